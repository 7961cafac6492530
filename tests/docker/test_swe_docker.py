"""The swe environment with the docker backend against the real engine: the oracle and the no-op on a sample of
instances, conformance, adversarial episodes, the per-version images, hidden tests, the named outcomes and
users' own SWE-bench / SWE-smith rows with their own images.

A few instances per repository by default; ``SKYRL_SWE_ALL=1`` runs every instance (``make test-swe-all``).
"""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_gym.envs.swe import repos
from skyrl_gym.envs.swe.backends import IMAGE_LABEL, ensure_image
from skyrl_gym.envs.swe.env import SWEEnv
from skyrl_gym.envs.swe.tasks import SWEInstance
from skyrl_gym.testing import check_env
from skyrl_gym.testing.strategies import episodes, tag_actions
from tests.swe.common import (
    CHECKED,
    check_edits_earn_nothing,
    check_oracle_and_noop,
    extras,
    play,
    play_adversarial,
)

FAST = {"backend": "docker", "command_timeout_s": 5, "timings": False, "test_timeout_s": 120}


@pytest.mark.parametrize("instance", CHECKED, ids=lambda i: i.instance_id)
def test_oracle_earns_one_and_doing_nothing_earns_zero(docker_engine, instance):
    check_oracle_and_noop(FAST, instance)


def test_images_are_built_once_per_repository_version(docker_engine):
    instance = CHECKED[0]
    name = ensure_image(instance)
    first = docker_engine.api.inspect_image(name)
    assert name == f"local/swe-{instance.repo}:{instance.version}"
    assert first["Config"]["Labels"][IMAGE_LABEL] and first["Config"]["WorkingDir"] == "/testbed"
    assert ensure_image(instance) == name and docker_engine.api.inspect_image(name)["Id"] == first["Id"]


def test_swe_env_conforms_on_docker(docker_engine):
    task = SWEEnv(FAST).sample_task(0)
    report = check_env(lambda: SWEEnv({**FAST, "max_turns": 3}), tasks=[task], gymnasium_check=False)
    assert report.ok
    for rule in ("oracle-earns-full-reward", "noop-earns-nothing", "deferred-verification",
                 "model-failures-are-not-errors"):  # fmt: skip
        assert rule in report.passed, report.summary()


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(episodes(tag_actions(["bash", "submit"]), max_turns=3))
def test_adversarial_episodes_never_end_in_error(docker_engine, actions):
    play_adversarial(FAST, actions)


EDITS = st.sampled_from(
    [
        "rm -rf .git /tmp/.skyrl-swe-episode.git",
        "git reset --hard -q; git clean -fdxq; git checkout --orphan other -q",
        "rm -rf * .[!.]*",
        "ln -s /etc/passwd passwd; ln -s / root; mkfifo pipe",
        "printf 'import pytest\\n' > conftest.py; echo '[pytest]' > pytest.ini",
        "find . -name '*.py' | head -n 3 | xargs -r sed -i 's/return/yield/'",
        "dd if=/dev/zero of=big bs=1M count=20 2>/dev/null",
    ]
)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(EDITS, min_size=1, max_size=3))
def test_adversarial_edits_never_error_and_never_earn(docker_engine, edits):
    check_edits_earn_nothing(FAST, edits)


def test_persistent_shell_hidden_tests_and_git_tampering(docker_engine):
    instance = CHECKED[0]
    env = SWEEnv({**FAST, "max_turns": 6}, extras(instance))
    hidden = sorted({node.split("::")[0] for node in instance.fail_to_pass})
    outputs = play(
        env,
        [
            f"<bash>cd /tmp && X=7; ls /testbed/{hidden[0]}; git -C /testbed log --oneline | wc -l</bash>",
            "<bash>echo $X $PWD</bash>",
            f"<bash>cd /testbed && {env.reference_action()[0][6:-7]}</bash>",
            "<bash>git add -A && git commit -qm fixed && rm -rf .git</bash>",  # the agent's git is not read
            "<submit/>",
        ],
    )
    assert "No such file" in outputs[0]["observations"][0]["content"]
    assert "\n1\n" in outputs[0]["observations"][0]["content"]
    assert "7 /tmp" in outputs[1]["observations"][0]["content"]
    assert outputs[-1]["reward"] == 1.0, outputs[-1]["metadata"]["verification"]
    env.close()


def test_named_outcomes_on_docker(docker_engine):
    instance = CHECKED[0]
    module = instance.fix_patch.split(" b/", 1)[1].split("\n", 1)[0]
    env = SWEEnv({**FAST, "test_timeout_s": 3}, extras(instance))
    outputs = play(env, [f"<bash>echo 'import time; time.sleep(60)' >> {module}</bash>", "<submit/>"])
    assert outputs[-1]["metadata"]["verification"]["outcome"] == "test_timeout"
    env.close()

    env = SWEEnv(FAST, extras(instance))
    # unreadable to the agent: the diff is read from outside the container, where it still is (no change)
    outputs = play(env, [f"<bash>chmod 000 {module}</bash>", "<submit/>"])
    assert outputs[-1]["metadata"]["verification"]["outcome"] == "unresolved"
    assert outputs[-1]["reward"] == 0.0
    assert outputs[-1]["metadata"]["end"] == "terminated"
    env.close()

    env = SWEEnv(FAST, extras(instance))
    env.init(None)
    env.backend.container.remove()  # the engine lost the container: the machinery failed
    final = env.step("<submit/>")
    assert (
        final["metadata"]["verification"]["outcome"] == "infra_error" and final["metadata"]["end"] == "error"
    )
    env.close()


def _row(instance: SWEInstance) -> dict:
    return {
        "instance_id": instance.instance_id.replace(".", "-") + "-user",
        "repo": instance.repo,
        "version": instance.version,
        "FAIL_TO_PASS": list(instance.fail_to_pass),
        "PASS_TO_PASS": list(instance.pass_to_pass),
        "problem_statement": instance.problem_statement,
        "test_command": instance.test_command,
    }


def test_swe_smith_row_with_its_image(docker_engine):
    """SWE-smith's rows: no base_commit, ``patch`` is the bug, applied to the clean repository of the image."""
    instance = CHECKED[0]
    row = {**_row(instance), "patch": instance.bug_patch, "image_name": ensure_image(instance)}
    env = SWEEnv(FAST, extras(row))
    assert env.instance.kind == "swe-smith"
    outputs = play(env, env.reference_action())  # git apply -R of the bug
    assert outputs[-1]["reward"] == 1.0, outputs[-1]["metadata"]["verification"]
    env.close()
    env = SWEEnv(FAST, extras(row))
    assert play(env, ["<submit/>"])[-1]["reward"] == 0.0
    env.close()


def test_swe_bench_row_with_a_user_image_found_by_a_naming_rule(docker_engine):
    """SWE-bench's rows: the user's image holds the repository at base_commit; no bug is applied, HEAD is
    checked; the image is named by env_config.image_template."""
    instance = CHECKED[0]
    tag = f"user/sweb.eval.{instance.repo}:{instance.base_commit[:12]}"
    dockerfile = (
        f"FROM {ensure_image(instance)}\nCOPY bug.patch /tmp/bug.patch\nUSER 1000\n"
        f"RUN git update-index -q --refresh; git apply --index /tmp/bug.patch && {repos.commit_shell_command()}\n"
    )
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        for name, text in (("Dockerfile", dockerfile), ("bug.patch", instance.bug_patch)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    for event in docker_engine.api.build(fileobj=io.BytesIO(context.getvalue()), custom_context=True, tag=tag,
                                         rm=True, decode=True):  # fmt: skip
        assert "error" not in event, event
    row = {
        **_row(instance),
        "base_commit": instance.base_commit,
        "patch": instance.fix_patch,
        "test_patch": "",
    }
    config = {**FAST, "image_template": "user/sweb.eval.{repo}:" + instance.base_commit[:12]}
    env = SWEEnv(config, extras(row))
    assert env.instance.kind == "swe-bench"
    outputs = play(env, env.reference_action())
    assert outputs[-1]["reward"] == 1.0, outputs[-1]["metadata"]["verification"]
    env.close()
    env = SWEEnv(config, extras({**row, "base_commit": "0" * 40}))  # the image is not at that commit
    with pytest.raises(Exception, match="not base_commit"):
        env.init(None)
    env.close()
    docker_engine.api.remove_image(tag, force=True)
