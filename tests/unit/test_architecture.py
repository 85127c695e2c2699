"""The rooms hold: no import circle, each room imports only what the table ROOMS allows
(features over foundations; a feature reaches another only through its package's
face), only the render layer writes to the terminal, and the programs sent to nodes
stand alone.

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


def face_of(package: str) -> set[str]:
    """The names a package's __init__ binds by importing them: its face. A submodule
    of the same name is shadowed (`from mpicluster.up import provision` is the
    function the face exports, not the module up/provision.py)."""
    path = MODULES.get(package)
    if path is None or path.name != "__init__.py":
        return set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module != package
        for alias in node.names
    }


def imports_of(name: str) -> set[str]:
    """The mpicluster modules `name` imports (a `from package import module` counts as
    importing the module, unless the package's face binds that name itself)."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            face = face_of(node.module) if node.module != name else set()
            targets = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in MODULES and alias.name not in face
                else node.module
                for alias in node.names
            ]
        else:
            continue
        found |= {t for t in targets if t.split(".")[0] == "mpicluster"}
    return found - {name}


#: The modules of doctor (and health's drain rules, which the node's check keeps under
#: Slurm) a node program imports: shipped with it as text (remote.script),
#: they run on the node's Python, not in this process, so they are no edge of the graph
#: here (test_node_programs_ship_only_the_judges_doctor_shares holds what they may be).
SHIPPED_JUDGES = {
    "mpicluster.cluster.layout",
    "mpicluster.doctor.checks.common",
    "mpicluster.doctor.checks.disk",
    "mpicluster.doctor.checks.environment",
    "mpicluster.doctor.checks.gpu_health",
    "mpicluster.doctor.checks.limits",
    "mpicluster.doctor.checks.rank_env",
    "mpicluster.doctor.checks.stack_files",
    "mpicluster.doctor.model",
    "mpicluster.doctor.refusals",
    "mpicluster.health.drain_rules",
    "mpicluster.remote.plugins.module_utils.mpicluster_envblock",
    "mpicluster.util.exitcodes",
}


def graph_edges(name: str) -> set[str]:
    found = imports_of(name)
    if name.startswith("mpicluster.remote.") and name != "mpicluster.remote":
        found -= SHIPPED_JUDGES
    return found


GRAPH = {name: graph_edges(name) for name in MODULES}


#: The rooms, lowest first. Foundations: util (with the errors every room raises),
#: remote (the programs shipped to nodes), cluster (what the cluster is, decided on the
#: control machine), nodes (reaching them). Features: one room per command or part.
#: Above them, render (terminal output) and cli (the commands).
FOUNDATIONS = ("util", "remote", "cluster", "nodes")
FEATURES = (
    "stack",
    "slurm",
    "smoke",
    "up",
    "down",
    "run",
    "doctor",
    "bench",
    "local",
    "health",
)

#: room -> the rooms it may import. A feature's imports of another feature name that
#: feature's package (its face, mpicluster/<room>/__init__.py), never a module inside.
ROOMS: dict[str, set[str]] = {
    "util": {"util"},
    "remote": {"remote"},
    "cluster": {"util", "cluster"},
    "nodes": {"util", "cluster", "nodes", "remote"},
    "stack": {"util", "cluster", "nodes", "stack"},
    "slurm": {"util", "cluster", "nodes", "slurm"},
    "smoke": {"util", "cluster", "nodes", "remote", "smoke", "slurm"},
    "up": {"util", "cluster", "nodes", "remote", "up", "stack", "slurm", "smoke"},
    "down": {"util", "cluster", "nodes", "down", "up", "slurm"},
    "run": {"util", "cluster", "nodes", "remote", "run", "stack"},
    "doctor": {"util", "cluster", "nodes", "remote", "doctor", "slurm", "bench"},
    "bench": {"util", "cluster", "nodes", "remote", "bench", "smoke"},
    "local": {"util", "cluster", "nodes", "local"},
    "health": {"util", "cluster", "nodes", "remote", "health"},
    "render": {"util", "cluster", "nodes", "render", *FEATURES},
    "cli": {"util", "cluster", "nodes", "render", "cli", *FEATURES},
}


def room(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1:
        return "util"  # the package itself (its version)
    if parts[1] == "__main__":
        return "cli"  # `python -m mpicluster`: the command line's entry point
    return parts[1]


def layer(name: str) -> str:
    """cli, render, remote, or core (every other room)."""
    return room(name) if room(name) in ("cli", "render", "remote") else "core"


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
    assert "mpicluster.up.provision" in GRAPH["mpicluster.cli.cluster"]
    assert "mpicluster.cluster.inventory" in GRAPH["mpicluster.cluster.layout"]


def test_a_circle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_circle():
    assert cycles() == []


def test_every_module_lives_in_a_room_of_the_table():
    assert {room(name) for name in MODULES} <= set(ROOMS)
    assert set(ROOMS) == {*FOUNDATIONS, *FEATURES, "render", "cli"}


def test_at_most_eight_modules_at_the_top():
    top = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(top) <= 8, sorted(top)


def test_each_room_imports_only_what_the_table_allows():
    wrong = [
        f"{name} ({room(name)}) imports {target} ({room(target)})"
        for name, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if room(target) not in ROOMS[room(name)]
    ]
    assert wrong == []


def test_a_feature_reaches_another_only_through_its_face():
    wrong = [
        f"{name} imports {target}: import mpicluster.{room(target)} instead"
        for name, targets in sorted(GRAPH.items())
        if room(name) in FEATURES
        for target in sorted(targets)
        if room(target) in FEATURES and room(target) != room(name)
        if target != f"mpicluster.{room(target)}"
    ]
    assert wrong == []


def test_foundations_import_no_feature():
    wrong = [
        f"{name} imports {target}"
        for name, targets in sorted(GRAPH.items())
        if room(name) in FOUNDATIONS
        for target in sorted(targets)
        if room(target) not in FOUNDATIONS
    ]
    assert wrong == []


def test_the_table_itself_has_no_circle():
    graph = {name: allowed - {name} for name, allowed in ROOMS.items()}
    assert cycles(graph) == []


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


LONGEST_FUNCTION = 80


def test_no_function_is_longer_than_80_lines():
    """Besides ruff's bounds on branches and statements (pyproject.toml): a function
    that does not fit a screen does two things."""
    long = []
    for name, path in sorted(MODULES.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    long.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


BENCHMARKS = PACKAGE.parent / "benchmarks"


def mpicluster_imports(path: Path) -> set[str]:
    """The mpicluster modules a script outside the package imports (as imports_of reads
    them: a package's face binds its names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "mpicluster"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mpicluster"):
            face = face_of(node.module)
            for alias in node.names:
                inner = f"{node.module}.{alias.name}"
                found.add(inner if inner in MODULES and alias.name not in face else node.module)
    return found


def test_benchmarks_reach_features_only_through_their_faces():
    """The benchmarks are users of the package: foundations they may import, a feature
    only by its package (its __init__'s names), never a module inside it."""
    scripts = sorted(BENCHMARKS.glob("*.py"))
    assert len(scripts) > 5
    wrong = [
        f"benchmarks/{script.name} imports {target}: import mpicluster.{room(target)} instead"
        for script in scripts
        for target in sorted(mpicluster_imports(script))
        if room(target) in FEATURES and target != f"mpicluster.{room(target)}"
    ]
    assert wrong == []


#: Where an inventory may be read and a plan built: the commands, the room that defines
#: both, and the local cluster, which writes the inventory it then reads back.
PLAN_BUILDERS = ("mpicluster.cli", "mpicluster.cluster", "mpicluster.local.cluster")
INVENTORY_WORDS = re.compile(
    r"\b(Inventory|load_inventory|parse_inventory|environment_of)\b(?!Error)"
    r"|ClusterPlan\.(of|load)\b|\._inventory\b|\bplan\.inventory\b"
)


def test_below_the_commands_only_the_plan_is_taken():
    """A command reads the inventory and builds the ClusterPlan once; every feature takes
    the plan and none of them sees the inventory, builds a plan of its own or recomputes
    what the plan holds."""
    wrong = []
    for name, path in sorted(MODULES.items()):
        if name.startswith(PLAN_BUILDERS):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            if INVENTORY_WORDS.search(code) and not code.lstrip().startswith(('"', "'")):
                wrong.append(f"{name}:{number}: {line.strip()}")
    assert wrong == []


def test_the_plan_rule_finds_a_feature_that_reads_the_inventory():
    assert INVENTORY_WORDS.search("    inventory = load_inventory(path)")
    assert INVENTORY_WORDS.search("def f(inventory: Inventory) -> None:")
    assert INVENTORY_WORDS.search("    plan = ClusterPlan.of(inventory)")
    assert INVENTORY_WORDS.search("    return plan.inventory.stack")
    assert not INVENTORY_WORDS.search("    raise InventoryError(message)")
    assert not INVENTORY_WORDS.search("    stack = plan.stack")


def test_node_programs_ship_only_the_judges_doctor_shares():
    """A node program (remote/) imports doctor's judges to judge as doctor does; they are
    shipped as text and run on the node's own Python: each imports, at its top level,
    only the standard library and the other shipped modules (the control machine's own
    imports stay inside its functions). tests/unit/test_node_health.py runs the result
    isolated."""
    from mpicluster import remote

    shipped = set()
    for program in sorted(remote.HERE.glob("*.py")):
        for target in remote._package_imports(program.read_text(encoding="utf-8")):
            shipped.add(target)
            queue = [target]
            while queue:
                text = remote._package_file(queue.pop()).read_text(encoding="utf-8")
                for inner in remote._package_imports(text):
                    if inner not in shipped:
                        shipped.add(inner)
                        queue.append(inner)
    assert shipped - {"mpicluster.remote"} == SHIPPED_JUDGES
