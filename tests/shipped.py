"""A program mpicluster ships to the nodes, loaded here as the nodes get it: its text
with the helper modules it imports (mpicluster.remote.script), as a module."""

from __future__ import annotations

import types

from mpicluster import remote


def load(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(remote.script(name), f"{name}.py", "exec"), module.__dict__)  # noqa: S102
    return module
