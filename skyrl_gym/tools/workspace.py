"""``Workspace``: what an environment lends to tools (a shell, files, a database, a search engine, Python).

An environment that has a place to work in exposes it with ``env.workspace()`` (``None`` when it lends none).
Tools written once against this interface (a ``bash`` tool, a file editor, a code index, a SQL tool) then run
in any environment that lends the capability they need:

- ``run(command, timeout_s) -> CommandResult``: a shell command (capability ``"run"``);
- ``read_file``, ``write_file``, ``list_files``: files, paths relative to the workspace's root or absolute
  inside it (capability ``"files"``);
- ``sql(query)``, ``search(query, k)``, ``python(code, timeout_s)``: optional capabilities, each returning
  the text to show the model;
- any other capability, by a name of its own: a workspace offers it by listing the name and answering
  ``call(name, ...)`` (a :class:`FunctionWorkspace` takes it as a keyword: ``FunctionWorkspace(browse=fetch)``),
  and a tool that needs it declares the name (``@tool(requires=["browse"])``) and uses ``call``.

A capability a workspace lacks raises :class:`WorkspaceUnsupported`; ``supports(name)`` says beforehand, so
an agent can offer only the tools that work. Failures of what runs inside (a command that exits 1 or times
out, a query that fails) are results, not exceptions; a path outside the workspace or a missing file raises
``ValueError`` / ``FileNotFoundError`` with a message meant for the model.

:class:`LocalDirWorkspace` is a folder on this machine (a repository, a test project) whose commands run in
a :mod:`skyrl_gym.runtime` sandbox. This module imports no environment.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import os
import secrets
import shlex
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CAPABILITIES",
    "CommandResult",
    "ContainerWorkspace",
    "FunctionWorkspace",
    "LocalDirWorkspace",
    "Workspace",
    "WorkspaceUnsupported",
]

CAPABILITIES = ("run", "files", "sql", "search", "python")
"""The built-in capabilities, each a method of :class:`Workspace`; the set is open (:meth:`Workspace.call`)."""


class WorkspaceUnsupported(NotImplementedError):
    """The workspace does not offer a capability (``"run"``, ``"files"``, ``"sql"``...)."""


@dataclass
class CommandResult:
    """One command's outcome: its ``output`` (stdout and stderr together), ``exit_code`` (``None`` when it
    was killed or never started) and whether it ``timed_out``."""

    output: str
    exit_code: int | None
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """The command ran to its end and exited with status 0."""
        return self.exit_code == 0 and not self.timed_out


class Workspace:
    """Base class of workspaces: every capability raises :class:`WorkspaceUnsupported` until overridden.

    Subclasses override the methods of the capabilities they offer and list them in :attr:`capabilities`.
    """

    capabilities: frozenset[str] = frozenset()
    """The capabilities this workspace offers: names from :data:`CAPABILITIES` or its own."""

    def supports(self, capability: str) -> bool:
        """Whether the workspace offers ``capability``."""
        return capability in self.capabilities

    def call(self, capability: str, *args: Any, **kwargs: Any) -> Any:
        """Use ``capability`` by name: the method of a built-in one (``call("sql", query)`` is
        ``sql(query)``); a workspace that offers capabilities of its own answers for them here.
        :class:`WorkspaceUnsupported` when it is not offered."""
        if capability == "files":
            raise ValueError("'files' is three methods: read_file, write_file and list_files")
        if capability not in self.capabilities or capability not in CAPABILITIES:
            raise self._unsupported(capability)
        return getattr(self, capability)(*args, **kwargs)

    def _unsupported(self, capability: str) -> WorkspaceUnsupported:
        offered = ", ".join(sorted(self.capabilities)) or "nothing"
        return WorkspaceUnsupported(f"this workspace offers no {capability!r} (it offers: {offered})")

    def run(self, command: str, timeout_s: float = 30.0) -> CommandResult:
        """Run a shell command and return its output and exit code."""
        raise self._unsupported("run")

    def read_file(self, path: str) -> str:
        """The text of a file (``FileNotFoundError`` when there is none)."""
        raise self._unsupported("files")

    def write_file(self, path: str, content: str) -> None:
        """Create or replace a file (folders are made as needed)."""
        raise self._unsupported("files")

    def list_files(self, path: str = ".", max_files: int = 10_000) -> list[str]:
        """Paths of the regular files under ``path``, relative to the workspace's root, sorted."""
        raise self._unsupported("files")

    def sql(self, query: str) -> str:
        """Run a SQL query; the result (or the error) as text."""
        raise self._unsupported("sql")

    def search(self, query: str, k: int = 3) -> str:
        """The ``k`` best passages for ``query``, as text."""
        raise self._unsupported("search")

    def python(self, code: str, timeout_s: float = 10.0) -> str:
        """Run Python code; what it printed (and its traceback) as text."""
        raise self._unsupported("python")

    @property
    def key(self) -> str:
        """A name for the workspace's content, stable while it lives (tools key their caches by it)."""
        return f"{type(self).__name__}-{id(self):x}"

    def close(self) -> None:
        """Release what the workspace holds (the environment that lent it usually owns it)."""


class FunctionWorkspace(Workspace):
    """A workspace made of plain functions: ``FunctionWorkspace(sql=run_query)`` offers the ``sql`` capability,
    ``FunctionWorkspace(browse=fetch)`` a capability of its own, ``browse`` (used through :meth:`call`).

    Args:
        sql: ``sql(query) -> str``.
        search: ``search(query, k) -> str``.
        python: ``python(code, timeout_s) -> str``.
        key: the name tools key their caches by (default: one per instance).
        others: further capabilities, name -> function (not ``run`` or ``files``, which are methods with a
            contract of their own: see :class:`LocalDirWorkspace`).
    """

    def __init__(
        self,
        *,
        sql: Callable[[str], str] | None = None,
        search: Callable[[str, int], str] | None = None,
        python: Callable[[str, float], str] | None = None,
        key: str | None = None,
        **others: Callable[..., Any] | None,
    ):
        reserved = sorted(set(others) & {"run", "files"})
        if reserved:
            raise ValueError(f"FunctionWorkspace cannot take {', '.join(reserved)}: use a workspace class")
        self._functions = {"sql": sql, "search": search, "python": python, **others}
        self.capabilities = frozenset(name for name, function in self._functions.items() if function)
        self._key = key

    def _call(self, capability: str, *args: Any, **kwargs: Any) -> Any:
        function = self._functions.get(capability)
        if function is None:
            raise self._unsupported(capability)
        return function(*args, **kwargs)

    def call(self, capability: str, *args: Any, **kwargs: Any) -> Any:
        return self._call(capability, *args, **kwargs)

    def sql(self, query: str) -> str:
        return self._call("sql", query)

    def search(self, query: str, k: int = 3) -> str:
        return self._call("search", query, k)

    def python(self, code: str, timeout_s: float = 10.0) -> str:
        return self._call("python", code, timeout_s)

    @property
    def key(self) -> str:
        return self._key or super().key


class ContainerWorkspace(Workspace):
    """A container's persistent shell and files (the terminal environment lends one).

    Commands go to ``shell`` (an object with ``run(command, timeout_s)`` returning ``output``, ``exit_code`` and
    ``timed_out``, such as :class:`~skyrl_gym.runtime.docker.ShellSession`): the current folder, variables and
    background jobs live across commands. Files are read and written through ``container`` (``exec``,
    ``get_file``, ``put_files``, ``workdir``, as :class:`~skyrl_gym.runtime.docker.DockerContainer` has them)
    as the container's user; relative paths are relative to its work folder.
    """

    capabilities = frozenset({"run", "files"})

    def __init__(self, container: Any, shell: Any, *, max_output_chars: int = 20_000):
        self.container = container
        self.shell = shell
        self.max_output_chars = max_output_chars

    def _path(self, path: str) -> str:
        if not isinstance(path, str) or not path.strip() or "\x00" in path:
            raise ValueError(f"invalid path {str(path)[:200]!r}: give a file path such as 'src/main.py'")
        return os.path.normpath(path if path.startswith("/") else f"{self.container.workdir}/{path}")

    def run(self, command: str, timeout_s: float = 30.0) -> CommandResult:
        if not isinstance(command, str) or not command.strip():
            return CommandResult("(empty command: nothing to run)", None)
        result = self.shell.run(command, timeout_s=timeout_s)
        return CommandResult(_cap(result.output, self.max_output_chars), result.exit_code, result.timed_out)

    def read_file(self, path: str) -> str:
        full = self._path(path)
        data = self.container.get_file(full, max_bytes=_MAX_READ_BYTES)
        if data is None:
            raise FileNotFoundError(f"no readable file {path!r} in the container")
        return data.decode("utf-8", errors="replace")

    def write_file(self, path: str, content: str) -> None:
        full = self._path(path)
        folder, name = os.path.split(full)
        self.container.put_files({name: content}, dest=folder or "/")

    def list_files(self, path: str = ".", max_files: int = 10_000) -> list[str]:
        full = self._path(path)
        result = self.container.exec(
            ["find", full, "-xdev", "(", "-name", ".git", "-o", "-name", "__pycache__", ")", "-prune",
             "-o", "-type", "f", "-print"],
            timeout_s=30,
        )  # fmt: skip
        if result.exit_code != 0 and not result.stdout:
            raise FileNotFoundError(f"no folder {path!r} in the container")
        base = self.container.workdir.rstrip("/") + "/"
        found = [line[len(base) :] if line.startswith(base) else line for line in result.stdout.splitlines()]
        return sorted(found)[:max_files]

    @property
    def key(self) -> str:
        return f"container:{getattr(self.container, 'id', id(self.container))}"


_MAX_READ_BYTES = 8 * 1024 * 1024
_SKIPPED_DIRS = frozenset({".git", "__pycache__", ".venv", "node_modules", ".mypy_cache", ".pytest_cache"})


class LocalDirWorkspace(Workspace):
    """A folder on this machine; its commands run in a sandbox of :mod:`skyrl_gym.runtime`.

    Files are read and written directly in ``root`` (paths may not leave it, symbolic links included).
    Each command runs in a fresh sandbox (``bwrap`` where it works: no network, a read-only system, an
    unprivileged user) that gets a copy of the folder as its work folder; when the command ends, what it left
    there is copied back, so files it created, changed or deleted persist, while its current folder,
    variables and background processes do not (each command starts in the root). A command that times out is
    killed and its changes are dropped.

    What comes back is the work of code that may be hostile, copied by this process (often root): only
    folders, regular files (without setuid bits) and symbolic links whose target is relative and stays inside
    the folder come back; the rest (links out, absolute links, fifos, devices) is dropped, and the command's
    output says so. No host-side file operation here ever lets the kernel follow a link.

    Args:
        root: the folder; ``None`` makes a temporary one, removed by :meth:`close`.
        files: files to write first (relative path -> text).
        sandbox: a :class:`~skyrl_gym.runtime.Sandbox`, or a backend name for ``make_sandbox`` (``"auto"``).
        memory_mb: memory of each command.
        max_output_chars: characters of a command's output kept (its beginning and end).
    """

    capabilities = frozenset({"run", "files"})

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        files: Mapping[str, str] | None = None,
        sandbox: Any = "auto",
        memory_mb: int = 512,
        max_output_chars: int = 20_000,
    ):
        self._owned = root is None
        self.root = Path(tempfile.mkdtemp(prefix="skyrl-workspace-") if root is None else root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._sandbox_spec = sandbox
        self._sandbox: Any = None
        self.memory_mb = memory_mb
        self.max_output_chars = max_output_chars
        self.commands = 0
        for relative, content in (files or {}).items():
            self.write_file(relative, content)

    # -- paths ------------------------------------------------------------------------------------------
    def resolve(self, path: str) -> Path:
        """The host path of ``path`` (relative to the root, or absolute inside it); ``ValueError`` outside.

        Symbolic links are followed one by one (``lstat`` and ``readlink``, never the kernel's resolution), and
        only while they stay inside the root: a link that leads out of it is refused. The file methods do not
        use the returned path: they walk the same way with folder descriptors, so a link swapped in meanwhile is
        never followed either.
        """
        parts = self._parts(path)
        try:
            with _Located(self.root, parts, path, create=False) as found:
                return self.root.joinpath(*found.names)
        except (FileNotFoundError, NotADirectoryError):  # a place that does not exist yet: as written
            return Path(os.path.normpath(self.root.joinpath(*parts)))

    def _parts(self, path: str) -> list[str]:
        """``path`` as components relative to the root (``ValueError`` for a path that leaves it)."""
        if not isinstance(path, str) or not path.strip() or "\x00" in path:
            raise ValueError(f"invalid path {str(path)[:200]!r}: give a file path such as 'src/main.py'")
        candidate = Path(path)
        if candidate.is_absolute():
            # an absolute path names a place inside the root, or inside /work (where commands see the folder)
            for base in (self.root, Path("/work")):
                if candidate == base or base in candidate.parents:
                    candidate = candidate.relative_to(base)
                    break
            else:
                raise ValueError(
                    f"path {path[:200]!r} is outside the workspace (give a path relative to its root)"
                )
        parts = [p for p in candidate.as_posix().split("/") if p not in ("", ".")]
        depth = 0
        for part in parts:  # written as it is, the path must stay inside (links are checked on the way)
            depth += -1 if part == ".." else 1
            if depth < 0:
                raise ValueError(f"path {path[:200]!r} is outside the workspace")
        return parts

    def relative(self, full: Path) -> str:
        """``full`` relative to the root, with ``/`` separators."""
        return full.relative_to(self.root).as_posix() or "."

    # -- files ------------------------------------------------------------------------------------------
    def read_file(self, path: str) -> str:
        try:
            with _Located(self.root, self._parts(path), path, create=False) as found:
                if found.name is None:
                    raise IsADirectoryError(f"{path!r} is a folder, not a file")
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                fd = os.open(found.name, flags, dir_fd=found.parent)
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(f"no file {path!r} in the workspace") from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(f"{path!r} is a folder, not a file")
            if not stat.S_ISREG(info.st_mode):
                raise FileNotFoundError(f"no file {path!r} in the workspace")
            if info.st_size > _MAX_READ_BYTES:
                raise ValueError(f"{path!r} is larger than {_MAX_READ_BYTES // (1024 * 1024)} MB")
            return handle.read(_MAX_READ_BYTES + 1).decode("utf-8", errors="replace")

    def write_file(self, path: str, content: str) -> None:
        data = content.encode("utf-8", errors="surrogatepass")
        with _Located(self.root, self._parts(path), path, create=True) as found:
            if found.name is None:
                raise IsADirectoryError(f"{path!r} is a folder, not a file")
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(found.name, flags, 0o644, dir_fd=found.parent)
            except IsADirectoryError:
                raise IsADirectoryError(f"{path!r} is a folder, not a file") from None
            except OSError as exc:  # ELOOP: a link swapped in after the walk; ENXIO: a fifo
                raise ValueError(f"{path!r} cannot be written: {exc.strerror}") from None
        with os.fdopen(fd, "wb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"{path!r} is not a regular file")
            os.set_blocking(fd, True)
            handle.truncate(0)
            handle.write(data)

    def list_files(self, path: str = ".", max_files: int = 10_000) -> list[str]:
        try:
            with _Located(self.root, self._parts(path), path, create=False) as found:
                prefix = "/".join(found.names)
                if found.name is None:
                    start = os.dup(found.parent)
                else:
                    try:
                        start = os.open(found.name, _DIR_FLAGS, dir_fd=found.parent)
                    except NotADirectoryError:
                        info = os.stat(found.name, dir_fd=found.parent, follow_symlinks=False)
                        if stat.S_ISREG(info.st_mode):
                            return [prefix]
                        raise
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            raise FileNotFoundError(f"no folder {path!r} in the workspace") from None
        found_files: list[str] = []
        try:
            for folder, dirs, names, dir_fd in os.fwalk(".", dir_fd=start, follow_symlinks=False):
                dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
                base = os.path.normpath(os.path.join(prefix, folder)) if prefix or folder != "." else ""
                base = "" if base == "." else base
                for name in sorted(names):
                    try:
                        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(info.st_mode):
                        found_files.append(f"{base}/{name}" if base else name)
                        if len(found_files) >= max_files:
                            return sorted(found_files)
        finally:
            os.close(start)
        return sorted(found_files)

    @property
    def key(self) -> str:
        return f"dir:{self.root}"

    # -- commands ---------------------------------------------------------------------------------------
    def _get_sandbox(self) -> Any:
        if self._sandbox is None:
            if isinstance(self._sandbox_spec, str):
                from skyrl_gym.runtime import make_sandbox

                self._sandbox = make_sandbox(self._sandbox_spec)
            else:
                self._sandbox = self._sandbox_spec
        return self._sandbox

    def run(self, command: str, timeout_s: float = 30.0) -> CommandResult:
        """Run ``command`` with bash in a sandboxed copy of the folder; changes come back when it ends."""
        from skyrl_gym.runtime import Limits

        if not isinstance(command, str) or not command.strip():
            return CommandResult("(empty command: nothing to run)", None)
        sandbox = self._get_sandbox()
        self.commands += 1
        archive = _pack(self.root)
        size_mb = max(64, 4 * len(archive) // (1024 * 1024) + 16)
        # the output channel carries the folder back (base64), so it must hold about 1.4x the folder
        limits = Limits(
            timeout_s=float(timeout_s) + 10.0,
            memory_mb=self.memory_mb,
            max_processes=128,
            max_file_mb=size_mb,
            max_output_bytes=2 * size_mb * 1024 * 1024,
        )
        script = _RUN_SCRIPT.format(timeout=f"{float(timeout_s):g}", command=shlex.quote(command))
        result = sandbox.run(["/bin/bash", "-c", script], stdin=archive, limits=limits)
        output = result.stderr
        if result.exit_code is None and not result.timed_out:
            return CommandResult(
                _cap(output or "the sandbox could not start the command", self.max_output_chars), None
            )
        marker = result.stdout.rfind(_EXIT_MARKER)
        if marker < 0 or result.timed_out:
            return CommandResult(_cap(output, self.max_output_chars), None, timed_out=True)
        tail = result.stdout[marker + len(_EXIT_MARKER) :]
        code_text, _, payload = tail.partition("\n")
        code = int(code_text) if code_text.strip().lstrip("-").isdigit() else None
        timed_out = code == 124
        notes = ""
        if not timed_out:
            notes = _format_notes(self._copy_back(payload))
        # the notes come last: the part of the output that _cap always keeps
        text = _cap(output, max(self.max_output_chars - len(notes), self.max_output_chars // 2)) + notes
        return CommandResult(text, None if timed_out else code, timed_out)

    def _copy_back(self, payload: str) -> list[str]:
        """Bring what the command left back into the root; notes on what was not (never raises for what the
        command sent: that is the model's doing, a result like its output)."""
        archive_text, end, _ = payload.partition(_END_MARKER)
        if not end:
            return [
                "the folder was too large to copy back (or its copy was cut short); its changes were dropped"
            ]
        try:
            data = base64.b64decode(archive_text.strip(), validate=True)
        except (binascii.Error, ValueError):
            return ["the folder's copy came back damaged; its changes were dropped"]
        try:
            return _unpack_into(self.root, data)
        except Exception as exc:  # what the command sent must never end the episode as an error
            return [f"the folder's changes could not all be copied back ({type(exc).__name__}: {exc})"]

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalDirWorkspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_EXIT_MARKER = "\x1eSKYRL-WORKSPACE-EXIT "
# The folder arrives as a tar on stdin; the command runs under coreutils' timeout with its output on stderr
# (stdout is the channel that carries the folder back), then the folder goes back as base64 on stdout.
_RUN_SCRIPT = (
    "tar -x -m -f - 2>/dev/null\n"
    "timeout -k 1 {timeout} /bin/bash -c {command} </dev/null 1>&2\n"
    "code=$?\n"
    "printf '\\036SKYRL-WORKSPACE-EXIT %s\\n' \"$code\"\n"
    "tar -c -f - . 2>/dev/null | base64 -w0\n"
    "printf '\\n\\036SKYRL-WORKSPACE-END\\n'\n"
)
_END_MARKER = "\x1eSKYRL-WORKSPACE-END"


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINK_HOPS = 40
"""Symbolic links followed in one path at most (the kernel's own limit)."""
_MAX_LINK_TARGET = 4095
_MAX_DEPTH = 128
"""Folders nested deeper than this in what a command leaves are not copied back."""
_LINK_CHECK_BUDGET = 2_000_000
"""Path components the copy-back may walk to check the links of one archive; links beyond it are dropped."""
_MAX_NOTES = 20


class _Located:
    """Walks ``parts`` from ``root`` one component at a time with ``O_NOFOLLOW`` folder descriptors, following
    symbolic links itself (``readlink``) only while they stay inside the root; ``..`` goes back to the folder
    the walk came from. The kernel never resolves a link, so a link swapped in during the walk fails the open
    instead of being followed.

    Inside the ``with``: ``parent`` is an open descriptor of the folder holding the last component, ``name``
    that component (never a link; it may not exist; ``None`` for the root itself), ``names`` the components
    of the real place from the root. With ``create``, missing folders on the way are made.
    """

    def __init__(self, root: Path, parts: list[str], shown: str, *, create: bool):
        self.root, self.parts, self.shown, self.create = root, parts, shown, create
        self._stack: list[int] = []
        self.names: list[str] = []
        self.name: str | None = None

    @property
    def parent(self) -> int:
        return self._stack[-1]

    def _outside(self) -> ValueError:
        return ValueError(f"path {self.shown[:200]!r} is outside the workspace")

    def __enter__(self) -> _Located:
        self._stack.append(os.open(self.root, _DIR_FLAGS))
        try:
            self._walk()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        while self._stack:
            os.close(self._stack.pop())

    def _walk(self) -> None:
        pending = [p for p in reversed(self.parts) if p not in ("", ".")]
        hops = 0
        while pending:
            part = pending.pop()
            if part == "..":
                if len(self._stack) == 1:
                    raise self._outside()
                os.close(self._stack.pop())
                self.names.pop()
                continue
            last = not pending
            try:
                info = os.stat(part, dir_fd=self.parent, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is not None and stat.S_ISLNK(info.st_mode):
                hops += 1
                if hops > _MAX_LINK_HOPS:
                    raise ValueError(f"path {self.shown[:200]!r} goes through too many links")
                target = os.readlink(part, dir_fd=self.parent)
                if target.startswith("/"):
                    relative = _inside_absolute(self.root, target)
                    if relative is None:
                        raise self._outside()
                    while len(self._stack) > 1:
                        os.close(self._stack.pop())
                    self.names.clear()
                    target = relative
                pending.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
                continue
            if last:
                self.name = part
                self.names.append(part)
                return
            if info is None:
                if not self.create:
                    raise FileNotFoundError(f"no {self.shown[:200]!r} in the workspace")
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=self.parent)
            self._stack.append(os.open(part, _DIR_FLAGS, dir_fd=self.parent))
            self.names.append(part)


def _inside_absolute(root: Path, target: str) -> str | None:
    """An absolute link target as a path relative to ``root``, or ``None`` when it names a place outside."""
    base = str(root).rstrip("/")
    if target == base:
        return "."
    if target.startswith(base + "/"):
        return target[len(base) + 1 :]
    return None


def _pack(root: Path) -> bytes:
    """The folder as a tar archive: folders, regular files and symbolic links (as links, never followed);
    other kinds (fifos, devices, sockets) are left out. Read through folder descriptors with ``O_NOFOLLOW``."""
    out = io.BytesIO()
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for folder, dirs, names, dir_fd in os.fwalk(".", dir_fd=root_fd, follow_symlinks=False):
                dirs.sort()
                base = os.path.normpath(folder)
                for name in sorted([*dirs, *names]):
                    arcname = name if base == "." else f"{base}/{name}"
                    with contextlib.suppress(OSError):  # a file that went away meanwhile
                        _pack_one(archive, dir_fd, name, arcname)
    finally:
        os.close(root_fd)
    return out.getvalue()


def _pack_one(archive: tarfile.TarFile, dir_fd: int, name: str, arcname: str) -> None:
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    member = tarfile.TarInfo(arcname)
    member.mode, member.mtime = stat.S_IMODE(info.st_mode), int(info.st_mtime)
    if stat.S_ISDIR(info.st_mode):
        member.type = tarfile.DIRTYPE
        archive.addfile(member)
    elif stat.S_ISLNK(info.st_mode):
        member.type, member.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=dir_fd)
        archive.addfile(member)
    elif stat.S_ISREG(info.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as handle:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                return
            data = handle.read()
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))


@dataclass
class _Entry:
    kind: str  # "dir", "file" or "link"
    member: tarfile.TarInfo | None = None  # the member holding a file's data, or the link
    mode: int = 0o644


def _member_parts(name: str) -> list[str] | None:
    """A member's name as components, or ``None`` when it is absolute or climbs with ``..``."""
    if "\x00" in name or name.startswith("/"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    return parts


def _read_archive(data: bytes, notes: list[str]) -> tuple[tarfile.TarFile, dict[tuple[str, ...], _Entry]]:
    """The tree an archive describes, every member checked: folders, regular files, hard links to files already
    in it (copied), and symbolic links with a relative target; anything else is dropped with a note."""
    archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    tree: dict[tuple[str, ...], _Entry] = {}
    for member in archive.getmembers():
        parts = _member_parts(member.name)
        if parts is None:
            notes.append(f"dropped {_shown(member.name)!r}: its name leads out of the folder")
            continue
        if not parts:
            continue  # the folder itself
        shown = _shown("/".join(parts))
        key = tuple(parts)
        if len(key) > _MAX_DEPTH or len(member.name) > 4095:
            notes.append(f"dropped {shown!r}: nested too deep")
            continue
        if key in tree:
            if not (member.isdir() and tree[key].kind == "dir"):
                notes.append(f"dropped {shown!r}: it appears twice")
            continue
        parents = [key[:i] for i in range(1, len(key))]
        if any(p in tree and tree[p].kind != "dir" for p in parents):
            notes.append(f"dropped {shown!r}: it lies under something that is not a folder")
            continue
        if member.isdir():
            entry = _Entry("dir", mode=(member.mode & 0o755) | 0o700)
        elif member.isreg():
            entry = _Entry("file", member, (member.mode & 0o755) | 0o600)
        elif member.issym():
            target = member.linkname
            if not target or "\x00" in target or len(target) > _MAX_LINK_TARGET:
                notes.append(f"dropped link {shown!r}: its target is not a valid path")
                continue
            if target.startswith("/"):
                notes.append(
                    f"dropped link {shown!r} -> {_shown(target)!r}: absolute links are not copied back"
                )
                continue
            entry = _Entry("link", member)
        elif member.islnk():
            source_parts = _member_parts(member.linkname)
            source = tree.get(tuple(source_parts)) if source_parts else None
            if source is None or source.kind != "file":
                notes.append(f"dropped hard link {shown!r}: it does not name a file of the folder")
                continue
            entry = _Entry("file", source.member, source.mode)
        else:
            notes.append(f"dropped {shown!r}: not a file, folder or link")
            continue
        for parent in parents:
            tree.setdefault(parent, _Entry("dir", mode=0o755))
        tree[key] = entry
    return archive, tree


def _drop_escaping_links(tree: dict[tuple[str, ...], _Entry], notes: list[str]) -> None:
    """Drop every link that, followed as the kernel would (through the other links of the tree, ``..`` going
    back from where a link led), leaves the folder or goes through too many links.

    A link that goes through a dropped link leaves the folder too (it makes the same steps), so one pass
    gives the same answer as repeating until nothing changes.
    """
    budget = _LINK_CHECK_BUDGET
    escaping = []
    for key, entry in tree.items():
        if entry.kind != "link":
            continue
        assert entry.member is not None
        leaves, budget = _link_leaves(tree, key, entry.member.linkname, budget)
        if leaves:
            escaping.append(key)
    for key in escaping:
        target = tree.pop(key).member.linkname  # type: ignore[union-attr]
        notes.append(
            f"dropped link {_shown('/'.join(key))!r} -> {_shown(target)!r}: it leads out of the folder"
        )


def _link_leaves(
    tree: dict[tuple[str, ...], _Entry], key: tuple[str, ...], target: str, budget: int
) -> tuple[bool, int]:
    current = list(key[:-1])
    pending = list(reversed(target.split("/")))
    hops = 0
    while pending:
        budget -= 1
        if budget < 0:
            return True, 0
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not current:
                return True, budget
            current.pop()
            continue
        current.append(part)
        entry = tree.get(tuple(current))
        if entry is not None and entry.kind == "link":
            hops += 1
            link_target = entry.member.linkname  # type: ignore[union-attr]
            if hops > _MAX_LINK_HOPS or link_target.startswith("/"):
                return True, budget
            current.pop()
            pending.extend(reversed(link_target.split("/")))
    return False, budget


def _unpack_into(root: Path, data: bytes) -> list[str]:
    """Make ``root`` hold what the archive holds: changed files rewritten, new ones added, missing ones
    removed; unchanged files are left alone (their modification times stay).

    The archive comes from code that may be hostile, and this runs as the caller (often root): every member is
    checked first (see :func:`_read_archive`, :func:`_drop_escaping_links`), and every change on the host
    goes through folder descriptors opened with ``O_NOFOLLOW``, so a link (in the archive or already in the
    folder) is never followed. Returns notes on what was not copied back; never raises for what the archive
    holds.
    """
    notes: list[str] = []
    try:
        archive, tree = _read_archive(data, notes)
    except (tarfile.TarError, EOFError, ValueError) as exc:
        return [f"the folder's changes could not be read back ({exc}); the folder was left as it was"]
    _drop_escaping_links(tree, notes)
    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        return [*notes, f"the folder's changes could not be copied back: {exc}"]
    try:
        with _DirCache(root_fd) as dirs:
            _remove_missing(dirs, tree, notes)
            for key in sorted(tree):
                try:
                    _apply(archive, dirs, key, tree[key])
                except (OSError, tarfile.TarError, EOFError, ValueError, OverflowError) as exc:
                    notes.append(f"could not copy back {_shown('/'.join(key))!r}: {exc}")
    finally:
        os.close(root_fd)
    return notes


class _DirCache:
    """Descriptors of the folders on the current path from the root (opened with ``O_NOFOLLOW``), reused
    while the keys come in sorted order."""

    def __init__(self, root_fd: int):
        self.root_fd = root_fd
        self.keys: list[str] = []
        self.fds: list[int] = []

    def __enter__(self) -> _DirCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.trim(0)

    def trim(self, depth: int) -> None:
        while len(self.fds) > depth:
            os.close(self.fds.pop())
            self.keys.pop()

    def folder(self, parts: tuple[str, ...]) -> int:
        """An open descriptor of the folder ``parts`` (``OSError`` when one of them is not a real folder)."""
        common = 0
        while common < min(len(parts), len(self.keys)) and parts[common] == self.keys[common]:
            common += 1
        self.trim(common)
        for part in parts[common:]:
            parent = self.fds[-1] if self.fds else self.root_fd
            self.fds.append(os.open(part, _DIR_FLAGS, dir_fd=parent))
            self.keys.append(part)
        return self.fds[-1] if self.fds else self.root_fd


def _host_kind(dir_fd: int, name: str) -> tuple[str, os.stat_result] | None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    mode = info.st_mode
    kind = (
        "dir"
        if stat.S_ISDIR(mode)
        else "file"
        if stat.S_ISREG(mode)
        else "link"
        if stat.S_ISLNK(mode)
        else "other"
    )
    return kind, info


def _remove_missing(dirs: _DirCache, tree: dict[tuple[str, ...], _Entry], notes: list[str]) -> None:
    """Remove from the host folder what the archive does not hold as the same kind (a folder that became a
    link, a file that became a folder...), without following any link."""
    removed: list[tuple[str, ...]] = []
    for folder, subdirs, names, dir_fd in os.fwalk(".", dir_fd=dirs.root_fd, follow_symlinks=False):
        base = tuple(p for p in os.path.normpath(folder).split("/") if p != ".")
        keep_dirs = []
        for name in sorted([*subdirs, *names]):
            key = (*base, name)
            try:
                found = _host_kind(dir_fd, name)
                if found is None:
                    continue
                kind, _ = found
                wanted = tree.get(key)
                if wanted is not None and wanted.kind == kind:
                    if kind == "dir":
                        keep_dirs.append(name)
                    continue
                if kind == "dir":
                    shutil.rmtree(name, dir_fd=dir_fd)
                else:
                    os.unlink(name, dir_fd=dir_fd)
                removed.append(key)
            except OSError as exc:
                notes.append(f"could not remove {_shown('/'.join(key))!r}: {exc}")
        subdirs[:] = [d for d in subdirs if d in keep_dirs]


def _apply(archive: tarfile.TarFile, dirs: _DirCache, key: tuple[str, ...], entry: _Entry) -> None:
    parent = dirs.folder(key[:-1])
    name = key[-1]
    found = _host_kind(parent, name)
    if entry.kind == "dir":
        if found is None:
            os.mkdir(name, 0o755, dir_fd=parent)
        elif found[0] != "dir":
            raise FileExistsError(f"{name!r} is in the way")
        return
    assert entry.member is not None
    if entry.kind == "link":
        target = entry.member.linkname
        if found is not None and found[0] == "link" and os.readlink(name, dir_fd=parent) == target:
            return
        temporary = _temporary_name()
        os.symlink(target, temporary, dir_fd=parent)
        _replace(parent, temporary, name)
        return
    handle = archive.extractfile(entry.member)
    data = handle.read() if handle is not None else b""
    if found is not None and found[0] == "file" and found[1].st_size == len(data):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        with os.fdopen(fd, "rb") as current:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and current.read(len(data) + 1) == data:
                if stat.S_IMODE(info.st_mode) != entry.mode:
                    os.fchmod(fd, entry.mode)
                return
    temporary = _temporary_name()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb", closefd=False) as out:
            out.write(data)
        os.fchmod(fd, entry.mode)
        with contextlib.suppress(OSError, OverflowError, ValueError, TypeError):
            mtime = int(entry.member.mtime)
            os.utime(fd, (mtime, mtime))
    finally:
        os.close(fd)
    _replace(parent, temporary, name)


def _replace(dir_fd: int, temporary: str, name: str) -> None:
    """Move ``temporary`` over ``name`` in one folder (a link there is replaced, not followed)."""
    try:
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def _temporary_name() -> str:
    return f".skyrl-copy-{secrets.token_hex(8)}"


def _shown(name: str) -> str:
    """A path for a note: long ones keep their end (where the name is)."""
    return name if len(name) <= 160 else f"...{name[-157:]}"


def _format_notes(notes: list[str]) -> str:
    shown = notes[:_MAX_NOTES]
    more = f"\n[workspace] ... and {len(notes) - len(shown)} more" if len(notes) > len(shown) else ""
    return "".join(f"\n[workspace] {note}" for note in shown) + more


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 3 // 4], text[-(limit // 4) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters not shown ...]\n{tail}"
