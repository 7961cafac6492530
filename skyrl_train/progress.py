"""A training progress bar with an ETA (tqdm), and a writer that prints lines without breaking it.

On a resumed run the bar starts at the resumed step and the ETA is computed from the steps done since the
restart, not from the run's start. ``max_wall_time_s`` caps the ETA at the time budget that is left.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from skyrl_gym.progress import format_duration

__all__ = ["ProgressBar", "format_duration", "write"]


def write(message: str) -> None:
    """Print a line above any active progress bar (plain print when tqdm is missing)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with the train extra
        print(message, flush=True)
        return
    tqdm.write(message, file=sys.stdout)


class ProgressBar:
    """Steps done out of ``total``, the rate, and the time left.

    ``disable=None`` hides the bar when stdout is not a terminal (the console logger's lines still show
    progress); use it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        total: int | None,
        *,
        initial: int = 0,
        desc: str = "train",
        unit: str = "step",
        max_wall_time_s: float | None = None,
        disable: bool | None = None,
    ) -> None:
        from tqdm import tqdm

        self.total = total
        self.initial = initial
        self.max_wall_time_s = max_wall_time_s
        self._start = time.monotonic()
        self._bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit=unit,
            dynamic_ncols=True,
            disable=disable,
            file=sys.stdout,
            smoothing=0.3,
        )
        self.n = initial

    def elapsed_s(self) -> float:
        """Seconds since this bar (this process's part of the run) started."""
        return time.monotonic() - self._start

    def eta_s(self) -> float | None:
        """Estimated seconds left: the mean time per step since the start times the steps left, capped by
        the time budget; None before the first step or without a total."""
        done = self.n - self.initial
        if self.total is None or done <= 0:
            return self._budget_left()
        eta = self.elapsed_s() / done * max(0, self.total - self.n)
        budget = self._budget_left()
        return eta if budget is None else min(eta, budget)

    def _budget_left(self) -> float | None:
        if self.max_wall_time_s is None:
            return None
        return max(0.0, self.max_wall_time_s - self.elapsed_s())

    def update(self, n: int = 1, **postfix: Any) -> None:
        """Advance by ``n`` steps and show ``postfix`` metrics (numbers are shortened) next to the bar."""
        self.n += n
        if postfix:
            shown = {
                key: (f"{value:.3g}" if isinstance(value, float) else value) for key, value in postfix.items()
            }
            self._bar.set_postfix(shown, refresh=False)
        self._bar.update(n)

    def close(self) -> None:
        """Finish the bar's line."""
        self._bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
