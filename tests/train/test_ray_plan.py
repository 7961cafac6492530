"""The Ray layout's plan from the config alone (no cluster): placement groups of the colocated and separate
layouts, the rules that keep Ray's keys to the Ray backend, and that importing the trainer leaves ray alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from skyrl_train.config import ConfigError, load_config
from skyrl_train.ray_layout import ray_plan

RAY = ["trainer.placement.backend=ray", "trainer.placement.policy_num_gpus_per_node=2"]
KL = ["trainer.algorithm.use_kl_loss=true", "trainer.placement.ref_num_gpus_per_node=2"]


def test_colocated_roles_split_the_bundles_of_one_group():
    plan = ray_plan(load_config(None, [*RAY, *KL, "trainer.placement.ray_num_cpus_per_worker=0.6"]))
    assert plan.groups == {"shared": [{"CPU": 0.6}, {"CPU": 0.6}]}
    assert plan.roles["policy"].bundles == (0, 1) and plan.roles["ref"].bundles == (0, 1)
    assert plan.roles["engine"].bundles == (0,)
    # policy, reference model and engine share each bundle: a third each
    assert [role.num_cpus for role in plan.roles.values()] == pytest.approx([0.2, 0.2, 0.2])


def test_separate_layouts_give_the_engine_and_the_reference_groups_of_their_own():
    separate = [*RAY, *KL, "trainer.placement.colocate_all=false", "trainer.placement.ray_device=cuda"]
    plan = ray_plan(load_config(None, separate))
    assert set(plan.groups) == {"policy", "engine"}  # the reference model stays with the policy
    assert plan.groups["policy"] == [{"CPU": 1.0, "GPU": 1.0}] * 2
    assert plan.roles["ref"].group == "policy" and plan.roles["ref"].num_gpus == 0.5
    assert plan.roles["engine"] == plan.roles["engine"].__class__("engine", (0,), 1.0, 1.0)

    apart = ray_plan(load_config(None, [*separate, "trainer.placement.colocate_policy_ref=false"]))
    assert set(apart.groups) == {"policy", "ref", "engine"}
    assert apart.roles["policy"].num_gpus == 1.0 and apart.roles["ref"].num_gpus == 1.0

    nodes = ray_plan(load_config(None, [*RAY, "trainer.placement.policy_num_nodes=2"]))
    assert len(nodes.groups["shared"]) == 4 and nodes.roles["policy"].bundles == (0, 1, 2, 3)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["generator.env_workers=2"], "generator.env_workers"),
        (["trainer.placement.colocate_all=false"], "set trainer.placement.backend=ray"),
        (
            ["trainer.placement.ray_device=cuda"],
            "trainer.placement.ray_device='cuda' needs trainer.placement.backend=ray",
        ),
        (["trainer.placement.policy_num_nodes=2"], "spans machines"),
        (
            ["trainer.placement.backend=ray", "trainer.placement.colocate_policy_ref=false"],
            "colocate_policy_ref=false acts only with trainer.placement.colocate_all=false",
        ),
    ],
)
def test_ray_keys_without_the_ray_backend_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_importing_the_trainer_and_the_ray_layout_does_not_import_ray():
    code = (
        "import sys, skyrl_gym, skyrl_train.loop.trainer, skyrl_train.ray_layout; print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
