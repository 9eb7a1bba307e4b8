//! The extension as SQLite loads it: libpcache_sqlite.so built here, then
//! driven through the sqlite3 shell (workloads larger than the cache,
//! integrity, the default VFS reading the files after, bad parameters) and
//! through tests/c/alternate.c (two processes alternating writes, built
//! against the system's libsqlite3). Each test skips, saying why, where
//! its tool is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// Where cargo puts libpcache_sqlite.so: beside the test's `deps`.
/// `cargo test` builds only what it links into tests (not a cdylib), so
/// the library is built here, once, in the profile of this test.
fn lib_path() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        let dir = exe.parent().and_then(Path::parent).expect("target/PROFILE").to_path_buf();
        let profile = if dir.ends_with("release") { "--release" } else { "--profile=test" };
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", profile, "-p", "pcache-sqlite", "--lib"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build -p pcache-sqlite failed");
        let lib = dir.join("libpcache_sqlite.so");
        assert!(lib.exists(), "no {}", lib.display());
        lib
    })
}

/// The library's path without ".so", as `.load` takes it.
fn load_arg() -> String {
    lib_path().with_extension("").to_string_lossy().into_owned()
}

/// A fresh directory under target/ (a disk, where /tmp may be tmpfs,
/// which refuses O_DIRECT).
fn work_dir(name: &str) -> tempfile::TempDir {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base).expect("target tmp dir");
    tempfile::Builder::new().prefix(name).tempdir_in(base).expect("temp dir")
}

fn have_sqlite3() -> bool {
    let ok = Command::new("sqlite3").arg("-version").output().is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped: no sqlite3 shell (Debian: apt-get install sqlite3)");
    }
    ok
}

/// Run the sqlite3 shell in `dir` on `script` (stdin), with `env` set.
fn shell(dir: &Path, script: &str, env: &[(&str, &str)]) -> Output {
    use std::io::Write;
    let mut cmd = Command::new("sqlite3");
    cmd.arg("-batch").current_dir(dir).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.env_remove("PCACHE_MEM").env_remove("PCACHE_POLICY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run sqlite3");
    child.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("write the script");
    child.wait_with_output().expect("wait for sqlite3")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ok_shell(dir: &Path, script: &str) -> String {
    let o = shell(dir, script, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.is_empty(), "sqlite3 failed ({}):\n{}{err}", o.status, stdout(&o));
    stdout(&o)
}

/// A digest of the table's content: the count, the bytes and where one
/// byte pattern falls in every value.
const DIGEST: &str = "SELECT count(*), sum(length(v)), sum(instr(hex(v), 'A5')), sum(k * (v2 % 1000)) FROM t;";

/// A database of about 40 MiB through a 4 MiB cache: filled, then updated
/// at random, then checked; the default VFS then finds the same content.
fn larger_than_cache(journal_mode: &str, policy: &str) {
    if !have_sqlite3() {
        return;
    }
    let dir = work_dir("larger");
    let script = format!(
        ".load {lib}
.open file:big.db?vfs=pcache&pcache_mem=4M&pcache_policy={policy}
PRAGMA journal_mode={journal_mode};
PRAGMA cache_size=-512;
CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB, v2 INTEGER);
BEGIN;
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 80000)
  INSERT INTO t SELECT i, randomblob(480), i FROM c;
COMMIT;
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000)
  UPDATE t SET v = randomblob(480), v2 = v2 + 7 WHERE k IN (SELECT abs(random()) % 80000 + 1 FROM c);
DELETE FROM t WHERE k % 10 = 3;
PRAGMA integrity_check;
{DIGEST}
",
        lib = load_arg()
    );
    let out = ok_shell(dir.path(), &script);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.contains(&"ok"), "integrity_check through pcache: {out}");
    let digest = lines.last().expect("digest").to_string();
    let size = std::fs::metadata(dir.path().join("big.db")).expect("big.db").len();
    assert!(size > 38 << 20, "the database is {size} bytes, not larger than 10x the cache");
    // The default VFS, on the files as they are on disk.
    let plain = ok_shell(dir.path(), &format!(".open big.db\nPRAGMA integrity_check;\n{DIGEST}\n"));
    let plain: Vec<&str> = plain.lines().collect();
    assert_eq!(plain[0], "ok", "integrity_check on the default VFS");
    assert_eq!(plain[1], digest, "the default VFS reads other content");
    println!("{journal_mode}, policy {policy}: {size} bytes through a 4 MiB cache: ok, digest {digest}");
}

#[test]
fn rollback_larger_than_cache() {
    larger_than_cache("DELETE", "kernel");
}

#[test]
fn wal_larger_than_cache() {
    larger_than_cache("WAL", "kernel");
}

// The same under a plug-in eviction policy (`pcache_policy`): the data
// stays right when pcache's own policy chooses what reclaim evicts.
#[test]
fn wal_larger_than_cache_under_a_plug_in() {
    larger_than_cache("WAL", "pcache");
}

#[test]
fn loads_permanently_not_as_default() {
    if !have_sqlite3() {
        return;
    }
    let dir = work_dir("load");
    // The loading connection closes (.open replaces it): the VFS stays.
    let out = ok_shell(
        dir.path(),
        &format!(
            ".load {}\n.open plain.db\nCREATE TABLE t(x);\n.open file:p.db?vfs=pcache\n\
             CREATE TABLE t(x);\nINSERT INTO t VALUES (42);\nSELECT x FROM t;\n.open plain.db\n\
             SELECT count(*) FROM t;\n",
            load_arg()
        ),
    );
    assert_eq!(out, "42\n0\n");
}

#[test]
fn bad_parameters_say_why() {
    if !have_sqlite3() {
        return;
    }
    let dir = work_dir("bad");
    let o = shell(
        dir.path(),
        &format!(".load {}\n.open file:x.db?vfs=pcache&pcache_mem=12X\nSELECT 1;\n", load_arg()),
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(r#"pcache_mem="12X": not a size"#), "stderr does not say what is wrong: {err}");
    let o = shell(
        dir.path(),
        &format!(".load {}\n.open file:x.db?vfs=pcache\nSELECT 1;\n", load_arg()),
        &[("PCACHE_MEM", "lots")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(r#"PCACHE_MEM="lots": not a size"#), "stderr does not say what is wrong: {err}");
    let o = shell(
        dir.path(),
        &format!(".load {}\n.open file:x.db?vfs=pcache&pcache_policy=belady\nSELECT 1;\n", load_arg()),
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(r#"pcache_policy="belady": no such eviction policy"#), "stderr does not say: {err}");
    let o = shell(
        dir.path(),
        &format!(".load {}\n.open file:x.db?vfs=pcache\nSELECT 1;\n", load_arg()),
        &[("PCACHE_POLICY", "lru2")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(r#"PCACHE_POLICY="lru2": no such eviction policy"#), "stderr does not say: {err}");
    // Good sizes in both places: the URI's wins, silently.
    let o = shell(
        dir.path(),
        &format!(".load {}\n.open file:y.db?vfs=pcache&pcache_mem=8MiB\nSELECT 7;\n", load_arg()),
        &[("PCACHE_MEM", "16M")],
    );
    assert_eq!(stdout(&o), "7\n", "{}", String::from_utf8_lossy(&o.stderr));
}

/// tests/c/alternate.c, built against the system's libsqlite3, or None
/// (saying why) where the compiler or the headers are missing.
fn alternate() -> Option<&'static Path> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pcache-sqlite-alternate");
        std::fs::create_dir_all(Path::new(env!("CARGO_TARGET_TMPDIR"))).expect("target tmp dir");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/alternate.c");
        let o = Command::new("cc")
            .args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror"])
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .arg("-lsqlite3")
            .output();
        match o {
            Ok(o) if o.status.success() => Some(out),
            Ok(o) => {
                println!(
                    "skipped: cannot build tests/c/alternate.c (Debian: apt-get install libsqlite3-dev):\n{}",
                    String::from_utf8_lossy(&o.stderr)
                );
                None
            }
            Err(e) => {
                println!("skipped: no C compiler ({e})");
                None
            }
        }
    })
    .as_deref()
}

fn two_processes(mode: &str, a: &str, b: &str) {
    let Some(bin) = alternate() else { return };
    let dir = work_dir("alternate");
    let o = Command::new(bin)
        .arg(dir.path().join("a.db"))
        .arg(load_arg())
        .args([mode, a, b, "60"])
        .output()
        .expect("run alternate");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{mode} {a}/{b}: {out}{err}");
    print!("{out}");
}

#[test]
fn two_processes_rollback_pcache_and_default() {
    two_processes("delete", "pcache", "default");
}

#[test]
fn two_processes_rollback_both_pcache() {
    two_processes("delete", "pcache", "pcache");
}

#[test]
fn two_processes_wal_pcache_and_default() {
    two_processes("wal", "pcache", "default");
}

#[test]
fn two_processes_wal_both_pcache() {
    two_processes("wal", "pcache", "pcache");
}

/// Two connections of one process on the same database (the shell's
/// `.connection`), in WAL and then rollback mode: each sees the other's
/// commits, and temporary files (a temp table on disk) pass through.
#[test]
fn two_connections_in_one_process() {
    if !have_sqlite3() {
        return;
    }
    let dir = work_dir("conns");
    let out = ok_shell(
        dir.path(),
        &format!(
            ".load {}
.open file:c.db?vfs=pcache&pcache_mem=4M
PRAGMA journal_mode=WAL;
CREATE TABLE t(x);
.connection 1
.open file:c.db?vfs=pcache
INSERT INTO t VALUES (1), (2);
.connection 0
SELECT sum(x) FROM t;
INSERT INTO t VALUES (3);
.connection 1
SELECT sum(x) FROM t;
PRAGMA wal_checkpoint(TRUNCATE);
.open :memory:
.connection 0
PRAGMA journal_mode=DELETE;
.connection 1
.open file:c.db?vfs=pcache
INSERT INTO t VALUES (4);
.connection 0
SELECT sum(x) FROM t;
PRAGMA temp_store=FILE;
CREATE TEMP TABLE s AS SELECT x, randomblob(2000) AS b FROM t;
SELECT count(*) FROM s;
PRAGMA integrity_check;
",
            load_arg()
        ),
    );
    assert_eq!(out, "wal\n3\n6\n0|0|0\ndelete\n10\n4\nok\n");
}

/// A writer on this VFS killed in the middle of a large transaction, in
/// rollback mode: whatever it had written back, the journal it synced
/// first lets the next opener (the default VFS) roll back to a database
/// that passes its integrity check and holds the last committed content.
#[test]
fn killed_writer_leaves_a_hot_journal_the_default_vfs_rolls_back() {
    if !have_sqlite3() {
        return;
    }
    let dir = work_dir("killed");
    ok_shell(
        dir.path(),
        &format!(
            ".load {}
.open file:k.db?vfs=pcache&pcache_mem=4M
CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000)
  INSERT INTO t SELECT i, zeroblob(500) FROM c;
",
            load_arg()
        ),
    );
    use std::io::Write;
    let mut child = Command::new("sqlite3")
        .arg("-batch")
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run sqlite3");
    let mut stdin = child.stdin.take().expect("stdin");
    // The transaction never ends: the shell waits for more input while
    // the updates spill from SQLite's small cache into the database file.
    let script = format!(
        ".load {}\n.open file:k.db?vfs=pcache&pcache_mem=4M\nPRAGMA cache_size=50;\nBEGIN;\n\
         UPDATE t SET v = randomblob(500);\nSELECT 'updated';\n",
        load_arg()
    );
    stdin.write_all(script.as_bytes()).expect("write the script");
    stdin.flush().expect("flush");
    // Until the journal is hot (written and synced) and the updates run.
    let journal = dir.path().join("k.db-journal");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::metadata(&journal).map_or(0, |m| m.len()) < 1 << 20 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    child.kill().expect("kill the writer");
    let _ = child.wait();
    drop(stdin);
    assert!(journal.exists(), "no journal left: the kill came too late to test anything");
    let out = ok_shell(
        dir.path(),
        ".open k.db\nPRAGMA integrity_check;\nSELECT count(*), sum(length(v)), max(hex(v)) FROM t;\n",
    );
    let zeros = "0".repeat(1000);
    assert_eq!(out, format!("ok\n20000|10000000|{zeros}\n"), "not rolled back to the last commit");
}
