//! A user's mistakes, through the built `pcache` binary: each is one clear
//! line on stderr and a nonzero exit, never a panic, a backtrace or a
//! Python traceback. Usage errors clap finds exit 2 (its line, then its
//! hint); the others exit 1 with one `error: ...` line. No case here needs
//! FUSE: the mount's paths are checked before anything is mounted.

use std::path::Path;
use std::process::{Command, Output};

fn pcache(args: &[&str]) -> Output {
    pcache_in(Path::new("."), args, &[])
}

fn pcache_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pcache"));
    cmd.args(args).current_dir(dir).env_remove("RUST_BACKTRACE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run pcache")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn no_crash(args: &[&str], err: &str) {
    for bad in ["panicked", "backtrace", "Traceback", "Error {", "Custom {", "Os {"] {
        assert!(!err.contains(bad), "pcache {args:?}: {bad:?} in stderr:\n{err}");
    }
}

/// Exit 1 and exactly one line on stderr, `error: ...`; returns it.
fn fails(args: &[&str]) -> String {
    check_fails(args, &pcache(args))
}

fn check_fails(args: &[&str], out: &Output) -> String {
    let err = stderr(out);
    no_crash(args, &err);
    assert_eq!(out.status.code(), Some(1), "pcache {args:?}: exit {:?}, stderr:\n{err}", out.status);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "pcache {args:?}: not one line:\n{err}");
    assert!(lines[0].starts_with("error: "), "pcache {args:?}: {err}");
    assert!(lines[0].len() <= 200, "pcache {args:?}: a long line: {err}");
    lines[0].to_string()
}

/// A usage error clap reports: exit 2, one `error:` line (and its hint).
fn usage_error(args: &[&str]) -> String {
    let out = pcache(args);
    let err = stderr(&out);
    no_crash(args, &err);
    assert_eq!(out.status.code(), Some(2), "pcache {args:?}: exit {:?}, stderr:\n{err}", out.status);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "pcache {args:?}:\n{err}");
    assert_eq!(err.lines().next(), Some(errors[0]), "pcache {args:?}: the error comes first:\n{err}");
    errors[0].to_string()
}

fn trace() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces/lirs/cs.trace.gz").to_string()
}

// Goal: replay's cache sizes below the smallest cache are refused, saying
// the minimum, not raised to it with exit 0.
#[test]
fn replay_refuses_sizes_too_small_to_run() {
    let t = trace();
    for args in [["--mem", "0"], ["--mem", "65535"], ["--pages", "0"], ["--pages", "15"]] {
        let line = usage_error(&["replay", &t, args[0], args[1]]);
        assert!(line.contains("16 pages"), "{args:?}: {line}");
    }
    let line = usage_error(&["replay", &t, "--threads", "0"]);
    assert!(line.contains("at least 1"), "{line}");
    let line = fails(&["replay", &t, "--sizes", "0"]);
    assert!(line.contains("--sizes"), "{line}");
    fails(&["replay", "/nonexistent/a.trace"]);
}

// Goal: bench's counts and sizes are refused before anything runs, and
// the debug build's warning does not come before the error.
#[test]
fn bench_refuses_bad_counts_and_sizes_first() {
    usage_error(&["bench", "--runs", "0"]);
    usage_error(&["bench", "dd", "--runs", "0"]);
    usage_error(&["bench", "nosuch"]);
    usage_error(&["bench", "dd", "--mem", "lots"]);
    let line = fails(&["bench", "dd", "--quick", "--no-kernel", "--no-progress", "--mem", "0"]);
    assert!(line.contains("4 MiB"), "{line}");
    let dir = tempfile::tempdir().unwrap();
    let (json, report) = (dir.path().join("out.json"), dir.path().join("report.txt"));
    let (j, r) = (json.to_str().unwrap(), report.to_str().unwrap());
    fails(&["bench", "dd", "--quick", "--no-kernel", "--mem", "0", "--json", j, "--report", r]);
    assert!(!json.exists() && !report.exists(), "empty files left behind");
    fails(&["bench", "dd", "--quick", "--json", "/nonexistent/dir/out.json"]);
    fails(&["bench", "dd", "--quick", "--report", "/nonexistent/dir/report.txt"]);
    // The main job checks every experiment's options before the first
    // runs: the error comes at once, with no report file begun.
    let line = fails(&["bench", "--no-kernel", "--no-progress", "--mem", "1M", "--report", r]);
    assert!(line.contains("must be from 4 MiB"), "{line}");
    assert!(!report.exists(), "a report file begun before the options were checked");
}

// Goal: an unknown tunable is one short line saying where the names are
// listed, and that listing exists; a bad value names its tunable.
#[test]
fn unknown_tunables_are_one_short_line() {
    let line = fails(&["bench", "dd", "--quick", "--set", "nosuch=1"]);
    assert!(line.contains("nosuch") && line.contains("pcache tunables"), "{line}");
    assert!(line.len() < 100, "{line}");
    let line = fails(&["bench", "dd", "--quick", "--set", "dirty_ratio=lots"]);
    assert!(line.contains("dirty_ratio=lots"), "{line}");
    let out = pcache(&["tunables"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["dirty_ratio", "remark_rule", "read_ahead_kb"] {
        assert!(text.contains(name), "{name} not in:\n{text}");
    }
}

// Goal: `replay --help` lists the variants the code compares, by name.
#[test]
fn replay_help_lists_its_variants() {
    let out = pcache(&["replay", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let presets = pcache_workloads::registry::presets("replay");
    assert!(!presets.is_empty());
    for p in presets {
        assert!(help.contains(p.name), "{} not in:\n{help}", p.name);
    }
    assert!(!help.contains("replay.rs"), "{help}");
}

// Goal: without the Python package (or without Python), `sweep` and
// `sweep --help` say in one line how to install it.
#[test]
fn sweep_without_the_python_package_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = pcache_in(dir.path(), &["sweep", "--help"], &[("PCACHE_PYTHON", "/nonexistent/python3")]);
    let line = check_fails(&["sweep", "--help"], &out);
    assert!(line.contains("pip install ./crates/python"), "{line}");
    if Command::new("python3").arg("-V").output().is_err() {
        eprintln!("skipped the Python cases: no python3");
        return;
    }
    // A pcache package whose compiled module is missing, first on the path.
    let pkg = dir.path().join("pcache");
    std::fs::create_dir(&pkg).unwrap();
    std::fs::write(pkg.join("__init__.py"), "from ._pcache import PageCache\n").unwrap();
    let env = [("PYTHONPATH", dir.path().to_str().unwrap()), ("PCACHE_PYTHON", "python3")];
    for args in [&["sweep", "--help"][..], &["sweep", "a.trace", "--pages", "100"]] {
        let line = check_fails(args, &pcache_in(dir.path(), args, &env));
        assert!(line.contains("pip install ./crates/python"), "{line}");
    }
}

// Goal: the mount refuses a mountpoint or backing directory that is
// missing, not a directory, the same one, or one inside the other, before
// mounting anything.
#[test]
fn mount_refuses_bad_paths() {
    let dir = tempfile::tempdir().unwrap();
    let (backing, mnt, file) = (dir.path().join("backing"), dir.path().join("mnt"), dir.path().join("file"));
    std::fs::create_dir(&backing).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::create_dir(backing.join("sub")).unwrap();
    std::fs::write(&file, b"x").unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let cases = [
        (s(&backing), s(&file), "not a directory"),
        (s(&file), s(&mnt), "not a directory"),
        (s(&dir.path().join("nope")), s(&mnt), "does not exist"),
        (s(&backing), s(&dir.path().join("nope")), "does not exist"),
        (s(&backing), s(&backing), "is the backing directory"),
        (s(&backing), format!("{}/.", s(&backing)), "is the backing directory"),
        (s(&backing), s(&backing.join("sub")), "inside the backing directory"),
        (s(&backing.join("sub")), s(&backing), "inside the mountpoint"),
    ];
    for (b, m, want) in cases {
        let line = fails(&["mount", "--mem", "16M", &b, &m]);
        assert!(line.contains(want), "mount {b} {m}: {line}");
    }
    let (b, m) = (s(&backing), s(&mnt));
    let line = fails(&["mount", "--mem", "0", &b, &m]);
    assert!(line.contains("16 pages"), "{line}");
    let line = fails(&["mount", "--mem", "16M", "--set", "nosuch=1", &b, &m]);
    assert!(line.contains("pcache tunables"), "{line}");
    usage_error(&["mount", "--mem", "16M", "--threads", "0", &b, &m]);
    usage_error(&["mount", "--mem", "16M", "--max-open-fds", "0", &b, &m]);
}
