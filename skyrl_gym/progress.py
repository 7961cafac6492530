"""Progress of a run of episodes on stderr: episodes done / total, the pass rate so far, elapsed time and ETA.

Used by ``skyrl-gym play`` and ``skyrl-train eval``. Where it shows (``enabled``):

* ``None`` (the default): a live bar when stderr is a terminal (``tqdm``'s when it is installed, else one
  line rewritten in place), nothing otherwise, so that logs, pipes and tests stay clean;
* ``True`` (``--progress``): the same bar on a terminal; elsewhere one plain line per finished episode,
  which reads well in a log file (a bar's carriage returns do not);
* ``False`` (``--no-progress``): nothing.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

__all__ = ["EpisodeProgress", "format_duration"]


def format_duration(seconds: float | None) -> str:
    """``1h02m03s`` / ``4m05s`` / ``7s``; ``?`` when unknown."""
    if seconds is None or seconds != seconds or seconds in (float("inf"), float("-inf")):
        return "?"
    seconds = max(int(round(seconds)), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class EpisodeProgress:
    """Counts finished episodes out of ``total`` and shows them on ``file`` (default: stderr).

    Call :meth:`update` once per finished episode with whether it passed (``None``: it ended in error, left
    out of the pass rate); :meth:`set_label` names what is running now and restarts the pass tally (e.g. a
    new environment or policy). Use it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        total: int,
        *,
        desc: str = "episodes",
        enabled: bool | None = None,
        file: IO[str] | None = None,
        unit: str = "ep",
    ) -> None:
        self.file = file if file is not None else sys.stderr
        tty = _isatty(self.file)
        if enabled is None:
            enabled = tty
        self.mode = "off" if not enabled else ("bar" if tty else "lines")
        """``bar`` (a live line on a terminal), ``lines`` (one line per episode) or ``off``."""
        self.total = total
        self.desc = desc
        self.unit = unit
        self.label = ""
        self.done = 0
        self.passed = 0
        self.scored = 0
        self.errors = 0
        self._start = time.monotonic()
        self._bar: Any = None
        self._width = 0
        self._closed = False
        if self.mode == "bar":
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(
                    total=total, desc=desc, unit=unit, file=self.file, dynamic_ncols=True, smoothing=0.1
                )
            else:
                self._redraw()

    # -- counts ---------------------------------------------------------------------------------------
    def elapsed_s(self) -> float:
        """Seconds since the progress started."""
        return time.monotonic() - self._start

    def eta_s(self) -> float | None:
        """The mean time per finished episode times the episodes left; None before the first one."""
        if self.done == 0:
            return None
        return self.elapsed_s() / self.done * max(self.total - self.done, 0)

    def tally(self) -> str:
        """``pass 2/3 (67%)``, then the errors if any (of the current label's episodes)."""
        rate = f" ({self.passed / self.scored:.0%})" if self.scored else ""
        text = f"pass {self.passed}/{self.scored}{rate}"
        if self.errors:
            text += f", {self.errors} error{'s' if self.errors != 1 else ''}"
        return f"{self.label} {text}" if self.label else text

    def status(self) -> str:
        """The whole state as one line: ``eval: 3/8 ep, pass 2/3 (67%), 5s elapsed, ETA 8s``."""
        return (
            f"{self.desc}: {self.done}/{self.total} {self.unit}, {self.tally()}, "
            f"{format_duration(self.elapsed_s())} elapsed, ETA {format_duration(self.eta_s())}"
        )

    # -- events ---------------------------------------------------------------------------------------
    def set_label(self, label: str) -> None:
        """Name what runs now (shown with the tally) and restart the pass tally."""
        self.label = label
        self.passed = self.scored = self.errors = 0
        if self._bar is not None:
            self._bar.set_postfix_str(self.tally())
        elif self.mode == "bar":
            self._redraw()

    def update(self, passed: bool | None) -> None:
        """One more finished episode: passed, failed, or (``None``) ended in error."""
        self.done += 1
        if passed is None:
            self.errors += 1
        else:
            self.scored += 1
            self.passed += bool(passed)
        if self.mode == "off" or self._closed:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(self.tally(), refresh=False)
            self._bar.update(1)
        elif self.mode == "bar":
            self._redraw()
        else:
            print(self.status(), file=self.file, flush=True)

    def write(self, message: str) -> None:
        """Print a line on the progress's stream without breaking a live bar."""
        if self._bar is not None:
            self._bar.write(message, file=self.file)
            return
        if self.mode == "bar" and self._width:
            self.file.write("\r" + " " * self._width + "\r")
        print(message, file=self.file, flush=True)
        if self.mode == "bar":
            self._redraw()

    def close(self) -> None:
        """End the live bar (it stays on screen); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.mode == "bar":
            self.file.write("\n")
            self.file.flush()

    def _redraw(self) -> None:
        text = self.status()
        pad = max(self._width - len(text), 0)
        self._width = len(text)
        self.file.write("\r" + text + " " * pad)
        self.file.flush()

    def __enter__(self) -> EpisodeProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
