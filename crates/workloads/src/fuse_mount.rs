//! A `pcache mount` daemon for the experiments that run real programs on a
//! mount (`fuse-dd`, `mount`): the `pcache` binary's `mount` subcommand,
//! spawned, waited for until the mountpoint is a FUSE filesystem, and
//! unmounted when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// Why this host cannot mount with FUSE, if it cannot.
pub fn fuse_unavailable() -> Option<String> {
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        return Some(format!("/dev/fuse cannot be opened: {e}"));
    }
    if let Err(e) = Command::new("fusermount3").arg("-V").output() {
        return Some(format!("fusermount3 cannot be run: {e}"));
    }
    None
}

/// Why `exe` cannot serve a mount here, if it cannot: only the pcache
/// binary has the `mount` subcommand (a test harness would start itself).
pub fn mount_unavailable(exe: &Path) -> Option<String> {
    let is_pcache = exe.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("pcache"));
    if is_pcache {
        fuse_unavailable()
    } else {
        Some(format!("{} is not the pcache binary, which serves the mount", exe.display()))
    }
}

fn is_fuse_mount(path: &Path) -> bool {
    crate::sys::fs_magic(path) == Some(0x6573_5546)
}

/// A `pcache mount` daemon, unmounted (lazily if need be) when dropped.
pub struct Daemon {
    child: Option<Child>,
    exe: PathBuf,
    backing: PathBuf,
    mnt: PathBuf,
    mem: u64,
    set: Vec<(String, String)>,
}

impl Daemon {
    pub fn start(exe: &Path, backing: &Path, mnt: &Path, mem: u64, set: &[(String, String)]) -> Result<Daemon> {
        let mut d = Daemon {
            child: None,
            exe: exe.to_path_buf(),
            backing: backing.to_path_buf(),
            mnt: mnt.to_path_buf(),
            mem,
            set: set.to_vec(),
        };
        d.spawn()?;
        Ok(d)
    }

    fn spawn(&mut self) -> Result<()> {
        let child = Command::new(&self.exe)
            .arg("mount")
            .arg(&self.backing)
            .arg(&self.mnt)
            .args(["--mem", &self.mem.to_string()])
            .args(self.set.iter().flat_map(|(k, v)| ["--set".to_string(), format!("{k}={v}")]))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::io(format!("starting {} mount", self.exe.display()), e))?;
        self.child = Some(child);
        let started = Instant::now();
        while !is_fuse_mount(&self.mnt) {
            if let Some(st) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                return Err(Error::Check(format!("pcache mount exited ({st}) before mounting")));
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err(Error::Check("pcache mount did not come up in 20 s".into()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mnt
    }

    /// Unmount (which writes every dirty page back) and wait for the daemon.
    pub fn stop(&mut self) -> Result<()> {
        let st = Command::new("fusermount3").arg("-u").arg(&self.mnt).status();
        if !st.map(|s| s.success()).unwrap_or(false) {
            return Err(Error::Check("fusermount3 -u failed".into()));
        }
        if let Some(mut c) = self.child.take() {
            let st = c.wait().map_err(|e| Error::io("waiting for pcache mount", e))?;
            if !st.success() {
                return Err(Error::Check(format!("pcache mount exited with {st}")));
            }
        }
        Ok(())
    }

    /// A new daemon on the same directories: its cache starts empty.
    pub fn remount(&mut self) -> Result<()> {
        self.stop()?;
        self.spawn()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("fusermount3").args(["-u", "-z", "-q"]).arg(&self.mnt).status();
            let _ = c.wait();
        }
    }
}
