"""The Ray layout (``trainer.placement.backend=ray``) on a local two-CPU Ray cluster: training workers as
actors forming the FSDP2 process group, the hf engine in an actor, environments in actors; the same step as
the spawned-process layout, a dead environment actor costing only its trajectories, and a killed training
or engine actor reported by name and resumed from the last checkpoint.

Under ``CI=true`` a missing ray fails these tests (the repository's conftest turns the skip into a failure).
"""

from __future__ import annotations

import json
import logging
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
ray = pytest.importorskip("ray")

from skyrl_train.loop.trainer import Trainer  # noqa: E402
from skyrl_train.training.workers import WorkerGroup, WorkerLostError  # noqa: E402

from .ray_common import RAY  # noqa: E402
from .ray_common import ray_config as _config  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of two logical CPUs for the module."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_a_step_through_ray_actors_equals_the_spawned_process_step(cluster, tiny_model, math_rows, tmp_path):
    """Same seed, same rows: the same trajectories, loss and weights from two FSDP2 actors (with the engine
    in an actor and the environments in two environment actors) as from two spawned processes."""
    from skyrl_train.ray_layout.envs import RemoteEnvRunner
    from skyrl_train.training.workers.ray_group import RayWorkerGroup

    results = {}
    for name, extra in (
        ("process", []),
        ("ray", [*RAY, "generator.env_workers=2", "generator.env_worker_num_cpus=0.25"]),
    ):
        with Trainer(_config(tiny_model, math_rows, tmp_path / name, *extra)) as trainer:
            rows = next(iter(trainer.iterator))
            metrics = trainer.train_step(rows)
            results[name] = {
                "metrics": metrics,
                "weights": trainer.policy.full_state_dict(),
                "kind": type(trainer.policy),
                "runner": type(trainer.generator),
            }
    assert results["process"]["kind"] is WorkerGroup and results["ray"]["kind"] is RayWorkerGroup
    assert results["ray"]["runner"] is RemoteEnvRunner
    process, ray_ = results["process"]["metrics"], results["ray"]["metrics"]
    assert process["generate/response_length_mean"] == ray_["generate/response_length_mean"]
    assert process["generate/reward_mean"] == ray_["generate/reward_mean"]
    assert ray_.get("generate/error_count", 0.0) == 0.0
    for key in ("policy/loss", "policy/grad_norm", "policy/entropy"):
        assert torch.isfinite(torch.tensor(ray_[key]))
        assert ray_[key] == pytest.approx(process[key], rel=1e-4, abs=1e-6), key
    weights, expected = results["ray"]["weights"], results["process"]["weights"]
    assert set(weights) == set(expected)
    for name in expected:
        torch.testing.assert_close(weights[name], expected[name], atol=1e-5, rtol=0)


def test_a_dead_environment_actor_ends_only_its_trajectories_in_error(cluster, tokenizer):
    """Two environment actors, four trajectories (two on each); the first actor is killed while the model
    answers: its two trajectories end in error naming it (in init or step, whichever reached it first), the others are scored, and the pool replaces it."""
    import asyncio

    from skyrl_train.config import SamplingParams
    from skyrl_train.inference.scripted import ScriptedEngine
    from skyrl_train.ray_layout.envs import EnvActorPool, RemoteEnvRunner

    pool = EnvActorPool(2, num_cpus=0.25, call_timeout_s=60.0)
    killed = []

    def script(conversation: str) -> str:
        if not killed:
            victim = pool.actors[0]
            ray.kill(victim, no_restart=True)
            # dead before any step reaches it: the kill is asynchronous, and on a busy machine a call sent
            # right after it was still answered once, so the test asks until the actor is gone (60 s at most)
            deadline = time.monotonic() + 60
            while True:
                try:
                    ray.get(victim.pid.remote(), timeout=60)
                except ray.exceptions.RayActorError:
                    break
                assert time.monotonic() < deadline, "the killed actor still answers after 60 s"
                time.sleep(0.2)
            killed.append(victim)
        answer = conversation.split("What is ")[-1].split(" + 2")[0]
        return f"#### {int(answer) + 2}"

    runner = RemoteEnvRunner(ScriptedEngine(tokenizer, script), env_pool=pool, max_turns=2)
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {i} + 2?"}],
            "env_class": "math_multi_turn",
            "reward_spec": {"method": "rule", "ground_truth": str(i + 2)},
        }
        for i in range(2)
    ]
    try:
        out = asyncio.run(runner.generate(rows, 2, SamplingParams(max_tokens=16, temperature=0.0)))
        errors = [t for t in out.trajectories if t.is_error]
        scored = [t for t in out.trajectories if not t.is_error]
        assert len(errors) == 2 and len(scored) == 2
        for t in errors:
            assert "environment actor 0" in t.error and "died during" in t.error, t.error
        assert all(t.reward == 1.0 for t in scored)
        assert pool.replaced == 1

        # the batch after: the replacement actor takes its share again and every trajectory is scored
        again = asyncio.run(runner.generate(rows, 2, SamplingParams(max_tokens=16, temperature=0.0)))
        assert [t.reward for t in again.trajectories] == [1.0] * 4
    finally:
        pool.close()


def test_killed_actors_are_named_and_the_run_resumes_from_its_checkpoint(
    cluster, tiny_model, math_rows, tmp_path, caplog
):
    """A policy actor killed in step 2 stops the run with an error naming it and the call; a new run resumes
    after step 1's checkpoint. There, the engine actor is killed before step 2's rollouts: with
    max_restarts=1 the run rebuilds its actors, resumes from step 1 again and finishes."""
    run_dir = tmp_path / "run"

    def kill_before_step(trainer, step, victim):
        original = trainer.train_step
        done = []

        def train_step(rows):
            if trainer.step + 1 == step and not done:  # once: the step is taken again after the restart
                done.append(True)
                ray.kill(victim(trainer), no_restart=True)
            return original(rows)

        trainer.train_step = train_step

    trainer = Trainer(_config(tiny_model, math_rows, run_dir, *RAY, "trainer.max_steps=2"))
    try:
        kill_before_step(trainer, 2, lambda t: t.policy.actors[1])
        with pytest.raises(WorkerLostError) as failure:
            trainer.fit()
    finally:
        trainer.close()
    message = str(failure.value)
    assert "policy worker actor rank 1 died during" in message, message
    assert (run_dir / "checkpoints" / "step_1").is_dir() and not (run_dir / "checkpoints" / "step_2").exists()

    config = _config(
        tiny_model, math_rows, run_dir, *RAY, "trainer.max_steps=2", "trainer.placement.max_restarts=1"
    )
    with caplog.at_level(logging.WARNING, logger="skyrl_train.loop.trainer"), Trainer(config) as trainer:
        assert trainer.step == 1  # resumed from step 1's checkpoint
        kill_before_step(trainer, 2, lambda t: t.engine.actor)
        summary = trainer.fit()
        assert trainer.restarts == 1
    assert summary["steps"] == 2
    assert (run_dir / "checkpoints" / "step_2").is_dir()
    logged = caplog.text
    assert "the inference engine actor" in logged and "died during generate" in logged, logged
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(line.get("restart/count") == 1.0 for line in lines)
