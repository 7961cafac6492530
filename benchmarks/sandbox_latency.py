"""Sandboxed run latency per backend, and per cell of a persistent session, against a bare ``python -c``.

For each backend the same tiny program (``print(sum(range(1000)))``) runs three ways, interleaved round by
round so that machine noise hits all of them alike:

- ``bare``: ``subprocess.run([python, "-c", code])`` with the interpreter the backend uses (no isolation);
- ``cold``: ``sandbox.run_python(code)``: a fresh isolated process started for the run;
- ``warm``: the same with ``warm=1``: the program is handed to an interpreter that was started, in its own
  fresh sandbox, ahead of time (used once, then replaced in the background while the round goes on);
- ``session cell``: ``session.run_cell(code)`` in a warm persistent interpreter inside the same sandbox.

It prints the median milliseconds and the ratios to ``bare``. Targets: an isolated run at most 1.5x bare;
a session cell at most 0.2x bare. ``cold`` is what a run costs when runs come faster than interpreters can
be started ahead (``warm`` falls back to it then).

    python benchmarks/sandbox_latency.py [--rounds 60]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from skyrl_gym.runtime import Limits, PythonSession, available_backends, make_sandbox

CODE = "print(sum(range(1000)))"


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(backend: str, rounds: int) -> dict[str, float]:
    sandbox = make_sandbox(backend, limits=Limits(timeout_s=30))
    warm = make_sandbox(backend, limits=Limits(timeout_s=30), warm=1)
    python = sandbox.python

    def bare() -> None:
        out = subprocess.run([python, "-c", CODE], capture_output=True, text=True, check=True)
        assert out.stdout == "499500\n"

    def cold() -> None:
        result = sandbox.run_python(CODE)
        assert result.stdout == "499500\n", result

    def warm_run() -> None:
        result = warm.run_python(CODE)
        assert result.stdout == "499500\n", result

    samples: dict[str, list[float]] = {"bare": [], "cold": [], "warm": [], "session cell": []}
    with PythonSession(sandbox) as session:
        assert session.run_cell(CODE).output == "499500\n"  # started and warm

        def cell() -> None:
            assert session.run_cell(CODE).output == "499500\n"

        for _ in range(3):  # warm the page cache for all of them
            bare(), cold(), warm_run(), cell()
        for _ in range(rounds):
            samples["bare"].append(timed(bare))
            samples["cold"].append(timed(cold))
            samples["warm"].append(timed(warm_run))
            samples["session cell"].append(timed(cell))
    warm.close()
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--backends", nargs="*", default=None, help="default: every available backend")
    args = parser.parse_args()

    backends = args.backends or available_backends()
    print(f"{'backend':<9} {'isolation':<11} {'interpreter':<32} {'bare ms':>8} {'cold ms':>8} {'ratio':>6} "
          f"{'warm ms':>8} {'ratio':>6} {'cell ms':>8} {'ratio':>7}")  # fmt: skip
    for backend in backends:
        box = make_sandbox(backend)
        medians = measure(backend, args.rounds)
        bare = medians["bare"]
        print(
            f"{backend:<9} {box.isolation:<11} {box.python[-32:]:<32} {bare * 1e3:>8.2f} "
            f"{medians['cold'] * 1e3:>8.2f} {medians['cold'] / bare:>5.2f}x "
            f"{medians['warm'] * 1e3:>8.2f} {medians['warm'] / bare:>5.2f}x "
            f"{medians['session cell'] * 1e3:>8.3f} {medians['session cell'] / bare:>6.3f}x"
        )
    print("targets: isolated run <= 1.5x bare, session cell <= 0.2x bare")


if __name__ == "__main__":
    main()
