"""Unpack an agent's files from a tar archive on the host without following a link the agent made.

``tarfile``'s own ``filter="data"`` resolves links with ``os.path.realpath``, which some Python releases let a
long chain of links defeat; this module trusts no resolution at all. Into a new, empty folder it writes
regular files, folders and symbolic links (stored as links, never followed), and skips everything else: a
member whose name is absolute or has ``..``, a member under a path that is a link, hard links, devices and
fifos. Every file is created with ``O_NOFOLLOW | O_EXCL`` from a folder descriptor opened with
``O_NOFOLLOW``, so not even a race inside the host could make a write land outside the folder.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO

__all__ = ["Extracted", "UnsafeArchive", "safe_extract"]


class UnsafeArchive(ValueError):
    """The archive is larger than allowed (what it held is not to be trusted as a whole)."""


@dataclass
class Extracted:
    """What :func:`safe_extract` wrote and what it left out (member name and why)."""

    files: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _parts(name: str) -> list[str] | None:
    """The parts of a member's name, ``None`` when it is absolute or climbs with ``..``."""
    if name.startswith("/") or "\x00" in name:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return None if ".." in parts else parts


def _open_dir(root_fd: int, parts: Iterable[str]) -> int:
    """A descriptor of the folder ``parts`` under ``root_fd``, made as needed, never through a link."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def safe_extract(
    archive: IO[bytes] | bytes, dest: str | os.PathLike, *, strip: int = 0, max_bytes: int = 1 << 30
) -> Extracted:
    """Unpack ``archive`` (a tar file object or its bytes) into the empty folder ``dest``.

    ``strip`` drops that many leading path parts of each name (an engine's archive of ``/testbed`` names its
    members ``testbed/...``). Raises :class:`UnsafeArchive` when the files add up to more than ``max_bytes``.
    """
    import io

    fileobj = io.BytesIO(archive) if isinstance(archive, (bytes, bytearray)) else archive
    result = Extracted()
    links: set[tuple[str, ...]] = set()
    total = 0
    root_fd = os.open(os.fspath(dest), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
            for member in tar:
                whole = _parts(member.name)
                if whole is None:
                    result.skipped.append((member.name, "an absolute name or '..'"))
                    continue
                if len(whole) <= strip:  # the archived folder itself
                    continue
                parts = whole[strip:]
                if any(tuple(parts[:i]) in links for i in range(1, len(parts) + 1)):
                    result.skipped.append((member.name, "under a symbolic link"))
                    continue
                kind = _KINDS.get(member.type)
                if kind is None:
                    result.skipped.append((member.name, "not a file, folder or symbolic link"))
                    continue
                try:
                    if kind == "dir":
                        os.close(_open_dir(root_fd, parts))
                        continue
                    parent = _open_dir(root_fd, parts[:-1])
                except OSError as exc:  # a file where a folder should be
                    result.skipped.append((member.name, f"its folder could not be made: {exc.strerror}"))
                    continue
                try:
                    total += member.size if kind == "file" else 0
                    if total > max_bytes:
                        raise UnsafeArchive(f"the files add up to more than {max_bytes} bytes")
                    _write_member(tar, member, kind, parent, parts[-1])
                    if kind == "link":
                        links.add(tuple(parts))
                    else:
                        result.files += 1
                except OSError as exc:  # a folder where a file should be, a name too long
                    result.skipped.append((member.name, f"it could not be written: {exc.strerror}"))
                finally:
                    os.close(parent)
    finally:
        os.close(root_fd)
    return result


_KINDS = {
    tarfile.DIRTYPE: "dir",
    tarfile.REGTYPE: "file",
    tarfile.AREGTYPE: "file",
    tarfile.CONTTYPE: "file",
    tarfile.SYMTYPE: "link",
}
"""The member types unpacked; hard links, devices, fifos and the rest are skipped."""


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, kind: str, parent: int, name: str) -> None:
    """One file or link, written in the folder ``parent`` without following a link."""
    _remove_existing(parent, name)
    if kind == "link":
        os.symlink(member.linkname, name, dir_fd=parent)
        return
    mode = stat.S_IMODE(member.mode) & 0o755 | 0o600
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=parent)
    with os.fdopen(fd, "wb") as out:
        source = tar.extractfile(member)
        if source is not None:
            while chunk := source.read(1 << 20):
                out.write(chunk)


def _remove_existing(parent: int, name: str) -> None:
    """A later member of the same name replaces an earlier one (a tar may hold both); folders stay."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent)
