"""The cordon state (cluster/cordons.py): kept as text on every node, the newest wins."""

from __future__ import annotations

import pytest

from mpicluster.cluster import cordons
from mpicluster.cluster.cordons import Cordon, CordonState
from mpicluster.util.errors import UsageError


def test_the_state_comes_back_from_its_text_and_the_newest_version_wins():
    first = CordonState().with_cordon("n2", Cordon("bad disk", 10.0, "operator", "a@b"))
    second = first.with_cordon("n3", Cordon("Xid 79", 20.0, "doctor", "a@b")).without("n2")
    assert cordons.parse(first.to_json()) == first and first.version == 1
    assert list(second.cordons) == ["n3"] and second.version == 3
    read = [None, cordons.parse(second.to_json()), cordons.parse(first.to_json())]
    assert cordons.newest(read) == second
    assert cordons.newest([None, cordons.parse("not json"), cordons.parse("")]) == CordonState()
    assert second.ready(["n1", "n2", "n3"]) == ["n1", "n2"]
    assert second.describe("n3") == "n3 is cordoned (Xid 79; by doctor)"


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("", "say why"),
        ("   ", "say why"),
        ("two\nlines", "without control characters or newlines"),
        ("bell\x07", "without control characters"),
        ("x" * 201, r"at most 200 characters \(this one has 201\)"),
    ],
)
def test_a_reason_that_cannot_be_shown_in_one_line_is_refused(reason, said):
    with pytest.raises(UsageError, match=said):
        cordons.check_reason(reason)


def test_a_reason_is_kept_trimmed():
    assert cordons.check_reason("  disk full  ") == "disk full"
