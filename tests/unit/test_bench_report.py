"""bench's kept runs, what changed between two, and the report's pictures (their data,
read back from the PNGs' own text, not their pixels)."""

from __future__ import annotations

import json

import pytest

from mpicluster.bench import history, plots


def report(pairs: dict, busbw: float = 0.3, flagged: tuple = (), cluster: str = "c") -> dict:
    return {
        "schema": 1,
        "cluster": cluster,
        "status": "fail" if flagged else "pass",
        "seconds": 40.0,
        "library": "Open MPI v4.1.4 <b>",
        "expected": {"gbs": 1.0, "source": "median of the faster half of the pairs"},
        "efficiency_basis": "baseline",
        "pairs": [
            {
                "nodes": list(p),
                "gbs": gbs,
                "latency_us": 12.0,
                "expected": 1.0,
                "pass": 1,
                "slow": gbs < 0.6,
                "network_gbs": 1.2,
            }
            for p, gbs in pairs.items()
        ],
        "allreduce": [
            {
                "bytes": 8,
                "algbw_gbs": 0.0002,
                "busbw_gbs": 0.0002,
                "latency_us": 40.0,
                "efficiency": 0.0,
                "exact": True,
            },
            {
                "bytes": 256 << 20,
                "algbw_gbs": 0.2,
                "busbw_gbs": busbw,
                "latency_us": 1.34e6,
                "efficiency": 0.25,
                "exact": True,
            },
        ],
        "flagged": [
            {"kind": "node", "nodes": [n], "measured": 0.06, "expected": 1.0, "why": "<slow>"}
            for n in flagged
        ],
    }


HEALTHY = {("node1", "node2"): 1.0, ("node1", "node3"): 1.1, ("node2", "node3"): 0.95}
SLOW3 = {("node1", "node2"): 1.05, ("node1", "node3"): 0.06, ("node2", "node3"): 0.06}


def test_compare_names_what_moved_and_ignores_noise():
    changes = history.compare(report(HEALTHY), report(SLOW3, busbw=0.06, flagged=("node3",)))
    said = {c.what: c for c in changes}
    assert sorted(said) == ["allreduce 256 MiB", "flagged", "node1-node3", "node2-node3"]
    assert said["node1-node3"].ratio == pytest.approx(0.06 / 1.1)
    assert (said["flagged"].before, said["flagged"].now) == (None, "slow node node3")
    assert history.compare(report(HEALTHY), report(HEALTHY, busbw=0.33)) == []  # +10%


def test_runs_are_kept_in_the_state_folder_and_compared_with_the_one_before(tmp_path, monkeypatch):
    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path))
    kept, first = history.record(report(HEALTHY))
    assert first.previous == "" and kept.parent == tmp_path / "clusters" / "c" / "bench"
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    (kept.parent / "29991231T000000Z.json").write_text("{half a rep")  # newest, not a report
    again, second = history.record(report(SLOW3, flagged=("node3",)))
    assert second.previous == kept.name and again != kept
    assert "flagged" in [c.what for c in second.changes]
    assert json.loads(again.read_text())["flagged"][0]["nodes"] == ["node3"]
    monkeypatch.setattr(history, "KEEP", 2)
    history.record(report(HEALTHY))
    assert len(list(kept.parent.glob("*.json"))) == 2  # the oldest went


def test_the_report_shows_the_flagged_node_in_its_pictures_and_page(tmp_path):
    from PIL import Image

    data = report(SLOW3, flagged=("node3",), cluster="a<b>")
    written = plots.write(data, tmp_path)
    assert [p.name for p in written] == ["heatmap.png", "busbw.png", "index.html"]
    with Image.open(tmp_path / "heatmap.png") as image:
        assert image.format == "PNG" and image.size[0] > 100
        heat = json.loads(image.text["Description"])
    assert heat["nodes"] == ["node1", "node2", "node3"] and heat["flagged_nodes"] == ["node3"]
    assert heat["gbs"][0][2] == 0.06 and heat["gbs"][2][0] == 0.06 and heat["gbs"][1][1] is None
    assert heat["slow_pairs"] == [["node1", "node3"], ["node2", "node3"]]
    with Image.open(tmp_path / "busbw.png") as image:
        curve = json.loads(image.text["Description"])
    assert curve == {"bytes": [8, 256 << 20], "busbw_gbs": [0.0002, 0.3], "slowest_link_gbs": 1.2}
    page = (tmp_path / "index.html").read_text()
    assert "slow node node3" in page and "&lt;slow&gt;" in page and "a&lt;b&gt;" in page
    assert "<slow>" not in page and not list(tmp_path.glob(".*partial"))
    assert "nccl-tests" not in page  # no GPU nodes
    data["gpu"] = [
        {
            "test": "all_reduce_perf",
            "ranks": 16,
            "avg_busbw_gbs": 180.0,
            "problem": "",
            "rows": [{"bytes": 256 << 20, "busbw_gbs": 361.2, "exact": True, "efficiency": 0.9}],
        }
    ]
    plots.write(data, tmp_path)
    page = (tmp_path / "index.html").read_text()
    assert "<td>all_reduce_perf</td><td>16</td><td>256 MiB</td><td>361.2</td><td>90%</td>" in page


def test_a_report_folder_that_is_a_file_is_refused_before_the_run(tmp_path):
    from mpicluster.util.errors import UsageError

    (tmp_path / "f").write_text("")
    with pytest.raises(UsageError, match="not a folder"):
        plots.check_folder(tmp_path / "f")
    plots.check_folder(tmp_path / "new" / "dir")
    assert (tmp_path / "new" / "dir").is_dir()
