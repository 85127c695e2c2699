"""Finding the Debian mirror in a machine's apt sources (text fixtures, no apt needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpicluster.util import debian_archive
from mpicluster.util.debian_archive import (
    Entry,
    Mirror,
    choose_debian_mirror,
    debian_mirror,
    debootstrap_mirror,
    is_debian_suite,
    parse_deb822,
    parse_one_line,
    read_entries,
)
from mpicluster.util.errors import MpiclusterError

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

# Debian 12's default, as the installer and the cloud images write it; comments inside
# stanzas are legal deb822.
DEBIAN_SOURCES = f"""\
# Debian's archive
Types: deb deb-src
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.internal/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: {KEYRING}

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://mirror.internal/debian-security
Suites: bookworm-security
Components: main
Signed-By: {KEYRING}
"""

NODESOURCE_SOURCES = """\
Types: deb
URIs: https://deb.example-nodejs.com/node_20.x
Suites: nodistro
Components: main
Architectures: amd64
Signed-By: /usr/share/keyrings/nodesource.gpg
"""


def test_deb822_stanzas_with_comments_and_fields_in_any_case():
    first, security = parse_deb822(DEBIAN_SOURCES, "debian.sources")
    assert first.types == ("deb", "deb-src")
    assert first.uris == ("http://mirror.internal/debian",)
    assert first.suites == ("bookworm", "bookworm-updates")
    assert first.components == ("main", "contrib")
    assert first.signed_by == KEYRING
    assert first.origin == "debian.sources:2"
    assert security.suites == ("bookworm-security",) and security.origin == "debian.sources:9"
    (lower,) = parse_deb822("types: deb\nuris: http://m/debian\nsuites: sid\ncomponents: main\n")
    assert lower.uris == ("http://m/debian",)


def test_deb822_disabled_stanzas_inline_keys_and_incomplete_stanzas():
    text = (
        "Types: deb\nURIs: http://off/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n"
        "\n\n"
        "Types: deb\nURIs: http://on/debian\nSuites: bookworm\nComponents: main\n"
        "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBF...\n"
        " -----END PGP PUBLIC KEY BLOCK-----\n"
        "\n"
        "Types: deb\nSuites: bookworm\n"  # no URIs: apt would refuse it, it is skipped
    )
    off, on = parse_deb822(text)
    assert off.enabled is False and on.enabled is True
    assert on.signed_by is not None and on.signed_by.startswith("-----BEGIN")
    assert "mQINBF..." in on.signed_by


def test_one_line_format_with_options_and_comments():
    text = """\
# deb cdrom:[Debian GNU/Linux 12.5.0 _Bookworm_]/ bookworm main
deb http://ftp.example.org/debian/ bookworm main non-free-firmware
deb-src [ arch=amd64,arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg ] \
http://ftp.example.org/debian bookworm main   # sources too
deb [trusted=yes] file:/srv/repo ./
deb [broken http://x/debian bookworm main
rpm http://not-apt/ fc40 main
"""
    binary, source, flat = parse_one_line(text, "sources.list")
    assert binary.types == ("deb",) and binary.uris == ("http://ftp.example.org/debian/",)
    assert binary.components == ("main", "non-free-firmware") and binary.signed_by is None
    assert binary.origin == "sources.list:2"
    assert source.types == ("deb-src",)
    assert source.options == {"arch": "amd64,arm64", "signed-by": KEYRING}
    assert source.components == ("main",)
    assert flat.suites == ("./",) and flat.components == () and flat.options == {"trusted": "yes"}


@pytest.mark.parametrize(
    ("suite", "debian"),
    [
        ("bookworm", True),
        ("bookworm-updates", True),
        ("bookworm-backports", True),
        ("stable", True),
        ("sid", True),
        ("bookworm-security", False),
        ("bookworm-pgdg", False),
        ("nodistro", False),
        ("jammy", False),
        ("cloud-sdk-bookworm", False),
    ],
)
def test_suites_of_debians_main_archive(suite, debian):
    assert is_debian_suite(suite) is debian


def _entry(uri: str, suites=("bookworm",), components=("main",), **options) -> Entry:
    return Entry(("deb",), (uri,), tuple(suites), tuple(components), options)


def test_choose_skips_security_third_parties_and_other_keyrings():
    entries = [
        *parse_deb822(NODESOURCE_SOURCES, "nodesource.sources"),
        _entry("https://download.example-docker.com/linux/debian", components=("stable",)),
        _entry("http://apt.example-pg.org/pub/repos/apt", suites=("bookworm-pgdg",)),
        _entry("https://packages.example-vendor.com/debian/12/prod", **{"signed-by": "/v.gpg"}),
        _entry("cdrom:[Debian 12]/"),
        *parse_deb822(DEBIAN_SOURCES, "debian.sources")[1:],  # security only
    ]
    assert choose_debian_mirror(entries) is None
    entries += parse_deb822(DEBIAN_SOURCES, "debian.sources")[:1]
    assert choose_debian_mirror(entries) == Mirror(
        "http://mirror.internal/debian", KEYRING, "debian.sources:2"
    )


def test_choose_prefers_a_debian_path_and_debians_keyring_then_apts_order():
    vendor = _entry("https://vendor.example/apt/prod")  # bookworm main, keyring unknown
    mirror = _entry("http://proxy.internal:3142/debian/")
    assert choose_debian_mirror([vendor, mirror]).uri == "http://proxy.internal:3142/debian"
    signed = _entry("http://signed.internal/debian", **{"signed-by": KEYRING})
    assert choose_debian_mirror([mirror, signed]).uri == "http://signed.internal/debian"
    assert choose_debian_mirror([vendor]).uri == "https://vendor.example/apt/prod"
    disabled = Entry(("deb",), ("http://off/debian",), ("bookworm",), ("main",), enabled=False)
    assert choose_debian_mirror([disabled]) is None


def _machine(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "etc/apt" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_read_entries_reads_what_apt_reads_and_skips_disabled_files(tmp_path):
    root = _machine(
        tmp_path,
        {
            "sources.list": "# see sources.list.d\n",
            "sources.list.d/debian.sources": DEBIAN_SOURCES,
            "sources.list.d/nodesource.sources": NODESOURCE_SOURCES,
            "sources.list.d/old.list.disabled-by-farm": "deb http://old/debian bookworm main\n",
            "sources.list.d/extra.list": "deb http://extra.internal/debian sid main\n",
            "sources.list.d/notes.txt": "deb http://notes/debian bookworm main\n",
        },
    )
    entries = read_entries(root)
    assert [e.uris[0] for e in entries] == [
        "http://mirror.internal/debian",
        "http://mirror.internal/debian-security",
        "http://extra.internal/debian",
        "https://deb.example-nodejs.com/node_20.x",
    ]
    assert debian_mirror({}, root).uri == "http://mirror.internal/debian"
    assert debootstrap_mirror({}, root) == "http://mirror.internal/debian"


def test_the_environment_overrides_and_nothing_found_says_how_to_set_it(tmp_path):
    root = _machine(tmp_path, {"sources.list.d/nodesource.sources": NODESOURCE_SOURCES})
    env = {debian_archive.ENV: "http://override.internal/debian/"}
    assert debian_mirror(env, root) == Mirror(
        "http://override.internal/debian", None, debian_archive.ENV
    )
    with pytest.raises(MpiclusterError, match="no Debian mirror found") as caught:
        debootstrap_mirror({}, root)
    assert debian_archive.ENV in (caught.value.hint or "")
    with pytest.raises(MpiclusterError):
        debian_mirror({}, tmp_path / "no-apt-here")
