//! The C test suite (tests/c/test_capi.c) built with the system's C
//! compiler against the checked-in header: linked with libpcache.so, with
//! libpcache.a under AddressSanitizer, and run once under valgrind. Each
//! skips, saying why, where its tool is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Where cargo puts libpcache.so and libpcache.a: beside the test's
/// `deps`. `cargo test` builds only libraries it can link into tests
/// (rlibs), so the libraries are built here, once, in the profile of this
/// test (whose dependencies are built already).
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        let dir = exe.parent().and_then(Path::parent).expect("target/PROFILE").to_path_buf();
        let profile = if dir.ends_with("release") { "--release" } else { "--profile=test" };
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", profile, "-p", "pcache-capi", "--lib"])
            .current_dir(crate_dir())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build -p pcache-capi failed");
        assert!(dir.join("libpcache.a").exists(), "no libpcache.a in {}", dir.display());
        dir
    })
}

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh directory for one run's files, under target/ (a disk, where
/// /tmp may be tmpfs).
fn work_dir(name: &str) -> tempfile::TempDir {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base).expect("target tmp dir");
    tempfile::Builder::new().prefix(name).tempdir_in(base).expect("temp dir")
}

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).output().is_ok_and(|o| o.status.success())
}

/// Compile the suite with `cc` and the given extra arguments into `out`;
/// false (with the compiler's output printed) if the compiler refused a
/// flag that the caller may do without.
fn compile(out: &Path, extra: &[&str]) -> Result<(), String> {
    let dir = crate_dir();
    let o = Command::new("cc")
        .args(["-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(dir.join("include"))
        .arg(dir.join("tests/c/test_capi.c"))
        .arg("-o")
        .arg(out)
        .args(extra)
        .output()
        .expect("run cc");
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
    }
}

/// Run `cmd`, print its output, and fail the test unless it exited 0 with
/// its closing line.
fn run(what: &str, mut cmd: Command) {
    let o = cmd.output().expect("run the C suite");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    println!("{what}:\n{stdout}{stderr}");
    assert!(o.status.success(), "{what}: the C suite failed ({})", o.status);
    assert!(stdout.lines().any(|l| l.ends_with(" passed, 0 failed")), "{what}: no closing line");
}

/// Libraries a Rust staticlib needs (`rustc --print native-static-libs`).
const STATIC_LIBS: &[&str] = &["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"];

#[test]
fn c_suite_shared() {
    if !have("cc", "--version") {
        println!("skip: no C compiler (cc)");
        return;
    }
    let lib = lib_dir();
    let work = work_dir("c-shared");
    let exe = work.path().join("test_capi");
    let rpath = format!("-Wl,-rpath,{}", lib.display());
    let libdir = format!("-L{}", lib.display());
    compile(&exe, &[&libdir, "-lpcache", &rpath, "-lpthread"]).unwrap_or_else(|e| panic!("cc: {e}"));
    let data = work.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    let mut cmd = Command::new(&exe);
    cmd.arg(&data);
    run("libpcache.so", cmd);
}

#[test]
fn c_suite_asan() {
    if !have("cc", "--version") {
        println!("skip: no C compiler (cc)");
        return;
    }
    let lib = lib_dir();
    let work = work_dir("c-asan");
    let exe = work.path().join("test_capi_asan");
    let archive = lib.join("libpcache.a");
    let mut args = vec!["-fsanitize=address", "-fno-omit-frame-pointer", archive.to_str().expect("UTF-8 path")];
    args.extend_from_slice(STATIC_LIBS);
    if let Err(e) = compile(&exe, &args) {
        // The suite itself compiled in c_suite_shared; here only the
        // sanitizer's runtime can be missing.
        println!("skip: cc -fsanitize=address failed (no libasan?):\n{e}");
        return;
    }
    let data = work.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    let mut cmd = Command::new(&exe);
    // Leaks too: every handle the suite takes it gives back.
    cmd.arg(&data).env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=86");
    run("libpcache.a under AddressSanitizer", cmd);
}

#[test]
fn c_suite_valgrind() {
    if !have("cc", "--version") {
        println!("skip: no C compiler (cc)");
        return;
    }
    if !have("valgrind", "--version") {
        println!("skip: valgrind is not installed (Debian: apt-get install valgrind)");
        return;
    }
    let lib = lib_dir();
    let work = work_dir("c-valgrind");
    let exe = work.path().join("test_capi_vg");
    let archive = lib.join("libpcache.a");
    let mut args = vec![archive.to_str().expect("UTF-8 path")];
    args.extend_from_slice(STATIC_LIBS);
    compile(&exe, &args).unwrap_or_else(|e| panic!("cc: {e}"));
    let data = work.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    let mut cmd = Command::new("valgrind");
    cmd.args(["-q", "--error-exitcode=86", "--leak-check=no"]).arg(&exe).arg(&data).arg("quick");
    run("libpcache.a under valgrind (quick)", cmd);
}
