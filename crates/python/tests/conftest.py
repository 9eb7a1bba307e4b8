"""Fixtures: the LIRS traces of the repository and the `pcache` binary to compare with."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TRACES = REPO / "traces" / "lirs"


@pytest.fixture(scope="session")
def lirs():
    # The traces belong to the repository: without them the checkout is broken, and the tests fail rather than skip.
    traces = sorted(TRACES.glob("*.trace.gz"))
    if not traces:
        pytest.fail(f"no traces in {TRACES}: traces/lirs/ belongs to the repository")
    return traces


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
