#!/bin/sh
# Real traces that a package registry brings, for the held-out set of
# issue 15 (pcache's policy judged on traces it was not tuned on). The data
# is not kept in the repository; this script fetches and converts it:
#
#   sh scripts/fetch_real_traces.sh OUTDIR
#
# - parda.trace.gz: the sample trace shipped inside the PyPI sdist
#   mimirCache 0.0.1 (Juncheng Yang, GPLv3; mimirCache/Data/parda.trace,
#   2 MB): 137,979 memory references of a program, one hexadecimal byte
#   address per line, 8-byte stride, 29,867 distinct. Each address becomes
#   one page id (address / 8), in the LIRS text format replay reads.
#
# Searched in session 7 for more (issue 15), none found: mimircache 0.0.2 to
# 0.0.2.85 ship only this same parda.trace (or nothing); PyMimircache
# 0.0.2.90, s3fifo, s3fifo-cache and corto-cache ship no trace; libcachesim's
# wheel has none (its sample trace.vscsi lives in its repository only).
set -eu
out=${1:?usage: fetch_real_traces.sh OUTDIR}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip download --quiet --no-deps --dest "$tmp" mimirCache==0.0.1
tar -xzf "$tmp"/mimirCache-0.0.1.tar.gz -C "$tmp" mimirCache-0.0.1/mimirCache/Data/parda.trace
python3 - "$tmp"/mimirCache-0.0.1/mimirCache/Data/parda.trace "$out"/parda.trace.gz <<'PY'
import gzip, sys
with open(sys.argv[1]) as f, gzip.open(sys.argv[2], "wt") as g:
    for line in f:
        line = line.strip()
        if line:
            g.write(f"{int(line, 16) // 8}\n")
PY
echo "wrote $out/parda.trace.gz"
