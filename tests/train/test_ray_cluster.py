"""The Ray layout on a cluster started the way a user starts one: ``ray start --head`` and a second node that
joins it with ``ray start --address``, then the trainer joins with ``trainer.placement.ray_address``. Both
nodes run on this machine (each a raylet of its own, with its own CPUs and object store), and each has room
for one training bundle only, so the two FSDP2 ranks form their process group across the two nodes, as they
do across two machines (rank 0's node address hosts the group).

Under ``CI=true`` a missing ray fails these tests (the repository's conftest turns the skip into a failure).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
ray = pytest.importorskip("ray")

from skyrl_train.distributed import find_free_port  # noqa: E402
from skyrl_train.loop.trainer import Trainer  # noqa: E402

from .ray_common import ray_config  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

RAY_CLI = str(Path(sys.executable).with_name("ray"))


def _ray(*args: str) -> None:
    # `ray start --head` turns token authentication on unless RAY_AUTH_MODE=disabled; this process imported
    # ray without a token (the mode is read at import), so the test's cluster runs without one
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([RAY_CLI, *args], env=env, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"ray {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """The address of a two-node cluster: a head node and a worker node, 2 CPUs each."""
    if ray.is_initialized():
        ray.shutdown()
    temp_dir = Path("/tmp") / f"skyrl-ray-{os.getpid()}"  # unix socket paths must stay short
    port = find_free_port()
    address = f"127.0.0.1:{port}"
    common = ["--num-cpus=2", "--object-store-memory=150000000", "--disable-usage-stats"]
    try:
        _ray(
            "start",
            "--head",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            f"--temp-dir={temp_dir}",
            *common,
        )
        _ray("start", f"--address={address}", "--node-ip-address=127.0.0.1", *common)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _ray("stop", "--force")
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_training_step_across_two_nodes_joined_by_ray_start(two_nodes, tiny_model, math_rows, tmp_path):
    """Two policy ranks of 1.5 CPUs each cannot share a 2-CPU node, so the placement group puts one on each
    node; the environments run in two environment actors; the step trains and checkpoints."""
    config = ray_config(
        tiny_model,
        math_rows,
        tmp_path / "run",
        "trainer.placement.backend=ray",
        f"trainer.placement.ray_address={two_nodes}",
        "trainer.placement.ray_num_cpus_per_worker=1.5",
        "generator.env_workers=2",
        "generator.env_worker_num_cpus=0.2",
        "trainer.max_steps=1",
    )
    with Trainer(config) as trainer:
        nodes = [node for node in ray.nodes() if node["Alive"]]
        assert len(nodes) == 2, nodes
        summary = trainer.fit()
        groups = [g for g in ray.util.placement_group_table().values() if g["state"] == "CREATED"]
        shared = [g for g in groups if g["name"] == "skyrl-shared"]
        assert len(shared) == 1, groups
        bundle_nodes = set(shared[0]["bundles_to_node_id"].values())
        assert len(bundle_nodes) == 2, shared[0]  # rank 0 and rank 1 on different nodes
        actor_nodes = set(ray.get([actor.node_id.remote() for actor in trainer.policy.actors]))
        assert actor_nodes == bundle_nodes
    assert summary["steps"] == 1
    assert (tmp_path / "run" / "checkpoints" / "step_1").is_dir()
