"""What every retriever shares: :class:`Passage`, the :class:`Retriever` interface, reading a corpus.

A corpus is a JSONL file, one passage a line, in Search-R1's format: ``{"id": ..., "contents": "\\"Title\\"\\ntext"}``
(``title`` and ``text`` fields are read too, and win over ``contents``). Retrievers that build an index
store it next to the corpus, named by the corpus's content fingerprint, so that a second process loads it
instead of building it; where the corpus's folder is not writable the index goes to
``$SKYRL_GYM_CACHE/search/indexes`` (``~/.cache/skyrl_gym`` by default).

Only the standard library is imported here.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import threading
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.envs.cache import cache_root

__all__ = [
    "MAX_QUERY_CHARS",
    "Passage",
    "RetrievalError",
    "Retriever",
    "cache_root",
    "clean_query",
    "corpus_fingerprint",
    "corpus_key",
    "find_artifact",
    "forget_corpora",
    "format_passages",
    "publish_artifact",
    "read_corpus",
]

MAX_QUERY_CHARS = 2000
"""Queries are cut to this many characters before retrieval (a model may write a megabyte in a tag)."""


class RetrievalError(RuntimeError):
    """Retrieval failed (a search server down or answering nonsense); the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Passage:
    """One retrieved passage: its corpus ``id``, ``title``, ``text`` and the retriever's ``score``.

    ``score`` is ``None`` when the source gave none (a server asked without ``return_scores``).
    """

    id: str
    title: str
    text: str
    score: float | None = None

    @property
    def contents(self) -> str:
        """Search-R1's ``contents`` field: the title in double quotes, a newline, the text."""
        return f'"{self.title}"\n{self.text}'

    def to_document(self) -> dict[str, str]:
        """The passage as a corpus row: ``{"id", "title", "text", "contents"}``."""
        return {"id": self.id, "title": self.title, "text": self.text, "contents": self.contents}

    @classmethod
    def from_document(
        cls, document: dict[str, Any], score: float | None = None, default_id: str = ""
    ) -> Passage:
        """Read a corpus row or a server's document; ``contents`` is split into title and text if needed."""
        contents = str(document.get("contents", ""))
        first, newline, rest = contents.partition("\n")
        if not newline:  # no title line: the contents are all text
            first, rest = "", contents
        first = first.strip()
        if len(first) >= 2 and first[0] == first[-1] == '"':
            first = first[1:-1]
        title = document.get("title")
        text = document.get("text")
        raw_id = document.get("id", document.get("doc_id", default_id))
        return cls(
            id=str(raw_id),
            title=str(first if title is None else title).strip(),
            text=str(rest if text is None else text).strip(),
            score=None if score is None else float(score),
        )


class Retriever(abc.ABC):
    """Finds the passages that best match a query.

    Subclasses implement :meth:`batch_search`; :meth:`search` is one query of it. Both return passages best
    first, at most ``topk`` of them (fewer when fewer match). Retrievers are safe to share between threads.
    """

    kind: str = "retriever"
    """A short name: ``bm25``, ``dense``, ``hybrid``, ``remote``."""

    def search(self, query: str, topk: int = 3) -> list[Passage]:
        """The best ``topk`` passages for ``query``."""
        return self.batch_search([query], topk)[0]

    @abc.abstractmethod
    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]:
        """The best ``topk`` passages for each query, in the order of ``queries``."""

    def __len__(self) -> int:
        """How many passages the retriever searches (0 when unknown, as for a remote server)."""
        return 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(passages={len(self)})"


def check_topk(topk: Any) -> int:
    """``topk`` as a positive int, or a ``ValueError`` naming it."""
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise ValueError(f"topk must be a positive integer, got {topk!r}")
    return topk


def clean_query(query: Any, max_chars: int = MAX_QUERY_CHARS) -> str:
    """A query any retriever can take: text, valid UTF-8, control characters as spaces, one line, capped."""
    text = "" if query is None else str(query)
    if len(text) > max_chars:
        text = text[:max_chars]
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates become '?'
    text = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)
    return " ".join(text.split())


def format_passages(passages: Sequence[Passage]) -> str:
    """Passages as Search-R1 shows them to the model: ``Doc 1(Title: "...") text``, one a line."""
    return "".join(f'Doc {i}(Title: "{p.title}") {p.text}\n' for i, p in enumerate(passages, start=1))


# -- corpora ------------------------------------------------------------------------------------------------
_corpus_lock = threading.Lock()
_corpus_cache: dict[tuple[str, int, int], list[Passage]] = {}
_fingerprint_cache: dict[tuple[str, int, int], str] = {}


def corpus_key(path: str | os.PathLike[str]) -> tuple[str, int, int]:
    """``(resolved path, size, modification time)``: what identifies a corpus file's current version."""
    resolved = Path(path).expanduser().resolve()
    try:
        stat = resolved.stat()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"corpus file {resolved} not found; pass env_config corpus_path=<a JSONL file of "
            '{"id", "contents"} rows>, or leave it unset to use the bundled corpus'
        ) from None
    return str(resolved), stat.st_size, stat.st_mtime_ns


def read_corpus(path: str | os.PathLike[str]) -> list[Passage]:
    """The passages of a JSONL corpus file, read once per process (until the file changes)."""
    key = corpus_key(Path(path))
    with _corpus_lock:
        cached = _corpus_cache.get(key)
    if cached is not None:
        return cached
    passages: list[Passage] = []
    with open(key[0], encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{key[0]}, line {number}: not a JSON object ({exc})") from None
            if not isinstance(row, dict) or not ({"contents", "text"} & set(row)):
                raise ValueError(
                    f"{key[0]}, line {number}: a corpus row needs 'contents' (Search-R1's format) "
                    "or 'title' and 'text'"
                )
            passages.append(Passage.from_document(row, default_id=str(len(passages))))
    if not passages:
        raise ValueError(f"corpus file {key[0]} holds no passages")
    with _corpus_lock:
        _corpus_cache[key] = passages
    return passages


def forget_corpora() -> None:
    """Forget the corpora and fingerprints read so far (the next read goes to the file again)."""
    with _corpus_lock:
        _corpus_cache.clear()
        _fingerprint_cache.clear()


def corpus_fingerprint(path: str | os.PathLike[str]) -> str:
    """A hex digest of the corpus file's bytes (memoised per path, size and modification time)."""
    key = corpus_key(Path(path))
    with _corpus_lock:
        cached = _fingerprint_cache.get(key)
    if cached is not None:
        return cached
    digest = hashlib.blake2b(digest_size=16)
    with open(key[0], "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    fingerprint = digest.hexdigest()
    with _corpus_lock:
        _fingerprint_cache[key] = fingerprint
    return fingerprint


def _candidate_folders(corpus: Path) -> list[Path]:
    return [corpus.parent, cache_root() / "search" / "indexes"]


def find_artifact(corpus: str | os.PathLike[str], name: str) -> Path | None:
    """An index file or folder called ``name`` built for ``corpus`` earlier, if one exists."""
    for folder in _candidate_folders(Path(corpus).expanduser().resolve()):
        if (folder / name).exists():
            return folder / name
    return None


def publish_artifact(corpus: str | os.PathLike[str], name: str, write: Callable[[Path], None]) -> Path | None:
    """Build an index artifact next to ``corpus`` (or in the cache) atomically; return where it is.

    ``write(staging)`` writes a file or folder at the path it is given; it is then renamed to ``name``, so a
    reader never sees half an index. If another process published it first, its copy is kept. Returns
    ``None`` when no folder is writable (the index then lives in memory only).
    """
    for folder in _candidate_folders(Path(corpus).expanduser().resolve()):
        target = folder / name
        try:
            folder.mkdir(parents=True, exist_ok=True)
            staging_root = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder))
        except OSError:
            continue
        staging = staging_root / name
        try:
            write(staging)
            if staging.is_dir():
                staging.rename(target)  # fails if another process published the folder first
            else:
                os.replace(staging, target)
            return target
        except OSError:
            if target.exists():  # lost the race to another process: its copy is as good
                return target
        finally:
            shutil.rmtree(staging_root, ignore_errors=True)
    return None
