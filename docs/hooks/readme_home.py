"""The site's home page is README.md itself, never a copy that can drift.

An mkdocs hook (mkdocs.yml `hooks:`): index.md is made from README.md at build time.
README's links are written for GitHub, from the repository's root: a page of the site is
`docs/up.md` there and `up.md` here; any other file of the repository (`benchmarks/...`,
`inventories/gpu.yaml`) is not part of the site, so here it keeps its text, unlinked.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

HOME = "index.md"
DOCS = "docs/"
#: An inline link, [text](target), its target without spaces.
LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
#: Targets left as they are: other sites, mail, this page's own headings.
OUTSIDE = ("http://", "https://", "mailto:", "#")


def site_markdown(readme: str) -> str:
    """README.md's text with its links as the site's home page needs them."""

    def relink(match: re.Match[str]) -> str:
        text, target = match.groups()
        if target.startswith(OUTSIDE):
            return match.group(0)
        if target.startswith(DOCS):
            return f"[{text}]({target.removeprefix(DOCS)})"
        return text

    return LINK.sub(relink, readme)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    readme = Path(config.config_file_path).parent / "README.md"
    stale = files.get_file_from_path(HOME)
    if stale is not None:
        files.remove(stale)
    files.append(File.generated(config, HOME, content=site_markdown(readme.read_text())))
    return files
