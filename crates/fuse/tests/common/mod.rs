//! The test harness both FUSE test binaries share: a `pcache-mount`
//! daemon over a temporary backing directory, unmounted (lazily) and
//! killed on drop so that a failing test leaves no stale mount, and the
//! check that says why FUSE tests skip.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A running `pcache-mount` daemon and its directories.
pub struct Mount {
    child: Option<Child>,
    pub dir: TempDir,
}

impl Mount {
    pub fn backing(&self) -> PathBuf {
        self.dir.path().join("backing")
    }

    pub fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// A temporary directory with `backing` and `mnt`, in `parent` (the
    /// system's temporary directory when None); no daemon yet.
    pub fn dirs(parent: Option<&Path>) -> Mount {
        let dir = tempfile::Builder::new()
            .prefix("pcache-fuse-test")
            .tempdir_in(parent.unwrap_or(&std::env::temp_dir()))
            .unwrap();
        let m = Mount { child: None, dir };
        fs::create_dir(m.backing()).unwrap();
        fs::create_dir(m.mnt()).unwrap();
        m
    }

    /// Start a daemon with `--mem MEM` and `extra` options in the system's
    /// temporary directory and wait until the mount is up.
    pub fn start(mem: &str, extra: &[&str]) -> Mount {
        let mut m = Mount::dirs(None);
        m.spawn(mem, extra, None);
        m
    }

    /// Start the daemon with RLIMIT_NOFILE `nofile` (soft and hard, when
    /// given) and wait until the mount is up.
    pub fn spawn(&mut self, mem: &str, extra: &[&str], nofile: Option<u64>) {
        let log = fs::File::create(self.dir.path().join("daemon.log")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pcache-mount"));
        cmd.arg(self.backing()).arg(self.mnt()).args(["--mem", mem]).args(extra).stdout(Stdio::null()).stderr(log);
        if let Some(n) = nofile {
            // SAFETY: the closure runs in the forked child before exec and
            // only calls setrlimit, which is async-signal-safe, on a value
            // on its own stack.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        self.child = Some(cmd.spawn().unwrap());
        let started = Instant::now();
        while !pcache_fuse::is_fuse_mount(&self.mnt()) {
            if let Some(st) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("daemon exited ({st}) before mounting:\n{}", self.log());
            }
            assert!(started.elapsed() < Duration::from_secs(20), "mount did not come up:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// Descriptors the daemon has open now.
    pub fn daemon_fds(&self) -> usize {
        fs::read_dir(format!("/proc/{}/fd", self.pid())).map(|d| d.count()).unwrap_or(0)
    }

    /// One counter of the mount's `.pcache/vmstat`.
    pub fn vmstat(&self, name: &str) -> u64 {
        let text = fs::read_to_string(self.mnt().join(".pcache/vmstat")).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no {name} in vmstat"))
    }

    /// Wait up to `secs` for the daemon to exit.
    pub fn wait_exit(&mut self, secs: u64) -> ExitStatus {
        let child = self.child.as_mut().expect("daemon running");
        let started = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                return st;
            }
            assert!(started.elapsed() < Duration::from_secs(secs), "daemon did not exit:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Unmount as a user would (fusermount3 -u) and wait for the daemon,
    /// which writes everything back before it exits.
    pub fn unmount(&mut self) {
        // Files closed just before are released asynchronously (the kernel
        // queues FUSE_RELEASE); until the daemon has answered, the mount
        // is busy, so a user's unmount is retried for a while, as here.
        let started = Instant::now();
        while !run("fusermount3", &["-u".as_ref(), self.mnt().as_os_str()], 30).success() {
            assert!(started.elapsed() < Duration::from_secs(10), "fusermount3 -u failed for 10 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        let st = self.wait_exit(60);
        assert!(st.success(), "daemon failed ({st}):\n{}", self.log());
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory involved.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // Unconditionally: a mount whose daemon died (kill -9) no longer
        // answers statfs, but its entry stays until unmounted.
        let _ = Command::new("fusermount3")
            .args(["-u", "-z", "-q"])
            .arg(self.mnt())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Some(mut child) = self.child.take() {
            let started = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if started.elapsed() > Duration::from_secs(20) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Why FUSE tests cannot run here, printed; None when they can.
pub fn skip_reason() -> Option<String> {
    let why = pcache_fuse::fuse_unavailable()?;
    eprintln!("SKIPPED: FUSE is not usable here: {why}");
    Some(why)
}

/// Run a program under `timeout`, inheriting output; its exit status.
pub fn run(program: &str, args: &[&std::ffi::OsStr], secs: u64) -> ExitStatus {
    Command::new("timeout")
        .args(["-k", "5", &secs.to_string(), program])
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("running {program}: {e}"))
}
