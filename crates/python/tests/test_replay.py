"""pcache.replay against `pcache replay --json`, and the trace readers."""

import gzip
import json
import struct
import subprocess

import pytest

import pcache


def cli_json(pcache_bin, paths, *args):
    out = subprocess.run(
        [pcache_bin, "replay", *map(str, paths), "--json", "-", *args], check=True, capture_output=True, text=True
    ).stdout
    v = json.loads(out)
    return v if isinstance(v, list) else [v]


def test_replay_agrees_exactly_with_the_cli_on_every_lirs_trace(pcache_bin, lirs):
    # The CLI runs beside the Python replays (two cores).
    cli = subprocess.Popen(
        [pcache_bin, "replay", *map(str, lirs), "--json", "-"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    got = [pcache.replay(str(path)) for path in lirs]
    out, _ = cli.communicate()
    assert cli.returncode == 0
    want = json.loads(out)
    assert len(want) == len(lirs) >= 11
    for path, g, w in zip(lirs, got, want):
        assert g == w, path.name


def test_replay_options_agree_with_the_cli(pcache_bin, small):
    path = small[0]
    variants = [p["name"] for p in pcache.presets()]
    (want,) = cli_json(pcache_bin, [path], "--variants", ",".join(variants), "--sizes", "5,33.3")
    assert pcache.replay(path, sizes=[5, 33.3], variants=variants) == want
    (want,) = cli_json(pcache_bin, [path], "--pages", "100", "--usable-equals-nominal")
    assert pcache.replay(path, pages=[100], usable_equals_nominal=True) == want


def test_presets_have_descriptions_and_defaults():
    ps = pcache.presets()
    names = [p["name"] for p in ps]
    assert {"workingset-off", "workingset-on", "pcache-adaptive"} <= set(names)
    assert all(p["stands_for"] for p in ps)
    assert pcache.default_variants() == [p["name"] for p in ps if p["default"]]


def test_a_trace_read_in_python_replays_as_its_file(small):
    path = small[0]
    t = pcache.read_trace(path)
    assert t.name == path.name.split(".")[0] and t.format == "lirs"
    pages = list(t)
    assert len(pages) == len(t) == t.records and pages == t.pages()
    assert pcache.replay(t) == pcache.replay(path)
    assert pcache.replay(pages, name=t.name) == pcache.replay(path)


def test_a_filtered_trace_replays_as_the_cli_replays_it_written_out(pcache_bin, small, tmp_path):
    t = pcache.read_trace(small[1])
    sample = [p for i, p in enumerate(t) if i % 3 != 0 and p % 7 != 0]
    assert 0 < len(sample) < len(t)
    f = tmp_path / "sample.trace"
    f.write_text("".join(f"{p}\n" for p in sample))
    (want,) = cli_json(pcache_bin, [f])
    assert pcache.replay(pcache.Trace(sample, name="sample")) == want
    assert pcache.replay(sample, name="sample") == want


def test_csv_and_oracle_general_read_and_replay_as_the_cli(pcache_bin, tmp_path):
    rows = [(i * 7 % 50, 4096 * (1 + i % 3)) for i in range(400)]
    csv = tmp_path / "t.csv"
    csv.write_text("timestamp,obj_id,obj_size\n" + "".join(f"{i},{o},{s}\n" for i, (o, s) in enumerate(rows)))
    og = tmp_path / "t.oracleGeneral.gz"
    with gzip.open(og, "wb") as f:
        for i, (o, s) in enumerate(rows):
            f.write(struct.pack("<IQIq", i, o << 20, s, -1))
    for path, fmt in [(csv, "csv"), (og, "oracleGeneral")]:
        t = pcache.read_trace(path)
        assert t.format == fmt and t.records == 400
        # A request of 2 pages is two accesses.
        assert len(t) == sum(1 + i % 3 for i in range(400))
        (want,) = cli_json(pcache_bin, [path])
        assert pcache.replay(path) == want
        assert pcache.replay(t) == want
    assert pcache.read_trace(og).renumbered
    data = og.read_bytes()
    shipped = pcache.parse_trace(data, "oracleGeneral", "t.oracleGeneral")
    assert shipped.pages() == pcache.read_trace(og).pages()


def test_bad_input_raises_python_exceptions(tmp_path, lirs):
    with pytest.raises(FileNotFoundError):
        pcache.replay(tmp_path / "missing.trace")
    bad = tmp_path / "bad.trace"
    bad.write_text("1\n2\nthree\n")
    with pytest.raises(ValueError, match="three"):
        pcache.read_trace(bad)
    with pytest.raises(ValueError, match="the trace is empty"):
        pcache.replay([])
    with pytest.raises(ValueError):
        pcache.replay(lirs[0], variants=["no-such-variant"])
    with pytest.raises(ValueError):
        pcache.replay(lirs[0], fmt="parquet")
    with pytest.raises(ValueError):
        pcache.replay(lirs[0], sizes=[0])
    with pytest.raises(ValueError):
        pcache.replay(lirs[0], sizes=[10], pages=[100])
    with pytest.raises(ValueError):
        pcache.replay([1, 2, -3])
    with pytest.raises(ValueError):
        pcache.replay([1, 2, 1 << 50])
    with pytest.raises(TypeError):
        pcache.replay([1, "x"])


def test_render_markdown_and_plot_take_the_records(small, tmp_path):
    rec = pcache.replay(small[0], sizes=[10, 50])
    table = pcache.render(rec)
    assert rec["trace"] in table and "workingset-on miss%" in table
    md = pcache.markdown_table([rec])
    assert md.startswith("| trace") and md.count("\n") == 4
    svg = pcache.plot(rec, tmp_path)
    assert open(svg).read().lstrip().startswith("<svg")
