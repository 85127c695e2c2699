"""bench's bookkeeping over many nodes, its measurements stood in for (no nodes: the
cluster tests measure for real): every pair scheduled is measured, judged and named
once, whatever the names' order ("node10" sorts before "node9")."""

from __future__ import annotations

from mpicluster.bench import measure, network, run_bench
from tests.unit.test_command_lines import inventory


def stand_ins(monkeypatch, slow: str):
    """MPI and iperf3 as a network where every pair with `slow` carries a tenth."""

    def rate(a: str, b: str) -> float:
        return 0.1 if slow in (a, b) else 1.0

    def run(plan, members, spec, timeout, major):
        if spec["mode"] == "allreduce":
            return {
                "sizes": [
                    {
                        "bytes": n,
                        "seconds": n / 0.1e9,
                        "algbw_gbs": 0.1,
                        "busbw_gbs": 0.15,
                        "exact": True,
                    }
                    for n in spec["sizes"]
                ]
            }
        (group,) = spec["rounds"]
        return {
            "library": "Open MPI v5.0.7",
            "pairs": [
                {"pair": [i, j], "gbs": rate(members[i], members[j]), "latency_us": 20.0}
                for i, j in group
            ],
        }

    def facts(plan, names):
        return {
            n: network.NodeNetwork("eth0", f"10.0.0.{i}", 1.25, tools=["iperf3"])
            for i, n in enumerate(names)
        }

    def iperf(plan, pairs, address, rdma_ports=None):
        return {(a, b): (rate(a, b) * 1.2, "") for a, b in pairs}

    monkeypatch.setattr(measure, "mpi_major", lambda plan: 5)
    monkeypatch.setattr(measure, "run", run)
    monkeypatch.setattr(network, "node_facts", facts)
    monkeypatch.setattr(network, "measure_round", iperf)


def test_sixteen_nodes_one_slow_is_named_and_every_pair_is_whole(tmp_path, monkeypatch):
    names = [f"node{i}" for i in range(1, 17)]
    text = "cluster: big\nnodes:\n" + "".join(
        f"  - {{name: {n}, address: 10.0.0.{i}}}\n" for i, n in enumerate(names, 1)
    )
    plan = inventory(tmp_path, text)
    stand_ins(monkeypatch, slow="node10")
    said = []
    report = run_bench(plan, on_progress=said.append)
    (found,) = report.flagged
    assert (found.kind, found.nodes) == ("node", ("node10",)), report.flagged
    first = [p for p in report.pairs if p.round == 1]
    assert len({p.nodes for p in first}) == len(first) >= 16  # a ring and a sample
    assert all(p.network_gbs for p in report.pairs)
    assert {n for p in first for n in p.nodes} == set(names)
    assert any(line.startswith("  round 1/") for line in said)
    assert report.efficiency_basis == "baseline" and len(report.allreduce) == 14
    # rounds of 8 pairs: each its own yardstick, and the report says so
    assert report.expected_source == "median of the faster half of each round's pairs"
    slow = {p.verdict for p in report.pairs if "node10" in p.nodes}
    assert slow == {"slow: 10% of expected, below the 60% threshold"}, slow
    assert {p.verdict for p in report.pairs if "node10" not in p.nodes} == {"ok"}
