#!/usr/bin/env bash
# Build libpcache in release and install it under PREFIX:
#   PREFIX/lib/libpcache.so, PREFIX/lib/libpcache.a, PREFIX/include/pcache.h,
#   PREFIX/lib/pkgconfig/pcache.pc (from pcache.pc.in, with PREFIX in it).
# Usage: crates/capi/install.sh PREFIX        (e.g. /usr/local, or ~/.local)
# Then: cc prog.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs pcache)
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 PREFIX" >&2
  exit 2
fi
mkdir -p "$1"
prefix=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cargo build --release --locked -p pcache-capi
target=${CARGO_TARGET_DIR:-$root/target}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$target/release/libpcache.so" "$prefix/lib/libpcache.so"
install -m 0644 "$target/release/libpcache.a" "$prefix/lib/libpcache.a"
install -m 0644 crates/capi/include/pcache.h "$prefix/include/pcache.h"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" crates/capi/pcache.pc.in > "$prefix/lib/pkgconfig/pcache.pc"
echo "installed libpcache $version under $prefix (pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig)"
