"""The artifact cache's packs are checked against the sha256 recorded when they were
filed: a corrupted or truncated pack is refused with its path."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from mpicluster.stack import artifacts
from mpicluster.util.errors import MpiclusterError


def pack(path: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = bytes(range(256)) * 4096
        info = tarfile.TarInfo("abc/bin/mpirun")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def test_a_recorded_pack_passes_and_a_changed_byte_is_refused(tmp_path):
    artifact = tmp_path / "stack-abc.tar.gz"
    data = pack(artifact)
    digest = hashlib.sha256(data).hexdigest()
    artifacts.checksum_path(artifact).write_text(f"{digest}  {artifact.name}\n")
    assert artifacts.verify(artifact) == digest
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01
    artifact.write_bytes(bytes(flipped))
    with pytest.raises(MpiclusterError) as caught:
        artifacts.verify(artifact)
    assert f"artifact cache: {artifact} does not match the sha256 recorded" in caught.value.message
    assert "corrupted or truncated; nothing was installed" in caught.value.message
    assert f"rm {artifact} {artifact}.sha256" in (caught.value.hint or "")


def test_a_truncated_pack_is_refused(tmp_path):
    artifact = tmp_path / "stack-abc.tar.gz"
    data = pack(artifact)
    artifacts.checksum_path(artifact).write_text(hashlib.sha256(data).hexdigest() + "\n")
    artifact.write_bytes(data[: len(data) // 3])
    with pytest.raises(MpiclusterError, match="does not match the sha256 recorded"):
        artifacts.verify(artifact)


def test_a_pack_without_a_record_is_read_through_then_recorded(tmp_path):
    artifact = tmp_path / "stack-abc.tar.gz"
    data = pack(artifact)
    assert artifacts.verify(artifact) == hashlib.sha256(data).hexdigest()
    assert artifacts.recorded(artifact) == hashlib.sha256(data).hexdigest()

    artifacts.checksum_path(artifact).unlink()
    artifact.write_bytes(data[: len(data) // 2])
    with pytest.raises(MpiclusterError, match="is not a whole packed stack"):
        artifacts.verify(artifact)
    assert artifacts.recorded(artifact) is None  # nothing recorded for a broken pack
