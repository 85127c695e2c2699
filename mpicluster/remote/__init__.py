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
    "nodedisk",
    "rankenv",
    "sshlogin",
    "mpicluster_applied",
    "mpicluster_envblock",
    "mpicluster_stackfiles",
    "mpicluster_slurmnodes",
    "mpicluster_sitecommand",
    "procinfo",
    "slurmnode",
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


#: The mpicluster package's own folder: the control machine's judges a node program
#: imports (`from mpicluster.doctor.checks import disk`) are shipped from there.
PACKAGE = HERE.parent


def _package_file(dotted: str) -> Path | None:
    """The file of an mpicluster module, or None when `dotted` names no module."""
    relative = Path(*dotted.split(".")[1:])
    for candidate in (PACKAGE / relative.with_suffix(".py"), PACKAGE / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_imports(text: str) -> list[str]:
    """The mpicluster modules `text` imports at its top level (imports inside a function
    are the control machine's alone and are not shipped)."""
    found = []
    for match in re.finditer(r"^from (mpicluster(?:\.\w+)*) import ([\w, ]+)$", text, re.M):
        package = match.group(1)
        names = [n.split(" as ")[0].strip() for n in match.group(2).split(",")]
        for name in names:
            inner = f"{package}.{name}"
            found.append(inner if _package_file(inner) and inner.count(".") else package)
    found += re.findall(r"^import (mpicluster(?:\.\w+)+)$", text, re.M)
    return list(dict.fromkeys(found))


def _register(name: str, text: str, filename: str) -> list[str]:
    """Lines that define module `name` from `text`: registered first (dataclasses look
    their module up while the class is made), then run."""
    return [
        f"_module = _types.ModuleType({name!r})",
        f"_sys.modules[{name!r}] = _module",
        f"exec(compile({text!r}, {filename!r}, 'exec'), _module.__dict__)",
    ]


def _shipped_package_modules(texts: list[str]) -> list[str]:
    """Lines that define the mpicluster modules the texts import (and what those import),
    under their own names, below empty package modules (a package's __init__ is not run:
    only the modules named are shipped, each of which imports only the standard library
    and other shipped modules; tests/unit/test_node_health.py runs the result isolated)."""
    order: list[str] = []

    def visit(dotted: str) -> None:
        if dotted in order:
            return
        path = _package_file(dotted)
        if path is None:
            raise ValueError(f"{dotted}: no such mpicluster module to ship")
        for needed in _package_imports(path.read_text(encoding="utf-8")):
            visit(needed)
        order.append(dotted)

    for text in texts:
        for dotted in _package_imports(text):
            visit(dotted)
    lines, packages = [], []
    for dotted in order:
        parts = dotted.split(".")
        for depth in range(1, len(parts)):
            package = ".".join(parts[:depth])
            if package not in packages and package not in order:
                packages.append(package)
                lines += [
                    f"if {package!r} not in _sys.modules:",
                    f"    _module = _types.ModuleType({package!r})",
                    "    _module.__path__ = []",
                    f"    _sys.modules[{package!r}] = _module",
                ]
    for dotted in order:
        path = _package_file(dotted)
        assert path is not None  # noqa: S101 (visit found it)
        text, filename = path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE))
        # where the package itself is there (a test on the control machine), it is used
        lines.append(f"if {dotted!r} not in _sys.modules:")
        lines += ["    " + line for line in _register(dotted, text, filename)]
        parent, _, leaf = dotted.rpartition(".")
        lines.append(f"setattr(_sys.modules[{parent!r}], {leaf!r}, _sys.modules[{dotted!r}])")
    return lines


@cache  # doctor sends the probe to every node: compose it once
def script(name: str) -> str:
    """Program `name` as one text to run with `python3 -`: the helper modules it
    imports (and those they import) are defined first, registered in sys.modules,
    then the program itself. The mpicluster modules it imports (the judges a node
    program shares with doctor) come the same way, under their package names."""
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
        prelude += _register(library, source(library), library + ".py")
    prelude += _shipped_package_modules([text])
    return "\n".join(prelude) + "\n" + text
