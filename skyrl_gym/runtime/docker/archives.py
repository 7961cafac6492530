"""Tar archives to and from a container: files written in, and an image's work folder re-rooted at its contents."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import time
from collections.abc import Iterable
from typing import IO

from skyrl_gym.runtime.base import FileMap, check_relative


def _tar(files: FileMap, mode: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        folders: set[str] = set()
        for relative, content in files.items():
            name = check_relative(relative)
            parent = os.path.dirname(name)
            while parent and parent not in folders:
                folders.add(parent)
                parent = os.path.dirname(parent)
            data = (
                content.encode("utf-8", errors="surrogatepass")
                if isinstance(content, str)
                else bytes(content)
            )
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = len(data), mode, int(time.time())
            archive.addfile(member, io.BytesIO(data))
        for folder in sorted(folders):
            member = tarfile.TarInfo(folder)
            member.type, member.mode, member.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            archive.addfile(member)
    return out.getvalue()


def _reroot(data: bytes) -> tuple[bytes, int, int]:
    """A tar of a folder (``app/...``) re-rooted at its contents, with the folder's own uid and mode."""
    source = tarfile.open(fileobj=io.BytesIO(data))
    out = io.BytesIO()
    uid, mode = 0, 0o755
    with tarfile.open(fileobj=out, mode="w") as target:
        for member in source.getmembers():
            top, _, rest = member.name.partition("/")
            if not rest:
                uid, mode = member.uid, member.mode & 0o7777
                continue
            member.name = rest
            if member.islnk():
                member.linkname = member.linkname.partition("/")[2]
            target.addfile(member, source.extractfile(member) if member.isfile() else None)
    return out.getvalue(), uid, mode


class _ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (an engine's archive stream)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def _reroot_stream(
    chunks: Iterable[bytes], spill_bytes: int = 16 * 1024 * 1024
) -> tuple[IO[bytes], int, int, int]:
    """:func:`_reroot` of a streamed archive, read once and kept in memory up to ``spill_bytes`` (on disk past
    that): the re-rooted tar (positioned at its start) and the folder's own uid, gid and mode. Every kind of
    member is kept as it is (owners, modes, times, links, files the folder's owner could not read)."""
    out = tempfile.SpooledTemporaryFile(max_size=spill_bytes)
    uid = gid = 0
    mode = 0o755
    with (
        tarfile.open(fileobj=io.BufferedReader(_ChunkReader(chunks), 1 << 20), mode="r|") as source,
        tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as target,
    ):
        for member in source:
            top, _, rest = member.name.partition("/")
            if not rest:
                uid, gid, mode = member.uid, member.gid, member.mode & 0o7777
                continue
            member.name = rest
            if member.islnk():
                member.linkname = member.linkname.partition("/")[2]
            target.addfile(member, source.extractfile(member) if member.isfile() else None)
    out.seek(0)
    return out, uid, gid, mode
