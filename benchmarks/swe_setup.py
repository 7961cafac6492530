"""Set-up and verification time of the ``swe`` environment (bwrap, Docker) against running the tests directly.

For a sample of instances (``--per-repo`` of each repository, from ``--split``), three ways of doing the same
work, each in its own process so that its peak memory is its own:

- ``direct``: no environment, no sandbox. Set-up makes a plain checkout at the bugged state
  (:func:`repos.bugged_repo`: the cached sdist unpacked, committed, the bug applied); verification applies the
  instance's fix with ``git apply`` in that checkout and runs the instance's test command there with
  ``/usr/bin/python3`` (:func:`testrun.run_tests`);
- ``bwrap``: ``SWEEnv`` with ``backend=bwrap``: set-up is ``init()`` (the bugged repository made, the tests
  hidden, the history replaced), the episode applies the fix in the sandbox and submits, verification is the
  deferred ``evaluate()`` (the agent's diff read and applied to a fresh copy, the suite run in the sandbox,
  graded);
- ``docker``: the same with ``backend=docker`` (a container of the repository version's image for the episode,
  a new one for verification). The image is made (or found) first, per repository, and timed apart (the
  last line): it is built once per repository version, not per episode.

It prints, per way, the mean and median seconds of set-up, of the episode's fix command and of verification,
their ratios to ``direct`` (of the means), how many instances were resolved, and the peak resident memory of
the process (VmHWM), of its largest child process (``getrusage(RUSAGE_CHILDREN)``: pytest, git, bwrap) and,
for Docker, of its largest container (the memory cgroup's ``max_usage_in_bytes``, page cache included).

    python benchmarks/swe_setup.py                        # 2 instances per repository, all three ways
    python benchmarks/swe_setup.py --per-repo 1 --ways direct bwrap
    python benchmarks/swe_setup.py --instances /tmp/swe.jsonl.gz --split train
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

WAYS = ("direct", "bwrap", "docker")


def sample(split: str, per_repo: int, path: str | None) -> list[Any]:
    """The first ``per_repo`` instances of each repository in ``split`` (all splits with ``all``)."""
    from skyrl_gym.envs.swe.tasks import load_instances

    chosen: dict[str, list[Any]] = defaultdict(list)
    for instance in load_instances(path):
        if split in ("all", instance.split) and len(chosen[instance.repo]) < per_repo:
            chosen[instance.repo].append(instance)
    return [i for group in chosen.values() for i in group]


def vm_hwm_mb() -> float:
    """This process's peak resident memory (VmHWM) in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class ContainerPeak:
    """The largest memory high-water mark of this process's containers, read from their memory cgroups
    (cgroup v1, cgroupfs driver) every ``every_s`` seconds while they live."""

    def __init__(self, every_s: float = 0.05):
        from skyrl_gym.runtime.docker import engine
        from skyrl_gym.runtime.docker.defaults import OWNER_LABEL

        self.engine = engine()
        self.label = f"{OWNER_LABEL}={self.engine.owner}"
        self.every_s = every_s
        self.peak_bytes = 0
        self.available = bool(glob.glob("/sys/fs/cgroup/memory/docker"))
        self._ids: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="container-peak", daemon=True)

    def __enter__(self) -> ContainerPeak:
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        listed = 0.0
        while not self._stop.is_set():
            if time.monotonic() - listed > 0.25:  # a listing is an API call: not on every tick
                listed = time.monotonic()
                try:
                    found = self.engine.api.containers(all=True, filters={"label": self.label}, quiet=True)
                    self._ids.update(c["Id"] for c in found)
                except Exception:  # the engine busy or a container gone between listing and reading
                    pass
            for cid in list(self._ids):
                try:
                    with open(f"/sys/fs/cgroup/memory/docker/{cid}/memory.max_usage_in_bytes") as handle:
                        self.peak_bytes = max(self.peak_bytes, int(handle.read()))
                except OSError:  # not started yet, or removed
                    pass
            self._stop.wait(self.every_s)


def timed(call: Any) -> tuple[Any, float]:
    """``call()``'s result and its wall seconds."""
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def direct(instance: Any) -> dict[str, Any]:
    """A plain checkout at the bugged state, then the fix and the test command there, no sandbox."""
    from skyrl_gym.envs.swe import repos, testrun

    folder = Path(tempfile.mkdtemp(prefix="swe-bench-direct-"))
    try:
        repo = folder / "repo"
        _, setup_s = timed(lambda: repos.bugged_repo(instance.row, repo))

        def verify() -> bool:
            repos.git(repo, "apply", "--whitespace=nowarn", "-", input=instance.fix_patch)
            run = testrun.run_tests(repo, instance.command(), timeout_s=300, python=testrun.DEBIAN_PYTHON)
            graded = testrun.grade(run.outcomes, instance.fail_to_pass, instance.pass_to_pass)
            return graded.resolved

        resolved, verify_s = timed(verify)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    outcome = "resolved" if resolved else "unresolved"
    return {
        "setup_s": setup_s,
        "episode_s": 0.0,
        "verify_s": verify_s,
        "resolved": resolved,
        "outcome": outcome,
    }


def in_env(instance: Any, backend: str, instances_path: str | None) -> dict[str, Any]:
    """An episode of ``SWEEnv``: ``init()``, the fix applied by a command, ``<submit/>``, ``evaluate()``."""
    from skyrl_gym.envs.swe.env import SWEEnv

    config = {"backend": backend, "timings": False, "test_timeout_s": 300, "instances_path": instances_path}
    extras = {"reward_spec": {"method": "rule", "ground_truth": {"instance_id": instance.instance_id}}}
    env = SWEEnv(config, extras)
    env.defer_verification()
    try:
        _, setup_s = timed(lambda: env.init(None))
        fix, submit = env.reference_action()
        output, episode_s = timed(lambda: env.step(fix))
        if output["done"] or output["metadata"]["commands"][0]["exit_code"] != 0:
            raise RuntimeError(f"{instance.instance_id}: the fix did not apply: {output['observations']}")
        env.step(submit)
        verification, verify_s = timed(env.evaluate)
    finally:
        env.close()
    return {
        "setup_s": setup_s,
        "episode_s": episode_s,
        "verify_s": verify_s,
        "resolved": verification["outcome"] == "resolved",
        "outcome": verification["outcome"],
        "tests": verification.get("tests"),
        "note": verification.get("note", ""),
    }


def worker(way: str, ids: list[str], instances_path: str | None) -> dict[str, Any]:
    """Run one way over the instances ``ids``; its per-instance records and peak memory."""
    from skyrl_gym.envs.swe.tasks import find_instance

    instances = [find_instance(i, instances_path) for i in ids]
    images: dict[str, float] = {}
    peak = None
    if way == "docker":
        from skyrl_gym.envs.swe.backends import ensure_image

        for instance in instances:
            if instance.image_name not in images:
                _, images[instance.image_name] = timed(lambda instance=instance: ensure_image(instance))
        peak = ContainerPeak()
    records = []
    context = peak if peak is not None else _Nothing()
    with context:
        for instance in instances:
            record = direct(instance) if way == "direct" else in_env(instance, way, instances_path)
            records.append({"instance_id": instance.instance_id, "repo": instance.repo, **record})
            print(
                f"  {way:7} {instance.instance_id:66} set-up {record['setup_s']:6.2f}s "
                f"verify {record['verify_s']:6.2f}s {record['outcome']}",
                file=sys.stderr,
                flush=True,
            )
    return {
        "records": records,
        "images_s": images,
        "vm_hwm_mb": vm_hwm_mb(),
        "children_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "container_peak_mb": (peak.peak_bytes / 2**20 if peak.available else float("nan")) if peak else None,
    }


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def run_way(way: str, ids: list[str], instances_path: str | None) -> dict[str, Any]:
    """One way in a fresh process (its own peak memory): this script with ``--worker``."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        command = [sys.executable, __file__, "--worker", way, "--out", out.name, "--ids", *ids]
        if instances_path:
            command += ["--instances", instances_path]
        subprocess.run(command, check=True)
        return json.loads(Path(out.name).read_text())


def table(results: dict[str, dict[str, Any]]) -> str:
    """The side-by-side table: per way, mean / median seconds and ratios to ``direct``, resolved, peaks."""

    def stats(way: str, key: str) -> tuple[float, float]:
        values = [r[key] for r in results[way]["records"]]
        return statistics.fmean(values), statistics.median(values)

    base = results.get("direct")
    lines = [
        f"{'way':7} {'n':>3} {'set-up mean':>11} {'median':>7} {'x direct':>8} {'fix cmd':>7} "
        f"{'verify mean':>11} {'median':>7} {'x direct':>8} {'resolved':>8} {'VmHWM MB':>8} "
        f"{'child MB':>8} {'cont. MB':>8}"
    ]
    for way, result in results.items():
        setup_mean, setup_median = stats(way, "setup_s")
        verify_mean, verify_median = stats(way, "verify_s")
        episode_mean, _ = stats(way, "episode_s")
        if base is not None:
            setup_ratio = f"{setup_mean / stats('direct', 'setup_s')[0]:7.2f}x"
            verify_ratio = f"{verify_mean / stats('direct', 'verify_s')[0]:7.2f}x"
        else:
            setup_ratio = verify_ratio = f"{'-':>8}"
        resolved = f"{sum(r['resolved'] for r in result['records'])}/{len(result['records'])}"
        container = result.get("container_peak_mb")
        container_text = f"{container:8.0f}" if isinstance(container, float) else f"{'-':>8}"
        lines.append(
            f"{way:7} {len(result['records']):3d} {setup_mean:10.2f}s {setup_median:6.2f}s {setup_ratio} "
            f"{episode_mean:6.2f}s {verify_mean:10.2f}s {verify_median:6.2f}s {verify_ratio} {resolved:>8} "
            f"{result['vm_hwm_mb']:8.0f} {result['children_peak_mb']:8.0f} {container_text}"
        )
    return "\n".join(lines)


def per_repo_table(results: dict[str, dict[str, Any]]) -> str:
    """Mean set-up + verification seconds per repository and way."""
    repos = sorted({r["repo"] for result in results.values() for r in result["records"]})
    width = max(len("repository"), *map(len, repos))
    lines = [f"{'repository':{width}} " + " ".join(f"{way + ' s':>14}" for way in results)]
    for repo in repos:
        cells = []
        for result in results.values():
            mine = [r for r in result["records"] if r["repo"] == repo]
            setup = statistics.fmean(r["setup_s"] for r in mine)
            verify = statistics.fmean(r["verify_s"] for r in mine)
            cells.append(f"{setup:6.2f} +{verify:6.2f}")
        lines.append(f"{repo:{width}} " + " ".join(f"{c:>14}" for c in cells))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-repo", type=int, default=2, help="instances of each repository")
    parser.add_argument("--split", default="test", choices=["train", "test", "all"])
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    parser.add_argument("--instances", default=None, help="instance file (default: datasets/swe)")
    parser.add_argument("--json", default=None, help="also write the records here")
    parser.add_argument("--worker", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--ids", nargs="*", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.instances:
        os.environ["SKYRL_SWE_INSTANCES"] = str(Path(args.instances).resolve())
        args.instances = os.environ["SKYRL_SWE_INSTANCES"]

    if args.worker:
        Path(args.out).write_text(json.dumps(worker(args.worker, args.ids, args.instances)))
        return
    instances = sample(args.split, args.per_repo, args.instances)
    if not instances:
        raise SystemExit(f"no instances in split {args.split!r}")
    ids = [i.instance_id for i in instances]
    if "docker" in args.ways:
        from skyrl_gym.runtime.docker import docker_available

        ok, why = docker_available()
        if not ok:
            print(f"docker left out: {why}", file=sys.stderr)
            args.ways = [w for w in args.ways if w != "docker"]
    # warm the sdist cache and the page cache once, outside every way's time
    run_way("direct", ids[:1], args.instances)
    results = {way: run_way(way, ids, args.instances) for way in args.ways}
    repos = sorted({i.repo for i in instances})
    print(
        f"\n{len(instances)} swe instances ({args.split} split, {args.per_repo} per repository: "
        f"{', '.join(repos)}); seconds per instance"
    )
    print(table(results))
    print()
    print(per_repo_table(results))
    if "docker" in results:
        images = results["docker"]["images_s"]
        print(
            "docker images made or found before timing (s): "
            + ", ".join(f"{name} {seconds:.1f}" for name, seconds in images.items())
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
