"""The files mpicluster writes on nodes, rendered from the top-level templates/ folder:
the same Jinja2 templates the roles render, with Ansible's settings (a newline after a
block tag dropped, the template's own trailing newline kept) and the filters of Ansible's
that they use."""

from __future__ import annotations

import json
import shlex
from functools import cache
from typing import Any

import jinja2

from mpicluster.util.paths import data_path


def to_nice_json(value: Any, indent: int = 4) -> str:
    """Ansible's to_nice_json: sorted keys, `indent` spaces, no trailing blanks."""
    return json.dumps(value, indent=indent, sort_keys=True, separators=(",", ": "))


@cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(  # noqa: S701 (configuration files, not HTML)
        loader=jinja2.FileSystemLoader(str(data_path("templates"))),
        trim_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["quote"] = shlex.quote
    environment.filters["to_nice_json"] = to_nice_json
    return environment


def render(name: str, **values: Any) -> str:
    """templates/`name` with `values`; a value it names but is not given is an error."""
    return _environment().get_template(name).render(**values)


def names() -> list[str]:
    """Every template in the folder."""
    return sorted(_environment().list_templates())
