"""Up's inputs are data, never templates: a string with Jinja2's delimiters (a shipped
program's `f"${{{name}}}"`, a user's text) reaches a node as written, through a real
ansible-playbook run on this machine (connection local)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mpicluster.nodes.ansible_run import data_yaml

TEXTS = [
    'if f"${{{name}}}" in line:',
    "{{ lookup('pipe', 'id') }}",
    "{% raw %}x{% endraw %} {# no comment #}",
    "plain text",
]
PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Write what the inputs hold
      ansible.builtin.copy:
        content: "{{ files | map(attribute='content') | list | to_json }}"
        dest: "{{ out }}"
        mode: "0600"
"""


def test_inputs_with_jinja_delimiters_reach_the_node_as_written(tmp_path: Path):
    out = tmp_path / "out.json"
    files = [{"path": f"/x/{i}", "content": text} for i, text in enumerate(TEXTS)]
    (tmp_path / "vars.yml").write_text(data_yaml({"files": files, "out": str(out)}))
    (tmp_path / "play.yml").write_text(PLAY)
    ansible = Path(sys.executable).parent / "ansible-playbook"
    done = subprocess.run(
        [
            str(ansible),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"@{tmp_path / 'vars.yml'}",
            str(tmp_path / "play.yml"),
        ],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "ANSIBLE_LOCALHOST_WARNING": "false",
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        },
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(out.read_text()) == TEXTS
