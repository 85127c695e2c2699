"""doctor's report: exit codes, the JSON schema, the table, and bad input on the CLI."""

from __future__ import annotations

import io
import json

from rich.console import Console
from typer.testing import CliRunner

from mpicluster.cli import app
from mpicluster.doctor import select_checks
from mpicluster.doctor.checks import NAMES
from mpicluster.doctor.model import CheckReport, DoctorReport, Status, failed, passed, warned
from mpicluster.render import Display
from mpicluster.render.doctor import show_doctor

GOOD = "cluster: t\nnodes:\n  - {name: n1, address: 10.0.0.1}\n"


def report(*statuses: Status) -> DoctorReport:
    results = []
    for i, status in enumerate(statuses):
        node = f"n{i}"
        if status == Status.PASS:
            results.append(passed(node, "fine"))
        elif status == Status.WARN:
            results.append(warned(node, "meh", "do this"))
        else:
            results.append(failed(node, "broken", "do that", peer="n9"))
    return DoctorReport("t", [CheckReport("mesh", "Mesh", results, ["n7"])], 1.234)


def test_exit_codes_follow_the_worst_result():
    assert report(Status.PASS, Status.PASS).exit_code == 0
    assert report(Status.PASS, Status.WARN).exit_code == 6  # warnings only
    assert report(Status.WARN, Status.FAIL, Status.PASS).exit_code == 5  # a check failed
    assert DoctorReport("t", []).exit_code == 0


def test_json_schema_is_stable():
    data = report(Status.PASS, Status.WARN, Status.FAIL).to_dict()
    assert set(data) == {"schema", "cluster", "status", "summary", "checks", "seconds"}
    assert data["schema"] == 1 and data["status"] == "fail" and data["seconds"] == 1.23
    assert data["summary"] == {"pass": 1, "warn": 1, "fail": 1}
    check = data["checks"][0]
    assert set(check) == {"name", "title", "status", "not_checked", "results"}
    assert check["not_checked"] == ["n7"]
    for result in check["results"]:
        assert set(result) == {"status", "node", "peer", "evidence", "fix"}
    assert check["results"][2]["peer"] == "n9" and check["results"][2]["fix"] == "do that"
    quiet = report(Status.FAIL).to_dict(fix_hints=False)
    assert quiet["checks"][0]["results"][0]["fix"] is None
    json.dumps(data)  # serializable as is


def render(rep: DoctorReport, fix_hints: bool = True) -> str:
    display = Display()
    buffer = io.StringIO()
    display.out = Console(file=buffer, width=200, highlight=False)
    show_doctor(display, rep, fix_hints=fix_hints)
    return buffer.getvalue()


def test_table_groups_by_check_and_folds_passes():
    rep = DoctorReport(
        "t",
        [
            CheckReport("ssh", "SSH", [passed(f"n{i}", f"ok {i}") for i in range(5)]),
            CheckReport("names", "Names", [failed("n2", "n2 -> 127.0.1.1", "edit /etc/hosts")]),
        ],
    )
    text = render(rep)
    assert text.count("pass") == 2  # one folded row + the summary line
    assert "n0 +4" in text and "n0: ok 0" in text
    assert "FAIL" in text and "n2 -> 127.0.1.1" in text and "edit /etc/hosts" in text
    assert "1 fail" in text and "(exit 5)" in text
    assert "edit /etc/hosts" not in render(rep, fix_hints=False)


def test_select_checks():
    assert select_checks(None) == tuple(NAMES)
    assert select_checks(["names", "ssh"]) == ("ssh", "names")  # report order


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["doctor", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "no such file" in missing.output
    assert "Traceback" not in missing.output

    inventory = tmp_path / "inv.yaml"
    inventory.write_text(GOOD)
    unknown = runner.invoke(app, ["doctor", str(inventory), "--check", "bogus"])
    assert unknown.exit_code == 2, unknown.output
    assert "--check 'bogus': not a check" in unknown.output
    assert len(unknown.output.strip().splitlines()) == 1
    zero = runner.invoke(app, ["doctor", str(inventory), "--timeout", "0"])
    assert zero.exit_code == 2 and "must be more than 0" in zero.output

    broken = tmp_path / "broken.yaml"
    broken.write_text("cluster: t\nnodes: []\n")
    invalid = runner.invoke(app, ["doctor", str(broken)])
    assert invalid.exit_code == 2 and "at least one node" in invalid.output
