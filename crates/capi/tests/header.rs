//! The checked-in header `include/pcache.h` is what cbindgen makes of
//! src/lib.rs with cbindgen.toml. `PCACHE_BLESS=1 cargo test -p
//! pcache-capi header` rewrites it.

use std::path::Path;

#[test]
fn header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8");
    let path = dir.join("include/pcache.h");
    if std::env::var_os("PCACHE_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/pcache.h");
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current != generated {
        let common = current.lines().count().min(generated.lines().count());
        let line = current.lines().zip(generated.lines()).position(|(a, b)| a != b).unwrap_or(common) + 1;
        panic!(
            "crates/capi/include/pcache.h is stale (first difference near line {line}): regenerate it with\n\
             \n    PCACHE_BLESS=1 cargo test -p pcache-capi header\n\nand commit it"
        );
    }
}
