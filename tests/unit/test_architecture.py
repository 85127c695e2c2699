"""The layers hold: no import circle, nothing imports the CLI, only the render layer
writes to the terminal, and the programs sent to nodes stand alone.

Every import counts, also those inside functions (a lazy import is still a dependency).
See docs/architecture.md for the picture.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mpicluster"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """The mpicluster modules `name` imports (a `from package import module` counts as
    importing the module)."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in MODULES
                else node.module
                for alias in node.names
            ]
        else:
            continue
        found |= {t for t in targets if t.split(".")[0] == "mpicluster"}
    return found - {name}


GRAPH = {name: imports_of(name) for name in MODULES}


def layer(name: str) -> str:
    if name == "mpicluster.__main__":
        return "cli"  # `python -m mpicluster`: the command line's entry point
    for prefix in ("mpicluster.cli", "mpicluster.render", "mpicluster.remote"):
        if name == prefix or name.startswith(prefix + "."):
            return prefix.rsplit(".", 1)[1]
    return "core"


def cycles(graph: dict[str, set[str]] = GRAPH) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read():
    assert "mpicluster.provision" in GRAPH["mpicluster.cli.cluster"]
    assert "mpicluster.inventory" in GRAPH["mpicluster.layout"]


def test_a_circle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_circle():
    assert cycles() == []


def test_nothing_imports_upward():
    """cli -> render -> core -> remote; remote (the programs for the nodes) imports
    nothing of ours but itself."""
    allowed = {
        "cli": {"cli", "render", "core"},
        "render": {"render", "core"},
        "core": {"core", "remote"},
        "remote": {"remote"},
    }
    wrong = [
        f"{name} ({layer(name)}) imports {target} ({layer(target)})"
        for name, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if layer(target) not in allowed[layer(name)]
    ]
    assert wrong == []


def test_core_reaches_remote_programs_only_as_files():
    """The core ships remote programs (mpicluster.remote's loader); the programs
    themselves are never imported on this side, except the shared module_utils."""
    for name, targets in GRAPH.items():
        if layer(name) == "remote":
            continue
        for target in targets:
            if layer(target) == "remote":
                assert target == "mpicluster.remote" or ".module_utils." in target, (name, target)


TERMINAL = re.compile(r"\bprint\(|sys\.stdout|sys\.stderr|\bConsole\(|typer\.echo|rich\.print")


def test_only_the_render_layer_writes_to_the_terminal():
    """The core returns results and reports progress through callbacks; the CLI hands
    them to mpicluster.render. Programs for the nodes talk JSON on their own stdout."""
    writers = []
    for name, path in sorted(MODULES.items()):
        if layer(name) in ("render", "remote"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found = TERMINAL.search(line)
            # --version is typer's own eager callback: one line, before any command runs
            if found and not (name == "mpicluster.cli" and found.group() == "typer.echo"):
                writers.append(f"{name}:{number}: {line.strip()}")
    assert writers == []
