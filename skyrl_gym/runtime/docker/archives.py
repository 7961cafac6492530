"""Tar archives to and from a container: files written in, and an image's work folder re-rooted at its contents."""

from __future__ import annotations

import io
import os
import tarfile
import time

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
