"""All terminal output of mpicluster: the only package that writes to the terminal.

The core never prints: it returns results (each with `to_dict()`) and reports progress
through callbacks. The CLI hands a result to `show`, which prints either the JSON of
its `to_dict()` or its table, one module per command family (up, doctor, local, stack).
`mpicluster run` calls render/run.py's own functions instead: a job's lines are shown as
they come, its hang reports while it runs, and its JSON carries the sync's result too.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from mpicluster.render.display import Display, styled

__all__ = ["Display", "show", "styled"]

#: Each result type (by its module and name) -> its renderer (module: function). Only the
#: renderer a command needs is imported, with the core types it names: doctor's table
#: loads no part of up, down or bench (tests/unit/test_cli_start.py).
RENDERERS = {
    "mpicluster.up.provision.UpResult": "mpicluster.render.up:show_up",
    "mpicluster.up.preview.UpPreview": "mpicluster.render.up:show_preview",
    "mpicluster.down.teardown.DownResult": "mpicluster.render.up:show_down",
    "mpicluster.smoke.steps.SmokeReport": "mpicluster.render.up:show_smoke",
    "mpicluster.doctor.model.DoctorReport": "mpicluster.render.doctor:show_doctor",
    "mpicluster.bench.report.BenchReport": "mpicluster.render.bench:show_bench",
    "mpicluster.local.cluster.LocalCluster": "mpicluster.render.local:show_local",
    "mpicluster.stack.prepare.FetchResult": "mpicluster.render.stack:show_fetch",
}


def show(display: Display, result: Any, *, as_json: bool = False, **options: Any) -> None:
    """`result` as JSON (`result.to_dict(**options)`) or as its table."""
    if as_json:
        display.json(result.to_dict(**options))
        return
    kind = type(result)
    where = RENDERERS.get(f"{kind.__module__}.{kind.__qualname__}")
    if where is None:
        raise TypeError(f"no renderer for {kind.__name__}")
    module, function = where.split(":")
    getattr(import_module(module), function)(display, result, **options)
