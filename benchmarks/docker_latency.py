"""Container start and command latency of the Docker runtime against the ``docker`` CLI and the bwrap sandbox,
and terminal-episode throughput at several concurrencies with and without a pool of started containers.

    python benchmarks/docker_latency.py                       # latency, then throughput at 1, 4, 16
    python benchmarks/docker_latency.py --concurrency 1 4 16 64 --episodes 64

Prints medians and the ratios against the baselines measured in the same run, and the peak resident memory of
this process (the runtime's) and of the CLI's processes.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import threading
import time

from skyrl_gym.runtime import Limits, make_sandbox
from skyrl_gym.runtime.docker import DEFAULT_IMAGE, ContainerPool, DockerContainer, configure

LIMITS = Limits(timeout_s=30, memory_mb=512, max_processes=128, max_file_mb=64)


def timed(call, repeat: int) -> float:
    """The median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def latency(repeat: int) -> None:
    cli = shutil.which("docker")

    def sdk_start() -> None:
        DockerContainer(limits=LIMITS).remove()

    def cli_start() -> None:
        cid = subprocess.run(
            [cli, "run", "-d", "--network", "none", "--cap-drop", "ALL", "--user", "1000:1000", DEFAULT_IMAGE,
             "sleep", "600"], capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        subprocess.run([cli, "rm", "-f", cid], capture_output=True, check=True)

    sdk_start()  # the first start reads the image's work folder once
    start_sdk, start_cli = timed(sdk_start, repeat), timed(cli_start, repeat)
    box = DockerContainer(limits=LIMITS)
    shell = box.shell()
    exec_sdk = timed(lambda: box.exec(["true"]), repeat * 3)
    exec_shell = timed(lambda: shell.run("true"), repeat * 3)
    exec_cli = timed(lambda: subprocess.run([cli, "exec", box.id, "true"], capture_output=True), repeat * 3)
    box.remove()
    bwrap = make_sandbox("bwrap", limits=LIMITS)
    exec_bwrap = timed(lambda: bwrap.run(["/bin/true"]), repeat * 3)
    docker_run = make_sandbox("docker", limits=LIMITS)
    run_docker = timed(lambda: docker_run.run(["/bin/true"]), repeat)
    print(f"{'what':42} {'median':>9} {'ratio':>22}")
    print(
        f"{'container start+remove, SDK':42} {start_sdk * 1000:8.1f}ms {start_cli / start_sdk:9.2f}x faster than CLI"
    )
    print(f"{'container start+remove, docker CLI':42} {start_cli * 1000:8.1f}ms")
    print(f"{'exec true, SDK':42} {exec_sdk * 1000:8.1f}ms {exec_cli / exec_sdk:9.2f}x faster than CLI")
    print(
        f"{'command in the persistent shell':42} {exec_shell * 1000:8.1f}ms {exec_cli / exec_shell:9.2f}x faster than CLI"
    )
    print(f"{'exec true, docker CLI':42} {exec_cli * 1000:8.1f}ms")
    print(
        f"{'bwrap sandbox run (fresh sandbox)':42} {exec_bwrap * 1000:8.1f}ms {exec_bwrap / exec_sdk:9.2f}x of SDK exec"
    )
    print(
        f"{'docker sandbox run (fresh container)':42} {run_docker * 1000:8.1f}ms {run_docker / exec_bwrap:9.2f}x of bwrap run"
    )
    print(f"peak RSS: this process {peak_mb(resource.RUSAGE_SELF):.0f} MB, largest CLI child "
          f"{peak_mb(resource.RUSAGE_CHILDREN):.0f} MB")  # fmt: skip


def episode(pool: ContainerPool | None) -> None:
    """A short terminal episode: a container, a shell, a few commands, a verification command, removal."""
    box = pool.acquire() if pool is not None else DockerContainer(limits=LIMITS)
    try:
        shell = box.shell()
        for command in ("cd /tmp && echo hi > f", "cat f | wc -c", "ls -la /app"):
            shell.run(command)
        shell.close()
        box.exec(["bash", "-c", "test -f /tmp/f"])
    finally:
        box.remove()


def throughput(concurrency: list[int], episodes: int) -> None:
    print(f"\n{'concurrent':>10} {'no pool ep/s':>13} {'pool ep/s':>10} {'pool/none':>10} {'peak RSS':>9}")
    for workers in concurrency:
        configure(max_concurrent_execs=max(32, workers * 2))
        results = []
        for pooled in (False, True):
            pool = ContainerPool(workers, limits=LIMITS) if pooled else None
            if pool is not None:
                deadline = time.monotonic() + 120
                while pool.ready() < workers and time.monotonic() < deadline:
                    time.sleep(0.05)
            count = max(episodes, workers)
            todo = list(range(count))
            lock = threading.Lock()

            def worker(todo=todo, lock=lock, pool=pool) -> None:
                while True:
                    with lock:
                        if not todo:
                            return
                        todo.pop()
                    episode(pool)

            start = time.perf_counter()
            threads = [threading.Thread(target=worker) for _ in range(workers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            results.append(count / (time.perf_counter() - start))
            if pool is not None:
                pool.close()
        print(f"{workers:>10} {results[0]:>13.2f} {results[1]:>10.2f} {results[1] / results[0]:>9.2f}x "
              f"{peak_mb(resource.RUSAGE_SELF):>7.0f}MB")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "--episodes", type=int, default=32, help="episodes per measurement (at least one each)"
    )
    args = parser.parse_args()
    latency(args.repeat)
    throughput(args.concurrency, args.episodes)


if __name__ == "__main__":
    main()
