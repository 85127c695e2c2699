"""bench's baseline: a node's cluster interface and rates from its facts, and iperf3's
JSON report (the shape iperf 3.12 prints, as on the local cluster's Debian 12 nodes)."""

from __future__ import annotations

import json
import shlex

from mpicluster.bench import network, rdma

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
        "iperf3 printed no report: bash: iperf3: command not found",
    )
    trailing = iperf_report(8e9, 6e9) + "\niperf3: interrupt - the client has terminated\n"
    assert network.parse_iperf("warning: x\n" + trailing) == (0.75, "")


#: ib_write_bw -b --report_gbits -D 3: the lines its format strings print (perftest's
#: REPORT_FMT; its peak is 0.00 in duration mode; a tab pair before the message rate).
IB_WRITE_BW = (
    " WARNING: BW peak won't be measured in this run.\n"
    "---------------------------------------------------------------------------------------\n"
    "                    RDMA_Write Bidirectional BW Test\n"
    " Dual-port       : OFF\t\tDevice         : mlx5_0\n"
    "---------------------------------------------------------------------------------------\n"
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
    " 1048576    69790            0.00               195.16\t\t     0.023264\n"
    "---------------------------------------------------------------------------------------\n"
)


def test_ib_write_bws_bidirectional_sum_is_halved_into_gigabytes_each_way():
    assert rdma.parse(IB_WRITE_BW) == (195.16 / 2 / 8, "")
    assert rdma.parse(" Unable to init the socket connection\n") == (
        None,
        "Unable to init the socket connection",
    )
    mebibytes = IB_WRITE_BW.replace("Gb/sec", "MB/sec")  # no --report_gbits: not ours
    assert rdma.parse(mebibytes)[0] is None


def test_every_node_with_an_rdma_port_and_perftest_measures_with_ib_write_bw():
    card = network.parse_facts(
        FACTS + "/usr/bin/ib_write_bw\n", cidr=None, interface=None, own="192.168.74.11"
    )
    other = network.parse_facts(FACTS, cidr=None, interface=None, own="192.168.74.11")
    assert network.rdma_ports({"a": card, "b": card}) == {"a": "mlx5_0:1", "b": "mlx5_0:1"}
    assert network.rdma_ports({"a": card, "b": other}) is None  # b lacks ib_write_bw
    words = shlex.split(
        rdma.client_command("mlx5_0:1", "10.1.0.12").split("out=$(")[1].split(" 2>&1")[0]
    )
    assert words[:5] == ["ib_write_bw", "-d", "mlx5_0", "-i", "1"] and words[-1] == "10.1.0.12"
    assert "-b" in words and "--report_gbits" in words


def test_the_rdma_client_tries_again_while_the_server_is_not_listening(tmp_path):
    """A stand-in ib_write_bw that cannot connect the first time (perftest's words), then
    prints a result: the loop's output is the second try's."""
    import subprocess

    fake = tmp_path / "ib_write_bw"
    fake.write_text(
        '#!/bin/sh\nif [ ! -e tried ]; then touch tried; echo "Couldn\'t connect to p:18591"; '
        'exit 1; fi\nprintf "%s" "' + IB_WRITE_BW.replace("\t", " ") + '"\n'
    )
    fake.chmod(0o755)
    done = subprocess.run(
        ["/bin/sh", "-c", rdma.client_command("mlx5_0:1", "p")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
        check=True,
    )
    assert rdma.parse(done.stdout) == (195.16 / 2 / 8, "")
