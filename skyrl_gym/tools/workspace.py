"""``Workspace``: what an environment lends to tools (a shell, files, a database, a search engine, Python).

An environment that has a place to work in exposes it with ``env.workspace()`` (``None`` when it lends none).
Tools written once against this interface (a ``bash`` tool, a file editor, a code index, a SQL tool) then run
in any environment that lends the capability they need:

- ``run(command, timeout_s) -> CommandResult``: a shell command (capability ``"run"``);
- ``read_file``, ``write_file``, ``list_files``: files, paths relative to the workspace's root or absolute
  inside it (capability ``"files"``);
- ``sql(query)``, ``search(query, k)``, ``python(code, timeout_s)``: optional capabilities, each returning
  the text to show the model.

A capability a workspace lacks raises :class:`WorkspaceUnsupported`; ``supports(name)`` says beforehand, so
an agent can offer only the tools that work. Failures of what runs inside (a command that exits 1 or times
out, a query that fails) are results, not exceptions; a path outside the workspace or a missing file raises
``ValueError`` / ``FileNotFoundError`` with a message meant for the model.

:class:`LocalDirWorkspace` is a folder on this machine (a repository, a test project) whose commands run in
a :mod:`skyrl_gym.runtime` sandbox. This module imports no environment.
"""

from __future__ import annotations

import base64
import io
import os
import shlex
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping
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
"""The names ``Workspace.supports`` knows."""


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
    """The capabilities this workspace offers (names from :data:`CAPABILITIES`)."""

    def supports(self, capability: str) -> bool:
        """Whether the workspace offers ``capability``."""
        return capability in self.capabilities

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
    """A workspace made of plain functions: ``FunctionWorkspace(sql=run_query)`` offers the ``sql`` capability.

    Args:
        sql: ``sql(query) -> str``.
        search: ``search(query, k) -> str``.
        python: ``python(code, timeout_s) -> str``.
        key: the name tools key their caches by (default: one per instance).
    """

    def __init__(
        self,
        *,
        sql: Callable[[str], str] | None = None,
        search: Callable[[str, int], str] | None = None,
        python: Callable[[str, float], str] | None = None,
        key: str | None = None,
    ):
        self._functions = {"sql": sql, "search": search, "python": python}
        self.capabilities = frozenset(name for name, function in self._functions.items() if function)
        self._key = key

    def _call(self, capability: str, *args: Any) -> str:
        function = self._functions[capability]
        if function is None:
            raise self._unsupported(capability)
        return function(*args)

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
        """The host path of ``path`` (relative to the root, or absolute inside it); ``ValueError`` outside."""
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
        full = (self.root / candidate).resolve()
        if full != self.root and self.root not in full.parents:
            raise ValueError(f"path {path[:200]!r} is outside the workspace")
        return full

    def relative(self, full: Path) -> str:
        """``full`` relative to the root, with ``/`` separators."""
        return full.relative_to(self.root).as_posix() or "."

    # -- files ------------------------------------------------------------------------------------------
    def read_file(self, path: str) -> str:
        full = self.resolve(path)
        if full.is_dir():
            raise IsADirectoryError(f"{path!r} is a folder, not a file")
        if not full.is_file():
            raise FileNotFoundError(f"no file {path!r} in the workspace")
        if full.stat().st_size > _MAX_READ_BYTES:
            raise ValueError(f"{path!r} is larger than {_MAX_READ_BYTES // (1024 * 1024)} MB")
        return full.read_bytes().decode("utf-8", errors="replace")

    def write_file(self, path: str, content: str) -> None:
        full = self.resolve(path)
        if full == self.root or full.is_dir():
            raise IsADirectoryError(f"{path!r} is a folder, not a file")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(content.encode("utf-8", errors="surrogatepass"))

    def list_files(self, path: str = ".", max_files: int = 10_000) -> list[str]:
        start = self.resolve(path)
        if start.is_file():
            return [self.relative(start)]
        if not start.is_dir():
            raise FileNotFoundError(f"no folder {path!r} in the workspace")
        found: list[str] = []
        for folder, dirs, names in os.walk(start):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
            for name in sorted(names):
                full = Path(folder) / name
                if full.is_file() and not full.is_symlink():
                    found.append(self.relative(full))
                    if len(found) >= max_files:
                        return sorted(found)
        return sorted(found)

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
        if not timed_out:
            _unpack_into(self.root, base64.b64decode(payload.strip() or b""))
        return CommandResult(_cap(output, self.max_output_chars), None if timed_out else code, timed_out)

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
)


def _pack(root: Path) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for folder, dirs, names in os.walk(root):
            for name in sorted([*dirs, *names]):
                full = Path(folder) / name
                if full.is_symlink() or full.is_file() or full.is_dir():
                    archive.add(full, arcname=full.relative_to(root).as_posix(), recursive=False)
    return out.getvalue()


def _unpack_into(root: Path, data: bytes) -> None:
    """Make ``root`` hold what the archive holds: changed files rewritten, new ones added, missing ones
    removed; unchanged files are left alone (their modification times stay)."""
    staging = Path(tempfile.mkdtemp(prefix="skyrl-workspace-back-"))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as archive:
            archive.extractall(staging, filter="data")  # no absolute paths, no links out of the folder
        wanted = set(_walk(staging))
        for relative in sorted(set(_walk(root)) - wanted, reverse=True):
            target = root / relative
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir() and not any(target.iterdir()):
                target.rmdir()
        for relative in sorted(wanted):
            source, target = staging / relative, root / relative
            if source.is_dir() and not source.is_symlink():
                target.mkdir(parents=True, exist_ok=True)
                continue
            if target.is_file() and not target.is_symlink() and source.is_file() and not source.is_symlink():
                if (
                    target.stat().st_size == source.stat().st_size
                    and target.read_bytes() == source.read_bytes()
                ):
                    continue
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(source), str(target))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _walk(root: Path) -> Iterable[str]:
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            yield (Path(folder) / name).relative_to(root).as_posix()


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 3 // 4], text[-(limit // 4) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters not shown ...]\n{tail}"
