//! Limits on the mount: many files under a small RLIMIT_NOFILE, names
//! past NAME_MAX and PATH_MAX, and an honest shutdown when dirty data
//! cannot be written back.
//!
//! Each test mounts a backing directory through the `pcache-mount` binary,
//! as mount.rs does. The many-files tests put the backing directory on
//! tmpfs (/dev/shm) where there is one: creating 100,000 files on this
//! machine's ext4 costs about 1 ms each in the host's inode allocator,
//! which would measure ext4, not the mount. The daemon's RLIMIT_NOFILE is
//! set with setrlimit in the child between fork and exec.
//!
//! Skipped, saying why, where FUSE cannot be used; the shutdown test also
//! needs root (it mounts a tmpfs and sets the immutable attribute).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{skip_reason, Mount};

/// Descriptors the daemon holds besides its fd cache: stdio, /dev/fuse,
/// the backing root, the signal pipe, transient `O_PATH` descriptors of
/// requests in flight (one or two per worker), files out of the cache but
/// still used by a transfer.
const SLACK: usize = 48;

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// tmpfs for the many-files tests where there is one.
fn shm() -> Option<&'static Path> {
    let p = Path::new("/dev/shm");
    p.is_dir().then_some(p)
}

/// Ask the kernel to forget every node it can (dentries and inodes): the
/// next stats are real LOOKUPs. Root only; false when not possible.
fn drop_kernel_caches() -> bool {
    fs::write("/proc/sys/vm/drop_caches", "2").is_ok()
}

/// Create, write a little and close `n` files through the mount, one after
/// another, then stat each; the daemon's descriptors are counted every
/// 500 files and must stay within the bound.
fn many_files(m: &Mount, n: usize, bound: usize) {
    let dir = m.mnt().join("many");
    fs::create_dir(&dir).unwrap();
    let mut peak = 0;
    let mut check = |i: usize| {
        let fds = m.daemon_fds();
        peak = peak.max(fds);
        assert!(fds <= bound + SLACK, "file {i}: the daemon has {fds} descriptors open, bound {bound}\n{}", m.log());
        assert!(m.vmstat("nr_open_fds") as usize <= bound + SLACK / 2);
    };
    let started = Instant::now();
    for i in 0..n {
        let p = dir.join(format!("f{i}"));
        fs::write(&p, format!("file {i}\n")).unwrap_or_else(|e| panic!("file {i}: {e}\n{}", m.log()));
        if i % 500 == 0 {
            check(i);
        }
    }
    let created = started.elapsed();
    let forgot = drop_kernel_caches();
    if forgot {
        // FORGET releases everything: each file's engine inode goes (its
        // dirty pages written back first), so nothing is kept per file the
        // kernel no longer knows.
        let t = Instant::now();
        while m.vmstat("nr_inodes") > 16 {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{} engine inodes still held after the kernel forgot its nodes\n{}",
                m.vmstat("nr_inodes"),
                m.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for i in 0..n {
        let md = fs::metadata(dir.join(format!("f{i}"))).unwrap_or_else(|e| panic!("stat {i}: {e}\n{}", m.log()));
        assert_eq!(md.len(), format!("file {i}\n").len() as u64);
        if i % 500 == 0 {
            check(i);
        }
    }
    check(n);
    for i in (0..n).step_by(997) {
        assert_eq!(fs::read_to_string(dir.join(format!("f{i}"))).unwrap(), format!("file {i}\n"));
    }
    eprintln!(
        "{n} files through the mount: created in {created:?}, all in {:?} (kernel caches dropped before the stats: \
         {forgot}); peak {peak} daemon descriptors, bound {bound}",
        started.elapsed()
    );
}

fn many_files_test(n: usize) {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::dirs(shm());
    m.spawn("16M", &[], Some(1024));
    // The default bound: half the soft limit the daemon runs with.
    many_files(&m, n, 512);
    let st = {
        let s = Command::new("fusermount3").arg("-u").arg(m.mnt()).status().unwrap();
        assert!(s.success());
        m.wait_exit(60)
    };
    assert!(st.success(), "daemon failed ({st}):\n{}", m.log());
}

// Goal: 100,000 files created, written a little and closed one after
// another, then 100,000 stat-only lookups, all succeed with the daemon's
// RLIMIT_NOFILE at 1,024, its descriptors never above the fd cache's bound
// (plus slack). Today's mount holds two descriptors per file the kernel
// knows and fails with EMFILE after about 500 files.
// Method: /proc/PID/fd counted every 500 files; the kernel's dentries and
// inodes dropped (root) before the stats, so they are real LOOKUPs (about
// 30 s on this machine, backing on tmpfs).
#[test]
fn hundred_thousand_files_under_nofile_1024() {
    many_files_test(100_000);
}

// Goal: --max-open-fds bounds the daemon's backing descriptors.
#[test]
fn max_open_fds_option_is_the_bound() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::dirs(shm());
    m.spawn("16M", &["--max-open-fds", "8"], Some(1024));
    many_files(&m, 2_000, 8);
}

// Goal: names past NAME_MAX and paths past PATH_MAX get ENAMETOOLONG on
// the mount, for every call that takes a name; 255 bytes still work.
#[test]
fn names_too_long() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::dirs(None);
    m.spawn("16M", &[], None);
    let long = m.mnt().join("n".repeat(256));
    let errno = |r: std::io::Result<()>| r.err().and_then(|e| e.raw_os_error());
    assert_eq!(errno(fs::write(&long, b"x")), Some(libc::ENAMETOOLONG));
    assert_eq!(errno(fs::metadata(&long).map(drop)), Some(libc::ENAMETOOLONG));
    assert_eq!(errno(fs::create_dir(&long)), Some(libc::ENAMETOOLONG));
    assert_eq!(errno(std::os::unix::fs::symlink("t", &long)), Some(libc::ENAMETOOLONG));
    fs::write(m.mnt().join("ok"), b"x").unwrap();
    assert_eq!(errno(fs::rename(m.mnt().join("ok"), &long)), Some(libc::ENAMETOOLONG));
    assert_eq!(errno(fs::hard_link(m.mnt().join("ok"), &long)), Some(libc::ENAMETOOLONG));
    fs::write(m.mnt().join("n".repeat(255)), b"x").unwrap();
    let mut deep = m.mnt();
    while deep.as_os_str().len() < libc::PATH_MAX as usize {
        deep.push("d".repeat(200));
    }
    assert_eq!(errno(fs::write(&deep, b"x")), Some(libc::ENAMETOOLONG));
    // A symlink target past PATH_MAX.
    let target = "t/".repeat(libc::PATH_MAX as usize / 2 + 1);
    assert_eq!(errno(std::os::unix::fs::symlink(&target, m.mnt().join("s"))), Some(libc::ENAMETOOLONG));
}

// Goal: a shutdown with dirty data that cannot be written back names each
// such file by its path, never says everything was written, and exits
// non-zero; files that could be written are intact.
// Method (root): a small tmpfs as the backing store; a daemon that keeps
// only 2 backing files open and does no writeback on its own; 6 files
// written without fsync; then every backing file made immutable, so the
// files whose descriptors the fd cache closed cannot be reopened for
// writing (EPERM); SIGTERM.
// Expect: the log names the first files by their backing path, the daemon
// exits with a failure status, no "all dirty pages written back".
#[test]
fn shutdown_reports_unwritten_files_by_path() {
    if skip_reason().is_some() {
        return;
    }
    if !is_root() {
        eprintln!("SKIPPED: mounting a tmpfs and chattr +i need root");
        return;
    }
    let mut m = Mount::dirs(None);
    let st = Command::new("mount").args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"]).arg(m.backing()).status().unwrap();
    assert!(st.success(), "mount -t tmpfs failed");
    struct Unmount(PathBuf, Vec<PathBuf>);
    impl Drop for Unmount {
        fn drop(&mut self) {
            for f in &self.1 {
                let _ = Command::new("chattr").arg("-i").arg(f).status();
            }
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let names: Vec<String> = (0..6).map(|i| format!("file{i}")).collect();
    let _guard = Unmount(m.backing(), names.iter().map(|n| m.backing().join(n)).collect());
    m.spawn(
        "32M",
        &[
            "--max-open-fds",
            "2",
            "--set",
            "dirty_writeback_centisecs=0",
            "--set",
            "dirty_background_ratio=90",
            "--set",
            "dirty_ratio=95",
        ],
        None,
    );
    for n in &names {
        fs::write(m.mnt().join(n), vec![7u8; 64 << 10]).unwrap();
    }
    for n in &names {
        let st = Command::new("chattr").arg("+i").arg(m.backing().join(n)).status().unwrap();
        assert!(st.success(), "chattr +i failed");
    }
    m.signal(libc::SIGTERM);
    let st = m.wait_exit(60);
    let log = m.log();
    assert!(!st.success(), "the daemon must fail when data was not written:\n{log}");
    assert!(!log.contains("all dirty pages written back"), "{log}");
    let first = m.backing().join(&names[0]);
    assert!(
        log.lines().any(|l| l.contains("NOT written back") && l.contains(&*first.to_string_lossy())),
        "file0 must be named by its path:\n{log}"
    );
}

/// A writer for the interrupt test: writes `MiB` MiB to PATH and fsyncs,
/// says "ready", waits for a line on stdin, then overwrites the same range
/// (space already allocated: no reservation, no fallocate on the frozen
/// store). SIGUSR1's handler raises, so the interrupted write is not
/// restarted (PEP 475) and the writer exits with status 3.
const WRITER: &str = r#"
import os, signal, sys
class Stop(Exception): pass
def stop(sig, frame): raise Stop()
signal.signal(signal.SIGUSR1, stop)
path, mib = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
buf = b"\x07" * (1 << 20)
for i in range(mib): os.pwrite(fd, buf, i << 20)
os.fsync(fd)
print("ready", flush=True)
sys.stdin.readline()
try:
    for i in range(mib): os.pwrite(fd, buf, i << 20)
except Stop:
    print("interrupted", flush=True); sys.exit(3)
print("done", flush=True)
"#;

// Goal: a writer blocked in the daemon's dirty throttle and signalled is
// released at once, though the backing store makes no progress: FUSE
// INTERRUPT, which fuser 0.18 does not deliver, emulated by the daemon's
// watcher raising the session thread's pcache::Interrupt.
// Method (root): backing store an ext4 image on a loop device; a writer
// writes and fsyncs 24 MiB, the store is frozen (fsfreeze), the writer
// overwrites: the flusher blocks in pwrite, dirty pages reach the limit
// (4 MiB) and the writer waits in balance_dirty_pages; then SIGUSR1.
// Expect: the writer's write returns (EINTR) and it exits with its
// handler's status while the store is still frozen (the throttle's own
// bound is 30 s; the test allows 20); after thawing, the daemon writes
// everything back and exits cleanly.
#[test]
fn signalled_writer_is_released_from_the_throttle() {
    signalled_writer_released(&[]);
}

// The same with the daemon's writeback on io_uring (Tunables::io_engine):
// the frozen store then holds ring writes, not I/O threads.
#[test]
fn signalled_writer_is_released_from_the_throttle_uring() {
    signalled_writer_released(&["--set", "io_engine=Uring"]);
}

fn signalled_writer_released(engine: &[&str]) {
    if skip_reason().is_some() {
        return;
    }
    if !is_root() {
        eprintln!("SKIPPED: loop-mounting an ext4 image and fsfreeze need root");
        return;
    }
    let tools = ["python3", "mkfs.ext4", "fsfreeze"];
    if let Some(t) = tools.iter().find(|t| Command::new(t).arg("--version").output().is_err()) {
        eprintln!("SKIPPED: {t} is not installed");
        return;
    }
    let mut m = Mount::dirs(None);
    let img = m.dir.path().join("ext4.img");
    fs::File::create(&img).unwrap().set_len(96 << 20).unwrap();
    assert!(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img).status().unwrap().success());
    if !Command::new("mount").args(["-o", "loop"]).arg(&img).arg(m.backing()).status().unwrap().success() {
        eprintln!("SKIPPED: no loop device for the ext4 image");
        return;
    }
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            // Lazy: on a failure the daemon may still hold files there.
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _umount = Umount(m.backing());
    let mut args = vec!["--set", "dirty_bytes=4194304", "--set", "dirty_background_bytes=1048576"];
    args.extend_from_slice(engine);
    m.spawn("64M", &args, None);
    struct Thaw(PathBuf);
    impl Drop for Thaw {
        fn drop(&mut self) {
            let _ = Command::new("fsfreeze").arg("-u").arg(&self.0).status();
        }
    }
    let mut writer = Command::new("python3")
        .args(["-c", WRITER])
        .arg(m.mnt().join("f"))
        .arg("24")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(i32);
    impl Drop for Kill {
        fn drop(&mut self) {
            // SAFETY: kill(2) on our own child, not yet reaped (the guard
            // is forgotten once it is); no memory involved.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    let kill = Kill(writer.id() as i32);
    let mut out = std::io::BufReader::new(writer.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "ready", "{}", m.log());
    assert!(Command::new("fsfreeze").arg("-f").arg(m.backing()).status().unwrap().success());
    let thaw = Thaw(m.backing());
    std::io::Write::write_all(writer.stdin.as_mut().unwrap(), b"go\n").unwrap();
    // Wait until the writer is held: dirty pages (those waiting for
    // writeback and those under it, as balance_dirty_pages counts them)
    // not moving, for the store is frozen. It is held in the throttle
    // (near the limit), or, with fewer dirty, waiting for writeback of a
    // page it is changing: FUSE splits a 1 MiB write from an unaligned
    // buffer at a page that both parts write, and the flusher may start
    // that page's writeback between them (stable pages).
    let started = Instant::now();
    let mut last = (0, Instant::now());
    loop {
        let n = m.vmstat("nr_dirty") + m.vmstat("nr_writeback");
        if n != last.0 {
            last = (n, Instant::now());
        } else if n > 0 && last.1.elapsed() >= Duration::from_millis(500) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "dirty pages kept moving on a frozen store:\n{}", m.log());
        assert!(writer.try_wait().unwrap().is_none(), "the writer finished: it was never held");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(writer.try_wait().unwrap().is_none(), "the writer must be held");
    if !engine.is_empty() {
        // The frozen store holds the ring's writes, not only the threads'.
        assert_eq!(m.vmstat("uring_setup"), 1, "{}", m.log());
        assert!(m.vmstat("wb_submit_uring") > 0, "no writeback went through the ring:\n{}", m.log());
    }
    // SAFETY: kill(2) on our own child; no memory involved.
    assert_eq!(unsafe { libc::kill(writer.id() as i32, libc::SIGUSR1) }, 0);
    let signalled = Instant::now();
    let status = loop {
        if let Some(st) = writer.try_wait().unwrap() {
            break st;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(20),
            "the signalled writer was not released while the store is frozen:\n{}",
            m.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Reaped: its pid is no longer ours to signal.
    std::mem::forget(kill);
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    assert_eq!(status.code(), Some(3), "writer said {rest:?}");
    assert_eq!(rest.trim(), "interrupted");
    drop(thaw);
    let st = Command::new("fusermount3").arg("-u").arg(m.mnt()).status().unwrap();
    assert!(st.success());
    let st = m.wait_exit(60);
    assert!(st.success(), "after thawing everything can be written:\n{}", m.log());
}

// Goal: close(2) (FUSE flush) reports a writeback error once per handle:
// the first close of a handle that has not seen the error fails, a
// second close of the same handle (a dup) and a handle that saw it at
// fsync do not.
// Method (root): tmpfs backing, 2 backing descriptors at most, no
// background writeback; handle A writes, handle B is opened on the same
// file; other files push its descriptor out of the fd cache; the backing
// file is made immutable (so it cannot be reopened for writing); B's
// fsync writes back and fails.
// Expect: fsync(B) fails; close(A) fails with that error; close(dup of A)
// and close(B) succeed.
#[test]
fn close_reports_a_writeback_error_once_per_handle() {
    use std::os::fd::IntoRawFd;
    if skip_reason().is_some() {
        return;
    }
    if !is_root() {
        eprintln!("SKIPPED: mounting a tmpfs and chattr +i need root");
        return;
    }
    let mut m = Mount::dirs(None);
    let st = Command::new("mount").args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"]).arg(m.backing()).status().unwrap();
    assert!(st.success(), "mount -t tmpfs failed");
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = Command::new("chattr").arg("-i").arg(self.0.join("f")).status();
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _cleanup = Cleanup(m.backing());
    m.spawn(
        "32M",
        &[
            "--max-open-fds",
            "2",
            "--set",
            "dirty_writeback_centisecs=0",
            "--set",
            "dirty_background_ratio=90",
            "--set",
            "dirty_ratio=95",
        ],
        None,
    );
    let path = m.mnt().join("f");
    let mut a = fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    std::io::Write::write_all(&mut a, &[5u8; 64 << 10]).unwrap();
    let b = fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    for i in 0..4 {
        fs::write(m.mnt().join(format!("other{i}")), [1u8; 8192]).unwrap();
    }
    assert!(Command::new("chattr").arg("+i").arg(m.backing().join("f")).status().unwrap().success());
    let e = b.sync_all().expect_err("writeback of f cannot reopen it for writing");
    eprintln!("fsync: {e}");
    let a = a.into_raw_fd();
    // SAFETY: dup of a descriptor we own; the copy is closed below.
    let a2 = unsafe { libc::dup(a) };
    assert!(a2 >= 0);
    let close = |fd: i32| {
        // SAFETY: closing a descriptor we own, once.
        if unsafe { libc::close(fd) } == 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        }
    };
    assert_ne!(close(a), 0, "the first close of a handle that did not see the error reports it");
    assert_eq!(close(a2), 0, "reported once per handle");
    assert_eq!(close(b.into_raw_fd()), 0, "B saw the error at fsync");
}

/// CPU time (user + system) the daemon has used so far, in clock ticks.
fn daemon_cpu_ticks(pid: i32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after ')'.
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

// Goal: a full backing store, on a backing tmpfs of 64 MiB behind a
// 16 MiB cache: a 20 MiB file written with fsync, then 100 MiB written
// with no fsync. dd gets ENOSPC from write(2) within seconds (it used to
// block in the throttle while the flusher spun), the daemon then sits idle
// (CPU measured over a second), the fsynced file is intact, and after it
// is deleted, writes work again. Root only (mounting the tmpfs).
#[test]
fn full_backing_store_fails_the_write_at_the_call() {
    if skip_reason().is_some() {
        return;
    }
    if !is_root() {
        eprintln!("SKIPPED: mounting a small tmpfs needs root");
        return;
    }
    let mut m = Mount::dirs(None);
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64m", "tmpfs"])
        .arg(m.backing())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIPPED: cannot mount a tmpfs");
        return;
    }
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _tmpfs = Umount(m.backing());
    m.spawn("16M", &[], None);
    let a: Vec<u8> = (0..20 << 20).map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    fs::write(m.mnt().join("A"), &a).unwrap();
    fs::File::open(m.mnt().join("A")).unwrap().sync_all().unwrap();

    let started = Instant::now();
    let out = Command::new("timeout")
        .args(["60", "dd", "if=/dev/zero", "bs=1M", "count=100"])
        .arg(format!("of={}", m.mnt().join("B").display()))
        .output()
        .unwrap();
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "dd wrote 100 MiB into a 64 MiB store: {err}");
    assert!(err.contains("No space left on device"), "dd's error: {err}");
    assert!(took < Duration::from_secs(20), "dd took {took:?} to fail");

    // Idle now: the daemon must not spin on the full store.
    std::thread::sleep(Duration::from_millis(500));
    let before = daemon_cpu_ticks(m.pid());
    std::thread::sleep(Duration::from_secs(1));
    let ticks = daemon_cpu_ticks(m.pid()) - before;
    // SAFETY: sysconf touches no memory.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    assert!(ticks * 10 <= hz, "the daemon used {ticks} ticks of {hz} in an idle second: it spins");
    // What was accepted had its space reserved: it all reaches the store.
    fs::File::open(m.mnt().join("B")).unwrap().sync_all().unwrap();
    assert_eq!(m.vmstat("nr_dirty"), 0, "a dirty page that cannot be written");

    assert_eq!(fs::read(m.mnt().join("A")).unwrap(), a, "the fsynced file is intact");
    // unlink(2) frees the space when it returns, as without the mount
    // (the kernel's FORGET of the inode may come later, on another thread).
    fs::remove_file(m.mnt().join("B")).unwrap();
    fs::write(m.mnt().join("C"), vec![7u8; 8 << 20]).unwrap();
    fs::File::open(m.mnt().join("C")).unwrap().sync_all().unwrap();
    assert_eq!(fs::read(m.backing().join("C")).unwrap(), vec![7u8; 8 << 20]);
}

// Goal: metadata stays bounded through the mount as through the library:
// random 4 KiB reads over a sparse 4 GiB file for 8x the cache leave at
// most 1 KiB of page-tree nodes per frame (the engine's own count,
// `.pcache/vmstat`), and none once the file is truncated.
#[test]
fn sparse_random_reads_keep_metadata_bounded() {
    if skip_reason().is_some() {
        return;
    }
    let mut m = Mount::dirs(shm());
    m.spawn("4M", &[], None);
    let path = m.mnt().join("sparse");
    let f = fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&path).unwrap();
    f.set_len(4 << 30).unwrap();
    let frames = (4u64 << 20) / 4096;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = vec![0u8; 4096];
    use std::os::unix::fs::FileExt;
    for _ in 0..8 * frames {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let page = x % ((4u64 << 30) / 4096);
        f.read_exact_at(&mut buf, page * 4096).unwrap();
    }
    let bytes = m.vmstat("pagetree_node_bytes");
    assert!(bytes <= 1024 * frames, "{bytes} bytes of tree nodes for {frames} frames after reads of 8x");
    f.set_len(0).unwrap();
    drop(f);
    let after = m.vmstat("pagetree_node_bytes");
    assert!(after <= 4096, "{after} bytes of tree nodes after truncation to 0");
}
