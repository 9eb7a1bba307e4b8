//! The standard programs `pcache bench mount` times, and what they run
//! on: a deterministic source tree (C files with a Makefile, text files in
//! directories) packed once into a tarball, SQLite scripts, fio's JSON.
//! Each program runs as a child process; the kernel side's children join
//! the memory cgroup before they exec ([`join_on_exec`]).

use std::ffi::CString;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::Value;

use crate::{Error, Result};

/// Why `tool` cannot be run here, if it cannot.
pub fn missing(tool: &str) -> Option<String> {
    // sqlite3 takes -version only; the others --version.
    let flag = if tool == "sqlite3" { "-version" } else { "--version" };
    match Command::new(tool).arg(flag).stdin(Stdio::null()).output() {
        Ok(_) => None,
        Err(e) => Some(format!("{tool} cannot be run: {e}")),
    }
}

/// Make `cmd`'s child join the memory cgroup at `cgroup` between fork and
/// exec, so that everything it and its own children cache or allocate is
/// charged there ("0" names the writer, in cgroup v1 and v2 alike).
pub fn join_on_exec(cmd: &mut Command, cgroup: &Path) -> Result<()> {
    let procs = CString::new(cgroup.join("cgroup.procs").as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{} holds a NUL byte", cgroup.display())))?;
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (open, write, close) on memory
    // made before the fork; last_os_error reads errno and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let wrote = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if wrote {
                Ok(())
            } else {
                Err(err)
            }
        });
    }
    Ok(())
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Run `cmd` to its end, its stdout thrown away unless captured: the
/// seconds it took and its stdout.
pub fn run(cmd: &mut Command, capture: bool) -> Result<(f64, Vec<u8>)> {
    cmd.stdout(if capture { Stdio::piped() } else { Stdio::null() }).stderr(Stdio::piped());
    let t = Instant::now();
    let out = cmd.output().map_err(|e| Error::io(format!("running {}", describe(cmd)), e))?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(Error::Check(format!("{} failed ({}): {last}", describe(cmd), out.status)));
    }
    Ok((secs, out.stdout))
}

/// The seconds `cmd` took.
pub fn timed(cmd: &mut Command) -> Result<f64> {
    run(cmd, false).map(|(s, _)| s)
}

/// Operations per second of fio's `--output-format=json` report: the sum
/// over its jobs (one with `--group_reporting`) of `rw`'s (`read`,
/// `write`) IOPS. fio may print notes before the JSON.
pub fn fio_iops(text: &str, rw: &str) -> Result<f64> {
    let start = text.find('{').ok_or_else(|| Error::Check("fio printed no JSON".into()))?;
    let v: Value =
        serde_json::from_str(&text[start..]).map_err(|e| Error::Check(format!("fio's JSON does not parse: {e}")))?;
    let jobs = v.get("jobs").and_then(Value::as_array).filter(|j| !j.is_empty());
    let jobs = jobs.ok_or_else(|| Error::Check("fio's JSON has no jobs".into()))?;
    let mut iops = 0.0;
    for j in jobs {
        if let Some(e) = j.get("error").and_then(Value::as_i64).filter(|&e| e != 0) {
            return Err(Error::Check(format!("fio job failed with error {e}")));
        }
        iops += j
            .get(rw)
            .and_then(|r| r.get("iops"))
            .and_then(Value::as_f64)
            .ok_or_else(|| Error::Check(format!("fio's JSON has no {rw} iops")))?;
    }
    Ok(iops)
}

/// One fio run's arguments: 4 KiB psync I/O by `jobs` jobs on `file` of
/// `size` bytes, each job on its own slice; `time_based` runs `ms` and
/// wraps around, otherwise each block is read once (fio's random map)
/// with `ms` as a cap.
pub fn fio_args(file: &Path, rw: &str, jobs: usize, size: u64, ms: u64, time_based: bool) -> Vec<String> {
    let slice = size / jobs as u64 / 4096 * 4096;
    let mut a = vec![
        "--name=pcache".to_string(),
        format!("--filename={}", file.display()),
        format!("--rw={rw}"),
        "--bs=4k".into(),
        format!("--numjobs={jobs}"),
        format!("--size={slice}"),
        format!("--offset_increment={slice}"),
        format!("--runtime={ms}ms"),
        "--ioengine=psync".into(),
        // The cache is the workload's to keep or drop, not fio's.
        "--invalidate=0".into(),
        "--fallocate=none".into(),
        "--group_reporting".into(),
        "--output-format=json".into(),
    ];
    if time_based {
        a.push("--time_based".into());
    }
    if rw == "randread" {
        a.push("--readonly".into());
    }
    a
}

/// What the source tree holds.
#[derive(Clone, Copy, Debug)]
pub struct TreeShape {
    /// C files (one of them with `main`), built by the Makefile.
    pub c_files: usize,
    /// Text files besides, 20 to a directory.
    pub text_files: usize,
}

/// Write the tree under `dir`: the same bytes for the same shape.
pub fn write_tree(dir: &Path, shape: TreeShape) -> Result<u64> {
    let io = |p: &Path, e| Error::io(format!("writing {}", p.display()), e);
    let put = |p: &Path, text: &str| -> Result<()> {
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        fs::write(p, text).map_err(|e| io(p, e))
    };
    let mut bytes = 0u64;
    for i in 0..shape.c_files {
        let mut c = String::from("#include <stdio.h>\n#include <string.h>\n#include <stdlib.h>\n\n");
        for f in 0..12 {
            let _ = write!(
                c,
                "static unsigned long f{f}(const char *s, unsigned long n)\n{{\n    unsigned long h = {seed}u;\n    \
                 for (unsigned long i = 0; i < n; i++)\n        h = h * 31u + (unsigned char)s[i % strlen(s)];\n    \
                 return h ^ (h >> {shift});\n}}\n\n",
                seed = 2166136261u64 + (i * 12 + f) as u64,
                shift = 1 + (i + f) % 17,
            );
        }
        let _ = write!(c, "unsigned long unit{i}(const char *s)\n{{\n    unsigned long h = 0;\n");
        for f in 0..12 {
            let _ = writeln!(c, "    h += f{f}(s, {});", 8 + f);
        }
        c.push_str("    return h;\n}\n");
        if i == 0 {
            c.push_str("\nint main(int argc, char **argv)\n{\n    unsigned long h = 0;\n");
            for j in 0..shape.c_files {
                let _ = writeln!(
                    c,
                    "    extern unsigned long unit{j}(const char *);\n    h ^= unit{j}(argc > 1 ? argv[1] : \"x\");"
                );
            }
            c.push_str("    printf(\"%lu\\n\", h);\n    return 0;\n}\n");
        }
        bytes += c.len() as u64;
        put(&dir.join(format!("src/unit{i:04}.c")), &c)?;
    }
    let make = "CC ?= gcc\nCFLAGS ?= -O2\nSRCS := $(wildcard src/*.c)\nOBJS := $(SRCS:.c=.o)\n\nprog: $(OBJS)\n\t\
                $(CC) -o $@ $(OBJS)\n\n%.o: %.c\n\t$(CC) $(CFLAGS) -c -o $@ $<\n\nclean:\n\trm -f prog $(OBJS)\n";
    put(&dir.join("Makefile"), make)?;
    for i in 0..shape.text_files {
        // 1 to 16 KiB of numbered lines, by a fixed pattern.
        let lines = 16 + (i * 7919) % 240;
        let mut t = String::new();
        for l in 0..lines {
            let _ = writeln!(t, "file {i} line {l}: the quick brown fox jumps over the lazy dog {}", (i * l) % 97);
        }
        bytes += t.len() as u64;
        put(&dir.join(format!("doc/d{:03}/f{i:05}.txt", i / 20)), &t)?;
    }
    Ok(bytes)
}

/// Files and directories under `dir` (what `find` lists), `dir` included.
pub fn count_entries(dir: &Path) -> Result<u64> {
    let mut n = 1;
    for e in fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))? {
        let e = e.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        let ft = e.file_type().map_err(|er| Error::io(format!("{}", e.path().display()), er))?;
        n += if ft.is_dir() { count_entries(&e.path())? } else { 1 };
    }
    Ok(n)
}

/// SQLite's journal modes measured.
pub const JOURNAL_MODES: [&str; 2] = ["DELETE", "WAL"];

/// The insert script: `rows` rows of about 80 bytes in `txns`
/// transactions, each committed (and synced) on its own.
pub fn sqlite_inserts(mode: &str, rows: u64, txns: u64) -> String {
    let mut s = format!("PRAGMA journal_mode={mode};\nCREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL);\n");
    let per = rows.div_ceil(txns.max(1));
    let mut done = 0;
    while done < rows {
        let n = per.min(rows - done);
        let _ = writeln!(
            s,
            "BEGIN;\nINSERT INTO t(v) SELECT printf('%064d-%d', value, value * 7919) FROM \
             (WITH RECURSIVE k(value) AS (SELECT {a} UNION ALL SELECT value + 1 FROM k WHERE value < {b}) \
             SELECT value FROM k);\nCOMMIT;",
            a = done + 1,
            b = done + n,
        );
        done += n;
    }
    s
}

/// The select script: `n` point lookups by primary key in a fixed
/// scattered order (CROSS JOIN keeps the key list outside, so each is a
/// rowid search), then a count the caller checks.
pub fn sqlite_selects(rows: u64, n: u64) -> String {
    format!(
        "WITH RECURSIVE k(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM k WHERE x < {n}) \
         SELECT count(*) FROM k CROSS JOIN t ON t.id = (k.x * 7919) % {rows} + 1 WHERE length(t.v) > 0;\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: fio's JSON gives the IOPS of the asked direction, summed over
    // jobs, past any note printed before it; a failed job or a missing
    // figure is an error, not a zero.
    #[test]
    fn parses_fio_json() {
        let one = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{"fio version": "fio-3.33", "jobs": [{"jobname": "pcache", "error": 0,
  "read": {"io_bytes": 4096, "iops": 31512.5}, "write": {"iops": 0.0}}]}"#;
        assert_eq!(fio_iops(one, "read").unwrap(), 31512.5);
        assert_eq!(fio_iops(one, "write").unwrap(), 0.0);
        let two = r#"{"jobs": [{"error": 0, "write": {"iops": 100.0}}, {"error": 0, "write": {"iops": 50.5}}]}"#;
        assert_eq!(fio_iops(two, "write").unwrap(), 150.5);
        for bad in ["", "no json", "{\"jobs\": []}", r#"{"jobs": [{"error": 5, "read": {"iops": 1.0}}]}"#] {
            assert!(matches!(fio_iops(bad, "read"), Err(Error::Check(_))), "{bad:?}");
        }
        assert!(fio_iops(r#"{"jobs": [{"error": 0, "read": {}}]}"#, "read").is_err());
    }

    // Goal: a child given join_on_exec runs in the memory cgroup (where
    // one can be made: root and a memory controller).
    #[test]
    fn children_join_the_cgroup() {
        let m = match crate::kernel::Memcg::create(64 << 20) {
            Ok(m) => m,
            Err(why) => {
                println!("skipped: {why}");
                return;
            }
        };
        let mut c = Command::new("cat");
        c.arg("/proc/self/cgroup");
        join_on_exec(&mut c, m.path()).unwrap();
        let (_, out) = run(&mut c, true).unwrap();
        let name = m.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(String::from_utf8_lossy(&out).contains(&name), "{}", String::from_utf8_lossy(&out));
    }

    // Goal: each fio job gets its own page-aligned slice of the file, and
    // only a time-based run wraps around.
    #[test]
    fn fio_slices_the_file() {
        let a = fio_args(Path::new("/f"), "randread", 4, 64 << 20, 500, false);
        assert!(a.contains(&format!("--size={}", 16 << 20)) && a.contains(&format!("--offset_increment={}", 16 << 20)));
        assert!(!a.contains(&"--time_based".to_string()) && a.contains(&"--readonly".to_string()));
        let a = fio_args(Path::new("/f"), "randwrite", 3, 10 << 20, 500, true);
        assert!(a.contains(&format!("--size={}", (10 << 20) / 3 / 4096 * 4096)) && a.contains(&"--time_based".into()));
    }

    // Goal: the tree is the same bytes each time, and its entries are
    // counted as find lists them.
    #[test]
    fn tree_is_deterministic() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let shape = TreeShape { c_files: 3, text_files: 45 };
        assert_eq!(write_tree(a.path(), shape).unwrap(), write_tree(b.path(), shape).unwrap());
        let f = "doc/d002/f00044.txt";
        assert_eq!(fs::read(a.path().join(f)).unwrap(), fs::read(b.path().join(f)).unwrap());
        // Root, Makefile, src + 3, doc + 3 directories + 45.
        assert_eq!(count_entries(a.path()).unwrap(), 1 + 1 + 4 + 4 + 45);
        let s = sqlite_inserts("WAL", 10, 3);
        assert_eq!(s.matches("COMMIT;").count(), 3);
        assert!(s.contains("value < 10)") && s.starts_with("PRAGMA journal_mode=WAL;"));
    }
}
