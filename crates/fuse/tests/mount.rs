//! Real programs on a pcache mount.
//!
//! Each test mounts a temporary backing directory through the
//! `pcache-mount` binary (the same code as `pcache mount`) with a cache of
//! a few MiB, a fraction of the data the program moves, so reclaim and
//! writeback run throughout; then runs the program and checks its data, on
//! the mount and, after unmounting, in the backing directory.
//!
//! A test is skipped, saying why, only when FUSE cannot be used here
//! (/dev/fuse does not open or fusermount3 is missing), and a program that
//! is not installed (fio, sqlite3) skips its own test. `.ci/run` installs
//! them all, so CI skips nothing. A `Mount` guard unmounts (lazily) and
//! kills the daemon in Drop, so a failing test leaves no stale mount; every
//! program runs under `timeout`, so no test hangs.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{skip_reason, Mount};

fn have(program: &str, test: &str) -> bool {
    let ok = Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !ok {
        eprintln!("SKIPPED {test}: {program} is not installed (apt-get install {program})");
    }
    ok
}

/// Run `sh -c SCRIPT` under `timeout`; its stdout, panicking on failure.
fn sh(script: &str, secs: u64) -> String {
    let out = Command::new("timeout")
        .args(["-k", "5", &secs.to_string(), "sh", "-c", script])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "`{script}` failed: {}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn vmstat(m: &Mount) -> std::collections::HashMap<String, u64> {
    fs::read_to_string(m.mnt().join(".pcache/vmstat"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Pages reclaimed so far (kswapd and direct).
fn reclaimed(m: &Mount) -> u64 {
    let v = vmstat(m);
    v.get("pgsteal_kswapd").unwrap_or(&0) + v.get("pgsteal_direct").unwrap_or(&0)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

// Goal: dd through the mount of a file six times the cache, read back
// byte for byte with cmp, on the mount and in the backing directory
// after unmount. Method: 8 MiB of cache, 48 MiB file; reclaim must run.
#[test]
fn dd_then_cmp_larger_than_cache() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("8M", &[]);
    let src = m.dir.path().join("src");
    fs::write(&src, pattern(1, 48 << 20)).unwrap();
    let dst = m.mnt().join("big");
    sh(
        &format!(
            "dd if={} of={} bs=1M status=none && dd if={} of=/dev/null bs=64k status=none",
            q(&src),
            q(&dst),
            q(&dst)
        ),
        60,
    );
    sh(&format!("cmp {} {}", q(&src), q(&dst)), 60);
    assert!(reclaimed(&m) > 0, "no reclaim with a file 6x the cache: {:?}", vmstat(&m));
    m.unmount();
    sh(&format!("cmp {} {}", q(&src), q(&m.backing().join("big"))), 60);
}

// Goal: fio's own data verification (crc32c) passes for random read-write
// and sequential jobs running at once through a cache a fraction of their
// data. Method: 3 randrw jobs of 8 MiB at 4 KiB and 2 sequential writers
// of 12 MiB at 128 KiB, 8 MiB of cache.
#[test]
fn fio_verify_crc32c() {
    if skip_reason().is_some() || !have("fio", "fio_verify_crc32c") {
        return;
    }
    let m = Mount::start("8M", &[]);
    let dir = m.mnt();
    let out = sh(
        &format!(
            "cd {} && fio --output-format=terse --ioengine=psync --verify=crc32c --verify_fatal=1 \
             --name=rand --rw=randrw --bs=4k --size=8M --numjobs=3 \
             --name=seq --rw=write --bs=128k --size=12M --numjobs=2",
            q(&dir)
        ),
        90,
    );
    // Terse output: field 5 of each job's line is its error number.
    let jobs: Vec<&str> = out.lines().filter(|l| l.starts_with("3;")).collect();
    assert_eq!(jobs.len(), 5, "fio output:\n{out}");
    for j in &jobs {
        assert_eq!(j.split(';').nth(4), Some("0"), "fio job failed:\n{j}");
    }
    assert!(reclaimed(&m) > 0, "no reclaim: {:?}", vmstat(&m));
}

// Goal: SQLite builds and queries a database larger than the cache, and
// PRAGMA integrity_check says ok on the mount and, after unmount, on the
// backing file. Method: 8 MiB of cache, ~20 MiB of rows in several
// transactions, an index, queries.
#[test]
fn sqlite_larger_than_cache() {
    sqlite_on_mount("DELETE", "sqlite_larger_than_cache", &[]);
}

// Goal: the same in WAL mode, whose `-shm` index is a shared mapping of a
// file on the mount (FUSE_DIRECT_IO_ALLOW_MMAP; the fallback's kernel page
// cache for `*-shm` on older kernels).
#[test]
fn sqlite_wal_larger_than_cache() {
    sqlite_on_mount("WAL", "sqlite_wal_larger_than_cache", &[]);
}

// Goal: the same as on a kernel before 6.6, where the `-shm` file is served
// through the kernel's page cache.
#[test]
fn sqlite_wal_without_direct_io_mmap() {
    sqlite_on_mount("WAL", "sqlite_wal_without_direct_io_mmap", &["--no-direct-io-mmap"]);
}

fn sqlite_on_mount(journal_mode: &str, test: &str, extra: &[&str]) {
    if skip_reason().is_some() || !have("sqlite3", test) {
        return;
    }
    let mut m = Mount::start("8M", extra);
    let db = m.mnt().join("t.db");
    let mut script =
        format!("PRAGMA journal_mode={journal_mode};\nCREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v BLOB);\n");
    for batch in 0..4 {
        script += &format!(
            "BEGIN; WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<5000) \
             INSERT INTO t(k, v) SELECT (x * 7919 + {batch}) % 10007, randomblob(1000) FROM c; COMMIT;\n"
        );
    }
    script += "CREATE INDEX tk ON t(k);\nUPDATE t SET v = randomblob(900) WHERE id % 3 = 0;\n\
               DELETE FROM t WHERE id % 10 = 0;\n";
    fs::write(m.dir.path().join("build.sql"), script).unwrap();
    sh(&format!("sqlite3 {} < {}", q(&db), q(&m.dir.path().join("build.sql"))), 90);
    let size = fs::metadata(&db).unwrap().len();
    assert!(size > 16 << 20, "database only {size} bytes");
    let out = sh(
        &format!(
            "sqlite3 {} 'SELECT count(*) FROM t; SELECT count(*) FROM t WHERE k < 100; PRAGMA integrity_check;'",
            q(&db)
        ),
        60,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"18000"), "{out}");
    assert_eq!(lines.last(), Some(&"ok"), "{out}");
    assert!(reclaimed(&m) > 0, "no reclaim: {:?}", vmstat(&m));
    m.unmount();
    let out =
        sh(&format!("sqlite3 {} 'PRAGMA integrity_check; SELECT count(*) FROM t;'", q(&m.backing().join("t.db"))), 60);
    assert_eq!(out.trim(), "ok\n18000");
}

/// A small tree: nested directories, files of many sizes, a symlink, a
/// hard link, an empty file and an empty directory.
fn make_tree(root: &Path) {
    for d in 0..6 {
        let dir = root.join(format!("d{d}/sub{}", d % 2));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..20u64 {
            let len = ((f * 7919 + d as u64 * 104_729) % 300_000) as usize;
            fs::write(dir.join(format!("f{f}")), pattern(d as u64 * 100 + f, len)).unwrap();
        }
    }
    fs::write(root.join("empty"), b"").unwrap();
    fs::create_dir(root.join("emptydir")).unwrap();
    std::os::unix::fs::symlink("d0/sub0/f1", root.join("link")).unwrap();
    fs::hard_link(root.join("d1/sub1/f2"), root.join("hard")).unwrap();
}

// Goal: a tree packed with tar and extracted on the mount is identical
// (diff -r) on the mount and, after unmount, in the backing directory.
// Method: ~18 MiB in 120 files, 4 MiB of cache.
#[test]
fn tar_extract_then_diff() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("4M", &[]);
    let src = m.dir.path().join("tree");
    make_tree(&src);
    let tarball = m.dir.path().join("tree.tar");
    sh(&format!("tar -cf {} -C {} .", q(&tarball), q(&src)), 60);
    let x = m.mnt().join("x");
    fs::create_dir(&x).unwrap();
    sh(&format!("tar -xf {} -C {}", q(&tarball), q(&x)), 60);
    sh(&format!("diff -r {} {}", q(&src), q(&x)), 60);
    // Hard links share one cached file.
    assert_eq!(fs::metadata(x.join("hard")).unwrap().nlink(), 2);
    m.unmount();
    sh(&format!("diff -r {} {}", q(&src), q(&m.backing().join("x"))), 60);
}

use std::os::unix::fs::MetadataExt;

// Goal: concurrent writers and readers keep every byte: 4 writers of
// their own files, 2 threads writing disjoint stripes of one shared file,
// 2 readers checking files as they complete, with renames and unlinks
// while files are open. Method: 8 MiB of cache, ~40 MiB of data.
#[test]
fn concurrent_writers_and_readers() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("8M", &[]);
    let mnt = m.mnt();
    const FILE: usize = 6 << 20;
    let done = std::sync::Arc::new(std::sync::Mutex::new(Vec::<usize>::new()));
    std::thread::scope(|s| {
        for w in 0..4usize {
            let (mnt, done) = (mnt.clone(), done.clone());
            s.spawn(move || {
                let data = pattern(w as u64 + 10, FILE);
                let tmp = mnt.join(format!("w{w}.tmp"));
                let mut f = fs::File::create(&tmp).unwrap();
                for chunk in data.chunks(100_003) {
                    f.write_all(chunk).unwrap();
                }
                // Rename while open (the kernel's cache follows the inode),
                // then keep writing through the handle.
                fs::rename(&tmp, mnt.join(format!("w{w}"))).unwrap();
                f.write_all_at(&data[..4096], 0).unwrap();
                drop(f);
                done.lock().unwrap().push(w);
            });
        }
        let shared = mnt.join("shared");
        fs::File::create(&shared).unwrap().set_len(4 * FILE as u64 / 2).unwrap();
        for t in 0..2u64 {
            let shared = shared.clone();
            s.spawn(move || {
                let f = fs::OpenOptions::new().write(true).open(&shared).unwrap();
                // Interleaved 64 KiB stripes: thread t owns every other one.
                for i in (t..(2 * FILE as u64 / 65536)).step_by(2) {
                    f.write_all_at(&pattern(1000 + i, 65536), i * 65536).unwrap();
                }
            });
        }
        for _ in 0..2 {
            let (mnt, done) = (mnt.clone(), done.clone());
            s.spawn(move || {
                let mut checked = std::collections::HashSet::new();
                let started = Instant::now();
                while checked.len() < 4 && started.elapsed() < Duration::from_secs(90) {
                    let ready: Vec<usize> = done.lock().unwrap().clone();
                    for w in ready {
                        if checked.contains(&w) {
                            continue;
                        }
                        let got = fs::read(mnt.join(format!("w{w}"))).unwrap();
                        assert!(got == pattern(w as u64 + 10, FILE), "w{w} corrupt");
                        checked.insert(w);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                assert_eq!(checked.len(), 4, "readers timed out");
            });
        }
    });
    let got = fs::read(mnt.join("shared")).unwrap();
    for i in 0..(2 * FILE / 65536) {
        assert!(got[i * 65536..(i + 1) * 65536] == pattern(1000 + i as u64, 65536)[..], "stripe {i}");
    }
    // Unlinked while open: the handle keeps reading and writing its file.
    let f = fs::OpenOptions::new().read(true).write(true).open(mnt.join("w0")).unwrap();
    fs::remove_file(mnt.join("w0")).unwrap();
    assert!(!mnt.join("w0").exists());
    f.write_all_at(b"still here", 0).unwrap();
    let mut buf = [0u8; 10];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"still here");
    drop(f);
    assert!(reclaimed(&m) > 0, "no reclaim: {:?}", vmstat(&m));
    m.unmount();
    for w in 1..4u64 {
        assert!(fs::read(m.backing().join(format!("w{w}"))).unwrap() == pattern(w + 10, FILE), "backing w{w}");
    }
    assert!(!m.backing().join("w0").exists());
}

// Goal: .pcache/vmstat reads in the /proc/vmstat format, a tunable written
// there reads back and takes effect (the dirty threshold follows), a bad
// value fails with EINVAL, and errors from the backing directory reach
// programs as the right errno. Method: 16 MiB of cache.
#[test]
fn control_files_and_errnos() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("16M", &["--set", "dirty_background_ratio=5"]);
    let mnt = m.mnt();
    let v = vmstat(&m);
    assert_eq!(v.get("nr_free_pages").map(|&n| n > 0), Some(true), "{v:?}");
    assert!(v.contains_key("pgsteal_kswapd") && v.contains_key("nr_dirty"));
    let ctl = mnt.join(".pcache");
    assert_eq!(fs::read_to_string(ctl.join("dirty_background_ratio")).unwrap(), "5\n");
    fs::write(ctl.join("dirty_ratio"), "50\n").unwrap();
    assert_eq!(fs::read_to_string(ctl.join("dirty_ratio")).unwrap(), "50\n");
    assert_eq!(vmstat(&m)["nr_dirty_threshold"], 4096 / 2);
    let e = fs::write(ctl.join("dirty_ratio"), "101").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    assert_eq!(fs::read_to_string(ctl.join("dirty_ratio")).unwrap(), "50\n");
    assert_eq!(fs::read_to_string(ctl.join("swappiness")).unwrap(), "60\n");
    fs::write(ctl.join("read_ahead_kb"), "256").unwrap();
    assert_eq!(fs::read_to_string(ctl.join("read_ahead_kb")).unwrap(), "256\n");
    let e = fs::write(ctl.join("vmstat"), "x").unwrap_err();
    assert!(matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)), "{e}");

    let errno = |r: std::io::Result<()>| r.unwrap_err().raw_os_error();
    assert_eq!(errno(fs::File::open(mnt.join("missing")).map(drop)), Some(libc::ENOENT));
    fs::create_dir(mnt.join("d")).unwrap();
    assert_eq!(errno(fs::create_dir(mnt.join("d"))), Some(libc::EEXIST));
    fs::write(mnt.join("d/f"), b"x").unwrap();
    assert_eq!(errno(fs::remove_dir(mnt.join("d"))), Some(libc::ENOTEMPTY));
    assert_eq!(errno(fs::OpenOptions::new().write(true).open(mnt.join("d")).map(drop)), Some(libc::EISDIR));
    assert_eq!(errno(fs::remove_file(mnt.join("d"))), Some(libc::EISDIR));
    assert_eq!(errno(fs::create_dir(mnt.join("d/f/x"))), Some(libc::ENOTDIR));
    assert_eq!(
        errno(fs::OpenOptions::new().write(true).create_new(true).open(mnt.join("d/f")).map(drop)),
        Some(libc::EEXIST)
    );
    // A read-only handle refuses writes (EBADF), as on any filesystem.
    let ro = fs::File::open(mnt.join("d/f")).unwrap();
    assert_eq!(errno(ro.write_all_at(b"y", 0)), Some(libc::EBADF));
    // Truncate, extend, punch and fallocate through the cache.
    let f = fs::OpenOptions::new().read(true).write(true).open(mnt.join("d/f")).unwrap();
    f.write_all_at(&[7u8; 100_000], 0).unwrap();
    f.set_len(50_000).unwrap();
    assert_eq!(fs::metadata(mnt.join("d/f")).unwrap().len(), 50_000);
    // SAFETY: fallocate on an open descriptor we own; no memory passed.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    let r = unsafe { libc::fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 4096, 8192) };
    if r == 0 {
        let mut buf = vec![1u8; 8192];
        f.read_exact_at(&mut buf, 4096).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "punched range not zero");
        let mut edge = [0u8; 1];
        f.read_exact_at(&mut edge, 4095).unwrap();
        assert_eq!(edge, [7]);
    } else {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "punch: {e}");
    }
    // SAFETY: as above.
    if unsafe { libc::fallocate(fd, 0, 0, 1 << 20) } == 0 {
        assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    }
    drop((ro, f));
    m.unmount();
    let disk = fs::read(m.backing().join("d/f")).unwrap();
    assert!(disk.len() == 1 << 20 || disk.len() == 50_000, "{}", disk.len());
    assert_eq!(disk[0], 7);
}

// Goal: data an fsync acknowledged survives a crash of the daemon
// (SIGKILL); data never fsynced may be lost, but nothing else is. Method:
// write and fsync 4 MiB, write 4 MiB more without fsync, kill -9, read
// the backing file.
#[test]
fn fsync_survives_kill_9() {
    if skip_reason().is_some() {
        return;
    }
    // Nothing reaches the disk unless fsync sends it: no periodic or
    // background writeback, a dirty limit above the data.
    let mut m = Mount::start(
        "16M",
        &["--set", "dirty_writeback_centisecs=0", "--set", "dirty_ratio=90", "--set", "dirty_background_ratio=90"],
    );
    let synced = pattern(7, 4 << 20);
    let mut f = fs::File::create(m.mnt().join("durable")).unwrap();
    f.write_all(&synced).unwrap();
    f.sync_all().unwrap();
    f.write_all(&pattern(8, 4 << 20)).unwrap();
    m.signal(libc::SIGKILL);
    m.wait_exit(20);
    drop(f);
    let disk = fs::read(m.backing().join("durable")).unwrap();
    assert!(disk.len() >= synced.len(), "fsynced data lost: {} bytes on disk", disk.len());
    assert!(disk[..synced.len()] == synced[..], "fsynced data corrupt");
}

// Goal: SIGTERM (and SIGINT) write every dirty page back before the daemon
// exits. Method: dirty 6 MiB that nothing would write back on its own,
// check the backing file lacks it, SIGTERM, check the backing file has it.
#[test]
fn sigterm_writes_back_dirty_pages() {
    if skip_reason().is_some() {
        return;
    }
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut m = Mount::start(
            "16M",
            &["--set", "dirty_writeback_centisecs=0", "--set", "dirty_ratio=90", "--set", "dirty_background_ratio=90"],
        );
        let data = pattern(sig as u64, 6 << 20);
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(m.mnt().join("dirty"))
            .unwrap();
        f.write_all(&data).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut first = [0u8; 16];
        f.read_exact(&mut first).unwrap();
        drop(f);
        let before = fs::metadata(m.backing().join("dirty")).unwrap().len();
        assert!(before < data.len() as u64, "written back before the signal; the test proves nothing");
        assert!(vmstat(&m)["nr_dirty"] > 0);
        m.signal(sig);
        let st = m.wait_exit(60);
        assert!(st.success(), "daemon exit {st}:\n{}", m.log());
        assert!(!pcache_fuse::is_fuse_mount(&m.mnt()), "still mounted after signal {sig}");
        let disk = fs::read(m.backing().join("dirty")).unwrap();
        assert!(disk == data, "signal {sig}: dirty data not written back ({} bytes on disk)", disk.len());
    }
}

fn cpath(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

fn set_xattr(p: &Path, name: &str, value: &[u8], flags: i32) -> Result<(), i32> {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings and a readable value, alive for the call.
    status(unsafe { libc::lsetxattr(cpath(p).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), flags) })
}

/// A syscall's 0 or -1 as Ok or its errno.
fn status(r: libc::c_int) -> Result<(), i32> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// The value of `name` on `p` read into a buffer of `cap` bytes (0: the
/// size only, returned as that many zero bytes).
fn get_xattr(p: &Path, name: &str, cap: usize) -> Result<Vec<u8>, i32> {
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; cap];
    let ptr = if cap == 0 { std::ptr::null_mut() } else { buf.as_mut_ptr().cast() };
    // SAFETY: NUL-terminated strings; `ptr` is null with size 0 or
    // writable for `cap` bytes, all alive for the call.
    let r = unsafe { libc::lgetxattr(cpath(p).as_ptr(), n.as_ptr(), ptr, cap) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    buf.resize(r as usize, 0);
    Ok(buf)
}

fn list_xattr(p: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 65536];
    // SAFETY: a NUL-terminated path and a writable buffer of its length.
    let r = unsafe { libc::llistxattr(cpath(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "listxattr {}: {}", p.display(), std::io::Error::last_os_error());
    buf[..r as usize].split(|&b| b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into()).collect()
}

fn remove_xattr(p: &Path, name: &str) -> Result<(), i32> {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings alive for the call.
    status(unsafe { libc::lremovexattr(cpath(p).as_ptr(), n.as_ptr()) })
}

// Goal: extended attributes pass through to the backing inode, with the
// syscalls' semantics: the size query, ERANGE for a short buffer,
// XATTR_CREATE and XATTR_REPLACE, removal, directories as files; an
// attribute set on the backing shows through the mount; symlinks and the
// control files refuse them (EPERM) as Linux refuses user attributes on
// symlinks. Skipped only where the backing filesystem has no user
// attributes.
#[test]
fn extended_attributes_pass_through() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("16M", &[]);
    let (mnt, backing) = (m.mnt(), m.backing());
    fs::write(backing.join("probe"), b"").unwrap();
    if set_xattr(&backing.join("probe"), "user.probe", b"1", 0) == Err(libc::EOPNOTSUPP) {
        eprintln!("skipped extended_attributes_pass_through: the backing filesystem has no user attributes");
        return;
    }
    let f = mnt.join("f");
    fs::write(&f, b"data").unwrap();
    set_xattr(&f, "user.colour", b"blue", 0).unwrap();
    assert_eq!(get_xattr(&f, "user.colour", 64).unwrap(), b"blue");
    assert_eq!(get_xattr(&backing.join("f"), "user.colour", 64).unwrap(), b"blue", "not on the backing inode");
    assert_eq!(get_xattr(&f, "user.colour", 0).unwrap().len(), 4, "the size query");
    assert_eq!(get_xattr(&f, "user.colour", 2), Err(libc::ERANGE));
    assert_eq!(set_xattr(&f, "user.colour", b"red", libc::XATTR_CREATE), Err(libc::EEXIST));
    assert_eq!(set_xattr(&f, "user.size", b"L", libc::XATTR_REPLACE), Err(libc::ENODATA));
    set_xattr(&f, "user.colour", b"green", libc::XATTR_REPLACE).unwrap();
    let big = pattern(1, 4000);
    set_xattr(&f, "user.big", &big, 0).unwrap();
    assert_eq!(get_xattr(&f, "user.big", 65536).unwrap(), big);
    let mut names = list_xattr(&f);
    names.sort();
    assert!(names.contains(&"user.big".to_string()) && names.contains(&"user.colour".to_string()), "{names:?}");
    assert_eq!(get_xattr(&f, "user.colour", 64).unwrap(), b"green");
    remove_xattr(&f, "user.colour").unwrap();
    assert_eq!(get_xattr(&f, "user.colour", 64), Err(libc::ENODATA));
    assert_eq!(remove_xattr(&f, "user.colour"), Err(libc::ENODATA));
    // Set on the backing behind the mount's back: seen through it.
    set_xattr(&backing.join("f"), "user.outside", b"x", 0).unwrap();
    assert_eq!(get_xattr(&f, "user.outside", 64).unwrap(), b"x");
    // A directory, and the file's data untouched by all this.
    fs::create_dir(mnt.join("d")).unwrap();
    set_xattr(&mnt.join("d"), "user.dir", b"yes", 0).unwrap();
    assert_eq!(list_xattr(&mnt.join("d")), vec!["user.dir".to_string()]);
    assert_eq!(fs::read(&f).unwrap(), b"data");
    // Symlinks and the control files have none to set.
    std::os::unix::fs::symlink("f", mnt.join("l")).unwrap();
    assert_eq!(set_xattr(&mnt.join("l"), "user.x", b"1", 0), Err(libc::EPERM));
    assert!(list_xattr(&mnt.join("l")).is_empty());
    let ctl = mnt.join(".pcache/vmstat");
    assert_eq!(set_xattr(&ctl, "user.x", b"1", 0), Err(libc::EPERM));
    assert_eq!(get_xattr(&ctl, "user.x", 64), Err(libc::ENODATA));
    m.unmount();
    assert_eq!(get_xattr(&backing.join("f"), "user.big", 65536).unwrap(), big);
}

// Goal: a directory of 2,000 entries lists every name once, with the
// attributes of its file (READDIRPLUS fills many replies, each entry
// counted as a lookup, and an entry that did not fit is forgotten again);
// `ls -l` agrees with the backing directory; a file unlinked while listed
// is no obstacle; the daemon exits cleanly after (the lookup counts
// balance).
#[test]
fn large_directories_list_with_their_attributes() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("16M", &[]);
    let (mnt, backing) = (m.mnt(), m.backing());
    fs::create_dir(backing.join("d")).unwrap();
    for i in 0..2000usize {
        fs::write(backing.join("d").join(format!("file-with-a-longish-name-{i:05}")), vec![1u8; i % 97]).unwrap();
    }
    for round in 0..2 {
        let mut seen = std::collections::HashMap::new();
        for e in fs::read_dir(mnt.join("d")).unwrap() {
            let e = e.unwrap();
            let md = e.metadata().unwrap();
            let name = e.file_name().into_string().unwrap();
            let i: usize = name.rsplit('-').next().unwrap().parse().unwrap();
            assert_eq!(md.len() as usize, i % 97, "round {round}: size of {name}");
            assert!(seen.insert(name, ()).is_none(), "round {round}: a name listed twice");
        }
        assert_eq!(seen.len(), 2000, "round {round}");
        fs::remove_file(mnt.join("d/file-with-a-longish-name-00007")).unwrap();
        fs::write(mnt.join("d/file-with-a-longish-name-00007"), vec![1u8; 7]).unwrap();
        fs::File::open(mnt.join("d/file-with-a-longish-name-00007")).unwrap().sync_all().unwrap();
    }
    // Without `total` (st_blocks: the backing filesystem's allocation).
    let ls = |dir: &Path| {
        let out = Command::new("ls").args(["-ln", "--time-style=+"]).arg(dir).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().lines().skip(1).map(String::from).collect::<Vec<_>>()
    };
    let (on_mount, on_backing) = (ls(&mnt.join("d")), ls(&backing.join("d")));
    assert_eq!(on_mount.len(), on_backing.len());
    let diff = on_mount.iter().zip(&on_backing).find(|(a, b)| a != b);
    assert!(diff.is_none(), "ls -l on the mount and on the backing directory differ: {diff:?}");
    m.unmount();
}

// Goal: inode numbers the backing filesystem reuses at once (ext4 gives a
// freed number to the next new inode), while the kernel's FORGET of the
// old inode may still be on its way on another session thread: four
// threads that create, check and remove files and directories under their
// own names never fail, never read another file's bytes, and a file
// written last reaches the backing directory intact.
#[test]
fn reused_inode_numbers_are_new_files() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("16M", &[]);
    let mnt = m.mnt();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let mnt = &mnt;
            s.spawn(move || {
                for i in 0..1500u64 {
                    let (f, d) = (mnt.join(format!("f{t}")), mnt.join(format!("d{t}")));
                    let data = pattern(t << 32 | i, 3000 + i as usize);
                    fs::write(&f, &data).unwrap_or_else(|e| panic!("thread {t} round {i}: write: {e}"));
                    assert!(fs::read(&f).unwrap() == data, "thread {t} round {i}: another file's bytes");
                    fs::remove_file(&f).unwrap();
                    fs::create_dir(&d).unwrap_or_else(|e| panic!("thread {t} round {i}: mkdir: {e}"));
                    fs::remove_dir(&d).unwrap();
                }
            });
        }
    });
    let data = pattern(99, 300_000);
    fs::write(mnt.join("last"), &data).unwrap();
    m.unmount();
    assert!(fs::read(m.backing().join("last")).unwrap() == data);
}

// Goal: times set on a file just after writing it (as tar, cp -p and rsync
// do) are its times on the mount at once and on the backing file after
// the data's writeback (fsync, or unmounting), which must not move them
// on; a write after them makes the mtime now again.
#[test]
fn times_set_after_writing_survive_writeback() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("16M", &[]);
    let (mnt, backing) = (m.mnt(), m.backing());
    let past = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let set = |p: &Path| {
        let f = fs::OpenOptions::new().write(true).open(p).unwrap();
        f.set_times(fs::FileTimes::new().set_accessed(past).set_modified(past)).unwrap();
    };
    for (i, name) in ["synced", "unmounted", "rewritten"].iter().enumerate() {
        // In blocks, as tar writes: the engine reserves space ahead of an
        // appending writer and gives it back later, which must not count
        // as a modification.
        let mut f = fs::File::create(mnt.join(name)).unwrap();
        for chunk in pattern(i as u64, 100_000 + i).chunks(10240) {
            f.write_all(chunk).unwrap();
        }
        drop(f);
        set(&mnt.join(name));
        assert_eq!(fs::metadata(mnt.join(name)).unwrap().modified().unwrap(), past, "{name} on the mount");
    }
    fs::File::open(mnt.join("synced")).unwrap().sync_all().unwrap();
    assert_eq!(fs::metadata(backing.join("synced")).unwrap().modified().unwrap(), past, "after fsync");
    fs::OpenOptions::new().write(true).open(mnt.join("rewritten")).unwrap().write_all_at(b"x", 5).unwrap();
    assert!(fs::metadata(mnt.join("rewritten")).unwrap().modified().unwrap() > past, "a write kept the old mtime");
    m.unmount();
    for name in ["synced", "unmounted"] {
        let md = fs::metadata(backing.join(name)).unwrap();
        assert_eq!(md.modified().unwrap(), past, "{name}: mtime on the backing file");
        assert_eq!(md.accessed().unwrap(), past, "{name}: atime on the backing file");
    }
    assert!(fs::metadata(backing.join("rewritten")).unwrap().modified().unwrap() > past);
}

/// A POSIX ACL in the kernel's xattr form (posix_acl_xattr: version 2,
/// then (tag, perm, id) entries sorted by tag and id).
fn acl_xattr(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend(tag.to_le_bytes());
        v.extend(perm.to_le_bytes());
        v.extend(id.to_le_bytes());
    }
    v
}

/// Whether `uid` (with only its own group) can read `path`, by `cat`.
fn can_read_as(uid: u32, path: &Path) -> bool {
    use std::os::unix::process::CommandExt as _;
    Command::new("cat")
        .arg(path)
        .uid(uid)
        .gid(uid)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

// Goal: POSIX ACLs on the mount are enforced by the kernel (FUSE_POSIX_ACL)
// and stored on the backing file: an entry for one user grants what the
// mode's "other" bits deny, and another entry denies what they grant.
// Root only (it runs the reader as another user).
#[test]
fn acls_are_enforced() {
    if skip_reason().is_some() {
        return;
    }
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped acls_are_enforced: needs root, to read as another user");
        return;
    }
    let mut m = Mount::start("16M", &[]);
    let (mnt, backing) = (m.mnt(), m.backing());
    // The other user must reach the mount: the test directory is 0700.
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    const NOBODY: u32 = 65534;
    const ANY: u32 = u32::MAX;
    let (user_obj, user, group_obj, mask, other) = (0x01, 0x02, 0x04, 0x10, 0x20);
    let (granted, denied) = (mnt.join("granted"), mnt.join("denied"));
    for f in [&granted, &denied] {
        fs::write(f, b"secret").unwrap();
    }
    fs::set_permissions(&granted, fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(&denied, fs::Permissions::from_mode(0o644)).unwrap();
    assert!(!can_read_as(NOBODY, &granted), "mode 0600 let another user read");
    assert!(can_read_as(NOBODY, &denied), "mode 0644 kept another user out");
    let grant =
        acl_xattr(&[(user_obj, 6, ANY), (user, 4, NOBODY), (group_obj, 0, ANY), (mask, 4, ANY), (other, 0, ANY)]);
    let deny =
        acl_xattr(&[(user_obj, 6, ANY), (user, 0, NOBODY), (group_obj, 4, ANY), (mask, 4, ANY), (other, 4, ANY)]);
    match set_xattr(&granted, "system.posix_acl_access", &grant, 0) {
        Err(libc::EOPNOTSUPP) => {
            eprintln!("skipped acls_are_enforced: the backing filesystem or the kernel has no POSIX ACLs");
            return;
        }
        r => r.unwrap(),
    }
    set_xattr(&denied, "system.posix_acl_access", &deny, 0).unwrap();
    assert!(can_read_as(NOBODY, &granted), "an ACL entry granting read was not honoured");
    assert!(!can_read_as(NOBODY, &denied), "an ACL entry denying read was not honoured");
    assert!(can_read_as(1000, &denied), "the ACL's other entry (read) was not honoured");
    // Stored on the backing inode, as the backing filesystem keeps ACLs.
    assert_eq!(get_xattr(&backing.join("granted"), "system.posix_acl_access", 256).unwrap(), grant);
    m.unmount();
}

// Goal: .pcache/zero, the round-trip floor's file, reads zeros at any
// offset up to its 1 GiB, in requests of up to 1 MiB, and takes writes
// and discards them, as /dev/zero; neither touches the cache.
#[test]
fn the_zero_file_reads_zeros() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("16M", &[]);
    let z = m.mnt().join(".pcache/zero");
    assert_eq!(fs::metadata(&z).unwrap().len(), 1 << 30);
    let before = m.vmstat("pgpgin");
    let f = fs::File::open(&z).unwrap();
    let mut buf = vec![1u8; 1 << 20];
    for off in [0u64, 12345, (1 << 30) - (1 << 20)] {
        f.read_exact_at(&mut buf, off).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "non-zero bytes at {off}");
    }
    assert_eq!(f.read_at(&mut buf, (1 << 30) - 10).unwrap(), 10, "a read past its end");
    assert_eq!(f.read_at(&mut buf, 1 << 30).unwrap(), 0);
    let w = fs::OpenOptions::new().write(true).open(&z).unwrap();
    assert_eq!(w.write_at(&[5u8; 1 << 20], 4096).unwrap(), 1 << 20);
    f.read_exact_at(&mut buf, 4096).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "a write to zero was kept");
    assert_eq!(m.vmstat("pgpgin"), before, "reading zero went through the cache");
    assert_eq!(m.vmstat("nr_dirty"), 0, "writing zero went through the cache");
    drop(w);
    drop(f);
    m.unmount();
}

/// A shared mapping of `len` bytes of `f` from offset 0.
struct SharedMap {
    ptr: *mut u8,
    len: usize,
}

impl SharedMap {
    fn new(f: &fs::File, len: usize, writable: bool) -> std::io::Result<SharedMap> {
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        let fd = std::os::fd::AsRawFd::as_raw_fd(f);
        // SAFETY: a fresh mapping chosen by the kernel, of an open file.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SharedMap { ptr: p.cast(), len })
    }

    fn read(&self, off: usize, n: usize) -> Vec<u8> {
        assert!(off + n <= self.len);
        // SAFETY: inside the mapping, which lives as long as `self`; the
        // file is not truncated below `off + n` while this reads (the test
        // says so where it truncates).
        unsafe { std::slice::from_raw_parts(self.ptr.add(off), n).to_vec() }
    }

    fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: as `read`, on a writable mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) }
    }

    fn msync(&self) {
        // SAFETY: the whole mapping, alive.
        assert_eq!(unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) }, 0);
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

// Goal: random operations on one file, through write(2), read(2), a shared
// mapping, truncation, msync, fsync and reopening, always read what a
// model of the file says, with the file three times the cache (pages of
// it evicted and read back from the backing store meanwhile); after
// unmounting, the backing file is the model. Seeded, so a failure
// repeats; the operation and its number are in the message.
#[test]
fn random_operations_with_a_shared_mapping_match_a_model() {
    if skip_reason().is_some() {
        return;
    }
    const MAX: usize = 24 << 20;
    const OPS: usize = 4000;
    let mut m = Mount::start("8M", &[]);
    let path = m.mnt().join("f");
    let rw = fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    let mut ro = fs::File::open(&path).unwrap();
    let mut model: Vec<u8> = Vec::new();
    let mut map: Option<SharedMap> = None;
    let mut x: u64 = 0x5eed_1234_abcd_0001;
    let mut rnd = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n.max(1) as u64) as usize
    };
    for op in 0..OPS {
        // Ranges lean to pages' edges and sizes from a byte to 256 KiB.
        let len = [1, 4096, 4095, 8193, 65536, 256 << 10][rnd(6)].min(1 + rnd(256 << 10));
        let off = if rnd(2) == 0 { rnd(MAX / 4096) * 4096 } else { rnd(MAX) };
        let size = model.len();
        // The mapped and in-file part a mapped access may touch.
        let mapped = map.as_ref().map_or(0, |mp| mp.len.min(size));
        match rnd(10) {
            0..=2 => {
                let off = off.min(MAX - len);
                let data = pattern(op as u64, len);
                rw.write_all_at(&data, off as u64).unwrap();
                if model.len() < off + len {
                    model.resize(off + len, 0);
                }
                model[off..off + len].copy_from_slice(&data);
            }
            3 | 4 => {
                let mut got = vec![0u8; len];
                let n = ro.read_at(&mut got, off as u64).unwrap();
                let want = &model[off.min(size)..(off + len).min(size)];
                assert_eq!(n, want.len(), "op {op}: read of {len} at {off}, file {size}");
                assert!(got[..n] == *want, "op {op}: read of {len} at {off} differs from the model");
            }
            5 if mapped > 0 => {
                let off = off % mapped;
                let len = len.min(mapped - off);
                let data = pattern(op as u64 + (1 << 32), len);
                map.as_ref().unwrap().write(off, &data);
                model[off..off + len].copy_from_slice(&data);
            }
            6 if mapped > 0 => {
                let off = off % mapped;
                let len = len.min(mapped - off);
                let got = map.as_ref().unwrap().read(off, len);
                assert!(got == model[off..off + len], "op {op}: mapped load of {len} at {off} differs from the model");
            }
            7 => {
                // Shrink more often than grow, so the file stays mixed.
                let new = if rnd(3) == 0 { (size + rnd(1 << 20)).min(MAX) } else { rnd(size + 1) };
                rw.set_len(new as u64).unwrap();
                model.resize(new, 0);
            }
            8 => {
                // A new mapping of the whole file as it is now.
                map = None;
                if size > 0 {
                    map = Some(SharedMap::new(&rw, size, true).unwrap());
                }
            }
            _ => match rnd(4) {
                0 => {
                    if let Some(mp) = map.as_ref().filter(|mp| mp.len <= size) {
                        mp.msync();
                    }
                }
                1 => rw.sync_all().unwrap(),
                2 => rw.sync_data().unwrap(),
                _ => ro = fs::File::open(&path).unwrap(),
            },
        }
    }
    drop(map);
    let mut all = Vec::new();
    ro.seek(SeekFrom::Start(0)).unwrap();
    ro.read_to_end(&mut all).unwrap();
    assert!(all == model, "the whole file differs from the model ({} bytes, model {})", all.len(), model.len());
    assert!(m.vmstat("pgpgin") > 0, "nothing was read back from the backing store");
    drop((rw, ro));
    m.unmount();
    assert!(fs::read(m.backing().join("f")).unwrap() == model, "the backing file differs from the model");
}

// Goal: a file on the mount can be mapped shared, read-only or writable,
// and stays coherent with read(2) and write(2) through pcache: a read after
// a store through the mapping sees the store; the mapping sees a write(2)
// made after it; msync and fsync take mapped stores to the backing file;
// truncating and re-extending a mapped file reads zeroes past the cut, as
// POSIX says; data written through the mapping outlives munmap and reads
// back on the backing file and through a remounted mount. Skipped only
// where the kernel lacks FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6), which the
// mount then says at start.
#[test]
fn shared_mappings_are_coherent() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("16M", &[]);
    let (mnt, backing) = (m.mnt(), m.backing());
    let len = 64 * 1024;
    let data = pattern(7, len);
    fs::write(mnt.join("f"), &data).unwrap();
    let f = fs::OpenOptions::new().read(true).write(true).open(mnt.join("f")).unwrap();
    let map = match SharedMap::new(&f, len, true) {
        Ok(map) => map,
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) && m.log().contains("FUSE_DIRECT_IO_ALLOW_MMAP") => {
            eprintln!("skipped shared_mappings_are_coherent: {}", m.log().trim());
            return;
        }
        Err(e) => panic!("mmap(MAP_SHARED) of a file on the mount: {e}\n{}", m.log()),
    };
    assert_eq!(map.read(0, len), data, "the mapping does not show the file");
    let ro = SharedMap::new(&fs::File::open(mnt.join("f")).unwrap(), len, false).unwrap();
    // write(2) after the mapping: seen through both mappings.
    f.write_all_at(b"written by write(2)", 4096).unwrap();
    assert_eq!(map.read(4096, 19), b"written by write(2)");
    assert_eq!(ro.read(4096, 19), b"written by write(2)");
    // A store through the mapping: seen by read(2), on this handle and another.
    map.write(8192, b"stored through the mapping");
    let mut buf = [0u8; 26];
    f.read_exact_at(&mut buf, 8192).unwrap();
    assert_eq!(&buf, b"stored through the mapping");
    fs::File::open(mnt.join("f")).unwrap().read_exact_at(&mut buf, 8192).unwrap();
    assert_eq!(&buf, b"stored through the mapping");
    assert_eq!(ro.read(8192, 26), b"stored through the mapping");
    // msync and fsync: on the backing file.
    map.write(12288, b"msynced");
    map.msync();
    f.sync_all().unwrap();
    let disk = fs::read(backing.join("f")).unwrap();
    assert_eq!(&disk[8192..8218], b"stored through the mapping");
    assert_eq!(&disk[12288..12295], b"msynced");
    assert_eq!(&disk[4096..4115], b"written by write(2)");
    // Truncate while mapped, then extend again: zeroes past the cut (no
    // access to the mapping while the file is shorter than it).
    f.set_len(4096).unwrap();
    f.set_len(len as u64).unwrap();
    assert!(map.read(4096, len - 4096).iter().all(|&b| b == 0), "stale bytes past a truncation");
    assert_eq!(map.read(0, 4096), data[..4096]);
    // Stores through the mapping outlive munmap and close.
    map.write(20000, b"after munmap");
    drop((map, ro, f));
    let mut got = [0u8; 12];
    fs::File::open(mnt.join("f")).unwrap().read_exact_at(&mut got, 20000).unwrap();
    assert_eq!(&got, b"after munmap");
    m.unmount();
    assert_eq!(&fs::read(backing.join("f")).unwrap()[20000..20012], b"after munmap");
    // And through the mount again, after a remount (a cold cache).
    m.spawn("16M", &[], None);
    fs::File::open(mnt.join("f")).unwrap().read_exact_at(&mut got, 20000).unwrap();
    assert_eq!(&got, b"after munmap", "after a remount");
    m.unmount();
}

// Goal: every read returns the file's bytes: wholly cached, wholly cold,
// and reads that start on cached pages and run into cold ones (the
// copy without waiting, then the rest read in from where it stopped).
#[test]
fn reads_across_cached_and_cold_pages_return_the_files_bytes() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("64M", &[]);
    let len = 8 << 20;
    let data = pattern(11, len);
    fs::write(m.backing().join("f"), &data).unwrap();
    let f = fs::File::open(m.mnt().join("f")).unwrap();
    // Cache the first 2 MiB and every other 64 KiB after it.
    let mut buf = vec![0u8; 64 << 10];
    for off in (0..2 << 20).step_by(64 << 10).chain((2 << 20..len).step_by(128 << 10)) {
        f.read_exact_at(&mut buf, off as u64).unwrap();
        assert!(buf[..] == data[off..off + buf.len()], "warm-up read at {off}");
    }
    for chunk in [4096usize, 100_000, 128 << 10, 1 << 20] {
        let mut got = vec![0u8; chunk];
        let mut off = 0;
        while off < len {
            let n = chunk.min(len - off);
            f.read_exact_at(&mut got[..n], off as u64).unwrap();
            assert!(got[..n] == data[off..off + n], "read of {n} bytes at {off}");
            off += n;
        }
    }
    drop(f);
    m.unmount();
}

// Goal: the fallback where the kernel cannot map direct-I/O files (before
// Linux 6.6, forced here with --no-direct-io-mmap): the mount says so; a
// file served directly fails mmap(MAP_SHARED) with ENODEV; a `*-shm` file
// is served through the kernel's page cache and maps; it stays coherent
// with pcache: a write(2) through a handle opened directly before the file
// got its `-shm` name (a hard link) is seen through the mapping (the
// kernel drops its pages of a range written directly), a store msynced is
// read through that handle, and both reach the backing file.
#[test]
fn shared_mappings_fall_back_to_the_kernel_cache() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("16M", &["--no-direct-io-mmap"]);
    let (mnt, backing) = (m.mnt(), m.backing());
    assert!(m.log().contains("--kernel-cache: *-shm"), "no word of the fallback:\n{}", m.log());
    let len = 64 * 1024;
    let data = pattern(9, len);
    fs::write(mnt.join("plain"), &data).unwrap();
    let plain = fs::OpenOptions::new().read(true).write(true).open(mnt.join("plain")).unwrap();
    let e = SharedMap::new(&plain, len, true).err().expect("a direct file mapped shared");
    assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
    fs::write(mnt.join("alias"), &data).unwrap();
    let alias = fs::OpenOptions::new().read(true).write(true).open(mnt.join("alias")).unwrap();
    fs::hard_link(mnt.join("alias"), mnt.join("x-shm")).unwrap();
    let f = fs::OpenOptions::new().read(true).write(true).open(mnt.join("x-shm")).unwrap();
    let map = SharedMap::new(&f, len, true).unwrap();
    assert_eq!(map.read(0, len), data);
    alias.write_all_at(b"through the alias", 4096).unwrap();
    assert_eq!(map.read(4096, 17), b"through the alias", "the kernel's pages were not invalidated");
    map.write(8192, b"through the mapping");
    map.msync();
    let mut got = [0u8; 19];
    alias.read_exact_at(&mut got, 8192).unwrap();
    assert_eq!(&got, b"through the mapping");
    f.write_all_at(b"write(2) on the cached name", 12288).unwrap();
    assert_eq!(map.read(12288, 27), b"write(2) on the cached name");
    drop((map, f, alias, plain));
    m.unmount();
    let on_disk = fs::read(backing.join("x-shm")).unwrap();
    assert_eq!(&on_disk[4096..4113], b"through the alias");
    assert_eq!(&on_disk[8192..8211], b"through the mapping");
    assert_eq!(&on_disk[12288..12315], b"write(2) on the cached name");
}

// Goal: POSIX's rule for a mapping past the end of its file holds on the
// mount: after a truncation below a live shared mapping, a load from a
// page wholly past the new end raises SIGBUS, while the pages still inside
// the file read their bytes. Method: the load runs in a forked child,
// which does nothing else before it exits.
#[test]
fn mapping_past_a_truncation_raises_sigbus() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::start("16M", &[]);
    let len = 64 * 1024;
    let data = pattern(3, len);
    fs::write(m.mnt().join("f"), &data).unwrap();
    let f = fs::OpenOptions::new().read(true).write(true).open(m.mnt().join("f")).unwrap();
    let map = match SharedMap::new(&f, len, false) {
        Ok(map) => map,
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
            eprintln!("skipped mapping_past_a_truncation_raises_sigbus: no shared mappings here");
            return;
        }
        Err(e) => panic!("mmap: {e}"),
    };
    f.set_len(8192).unwrap();
    assert_eq!(map.read(0, 8192), data[..8192]);
    let load_in_child = |off: usize| {
        // SAFETY: the child only loads one byte of the mapping and calls
        // _exit, both async-signal-safe; the parent waits for it.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                let b = std::ptr::read_volatile(map.ptr.add(off));
                libc::_exit(i32::from(b == data[off]));
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            status
        }
    };
    let inside = load_in_child(4096);
    assert!(libc::WIFEXITED(inside) && libc::WEXITSTATUS(inside) == 1, "a load inside the file: status {inside:#x}");
    let past = load_in_child(16384);
    assert!(
        libc::WIFSIGNALED(past) && libc::WTERMSIG(past) == libc::SIGBUS,
        "a load past the end did not raise SIGBUS: status {past:#x}"
    );
    drop((map, f));
    m.unmount();
}
