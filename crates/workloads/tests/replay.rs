//! Trace readers and the replay's hit/miss accounting; the kernel column
//! (where the machine allows it), baselines merged from JSON, and the
//! libCacheSim script's trace reading (where python3 is installed).

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use pcache_workloads::kernel::{self, WORKER_SUBCOMMAND};
use pcache_workloads::replay::{
    self, oracle_record, parse, read_trace, Format, ReplayOpts, Sizes, Trace, WORKINGSET_OFF, WORKINGSET_ON,
};
use pcache_workloads::replay_kernel::{self, KERNEL};

fn opts(sizes: Sizes, variants: &[&str]) -> ReplayOpts {
    ReplayOpts { sizes, variants: variants.iter().map(|s| s.to_string()).collect(), ..ReplayOpts::default() }
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

// Goal: default sizes are 10/20/40/80% of distinct pages (at least 16).
#[test]
fn default_sizes() {
    assert_eq!(Sizes::default().pages(1000), vec![100, 200, 400, 800]);
    assert_eq!(Sizes::default().pages(100), vec![16, 20, 40, 80]);
    assert!(replay::resolve(&["nosuch".into()]).is_err());
    assert!(replay::default_variants().starts_with(&[WORKINGSET_OFF.to_string(), WORKINGSET_ON.to_string()]));
}

// Goal: the cs LIRS trace replays at one size and its JSON has every key;
// a plot is written.
#[test]
fn cs_trace_json() {
    // The trace is in the repository: a missing one is a broken checkout, not a reason to skip.
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/lirs/cs.trace.gz");
    assert!(p.exists(), "{} is missing: traces/lirs/ belongs to the repository", p.display());
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
    assert_eq!(results.len(), replay::default_variants().len());
    for x in results {
        assert_eq!(x["cache_pages"], 500);
        assert!(x["misses"].as_u64().unwrap() >= j["pages"].as_u64().unwrap());
        assert!(x["miss_ratio"].as_f64().unwrap() <= 1.0);
    }
    assert!(r.render().contains("workingset-on miss%"));
    assert!(dir.path().join("replay-cs.svg").exists());
}

// Goal: a cache that holds the whole working set misses exactly once per
// distinct page, worked out by hand, for both variants.
#[test]
fn hand_counted_fitting_trace() {
    // Pages 0..40 three times, a scan of 100..200 once, then 0..40 again:
    // 3 * 40 + 100 + 40 = 260 requests over 140 distinct pages. 256 frames
    // keep all 140 (the usable cache is 256 minus a reserve of well under
    // 116), so only first touches miss: 40 + 100 = 140 misses, 260 - 140 =
    // 120 hits (2 * 40 re-reads of the loop, 40 after the scan).
    let mut pages: Vec<u64> = Vec::new();
    for _ in 0..3 {
        pages.extend(0..40);
    }
    pages.extend(100..200);
    pages.extend(0..40);
    let t = Trace::from_pages("fit", pages);
    let r = replay::run(&t, Format::Lirs, &opts(Sizes::Pages(vec![256]), &[WORKINGSET_OFF, WORKINGSET_ON])).unwrap();
    assert_eq!(r.requests, 260);
    assert_eq!(r.pages, 140);
    for run in &r.results {
        assert_eq!(run.misses, 140, "{}", run.variant);
        assert_eq!(run.hits, 120, "{}", run.variant);
        assert_eq!(run.miss_ratio, 140.0 / 260.0);
        assert_eq!(run.compulsory_misses, 140);
        assert!(run.usable_pages >= 140 && run.usable_pages < run.cache_pages);
        // Nothing was ever evicted, so nothing refaulted.
        assert_eq!(run.workingset_refault, 0);
    }
}

// Goal: a loop too big for the cache followed by a loop that fits, counted
// by hand: with workingset off every access of the big loop misses (as in
// LRU), then the small loop misses once per page it did not leave cached.
#[test]
fn hand_counted_loop_then_small_loop() {
    // 5 passes over 0..80 through 64 frames (usable < 64): each access
    // evicts the page needed next, so all 400 miss. Then 10 passes over
    // 1000..1010 (10 pages, fits): 10 misses, 90 hits.
    // Totals: 410 misses, 90 hits of 500.
    let mut pages: Vec<u64> = (0..400).map(|i| i % 80).collect();
    pages.extend((0..100).map(|i| 1000 + i % 10));
    let t = Trace::from_pages("loops", pages);
    let r = replay::run(&t, Format::Lirs, &opts(Sizes::Pages(vec![64]), &[WORKINGSET_OFF])).unwrap();
    let run = &r.results[0];
    assert!(run.usable_pages < 64);
    assert_eq!((run.misses, run.hits), (410, 90));
}

// Goal: the JSON of a replay has the schema's fields at both levels, and
// the kernel column, when not asked for, is simply absent.
#[test]
fn json_schema_fields() {
    let t = Trace::from_pages("schema", (0..300u64).map(|i| i % 30).collect());
    let r = replay::run(&t, Format::Lirs, &ReplayOpts::default()).unwrap();
    let j = r.to_json();
    for k in ["trace", "format", "records", "requests", "pages", "sizes", "variants", "results", "threads"] {
        assert!(!j[k].is_null(), "missing {k}");
    }
    assert!(j["kernel"].is_null() && j["kernel_skipped"].is_null());
    assert_eq!(j["baselines"], serde_json::json!([]));
    // 10/20/40% of 30 pages (3, 6, 12) are below the minimum of 16; 80%
    // is 24.
    assert_eq!(j["sizes"], serde_json::json!([16, 24]));
    for x in j["results"].as_array().unwrap() {
        for k in ["variant", "cache_pages", "usable_pages", "requests", "misses", "hits", "miss_ratio"] {
            assert!(!x[k].is_null(), "missing {k}");
        }
    }
}

// Goal: with threads, every request is counted once as a hit or a miss;
// in a cache that holds everything each thread misses a page at most once.
#[test]
fn threads_count_every_request() {
    let pages: Vec<u64> = (0..4000u64).map(|i| (i * 7919) % 100).collect();
    let t = Trace::from_pages("t", pages);
    let o = ReplayOpts { threads: 3, ..opts(Sizes::Pages(vec![512]), &[WORKINGSET_OFF]) };
    let r = replay::run(&t, Format::Lirs, &o).unwrap();
    let run = &r.results[0];
    assert_eq!(r.threads, 3);
    assert_eq!(run.hits + run.misses, 4000);
    assert!(run.misses >= 100 && run.misses <= 300, "{}", run.misses);
    assert!(r.render().contains("3 threads"));
    let bad = ReplayOpts { threads: 0, ..ReplayOpts::default() };
    assert!(replay::run(&t, Format::Lirs, &bad).is_err());
}

// Goal: baseline runs merge by trace name and cache size into the table
// and the JSON; other sizes and traces are ignored; a trace numbered
// differently (other distinct pages) or a run given twice is refused.
#[test]
fn baselines_merge() {
    let t = Trace::from_pages("b", (0..300u64).map(|i| i % 40).collect());
    let r = replay::run(&t, Format::Lirs, &opts(Sizes::Pages(vec![16, 32]), &[WORKINGSET_OFF])).unwrap();
    let doc = serde_json::json!([
        {"trace": "b", "pages": 40, "results": [
            {"variant": "libcachesim-LRU", "cache_pages": 16, "requests": 300, "misses": 300, "miss_ratio": 1.0},
            {"variant": "libcachesim-LRU", "cache_pages": 32, "requests": 300, "misses": 300, "miss_ratio": 1.0},
            {"variant": "libcachesim-LRU", "cache_pages": 99, "requests": 300, "misses": 40, "miss_ratio": 0.1333}
        ]},
        {"trace": "other", "pages": 5, "results": []}
    ]);
    let mut all = vec![r];
    assert_eq!(replay::merge_baselines(&mut all[0], &doc, "doc").unwrap(), 2);
    let table = all[0].render();
    assert!(table.contains("libcachesim-LRU miss%"), "{table}");
    assert!(table.contains("100.00"));
    assert_eq!(all[0].to_json()["baselines"].as_array().unwrap().len(), 2);
    // The Markdown table: a row per size, "-" where a column has no run.
    let md = replay::markdown_table(&all);
    assert!(md.starts_with("| trace (distinct pages) | cache pages | workingset-off | libcachesim-LRU | compulsory |"));
    assert!(md.contains("| b (40) | 16 (40%) | "), "{md}");
    assert!(md.contains("|  | 32 (80%) | "), "{md}");
    assert_eq!(md.lines().count(), 4);
    // Given again: refused.
    assert!(replay::merge_baselines(&mut all[0], &doc, "doc").is_err());
    let renumbered = serde_json::json!({"trace": "b", "pages": 41, "results": []});
    assert!(replay::merge_baselines(&mut all[0], &renumbered, "x").is_err());
    assert!(replay::merge_baselines(&mut all[0], &serde_json::json!({"trace": 1}), "x").is_err());
}

/// The kernel worker, when this test binary is started as one by
/// `kernel_column_counts` (arguments `... __kernel-worker EXPERIMENT CGROUP
/// PARAMS`, which the harness takes for filters); otherwise nothing.
#[test]
fn kernel_worker_entry() {
    let args: Vec<String> = std::env::args().collect();
    let Some(i) = args.iter().position(|a| a == WORKER_SUBCOMMAND) else { return };
    let (Some(exp), Some(cg), Some(params)) = (args.get(i + 1), args.get(i + 2), args.get(i + 3)) else {
        panic!("worker arguments missing: {args:?}");
    };
    match pcache_workloads::registry::kernel_worker(exp, Path::new(cg), params) {
        // On a line of its own: the harness prints around it.
        Ok(v) => println!("\n{v}"),
        Err(e) => {
            eprintln!("kernel worker: {e}");
            std::process::exit(1);
        }
    }
}

// Goal: the kernel column counts hits and misses by hand-checkable rules
// (a cache holding the working set misses once per page; every request is
// a hit or a miss) and its calibrated cache is the nominal one within a
// few pages. Skipped, with the reason, where there is no memory cgroup to
// be had (not root, no controller).
#[test]
fn kernel_column_counts() {
    if let Err(why) = kernel::Memcg::create(64 << 20) {
        eprintln!("skipping the kernel column test: {why}");
        return;
    }
    // 100 distinct pages read 6 times in a scrambled order: 600 requests.
    let pages: Vec<u64> = (0..600u64).map(|i| (i * 37) % 100).collect();
    let t = Trace::from_pages("k", pages);
    let exe = std::env::current_exe().unwrap();
    let worker = move || {
        let mut c = Command::new(&exe);
        c.args(["kernel_worker_entry", "--exact", "--nocapture", "--test-threads=1"]);
        c
    };
    // 256 pages hold all 100: 100 misses, 500 hits. 48 pages do not: at
    // least the 100 first touches miss.
    // In the target directory: the system's temporary one may be tmpfs.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let col = match replay_kernel::run(&t.accesses, &[48, 256], Some(dir), Some(&worker)) {
        Ok(col) => col,
        // A group that can be made but not joined or limited (a container),
        // or no disk to put the file on: the machine does not allow it.
        Err(why) if why.contains("cgroup") || why.contains("tmpfs") => {
            eprintln!("skipping the kernel column test: {why}");
            return;
        }
        Err(why) => panic!("{why}"),
    };
    let results = col.results(&t);
    assert_eq!(results.len(), 2);
    let (small, big) = (&results[0], &results[1]);
    assert!(small.variant == KERNEL && small.cache_pages == 48);
    assert_eq!((big.misses, big.hits), (100, 500));
    assert_eq!(small.hits + small.misses, 600);
    assert!(small.misses >= 100);
    for r in &col.runs {
        assert_eq!(r.unknown, 0);
        assert!(r.calibrated_pages.abs_diff(r.cache_pages) <= 4, "{r:?}");
    }
    // The small cache was full; its effective size is near the nominal.
    assert!(col.runs[0].effective_pages.abs_diff(48) <= 6, "{:?}", col.runs[0]);
}

// Goal: scripts/libcachesim_replay.py reads all three formats into the
// same accesses as pcache (requests, distinct pages, cache sizes), and its
// reference LRU misses exactly once per page in a cache that holds them.
// Needs only python3 (not libcachesim); skipped without it.
#[test]
fn python_script_reads_traces_as_pcache_does() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/libcachesim_replay.py");
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipping: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lirs = dir.path().join("s.trace");
    std::fs::write(&lirs, "5\r\n6\r\n*\r\n5\r\n\r\n900\n").unwrap();
    let csv = dir.path().join("c.csv");
    std::fs::write(&csv, "timestamp,obj_id,obj_size\n1,10,4096\n2,20,10000\n3,10,0\n4,abc,\n").unwrap();
    let oracle = dir.path().join("o.oracleGeneral.bin");
    let mut b = Vec::new();
    b.extend_from_slice(&oracle_record(1, u64::MAX - 7, 9000, 2));
    b.extend_from_slice(&oracle_record(2, 1 << 50, 10, -1));
    b.extend_from_slice(&oracle_record(3, u64::MAX - 7, 10, -1));
    std::fs::write(&oracle, b).unwrap();
    for path in [&lirs, &csv, &oracle] {
        let out = Command::new("python3")
            .arg(&script)
            .arg(path)
            .args(["--policies", "reference-LRU", "--sizes", "10,200"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let t = read_trace(path, None).unwrap();
        assert_eq!(j["trace"], t.name.as_str());
        assert_eq!(j["requests"], t.accesses.len() as u64);
        assert_eq!(j["pages"], t.distinct_pages());
        let sizes = Sizes::Percent(vec![10.0, 200.0]).pages(t.distinct_pages());
        assert_eq!(j["sizes"], serde_json::json!(sizes));
        let runs = j["results"].as_array().unwrap();
        assert_eq!(runs.len(), sizes.len());
        for run in runs {
            assert_eq!(run["variant"], "reference-LRU");
            assert_eq!(run["misses"], t.distinct_pages(), "{}", path.display());
        }
    }
}

// Goal: `usable_equals_nominal` sizes the arena so that exactly the nominal
// pages can be cached at once (frames = pages + the reserve), where the
// default arena of `pages` frames caches fewer.
// Method: a loop over 3000 pages at a 400-page cache fills the cache.
#[test]
fn usable_equals_nominal_caches_exactly_the_nominal_pages() {
    let text: String = (0..3).flat_map(|_| 0..3000).map(|i| format!("{i}\n")).collect();
    let t = parse(text.as_bytes(), Format::Lirs, "loop").unwrap();
    let mut o = opts(Sizes::Pages(vec![400]), &[WORKINGSET_ON]);
    let plain = replay::run(&t, Format::Lirs, &o).unwrap();
    o.usable_equals_nominal = true;
    let equal = replay::run(&t, Format::Lirs, &o).unwrap();
    let (p, e) = (&plain.results[0], &equal.results[0]);
    assert_eq!((p.cache_pages, p.frames), (400, 400));
    assert!(p.usable_pages < 400, "the default arena keeps a reserve: {}", p.usable_pages);
    assert_eq!(e.cache_pages, 400);
    assert!(e.frames > 400);
    assert_eq!(e.usable_pages, 400, "frames {}", e.frames);
}
