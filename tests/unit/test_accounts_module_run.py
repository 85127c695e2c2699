"""The accounts module through a real `ansible` run on this machine (connection local):
its arguments as the teardown role gives them (no names: the record's users), against a
record that names nobody, change nothing and fail nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mpicluster import remote


def run_module(tmp_path: Path, args: str) -> dict:
    ansible = Path(sys.executable).parent / "ansible"
    done = subprocess.run(
        [str(ansible), "localhost", "-c", "local", "-M", str(remote.MODULES),
         "-m", "mpicluster_accounts", "-a", args],
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false",
             "ANSIBLE_PYTHON_INTERPRETER": sys.executable},
        timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # "localhost | SUCCESS => {...}" (or CHANGED): the module's result
    return json.loads(done.stdout.partition("=>")[2])


def test_down_with_no_users_in_the_record_changes_nothing(tmp_path: Path):
    record = tmp_path / "users.json"
    for made in (None, {"users": {}}):
        if made is not None:
            record.write_text(json.dumps(made))
        said = run_module(
            tmp_path,
            f"action=remove node=node1 record={record} key_name=mpicluster_c marker='mpicluster c'",
        )
        assert said["changed"] is False and said["removed"] == [] and said["kept"] == []
