"""All terminal output of mpicluster: the only package that writes to the terminal.

The core never prints: it returns results (each with `to_dict()`) and reports progress
through callbacks. The CLI hands a result to `show`, which prints either the JSON of
its `to_dict()` or its table, one module per command family (up, doctor, local, stack).
`mpicluster run` calls render/run.py's own functions instead: a job's lines are shown as
they come, its hang reports while it runs, and its JSON carries the sync's result too.
"""

from __future__ import annotations

from typing import Any

from mpicluster.render.display import Display, styled
from mpicluster.render.playbook import PlaybookView
from mpicluster.render.up import down_summary, preview_summary, up_summary

__all__ = [
    "Display",
    "PlaybookView",
    "down_summary",
    "preview_summary",
    "show",
    "styled",
    "up_summary",
]


def show(display: Display, result: Any, *, as_json: bool = False, **options: Any) -> None:
    """`result` as JSON (`result.to_dict(**options)`) or as its table."""
    if as_json:
        display.json(result.to_dict(**options))
        return
    # the renderers import the core's result types: only when a table is wanted
    from mpicluster.bench import BenchReport
    from mpicluster.doctor.model import DoctorReport
    from mpicluster.down.teardown import DownResult
    from mpicluster.local.cluster import LocalCluster
    from mpicluster.render import bench, doctor, local, stack, up
    from mpicluster.smoke.steps import SmokeReport
    from mpicluster.stack.prepare import FetchResult
    from mpicluster.up.preview import UpPreview
    from mpicluster.up.provision import UpResult

    renderers = {
        UpResult: up.show_up,
        UpPreview: up.show_preview,
        DownResult: up.show_down,
        SmokeReport: up.show_smoke,
        DoctorReport: doctor.show_doctor,
        BenchReport: bench.show_bench,
        LocalCluster: local.show_local,
        FetchResult: stack.show_fetch,
    }
    renderer = renderers.get(type(result))
    if renderer is None:
        raise TypeError(f"no renderer for {type(result).__name__}")
    renderer(display, result, **options)
