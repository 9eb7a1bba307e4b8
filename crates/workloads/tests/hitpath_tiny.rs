//! Runs `hitpath` at a tiny size and checks the shape of its JSON. Asserts
//! nothing about timings.

use pcache_workloads::hitpath::{self, HitpathOpts};

#[test]
fn hitpath_tiny_json_has_every_key() {
    let opts =
        HitpathOpts { file_mib: 8, hit_pages: 4096, ops: 20_000, rounds: 2, progress: false, ..HitpathOpts::default() };
    let result = hitpath::run(&opts).expect("hitpath runs");
    let json = serde_json::to_value(&result).expect("serialises");

    for key in [
        "pcache_read_ns",
        "kernel_pread_ns",
        "memcpy_ns",
        "pcache_hot_read_ns",
        "kernel_hot_pread_ns",
        "hit_ns_1thread",
        "hit_ns_2threads",
        "kernel_over_pcache",
        "pcache_over_memcpy",
        "hot_kernel_over_pcache",
        "scaling_2threads",
        "pageref_hit_ns_1thread",
        "mapped_hit_ns_1thread",
        "mapped_hit_ns_2threads",
        "pagemut_write_ns_1thread",
        "mapped_scaling_2threads",
        "kernel_mapped_ns_1thread",
        "mglru_hit_ns_1thread",
        "mglru_hit_ns_2threads",
        "policy_hit_ns_1thread",
        "policy_hit_ns_2threads",
        "policy_over_builtin",
        "policy_scaling_2threads",
        "mapped_load_ns_1thread",
        "mapped_load_ns_2threads",
        "mapped_batch_ns_1thread",
        "mapped_batch_ns_2threads",
    ] {
        let v = json.get(key).and_then(|v| v.as_f64()).unwrap_or_else(|| panic!("{key} missing or not a number"));
        assert!(v.is_finite() && v > 0.0, "{key} = {v}");
    }
    // A difference of two timings: any sign.
    assert!(json["mapped_over_kernel_ns"].as_f64().is_some_and(f64::is_finite));
    assert!(json["mglru_marking_ns"].as_f64().is_some_and(f64::is_finite));
    assert!(json["mapped_load_over_kernel_ns"].as_f64().is_some_and(f64::is_finite));
    for (key, want) in [("file_mib", 8), ("hit_pages", 4096), ("ops", 20_000), ("rounds", 2), ("seed", 1)] {
        assert_eq!(json[key].as_u64(), Some(want), "{key}");
    }
    assert_eq!(json["threads"], serde_json::json!([1, 2]));

    for part in ["read_setup", "read", "hit_setup", "hit", "hit_mglru", "hit_policy"] {
        assert!(json["vmstat"][part].is_object(), "vmstat.{part}");
    }
    assert_eq!(json["samples"]["pcache_read_ns"].as_array().map(Vec::len), Some(2));
    // Rows: find_page, find_page_mglru, find_page_s3fifo, find_page_lists, mapped, mapped_load and mapped_batch for
    // 1 and 2 threads,
    // pageref, pagemut and the kernel's mapped access for 1.
    let rows: Vec<(String, u64)> = json["hit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["access"].as_str().unwrap().to_string(), r["threads"].as_u64().unwrap()))
        .collect();
    for (access, threads) in [
        ("find_page", 1),
        ("find_page", 2),
        ("mapped", 1),
        ("mapped", 2),
        ("mapped_load", 1),
        ("mapped_load", 2),
        ("mapped_batch", 1),
        ("mapped_batch", 2),
        ("pageref", 1),
        ("pagemut", 1),
        ("kernel_mapped", 1),
        ("find_page_mglru", 1),
        ("find_page_mglru", 2),
        ("find_page_s3fifo", 1),
        ("find_page_s3fifo", 2),
        ("find_page_lists", 1),
        ("find_page_lists", 2),
    ] {
        assert!(rows.contains(&(access.to_string(), threads)), "no {access} row for {threads} threads: {rows:?}");
    }
    assert_eq!(rows.len(), 17);
    assert_eq!(json["targets"].as_array().map(Vec::len), Some(12));
    for t in json["targets"].as_array().unwrap() {
        let status = t["status"].as_str().unwrap();
        assert!(status == "PASS" || status == "MISS", "{t}");
    }

    // It reads back, and the report names every target.
    let back: hitpath::HitpathResult = serde_json::from_value(json).expect("deserialises");
    assert_eq!(back.hit.len(), result.hit.len());
    assert_eq!(back.targets.len(), result.targets.len());
    let report = result.report();
    for t in &result.targets {
        assert!(report.contains(&t.name), "{}", t.name);
    }
}
