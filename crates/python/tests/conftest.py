"""Shared fixtures: the shared traces and the `pcache` binary to compare with."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def traces_dir():
    env = os.environ.get("PCACHE_TRACES")
    for d in [env, REPO.parent / "shared" / "traces" / "lirs"]:
        if d and Path(d).is_dir():
            return Path(d)
    return None


@pytest.fixture(scope="session")
def lirs():
    d = traces_dir()
    if d is None:
        pytest.skip("no shared traces (../shared/traces/lirs or $PCACHE_TRACES)")
    return sorted(d.glob("*.trace.gz"))


@pytest.fixture(scope="session")
def small(lirs):
    """Two small traces, for the sweeps."""
    by = {p.name.split(".")[0]: p for p in lirs}
    return [by["cs"], by["gli"]]


@pytest.fixture(scope="session")
def pcache_bin():
    """The CLI: $PCACHE_BIN, else the workspace's release build (built
    here if missing)."""
    env = os.environ.get("PCACHE_BIN")
    if env:
        return env
    b = REPO / "target" / "release" / "pcache"
    if not b.exists():
        cargo = shutil.which("cargo")
        if cargo is None:
            pytest.skip("no pcache binary and no cargo to build it")
        subprocess.run([cargo, "build", "--release", "-q", "-p", "pcache-cli"], cwd=REPO, check=True)
    return str(b)
