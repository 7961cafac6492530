"""The ``code_search`` tool: find files, classes and functions of a repository by name or by content.

The index of a workspace (:class:`CodeIndex`) lists its files and, for Python files, every class, function and
method with its line span, read with :mod:`ast`. A query is answered in stages, each adding results until
``max_results`` are found:

1. exact name: a symbol's name or dotted name (``Class.method``), or a file's path or base name, equal to the
   query (case first as written, then ignored);
2. fuzzy name: close names (rapidfuzz when installed, else :mod:`difflib`), for a misspelt or partial name;
3. substring: lines of the files that contain the query (case ignored);
4. BM25 over the symbols' source (``bm25s``, imported when first needed) for a query in words.

Results name the file and the line span. Indexes are cached per workspace (:attr:`CodeIndex.builds` and
:data:`CACHE_STATS` count builds and hits) and rebuilt after a tool reported a change with
:func:`mark_changed` (the editor and bash do).
"""

from __future__ import annotations

import ast
import difflib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from skyrl_gym.tools.core import tool
from skyrl_gym.tools.workspace import Workspace

__all__ = ["CACHE_STATS", "CodeIndex", "Symbol", "code_search", "index_for", "mark_changed"]

MAX_FILES = 5000
MAX_FILE_CHARS = 1_000_000
TEXT_SUFFIXES = (
    ".py", ".pyi", ".md", ".rst", ".txt", ".toml", ".cfg", ".ini", ".yaml", ".yml", ".json", ".sh", ".js",
    ".ts", ".c", ".h", ".cpp", ".go", ".rs", ".java", ".sql", ".html", ".css",
)  # fmt: skip


@dataclass(frozen=True)
class Symbol:
    """A file, class, function or method: its ``name``, dotted ``qualname``, ``kind``, ``path`` and lines."""

    name: str
    qualname: str
    kind: str
    path: str
    start: int
    end: int

    def render(self) -> str:
        """``path:start-end kind qualname``."""
        return f"{self.path}:{self.start}-{self.end} {self.kind} {self.qualname}"


@dataclass
class CodeIndex:
    """The files and symbols of one workspace, and the text of each file (for the substring scan and BM25)."""

    symbols: list[Symbol] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    parse_errors: list[str] = field(default_factory=list)
    _bm25: Any = None
    _bm25_docs: list[Symbol] | None = None

    @classmethod
    def build(cls, workspace: Workspace) -> CodeIndex:
        """Read every text file of ``workspace`` (at most :data:`MAX_FILES`) and index it."""
        index = cls()
        for path in workspace.list_files(".", max_files=MAX_FILES):
            if not path.endswith(TEXT_SUFFIXES):
                continue
            try:
                text = workspace.read_file(path)
            except (OSError, ValueError):
                continue
            if len(text) > MAX_FILE_CHARS:
                continue
            index.add_file(path, text)
        return index

    def add_file(self, path: str, text: str) -> None:
        """Index one file: a file entry, and for Python its classes, functions and methods."""
        self.texts[path] = text
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        base = path.rsplit("/", 1)[-1]
        self.symbols.append(Symbol(base, path, "file", path, 1, max(lines, 1)))
        if not path.endswith((".py", ".pyi")):
            return
        try:
            tree = ast.parse(text, filename=path)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            self.parse_errors.append(path)
            return
        self._walk(tree, path, "")

    def _walk(self, node: ast.AST, path: str, prefix: str, in_class: bool = False) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = f"{prefix}{child.name}"
                is_class = isinstance(child, ast.ClassDef)
                kind = "class" if is_class else "method" if in_class else "function"
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                end = getattr(child, "end_lineno", None) or child.lineno
                self.symbols.append(Symbol(child.name, qualname, kind, path, start, end))
                self._walk(child, path, qualname + ".", is_class)
            elif not isinstance(child, (ast.expr, ast.Import, ast.ImportFrom)):
                self._walk(child, path, prefix, in_class)

    # -- queries ------------------------------------------------------------------------------------------
    def exact(self, query: str, kinds: set[str]) -> list[Symbol]:
        """Symbols whose name, dotted name or path equals ``query`` (as written first, then ignoring case)."""
        chosen = [s for s in self.symbols if s.kind in kinds]
        same = [s for s in chosen if query in (s.name, s.qualname, s.path)]
        if same:
            return same
        folded = query.casefold()
        return [s for s in chosen if folded in (s.name.casefold(), s.qualname.casefold(), s.path.casefold())]

    def fuzzy(self, query: str, kinds: set[str], limit: int) -> list[Symbol]:
        """Symbols whose names are close to ``query``, closest first."""
        chosen = [s for s in self.symbols if s.kind in kinds]
        names = sorted({s.name for s in chosen} | {s.qualname for s in chosen})
        close = _close_names(query, names, limit)
        order = {name: rank for rank, name in enumerate(close)}
        found = [s for s in chosen if s.name in order or s.qualname in order]
        found.sort(key=lambda s: min(order.get(s.name, 10**6), order.get(s.qualname, 10**6)))
        return found

    def substring(self, query: str, limit: int) -> list[tuple[str, int, str]]:
        """``(path, line, text)`` of the lines holding ``query`` (case ignored), in file order."""
        folded = query.casefold()
        hits: list[tuple[str, int, str]] = []
        for path in sorted(self.texts):
            text = self.texts[path]
            if folded not in text.casefold():
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                if folded in line.casefold():
                    hits.append((path, number, line.strip()[:160]))
                    if len(hits) >= limit:
                        return hits
        return hits

    def bm25(self, query: str, kinds: set[str], limit: int) -> list[Symbol]:
        """The symbols whose source best matches the words of ``query`` (BM25), or ``[]`` without ``bm25s``."""
        if self._bm25 is None:
            try:
                import bm25s
            except ImportError:
                return []
            docs = [s for s in self.symbols if s.kind != "file" or not s.path.endswith((".py", ".pyi"))]
            corpus = [_tokens(f"{s.qualname} {s.path} {self._source(s)}") for s in docs]
            if not docs or not any(corpus):
                return []
            retriever = bm25s.BM25()
            retriever.index(corpus, show_progress=False)
            self._bm25, self._bm25_docs = retriever, docs
        words = _tokens(query)
        assert self._bm25_docs is not None
        if not words:
            return []
        results, scores = self._bm25.retrieve(
            [words], k=min(len(self._bm25_docs), limit * 3), show_progress=False, n_threads=1
        )
        found = []
        for doc_id, score in zip(results[0], scores[0], strict=True):
            symbol = self._bm25_docs[int(doc_id)]
            if score > 0 and symbol.kind in kinds:
                found.append(symbol)
        return found[:limit]

    def _source(self, symbol: Symbol) -> str:
        lines = self.texts.get(symbol.path, "").splitlines()
        return "\n".join(lines[symbol.start - 1 : symbol.end])


def _tokens(text: str) -> list[str]:
    # identifiers split at underscores and camel case, so "read file" finds read_file and ReadFile
    words = re.findall(r"[A-Za-z][a-z0-9]*|[A-Z]+(?![a-z])|\d+", text)
    return [w.lower() for w in words if len(w) > 1]


def _close_names(query: str, names: list[str], limit: int) -> list[str]:
    try:
        from rapidfuzz import fuzz, process
    except ImportError:
        folded = {name.casefold(): name for name in names}
        close = difflib.get_close_matches(query.casefold(), list(folded), n=limit, cutoff=0.6)
        return [folded[name] for name in close]
    matches = process.extract(query, names, scorer=fuzz.WRatio, limit=limit, score_cutoff=75)
    return [match[0] for match in matches]


# -- the cache of indexes ----------------------------------------------------------------------------------
CACHE_STATS = {"builds": 0, "hits": 0}
"""How many indexes were built and how many queries found theirs in the cache, in this process."""
_CACHE_SIZE = 32
_cache: OrderedDict[str, tuple[int, CodeIndex]] = OrderedDict()
_generations: dict[str, int] = {}
_lock = threading.Lock()


def mark_changed(workspace: Workspace) -> None:
    """Say that ``workspace``'s files changed: its cached index is rebuilt at the next query."""
    with _lock:
        _generations[workspace.key] = _generations.get(workspace.key, 0) + 1


def index_for(workspace: Workspace) -> CodeIndex:
    """The cached index of ``workspace``, built when missing or after :func:`mark_changed`."""
    key = workspace.key
    with _lock:
        generation = _generations.get(key, 0)
        cached = _cache.get(key)
        if cached is not None and cached[0] == generation:
            _cache.move_to_end(key)
            CACHE_STATS["hits"] += 1
            return cached[1]
    index = CodeIndex.build(workspace)
    with _lock:
        CACHE_STATS["builds"] += 1
        _cache[key] = (generation, index)
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return index


_KINDS = {
    "any": {"file", "class", "function", "method"},
    "class": {"class"},
    "function": {"function", "method"},
    "file": {"file"},
}


@tool(requires=("files",))
def code_search(
    workspace: Workspace,
    query: str,
    kind: Literal["any", "class", "function", "file"] = "any",
    max_results: int = 10,
) -> str:
    """Search the repository for files, classes and functions by name, and for lines that mention the query.

    Args:
        query: a name (e.g. "parse_config", "Parser.run", "utils.py") or a few words about the code.
        kind: what to look for: "any", "class", "function" (functions and methods) or "file".
        max_results: the most results to return (1 to 50).
    """
    query = query.strip()
    if not query:
        return "Error: the query is empty; give a name or a few words."
    limit = max(1, min(int(max_results), 50))
    kinds = _KINDS[kind]
    index = index_for(workspace)
    lines: list[str] = []
    seen: set[Symbol] = set()

    def add(symbols: list[Symbol], how: str) -> None:
        for symbol in symbols:
            if symbol not in seen and len(lines) < limit:
                seen.add(symbol)
                lines.append(f"{symbol.render()}  [{how}]")

    add(index.exact(query, kinds), "exact name")
    if len(lines) < limit:
        add(index.fuzzy(query, kinds, limit), "similar name")
    if len(lines) < limit and kind == "any":
        for path, number, text in index.substring(query, limit - len(lines)):
            lines.append(f"{path}:{number} {text}  [text match]")
    if len(lines) < limit:
        add(index.bm25(query, kinds, limit), "related")
    if not lines:
        return f"No match for {query!r} in {len(index.texts)} files."
    return "\n".join(lines)
