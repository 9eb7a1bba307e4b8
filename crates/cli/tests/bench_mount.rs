//! `pcache bench mount` end to end through the built binary, which also
//! serves the mount: its quick form, made smaller, on this host. Without
//! FUSE the test says why and passes; without root or a memory cgroup the
//! kernel side is skipped by the experiment itself, which the JSON says.

use std::process::Command;

#[test]
fn quick_form_runs_end_to_end() {
    if let Some(why) = pcache_workloads::fuse_mount::fuse_unavailable() {
        println!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("mount.json");
    let params =
        ["dd_mib=8", "fio_ms=100", "c_files=2", "text_files=20", "stat_rounds=1", "rows=200", "txns=4", "selects=100"];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pcache"));
    cmd.args(["bench", "mount", "--quick", "--runs", "1", "--mem", "64M", "--json"])
        .arg(&json)
        .arg("--dir")
        .arg(dir.path());
    for p in params {
        cmd.args(["--param", p]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["mount_skipped"], serde_json::Value::Null, "{v}");
    let rows = v["workloads"].as_array().unwrap();
    for name in ["dd write+fsync", "dd read warm", "tar x", "sqlite WAL selects"] {
        let r = rows.iter().find(|r| r["name"] == name).unwrap();
        // Each row either measured the mount or says why not (a missing tool).
        assert!(r["mount"].as_f64().is_some_and(|x| x > 0.0) || r["note"].is_string(), "{r}");
        assert!(r["better"] == "higher" || r["better"] == "lower", "{r}");
    }
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("mount/kernel"), "{report}");
}
