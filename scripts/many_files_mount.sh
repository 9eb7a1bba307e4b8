#!/bin/bash
# Metadata cost of a pcache mount with many files: create, write 100 bytes
# and close N files one after another, drop the kernel's dentries and
# inodes (root), stat each (real LOOKUPs), and count the daemon's open
# descriptors. The backing directory is on /dev/shm, so the host file
# system's own cost stays small.
#
# usage: scripts/many_files_mount.sh PCACHE_MOUNT_BINARY N
set -euo pipefail
BIN=$1
N=$2
D=$(mktemp -d /dev/shm/pcache-many-files.XXXX)
mkdir "$D/b" "$D/m"
"$BIN" "$D/b" "$D/m" --mem 64M 2>"$D/log" &
PID=$!
for _ in $(seq 100); do mountpoint -q "$D/m" && break; sleep 0.1; done
python3 - "$D/m" "$N" "$PID" <<'PY'
import os, sys, time
m, n, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.mkdir(m + '/t')
t = time.time()
for i in range(n):
    with open(f'{m}/t/f{i}', 'w') as f:
        f.write('x' * 100)
c = time.time() - t
fds = len(os.listdir(f'/proc/{pid}/fd'))
try:
    open('/proc/sys/vm/drop_caches', 'w').write('2')
except OSError:
    pass
t = time.time()
for i in range(n):
    os.stat(f'{m}/t/f{i}')
s = time.time() - t
print(f'{n} files: create+write+close {c / n * 1e6:.0f} us/file, '
      f'stat after drop_caches {s / n * 1e6:.0f} us/file, daemon descriptors after creating: {fds}')
PY
fusermount3 -u "$D/m"
wait "$PID"
rm -rf "$D"
