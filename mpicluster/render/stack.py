"""`fetch`: what the source cache holds for an inventory."""

from __future__ import annotations

from rich.markup import escape

from mpicluster.render.display import Display
from mpicluster.stack.prepare import FetchResult


def show_fetch(display: Display, result: FetchResult) -> None:
    rows = [
        [
            escape(name),
            escape(f.source.version),
            escape(str(f.path)),
            "downloaded" if f.fetched else "cached",
            f.source.sha256[:16],
        ]
        for name, f in result.files.items()
    ]
    rows += [
        [
            escape(f"wheels {target}"),
            f"{len(h.files)} files",
            escape(str(h.path)),
            "ready",
            h.digest,
        ]
        for target, h in result.houses.items()
    ]
    rows += [
        [
            escape(f"cluster packages {target}"),
            f"{len(p.install)} to install ({len(p.files)} files)",
            escape(str(p.path)),
            "ready",
            p.digest,
        ]
        for target, p in result.packages.items()
    ]
    display.table(
        "source cache",
        ["component", "version", "file", "status", "sha256"],
        rows,
        whole=("sha256",),
        give_way=("file", "version", "component"),
    )
