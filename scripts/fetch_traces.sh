#!/bin/sh
# The validation traces: real access streams for judging an eviction policy
# after its design is fixed (traces/README.md, "validation"). They are larger
# than the LIRS traces (3 MB), so they are not committed; this script puts
# them into traces/validation/ and checks each against
# traces/validation/SHA256SUMS.
#
#   sh scripts/fetch_traces.sh --from DIR     # copy from a local directory
#   sh scripts/fetch_traces.sh --url BASE     # download BASE/NAME with curl
#   PCACHE_TRACES_URL=BASE sh scripts/fetch_traces.sh
#   sh scripts/fetch_traces.sh --parda        # also (or only) the parda trace
#
# --parda converts the sample trace shipped in the PyPI sdist mimirCache 0.0.1
# (Juncheng Yang, GPLv3; mimirCache/Data/parda.trace): 137,979 memory
# references of a program, one hexadecimal byte address per line at an 8-byte
# stride, 29,867 distinct; each address becomes id address / 8 (20,359 distinct). The
# sdist and the converted trace each have a recorded sha256 below.
#
# A file whose sha256 differs is deleted and the script exits 1 with a
# one-line error; a file already present and intact is kept.
set -eu

PARDA_SDIST_SHA256=a78ab546553d513e348e73992d03e804ca72260973bc8c860de56b68ce675a02
PARDA_TRACE_SHA256=91b99988e8042bef050afb61203e27d5c7af65d6ebf1a3114347800fd4498a71

usage="usage: sh scripts/fetch_traces.sh [--from DIR | --url BASE] [--parda]"
die() {
  echo "fetch_traces.sh: $*" >&2
  exit 1
}

from=
url=${PCACHE_TRACES_URL:-}
parda=no
while [ $# -gt 0 ]; do
  case $1 in
    --from) [ $# -ge 2 ] || die "$usage"; from=$2; url=; shift 2 ;;
    --url) [ $# -ge 2 ] || die "$usage"; url=$2; from=; shift 2 ;;
    --parda) parda=yes; shift ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) die "$usage" ;;
  esac
done
if [ -z "$from" ] && [ -z "$url" ] && [ $parda = no ]; then
  die "no source: give --from DIR or --url BASE (or set PCACHE_TRACES_URL), or --parda"
fi

dest=$(cd "$(dirname "$0")/.." && pwd)/traces/validation
sums=$dest/SHA256SUMS
[ -f "$sums" ] || die "$sums is missing"
command -v sha256sum >/dev/null || die "sha256sum is missing (coreutils)"

sha() { sha256sum "$1" | cut -d' ' -f1; }

# check FILE NAME EXPECTED SOURCE: keeps FILE as $dest/NAME if its sum is
# EXPECTED, else deletes it and stops.
check() {
  got=$(sha "$1")
  if [ "$got" != "$3" ]; then
    rm -f "$1"
    die "$2 from $4: sha256 $got, expected $3; deleted"
  fi
  [ "$1" = "$dest/$2" ] || mv "$1" "$dest/$2"
  echo "ok $2"
}

if [ -n "$from$url" ]; then
  [ -z "$from" ] || [ -d "$from" ] || die "--from $from: not a directory"
  [ -z "$url" ] || command -v curl >/dev/null || die "curl is missing, needed for --url"
  while read -r want name; do
    [ -n "$name" ] || continue
    if [ -f "$dest/$name" ] && [ "$(sha "$dest/$name")" = "$want" ]; then
      echo "ok $name (already here)"
      continue
    fi
    part=$dest/$name.part
    if [ -n "$from" ]; then
      [ -f "$from/$name" ] || die "$name: not in $from"
      cp "$from/$name" "$part"
      check "$part" "$name" "$want" "$from"
    else
      curl -fsL -o "$part" "${url%/}/$name" || { rm -f "$part"; die "$name: download from ${url%/}/$name failed"; }
      check "$part" "$name" "$want" "${url%/}"
    fi
  done <"$sums"
fi

if [ $parda = yes ]; then
  if [ -f "$dest/parda.trace.gz" ] && [ "$(sha "$dest/parda.trace.gz")" = $PARDA_TRACE_SHA256 ]; then
    echo "ok parda.trace.gz (already here)"
    exit 0
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --dest "$tmp" mimirCache==0.0.1 \
    || die "parda: pip download mimirCache==0.0.1 failed"
  got=$(sha "$tmp/mimirCache-0.0.1.tar.gz")
  [ "$got" = $PARDA_SDIST_SHA256 ] || die "parda: mimirCache-0.0.1.tar.gz has sha256 $got, expected $PARDA_SDIST_SHA256"
  tar -xzf "$tmp/mimirCache-0.0.1.tar.gz" -C "$tmp" mimirCache-0.0.1/mimirCache/Data/parda.trace
  # A fixed gzip header (no name, mtime 0), so the converted file has one checksum.
  python3 - "$tmp/mimirCache-0.0.1/mimirCache/Data/parda.trace" "$dest/parda.trace.gz.part" <<'PY'
import gzip, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "wb") as raw:
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as g:
        for line in f:
            line = line.strip()
            if line:
                g.write(f"{int(line, 16) // 8}\n".encode())
PY
  check "$dest/parda.trace.gz.part" parda.trace.gz $PARDA_TRACE_SHA256 "mimirCache 0.0.1"
fi
