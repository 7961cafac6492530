"""What the Tinker API costs on top of the backend: the same work through the official client and
``skyrl-train serve`` (on 127.0.0.1, in this process) and by calling :class:`TinkerBackend` directly.

Training: a step is ``forward_backward`` (cross-entropy on a batch) then ``optim_step``, on two LoRA models
made alike, one driven through the API and one directly; the two alternate step by step, so a change in the
machine's load hits both. Sampling: ``sample`` from the base model with ``num_samples`` continuations of
exactly ``max_tokens`` tokens (no stop), through a ``SamplingClient`` and directly; both use the same engine.
The table gives median seconds per call and their ratio API / direct, and the ratio and difference of the
fastest calls of each kind. Then the API's own cost measured inside each request (its wall time less the
backend's time in it), which the machine's load disturbs least; the backend calls the server made (its
batching) and the process's memory.

    python benchmarks/tinker_overhead.py [--steps 8] [--batch 4] [--seq-len 64] [--samples 4] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

# Spinning OpenMP threads steal a shared machine's cores from the other side of the comparison (as in
# skyrl-train's own entry point); set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def rss_mb() -> float:
    """The process's resident memory now, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class TimedBackend:
    """The backend as the server sees it, timing each call: the API's own cost is a request's wall time
    less the backend time inside it, which load on a shared machine disturbs far less than a difference of
    two separately timed runs."""

    TIMED = ("forward_backward", "optim_step", "sample")

    def __init__(self, backend):
        self._backend = backend
        self.seconds = 0.0

    def __getattr__(self, name):
        attr = getattr(self._backend, name)
        if name not in self.TIMED:
            return attr

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="timed training steps of each kind")
    parser.add_argument("--batch", type=int, default=4, help="sequences per forward_backward")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per sequence")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank")
    parser.add_argument("--sample-calls", type=int, default=6, help="timed sample calls of each kind")
    parser.add_argument("--samples", type=int, default=4, help="num_samples per sample call")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per sample")
    parser.add_argument("--device", default="cpu", help="torch device of the backend")
    args = parser.parse_args()
    os.environ.setdefault("TINKER_API_KEY", "tml-local")
    os.environ.setdefault("TINKER_TELEMETRY", "0")

    import numpy as np
    import tinker
    from tinker import types

    from skyrl_train.tinker.backend import Datum, TinkerBackend
    from skyrl_train.tinker.server import TinkerService, serve_in_thread

    rng = np.random.default_rng(0)
    store = Path(tempfile.mkdtemp(prefix="tinker-bench-"))
    backend = TinkerBackend(store_dir=store, device=args.device)
    seqs = [rng.integers(100, 20000, args.seq_len + 1).tolist() for _ in range(args.batch)]
    direct_data = [
        Datum(
            tokens=s[:-1],
            inputs={"target_tokens": np.asarray(s[1:]), "weights": np.ones(args.seq_len, np.float32)},
        )
        for s in seqs
    ]
    api_data = [
        types.Datum(
            model_input=types.ModelInput.from_ints(s[:-1]),
            loss_fn_inputs={"target_tokens": s[1:], "weights": [1.0] * args.seq_len},
        )
        for s in seqs
    ]
    adam = {"learning_rate": 1e-4}
    prompt = rng.integers(100, 20000, 24).tolist()
    sample_kwargs = {"max_tokens": args.max_tokens, "temperature": 1.0, "stop": []}

    direct_model = backend.create_model("embedded", lora_rank=args.rank, seed=0)
    rss_before_server = rss_mb()
    timed_backend = TimedBackend(backend)
    service = TinkerService(timed_backend, store)
    with serve_in_thread(service) as url:
        sc = tinker.ServiceClient(base_url=url)
        tc = sc.create_lora_training_client(base_model="embedded", rank=args.rank, seed=0).result()
        rss_with_server = rss_mb()

        def direct_step() -> None:
            backend.forward_backward(direct_model, direct_data, "cross_entropy")
            backend.optim_step(direct_model, **adam)

        def api_step() -> None:
            fb = tc.forward_backward(api_data, "cross_entropy")
            step = tc.optim_step(types.AdamParams(**adam))
            fb.result()
            step.result()

        direct_sampler = backend.sampler(base_model="embedded")
        api_sampler = sc.create_sampling_client(base_model="embedded").result()
        sampling_params = types.SamplingParams(max_tokens=args.max_tokens, temperature=1.0, stop=[])

        def direct_sample() -> None:
            out = backend.sample(direct_sampler, prompt, num_samples=args.samples, **sample_kwargs)
            assert all(len(s["tokens"]) == args.max_tokens for s in out["sequences"])

        def api_sample() -> None:
            out = api_sampler.sample(
                types.ModelInput.from_ints(prompt), args.samples, sampling_params
            ).result()
            assert all(len(s.tokens) == args.max_tokens for s in out.sequences)

        times: dict[str, list[float]] = {
            k: [] for k in ("direct_step", "api_step", "direct_sample", "api_sample")
        }

        inside: dict[str, list[float]] = {"api_step": [], "api_sample": []}

        def timed(name: str, fn) -> None:
            before = timed_backend.seconds
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
            if name in inside:
                inside[name].append(timed_backend.seconds - before)

        direct_step(), api_step(), direct_sample(), api_sample()  # warm-up: caches, engines, connections
        for i in range(args.steps):
            order = [("direct_step", direct_step), ("api_step", api_step)]
            for name, fn in order if i % 2 == 0 else order[::-1]:
                timed(name, fn)
        for i in range(args.sample_calls):
            order = [("direct_sample", direct_sample), ("api_sample", api_sample)]
            for name, fn in order if i % 2 == 0 else order[::-1]:
                timed(name, fn)
        lane = service.models[tc.model_id].lane
        calls, jobs = lane.calls, lane.jobs_run
        sc.close("success").result()
    backend.close()

    print(
        f"Tinker API overhead: {args.batch} x {args.seq_len} tokens per step (LoRA rank {args.rank}); "
        f"{args.samples} samples x {args.max_tokens} tokens per sample call; device {args.device}"
    )
    # Medians, and the fastest of each kind: on a machine shared with other work the minimum is the least
    # disturbed measurement of what a call costs.
    print(f"{'call':<28}{'direct s':>10}{'API s':>10}{'ratio':>8}{'min ratio':>11}{'min overhead ms':>17}")
    for label, d, a in (
        ("forward_backward+optim_step", "direct_step", "api_step"),
        ("sample", "direct_sample", "api_sample"),
    ):
        direct, api = statistics.median(times[d]), statistics.median(times[a])
        fastest_direct, fastest_api = min(times[d]), min(times[a])
        print(
            f"{label:<28}{direct:>10.3f}{api:>10.3f}{api / direct:>8.2f}{fastest_api / fastest_direct:>11.2f}"
            f"{(fastest_api - fastest_direct) * 1000:>17.0f}"
        )
    for label, name in (("forward_backward+optim_step", "api_step"), ("sample", "api_sample")):
        own = [wall - backend_s for wall, backend_s in zip(times[name], inside[name], strict=True)]
        ratio = [wall / backend_s for wall, backend_s in zip(times[name], inside[name], strict=True)]
        print(
            f"{label} through the API: median {statistics.median(own) * 1000:.0f} ms more than the backend "
            f"time inside it (API / backend {statistics.median(ratio):.3f})"
        )
    print(f"training lane: {jobs} requests in {calls} backend calls")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"memory: peak RSS {peak:.0f} MB (backend, both models, the engine, client and server in one process); "
        f"RSS {rss_before_server:.0f} MB before the server and client, {rss_with_server:.0f} MB with them "
        f"and the API's model"
    )


if __name__ == "__main__":
    main()
