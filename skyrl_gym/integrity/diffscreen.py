"""The diff screen: what of an agent's diff may reach verification, and what makes it score 0.

A fix is graded by running tests in the same interpreter as the code it changes, so code in the fix can reach
the test machinery (rewrite pytest's reports, wrap a hidden test's body, write the report file at exit). That
cannot be made impossible inside one interpreter; it is screened instead, on the diff's text:

- files: only files under the instance's source folders are kept (every file when none are known). The rest
  (scratch scripts, notes, edits to tests or pytest configuration) is dropped and named; it never reaches the
  fresh copy that the tests run in.
- machinery: a kept file that is itself test machinery or an import-time hook (``conftest.py``,
  ``sitecustomize.py``, ``usercustomize.py``, ``*.pth``, ``*.dist-info`` / ``*.egg-info`` metadata with entry
  points, byte code, native extension modules, a binary patch, a symbolic link), or an added line that names
  the machinery (:data:`MACHINERY_MARKERS`: ``pytest``, import hooks, ``sys.modules``, ``atexit``, frame and
  garbage-collector walks, ``exec``/``eval``, ``ctypes``, ``/proc``, the report's names), makes the whole diff
  score 0, with the file and the reason named.

The markers are a deliberately wide net for library code: a fix to a library's logic does not import pytest
or install import hooks. A dataset whose fixes legitimately do can pass its own ``markers``.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["MACHINERY_MARKERS", "Screened", "screen_diff", "split_diff"]

MACHINERY_MARKERS: tuple[tuple[str, str], ...] = (
    (r"\b_?pytest\b|\bpluggy\b|\bpytest11\b", "names pytest"),
    (
        r"\b(meta_path|path_hooks|path_importer_cache|settrace|setprofile|_getframe)\b|\.\s*modules\b"
        r"|\bimport\s+sys\s+as\b|\bfrom\s+sys\s+import\b",
        "changes the import system or walks frames",
    ),
    (r"\b(importlib|__import__|builtins|__builtins__)\b", "imports by name or changes builtins"),
    (r"\batexit\b|\bos\s*\.\s*_exit\b|\bsignal\s*\.\s*signal\b", "acts at interpreter exit"),
    (
        r"\bgc\s*\.\s*get_(objects|referrers|referents)\b|\binspect\s*\.\s*(stack|currentframe)\b",
        "walks the interpreter's objects or frames",
    ),  # fmt: skip
    (r"\b(exec|eval|compile)\s*\(", "runs code built at run time"),
    (
        r"\b(globals|vars|locals)\s*\(|__(dict|globals|subclasses|code|closure|getattribute|loader|spec)__",
        "reaches objects by name at run time",
    ),  # fmt: skip
    (r"\bctypes\b|\bcffi\b|\bmarshal\b", "loads native or serialized code"),
    (r"/proc/|\bSKYRL_|skyrl_swe_report|report\.json|\bjunitxml\b", "reaches the report or the process"),
)
"""Regular expressions for added lines, each with the reason it names."""

_FORBIDDEN_NAMES = {
    "conftest.py": "a pytest conftest",
    "sitecustomize.py": "an interpreter start-up hook",
    "usercustomize.py": "an interpreter start-up hook",
    "entry_points.txt": "package entry points (pytest plugins are loaded from them)",
}
_FORBIDDEN_SUFFIXES = {
    ".pth": "a site path-configuration file (runs code at start-up)",
    ".pyc": "byte code",
    ".pyo": "byte code",
    ".so": "a native extension module",
    ".pyd": "a native extension module",
    ".dll": "a native library",
    ".dylib": "a native library",
}


@dataclass
class FileDiff:
    """One file's part of a git diff: its path, its text, and what kind of change it is."""

    path: str
    text: str

    @property
    def binary(self) -> bool:
        return "\nGIT binary patch\n" in self.text or "\nBinary files " in self.text

    @property
    def symlink(self) -> bool:
        return bool(
            re.search(r"^(new file mode|new mode|index [0-9a-f]+\.\.[0-9a-f]+) 120000$", self.text, re.M)
        )

    def added_lines(self) -> Iterable[str]:
        in_hunk = False
        for line in self.text.split("\n"):
            if line.startswith("@@"):
                in_hunk = True
            elif in_hunk and line.startswith("+"):
                yield line[1:]


@dataclass
class Screened:
    """The screen's verdict: the ``patch`` to apply (the kept files), the ``dropped`` paths, and
    ``violation`` (the file and reason that make the diff score 0) or ``""``."""

    patch: str
    dropped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    violation: str = ""

    @property
    def note(self) -> str:
        """A line for the verdict: what was dropped and why the diff failed, if it did."""
        parts = []
        if self.violation:
            parts.append(f"the diff changes test machinery: {self.violation}")
        if self.dropped:
            shown = ", ".join(self.dropped[:10]) + (" ..." if len(self.dropped) > 10 else "")
            parts.append(f"changes outside the source folders were not applied: {shown}")
        return "; ".join(parts)


def _unquote(path: str) -> str:
    """A path as git prints it: C-quoted (``"a/\\303\\251"``) when it has unusual bytes."""
    if len(path) >= 2 and path[0] == '"' and path[-1] == '"':
        raw = codecs.escape_decode(path[1:-1].encode("latin-1", errors="backslashreplace"))[0]
        return raw.decode("utf-8", errors="surrogateescape")
    return path


_HEADER = re.compile(r'^diff --git ("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$')


def _header_path(line: str) -> str:
    match = _HEADER.match(line)
    if match is not None:
        new = _unquote(match.group(2))
        return new[2:] if new.startswith("b/") else new
    # unquoted paths with spaces: "diff --git a/P b/P" (no renames, so both halves are the same path)
    rest = line[len("diff --git ") :]
    half = (len(rest) - 1) // 2
    return rest[half + 1 :][2:]


def split_diff(patch: str) -> list[FileDiff]:
    """A ``git diff`` (no renames) as one :class:`FileDiff` per file, in order."""
    files: list[FileDiff] = []
    starts = [m.start() for m in re.finditer(r"^diff --git ", patch, re.M)]
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(patch)
        text = patch[start:end]
        files.append(FileDiff(_header_path(text.split("\n", 1)[0]), text))
    return files


def _under(path: str, folders: Sequence[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _file_problem(diff: FileDiff) -> str:
    parts = diff.path.split("/")
    name = parts[-1]
    if name in _FORBIDDEN_NAMES:
        return _FORBIDDEN_NAMES[name]
    for suffix, why in _FORBIDDEN_SUFFIXES.items():
        if name.endswith(suffix) or f"{suffix}." in name:  # foo.so, foo.cpython-311-x86_64-linux-gnu.so
            return why
    if "__pycache__" in parts:
        return "byte code"
    if any(p.endswith((".dist-info", ".egg-info", ".egg-link")) for p in parts):
        return "package metadata (entry points load pytest plugins)"
    if diff.binary:
        return "a binary patch (its content cannot be screened)"
    if diff.symlink:
        return "a symbolic link"
    return ""


def screen_diff(
    patch: str,
    source_dirs: Sequence[str] = (),
    *,
    excluded: Sequence[str] = (),
    markers: Sequence[tuple[str, str]] = MACHINERY_MARKERS,
) -> Screened:
    """Screen an agent's ``git diff``: keep the files under ``source_dirs`` (all when empty) and not under
    ``excluded`` (hidden tests, files a row's ``test_patch`` changes), drop and name the rest, and find the
    first kept file that touches test machinery (see the module docstring)."""
    compiled = [(re.compile(expr), why) for expr, why in markers]
    result = Screened(patch="")
    kept_text: list[str] = []
    for diff in split_diff(patch):
        if (source_dirs and not _under(diff.path, source_dirs)) or _under(diff.path, excluded):
            result.dropped.append(diff.path)
            continue
        result.kept.append(diff.path)
        kept_text.append(diff.text)
        if result.violation:
            continue
        problem = _file_problem(diff)
        if problem:
            result.violation = f"{diff.path} is {problem}"
            continue
        for line in diff.added_lines():
            if line.lstrip().startswith("#"):  # a comment runs nothing (code built from text needs exec/eval)
                continue
            for expr, why in compiled:
                if expr.search(line):
                    result.violation = f"{diff.path} {why}: {line.strip()[:120]!r}"
                    break
            if result.violation:
                break
    result.patch = "".join(kept_text)
    return result
