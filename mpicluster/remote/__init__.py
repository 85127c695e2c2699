"""The programs mpicluster runs on the nodes, and how they are shipped.

Every file here runs on a node's own Python (stdlib only, no mpicluster), so they
use plain idioms that old Pythons accept. They reach a node one of two ways:
- sent on stdin of `/usr/bin/python3` over the control connection: `script(name)`,
  which also carries the helper modules the program imports (nodeinfo.py,
  launch_proof_node.py, procinfo.py);
- copied by the hostfiles role into /etc/mpicluster/smoke (`RANK_PROGRAMS`), where `mpirun`
  starts them on every rank.
plugins/ is the Ansible side, laid out as a collection lays it out: plugins/modules/
holds the modules the roles call, plugins/module_utils/ the code they import
(`ansible.module_utils.NAME`), which the probes here and the control machine import too,
so every side parses the same way.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Programs the smoke test runs with mpirun (installed on every node).
RANK_PROGRAMS = HERE / "rank_programs"
#: The Ansible side: the modules the roles call, and the module_utils they import.
PLUGINS = HERE / "plugins"
MODULES = PLUGINS / "modules"
MODULE_UTILS = PLUGINS / "module_utils"
#: Helper modules a shipped program may import (here, or in module_utils/).
LIBRARIES = (
    "nodeinfo",
    "launch_proof_node",
    "accessfacts",
    "fabricfacts",
    "gpuhealth",
    "loginlimits",
    "rankenv",
    "mpicluster_applied",
    "mpicluster_stackfiles",
    "procinfo",
)
#: Absolute: the node's PATH may be the very thing to repair.
PYTHON = "/usr/bin/python3"


def source(name: str) -> str:
    path = HERE / f"{name}.py"
    if not path.exists():
        path = MODULE_UTILS / f"{name}.py"
    return path.read_text(encoding="utf-8")


def _imports(text: str) -> list[str]:
    return [lib for lib in LIBRARIES if re.search(rf"^(from|import) {lib}\b", text, re.M)]


@cache  # doctor sends the probe to every node: compose it once
def script(name: str) -> str:
    """Program `name` as one text to run with `python3 -`: the helper modules it
    imports (and those they import) are defined first, registered in sys.modules,
    then the program itself."""
    text = source(name)
    order: list[str] = []

    def visit(library: str) -> None:
        if library in order or library == name:
            return
        for needed in _imports(source(library)):
            visit(needed)
        order.append(library)

    for library in _imports(text):
        visit(library)
    prelude = ["import sys as _sys, types as _types"]
    for library in order:
        prelude += [
            f"_module = _types.ModuleType({library!r})",
            f"exec(compile({source(library)!r}, {library + '.py'!r}, 'exec'), _module.__dict__)",
            f"_sys.modules[{library!r}] = _module",
        ]
    return "\n".join(prelude) + "\n" + text
