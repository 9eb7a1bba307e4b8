//! Trace readers and the replay's hit/miss accounting.

use std::io::Write as _;
use std::path::Path;

use pcache_workloads::replay::{
    self, oracle_record, parse, read_trace, Format, ReplayOpts, Sizes, Trace, WORKINGSET_OFF, WORKINGSET_ON,
};

fn opts(sizes: Sizes, variants: &[&str]) -> ReplayOpts {
    ReplayOpts { sizes, variants: variants.iter().map(|s| s.to_string()).collect(), plot_dir: None }
}

// Goal: LIRS text accepts CRLF and skips `*` markers and blank lines.
#[test]
fn lirs_crlf_and_markers() {
    let text = "3\r\n1\r\n*\r\n4\r\n\r\n1\n*\n5\n";
    let t = parse(text.as_bytes(), Format::Lirs, "t").unwrap();
    assert_eq!(t.accesses, vec![3, 1, 4, 1, 5]);
    assert_eq!(t.records, 5);
    assert_eq!(t.distinct_pages(), 4);
    assert!(parse("1\nx\n".as_bytes(), Format::Lirs, "t").is_err());
}

// Goal: a gzipped LIRS file is read (gzip detected by its magic).
#[test]
fn lirs_gzip_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.trace.gz");
    let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&p).unwrap(), flate2::Compression::fast());
    gz.write_all(b"7\r\n*\r\n8\r\n7\r\n").unwrap();
    gz.finish().unwrap();
    let t = read_trace(&p, None).unwrap();
    assert_eq!(t.name, "x");
    assert_eq!(t.accesses, vec![7, 8, 7]);
}

// Goal: csv uses the obj_id column and its size spans pages.
#[test]
fn csv_header_and_sizes() {
    let text = "timestamp,obj_id,obj_size,next_access_vtime\n1,10,4096,5\n2,20,10000,-1\n3,10,0,-1\n4,30,,-1\n";
    let t = parse(text.as_bytes(), Format::Csv, "t").unwrap();
    assert_eq!(t.records, 4);
    assert_eq!(t.accesses, vec![10, 20, 21, 22, 10, 30]);
    // A `key` column, no size column.
    let t = parse("key,op\n5,r\n6,w\n".as_bytes(), Format::Csv, "t").unwrap();
    assert_eq!(t.accesses, vec![5, 6]);
    assert!(parse("a,b\n1,2\n".as_bytes(), Format::Csv, "t").is_err());
}

// Goal: oracleGeneral records decode (little endian, 24 bytes), sizes span
// pages, sparse ids are renumbered densely, a truncated record is refused.
#[test]
fn oracle_general_records() {
    let mut b = Vec::new();
    b.extend_from_slice(&oracle_record(1, 3, 100, 2));
    b.extend_from_slice(&oracle_record(2, 4, 8192, -1));
    b.extend_from_slice(&oracle_record(3, 3, 1, -1));
    let t = parse(b.as_slice(), Format::OracleGeneral, "t").unwrap();
    assert_eq!(t.records, 3);
    assert_eq!(t.accesses, vec![3, 4, 5, 3]);
    assert!(!t.renumbered);

    let mut b = Vec::new();
    b.extend_from_slice(&oracle_record(1, u64::MAX - 7, 10, 1));
    b.extend_from_slice(&oracle_record(2, 1 << 50, 10, -1));
    b.extend_from_slice(&oracle_record(3, u64::MAX - 7, 10, -1));
    let t = parse(b.as_slice(), Format::OracleGeneral, "t").unwrap();
    assert!(t.renumbered);
    assert_eq!(t.accesses, vec![0, 1, 0]);

    b.push(0);
    assert!(parse(b.as_slice(), Format::OracleGeneral, "t").is_err());
}

// Goal: formats parse by name and are guessed from file names.
#[test]
fn format_names() {
    assert_eq!("oracleGeneral".parse::<Format>().unwrap(), Format::OracleGeneral);
    assert_eq!("csv".parse::<Format>().unwrap(), Format::Csv);
    assert!("x".parse::<Format>().is_err());
    assert_eq!(Format::guess(Path::new("a.csv.gz")), Format::Csv);
    assert_eq!(Format::guess(Path::new("w.oracleGeneral.bin")), Format::OracleGeneral);
    assert_eq!(Format::guess(Path::new("cs.trace.gz")), Format::Lirs);
}

// Goal: a cache holding everything misses exactly once per distinct page.
#[test]
fn big_cache_misses_only_compulsory() {
    let pages: Vec<u64> = (0..2000u64).map(|i| (i * 7919) % 50).collect();
    let t = Trace::from_pages("t", pages);
    for v in [WORKINGSET_OFF, WORKINGSET_ON] {
        let r = replay::run(&t, Format::Lirs, &opts(Sizes::Pages(vec![256]), &[v])).unwrap();
        let run = &r.results[0];
        assert_eq!(r.pages, 50);
        assert_eq!(run.requests, 2000);
        assert_eq!(run.misses, 50, "{v}");
        assert_eq!(run.hits, 1950, "{v}");
        assert_eq!(run.compulsory_misses, 50);
        assert!(run.usable_pages >= 50 && run.usable_pages < run.cache_pages);
    }
}

// Goal: a loop over more pages than the cache holds misses on every
// request with workingset off, as LRU does.
#[test]
fn cyclic_trace_over_small_cache_always_misses() {
    let cache = 64u64;
    let n = 80u64; // more distinct pages than the frames, let alone usable ones
    let pages: Vec<u64> = (0..10 * n).map(|i| i % n).collect();
    let t = Trace::from_pages("loop", pages);
    let r = replay::run(&t, Format::Lirs, &opts(Sizes::Pages(vec![cache]), &[WORKINGSET_OFF])).unwrap();
    let run = &r.results[0];
    assert!(run.usable_pages < cache);
    assert_eq!(run.misses, run.requests);
    assert_eq!(run.hits, 0);
    assert_eq!(run.miss_ratio, 1.0);
}

// Goal: default sizes are 10/20/40/80% of distinct pages (at least 16).
#[test]
fn default_sizes() {
    assert_eq!(Sizes::default().pages(1000), vec![100, 200, 400, 800]);
    assert_eq!(Sizes::default().pages(100), vec![16, 20, 40, 80]);
    assert!(replay::resolve(&["nosuch".into()]).is_err());
    assert_eq!(replay::default_variants(), vec![WORKINGSET_OFF, WORKINGSET_ON]);
}

// Goal: the cs LIRS trace replays at one size and its JSON has every key;
// a plot is written.
#[test]
fn cs_trace_json() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/lirs/cs.trace.gz");
    if !p.exists() {
        eprintln!("skipping: {} is missing", p.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = ReplayOpts {
        sizes: Sizes::Pages(vec![500]),
        plot_dir: Some(dir.path().to_path_buf()),
        ..ReplayOpts::default()
    };
    let r = replay::run_file(&p, None, &o).unwrap();
    let j = r.to_json();
    assert_eq!(j["trace"], "cs");
    assert!(j["pages"].as_u64().unwrap() > 1000);
    let results = j["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for x in results {
        for k in ["variant", "cache_pages", "requests", "misses", "miss_ratio"] {
            assert!(!x[k].is_null(), "missing {k}");
        }
        assert_eq!(x["cache_pages"], 500);
        assert!(x["misses"].as_u64().unwrap() >= j["pages"].as_u64().unwrap());
        assert!(x["miss_ratio"].as_f64().unwrap() <= 1.0);
    }
    assert!(r.render().contains("workingset-on miss%"));
    assert!(dir.path().join("replay-cs.svg").exists());
}
