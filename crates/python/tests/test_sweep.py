"""pcache sweep: local and Ray give the same records as pcache.replay."""

import json
import os
import subprocess
import sys

import pytest

import pcache
from pcache import sweep as sw

SIZES = [10, 40]


def by_replay(paths, sizes=None):
    return [pcache.replay(p, sizes=sizes) for p in paths]


def test_local_sweep_gives_replays_records(small, tmp_path):
    out = tmp_path / "s.json"
    doc = sw.sweep(small, workers=2, json_path=str(out), quiet=True)
    assert doc["failed"] == [] and doc["sweep"]["complete"]
    assert doc["traces"] == by_replay(small)
    assert json.loads(out.read_text())["traces"] == doc["traces"]
    one = sw.sweep(small, workers=1, chunk="trace", quiet=True)
    assert one["traces"] == doc["traces"]


def test_local_sweep_survives_a_killed_worker(small, tmp_path):
    marker = tmp_path / "killed"
    doc = sw.sweep(small, sizes=SIZES, workers=2, quiet=True, _kill_once=str(marker))
    assert marker.exists(), "no worker was killed"
    assert int(marker.read_text()) not in {r["pid"] for r in doc["cells"].values()}
    assert doc["failed"] == []
    assert doc["traces"] == by_replay(small, SIZES)


def test_traces_by_url(small):
    doc = sw.sweep([f"file://{p}" for p in small], sizes=[10], quiet=True)
    assert doc["failed"] == []
    assert doc["traces"] == by_replay(small, [10])


def test_resume_runs_only_the_missing_cells(small, tmp_path):
    out = tmp_path / "s.json"
    full = sw.sweep(small, sizes=SIZES, json_path=str(out), quiet=True)
    doc = json.loads(out.read_text())
    keys = sorted(doc["cells"])
    for k in keys[::2]:
        del doc["cells"][k]
    out.write_text(json.dumps(doc))
    again = sw.sweep(small, sizes=SIZES, json_path=str(out), resume=True, quiet=True)
    assert again["sweep"]["resumed"] == len(keys) - len(keys[::2])
    assert again["traces"] == full["traces"] == by_replay(small, SIZES)


def test_a_failing_cell_is_reported_not_lost(small, tmp_path):
    bad = tmp_path / "broken.trace"
    bad.write_text("1\n2\nnot-a-block\n")
    doc = sw.sweep([*small, bad], sizes=SIZES, retries=1, quiet=True)
    nvar = len(pcache.default_variants())
    assert len(doc["failed"]) == len(SIZES) * nvar
    assert all("not-a-block" in f["error"] and f["tries"] == 2 for f in doc["failed"])
    assert doc["traces"] == by_replay(small, SIZES)
    assert not doc["sweep"]["complete"]


def test_the_cli_runs_the_driver(small, tmp_path, pcache_bin):
    out = tmp_path / "cli.json"
    env = dict(os.environ, PCACHE_PYTHON=sys.executable)
    r = subprocess.run(
        [pcache_bin, "sweep", *map(str, small), "--sizes", "10", "--json", str(out), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "workingset-on miss%" in r.stdout
    assert json.loads(out.read_text())["traces"] == by_replay(small, [10])
    r = subprocess.run([pcache_bin, "sweep", str(tmp_path / "missing")], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "missing" in r.stderr
    # A cache size below replay's minimum is refused, not raised to it.
    r = subprocess.run([pcache_bin, "sweep", *map(str, small), "--pages", "0,5"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "at least 16 pages" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_ray_sweep_gives_the_local_records_even_when_a_worker_is_killed(ray_local, small, tmp_path):
    local = sw.sweep(small, sizes=SIZES, quiet=True)
    marker = tmp_path / "killed"
    doc = sw.sweep(small, sizes=SIZES, ray="local", quiet=True, _kill_once=str(marker))
    assert marker.exists(), "no task was killed"
    killed = int(marker.read_text())
    assert killed not in {r["pid"] for r in doc["cells"].values()}
    assert doc["failed"] == []
    assert doc["traces"] == local["traces"]
    # Per trace, with the traces shipped through the object store.
    shipped = sw.sweep(small, sizes=SIZES, ray="local", chunk="trace", ship=True, quiet=True)
    assert shipped["traces"] == local["traces"]


def test_ray_reports_a_cell_that_fails_again(ray_local, small, tmp_path):
    bad = tmp_path / "broken.trace"
    bad.write_text("x\n")
    doc = sw.sweep([small[0], bad], sizes=[10], ray="local", retries=1, quiet=True)
    assert len(doc["failed"]) == len(pcache.default_variants())
    assert all(f["tries"] == 2 for f in doc["failed"])
    assert doc["traces"] == by_replay([small[0]], [10])


def test_libcachesim_policies_are_merged_as_the_scripts_baselines(small):
    pytest.importorskip("libcachesim")
    script = sw.os.path.join(sw.os.path.dirname(__file__), "..", "..", "..", "scripts", "libcachesim_replay.py")
    r = subprocess.run(
        [sys.executable, script, str(small[0]), "--sizes", "10,40", "--policies", "LRU,S3-FIFO", "--json", "-"],
        capture_output=True,
        text=True,
        check=True,
    )
    want = json.loads(r.stdout)
    doc = sw.sweep([small[0]], sizes=[10, 40], policies=["LRU", "S3-FIFO"], quiet=True)
    (rec,) = doc["traces"]
    assert rec["baselines"] == want["results"]
    pc = pcache.replay(small[0], sizes=[10, 40])
    assert {k: v for k, v in rec.items() if k != "baselines"} == {k: v for k, v in pc.items() if k != "baselines"}
