//! SVG plots of compared series (plotters, SVG backend only).

use std::path::Path;

use plotters::prelude::*;

use crate::{Error, Result};

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const COLORS: [RGBColor; 6] = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];

/// Draw `series` as lines in one chart and write it to `dir/file` (SVG),
/// making `dir` if need be. Returns the path written, for the report.
pub fn line_chart(
    dir: &Path,
    file: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<String> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let path = &dir.join(file);
    let err = |e: String| Error::Invalid(format!("plot {}: {e}", path.display()));
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0f64, f64::MIN);
    for &(x, y) in pts() {
        if x.is_finite() && y.is_finite() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if x0 > x1 {
        return Err(err("no finite points".into()));
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1 * 1.05)
        .map_err(|e| err(e.to_string()))?;
    chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw().map_err(|e| err(e.to_string()))?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()),
                color,
            ))
            .map_err(|e| err(e.to_string()))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(path.display().to_string())
}

/// The points of an empirical CDF of `samples`: (value, fraction <= it).
pub fn cdf(samples: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len() as f64;
    v.iter().enumerate().map(|(i, &x)| (x, (i + 1) as f64 / n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a chart is written as SVG with each series' name in it.
    #[test]
    fn writes_svg() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.svg");
        let s = vec![
            Series { name: "before".into(), points: cdf(&[3.0, 1.0, 2.0]) },
            Series { name: "after".into(), points: vec![(0.0, 0.0), (1.0, 2.0)] },
        ];
        assert_eq!(line_chart(dir.path(), "c.svg", "t", "x", "y", &s).unwrap(), p.display().to_string());
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("<svg") && text.contains("before") && text.contains("after"));
        assert_eq!(cdf(&[3.0, 1.0, 2.0]), vec![(1.0, 1.0 / 3.0), (2.0, 2.0 / 3.0), (3.0, 1.0)]);
    }
}
