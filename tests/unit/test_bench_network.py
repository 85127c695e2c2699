"""bench's baseline: a node's cluster interface and rates from its facts, and iperf3's
JSON report (the shape iperf 3.12 prints, as on the local cluster's Debian 12 nodes)."""

from __future__ import annotations

import json

from mpicluster.bench import network

FACTS = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: eth0@if41    inet 192.168.74.11/24 brd 192.168.74.255 scope global eth0\\       valid_lft forever
3: ib0    inet 10.1.0.11/16 brd 10.1.255.255 scope global ib0\\       valid_lft forever
#speeds
eth0 10000
ib0 -
lo -
#rdma
/sys/class/infiniband/mlx5_0/ports/1 200 Gb/sec (4X HDR)
#tools
/usr/bin/iperf3
"""


def test_the_cluster_interface_is_the_one_holding_the_nodes_address():
    found = network.parse_facts(FACTS, cidr=None, interface=None, own="192.168.74.11")
    assert (found.interface, found.address, found.nic_gbs) == ("eth0", "192.168.74.11", 1.25)
    assert found.rdma == {"mlx5_0:1": 25.0} and found.tools == ["iperf3"]


def test_the_inventorys_network_picks_the_interface_and_an_unknown_rate_is_none():
    by_cidr = network.parse_facts(FACTS, cidr="10.1.0.0/16", interface=None, own="192.168.74.11")
    by_name = network.parse_facts(FACTS, cidr=None, interface="ib0", own="")
    for found in (by_cidr, by_name):
        assert (found.interface, found.address, found.nic_gbs) == ("ib0", "10.1.0.11", None)
    nothing = network.parse_facts("", cidr=None, interface=None, own="10.9.9.9")
    assert (nothing.interface, nothing.tools) == ("", [])


def iperf_report(forward: float, reverse: float) -> str:
    return json.dumps(
        {
            "start": {"version": "iperf 3.12"},
            "end": {
                "sum_sent": {"bits_per_second": forward * 1.01},
                "sum_received": {"bits_per_second": forward},
                "sum_sent_bidir_reverse": {"bits_per_second": reverse * 1.01},
                "sum_received_bidir_reverse": {"bits_per_second": reverse},
            },
        }
    )


def test_iperf3s_figure_is_the_slower_direction_in_gigabytes():
    assert network.parse_iperf(iperf_report(8e9, 6e9)) == (0.75, "")


def test_iperf3s_failure_is_its_own_words():
    refused = json.dumps({"end": {}, "error": "unable to connect to server: Connection refused"})
    assert network.parse_iperf(refused) == (None, "unable to connect to server: Connection refused")
    assert network.parse_iperf("bash: iperf3: command not found\n") == (
        None,
        "bash: iperf3: command not found",
    )
