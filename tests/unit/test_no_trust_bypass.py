"""Nothing mpicluster ships, installs or generates turns host-key checking off."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.plan import ClusterPlan

REPO = Path(__file__).resolve().parents[2]
BYPASS = re.compile(
    r"StrictHostKeyChecking[\s=]+no\b|UserKnownHostsFile[\s=]+/dev/null|"
    r"host_key_checking\s*=\s*(false|no|0)\b|HOST_KEY_CHECKING\s*=\s*(false|no|0)\b|"
    r"AutoAddPolicy|WarningPolicy|accept-new\s*=\s*yes",
    re.IGNORECASE,
)


def bypasses(text: str) -> list[str]:
    return [m.group(0) for m in BYPASS.finditer(text)]


def test_the_pattern_catches_what_it_should():
    assert bypasses("ssh -o StrictHostKeyChecking=no host")
    assert bypasses("    UserKnownHostsFile /dev/null")
    assert bypasses("host_key_checking = False")
    assert bypasses("client.set_missing_host_key_policy(paramiko.AutoAddPolicy())")
    assert not bypasses("StrictHostKeyChecking yes")


def test_no_shipped_file_bypasses_host_keys():
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    shipped = [f for f in files if not f.startswith("tests/")]
    assert len(shipped) > 20
    found = {}
    for name in shipped:
        path = REPO / name
        if path.is_file():
            hits = bypasses(path.read_text(encoding="utf-8", errors="replace"))
            if hits:
                found[name] = hits
    assert found == {}


def test_generated_run_inputs_do_not_bypass_host_keys(tmp_path, monkeypatch):
    from mpicluster.nodes.ansible_run import prepare_run

    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path))
    for accept_new in ("false", "true"):
        inv = parse_inventory(
            f"cluster: t\nssh: {{accept_new_host_keys: {accept_new}}}\nnodes: [{{name: n1}}]\n"
        )
        run_dir, command = prepare_run(
            tmp_path / accept_new, "t", ClusterPlan.of(inv), {}, {}, "site.yml"
        )
        for generated in run_dir.iterdir():
            if generated.is_file():
                assert bypasses(generated.read_text()) == [], generated
        assert bypasses(command) == []


def test_ansible_runner_is_not_left_to_switch_host_key_checking_off(tmp_path):
    """ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless told; the real
    RunnerConfig, given the environment `up` passes, keeps it on."""
    from ansible_runner.config.runner import RunnerConfig

    from mpicluster.nodes.ansible_run import runner_env

    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "site.yml").write_text("- hosts: all\n  tasks: []\n")
    config = RunnerConfig(
        private_data_dir=str(tmp_path),
        project_dir=str(tmp_path / "project"),
        playbook="site.yml",
        envvars=runner_env(tmp_path, "/usr/bin"),
        suppress_env_files=True,
    )
    config.prepare()
    assert config.env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    bare = RunnerConfig(
        private_data_dir=str(tmp_path), project_dir=str(tmp_path / "project"), playbook="site.yml"
    )
    bare.prepare()
    assert bare.env["ANSIBLE_HOST_KEY_CHECKING"] == "False"  # what it does when not told
