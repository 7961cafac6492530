"""The swe environment with the bwrap backend: the oracle and the no-op on a sample of instances, conformance,
adversarial episodes, the named outcomes, hidden tests and history, and users' rows.

The oracle / no-op check runs a few instances per repository by default; ``SKYRL_SWE_ALL=1`` runs every
instance (``make test-swe-all``). The docker backend has the same checks in tests/docker/test_swe_docker.py.
"""

from __future__ import annotations

import json
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import skyrl_gym
from skyrl_gym.envs.swe.backends import BackendSettings, make_backend
from skyrl_gym.envs.swe.env import SWEEnv
from skyrl_gym.envs.swe.tasks import SWEInstance, image_for, load_split
from skyrl_gym.testing import check_env
from skyrl_gym.testing.strategies import episodes, tag_actions
from tests.swe.common import (
    CHECKED,
    INSTANCES,
    check_edits_earn_nothing,
    check_oracle_and_noop,
    extras,
    play,
    play_adversarial,
)


def bwrap_ready() -> None:
    from skyrl_gym.runtime.bwrap import bwrap_available

    ok, why = bwrap_available()
    if not ok:
        pytest.skip(f"no bubblewrap sandbox: {why} (make sysdeps)")


FAST = {"backend": "bwrap", "command_timeout_s": 5, "timings": False, "test_timeout_s": 120}


@pytest.fixture(scope="module")
def bwrap():
    bwrap_ready()


@pytest.mark.parametrize("instance", CHECKED, ids=lambda i: i.instance_id)
def test_oracle_earns_one_and_doing_nothing_earns_zero(bwrap, instance):
    check_oracle_and_noop(FAST, instance)


def test_instance_set_and_splits():
    assert INSTANCES, "datasets/swe/instances.jsonl.gz holds no instance"
    train, test = load_split("train"), load_split("test")
    assert {i.instance_id for i in train}.isdisjoint(i.instance_id for i in test)
    for instance in INSTANCES:
        assert instance.kind == "synth" and instance.fail_to_pass and instance.base_commit
        assert image_for(instance) == f"local/swe-{instance.repo}:{instance.version}"


def test_swe_env_conforms_on_bwrap(bwrap):
    task = SWEEnv(FAST).sample_task(0)
    report = check_env(lambda: SWEEnv({**FAST, "max_turns": 3}), tasks=[task], gymnasium_check=False)
    assert report.ok
    for rule in ("oracle-earns-full-reward", "noop-earns-nothing", "deferred-verification",
                 "model-failures-are-not-errors", "survives-adversarial-actions"):  # fmt: skip
        assert rule in report.passed, report.summary()


def test_made_by_name_and_reset_draws_from_the_test_split(bwrap):
    env = skyrl_gym.make("swe", env_config=FAST)
    prompt, info = env.reset(seed=0)
    test_ids = {i.instance_id for i in load_split("test")}
    assert info["instance_id"] in test_ids and info["backend"] == "bwrap"
    assert prompt[0]["role"] == "system" and "<submit/>" in prompt[0]["content"]
    output = env.step(
        '<tool_call>{"name": "bash", "arguments": {"command": "git status --short | wc -l"}}</tool_call>'
    )
    assert "0\n" in output["observations"][0]["content"] and not output["done"]
    env.close()
    row = SWEEnv(FAST, extras(CHECKED[0]))
    row_prompt, _ = row.init([{"role": "user", "content": "Fix it."}])  # a row without the protocol
    assert [m["role"] for m in row_prompt] == ["system", "user"] and "<bash>" in row_prompt[0]["content"]
    row.close()


def test_swe_env_in_gymnasium(bwrap):
    import gymnasium
    from gymnasium.utils.env_checker import check_env as gymnasium_check_env

    env = gymnasium.make("skyrl_gym/swe", env_config={**FAST, "max_turns": 2})
    gymnasium_check_env(env.unwrapped, skip_render_check=True)
    env.reset(seed=1)
    _, reward, terminated, truncated, _ = env.step("<bash>ls</bash>")
    assert reward == 0.0 and not terminated and not truncated
    env.close()


def test_tests_and_history_are_hidden_and_lists_never_shown(bwrap):
    instance = CHECKED[0]
    env = SWEEnv({**FAST, "max_turns": 5}, extras(instance))
    hidden = sorted({node.split("::")[0] for node in instance.fail_to_pass})
    outputs = play(
        env,
        [
            f"<bash>ls {' '.join(hidden)}; git log --oneline | wc -l; git show HEAD~1 2>&1 | head -1</bash>",
            "<bash>git ls-files | grep -c '^tests/' ; git log --all --oneline | wc -l</bash>",
            env.reference_action()[0],
            "<submit/>",
        ],
    )
    first = outputs[0]["observations"][0]["content"]
    assert "No such file" in first and "\n1\n" in first and "unknown revision" in first
    assert "<output>\n0\n1\n</output>" in outputs[1]["observations"][0]["content"]
    assert outputs[-1]["reward"] == 1.0
    shown = json.dumps([o["observations"] for o in outputs] + [o["metadata"] for o in outputs])
    assert not any(node in shown for node in (*instance.fail_to_pass, *instance.pass_to_pass))
    env.close()


def test_agent_edits_to_tests_and_config_do_not_count(bwrap):
    """A conftest that reports every test as passed, deleted tests and a pytest.ini switching tests off are
    left out of the agent's diff: the bug stays, the reward stays 0."""
    instance = CHECKED[0]
    hook = (
        "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    report = outcome.get_result()\n    report.outcome = 'passed'\n"
    )
    env = SWEEnv(FAST, extras(instance))
    outputs = play(
        env,
        [
            f"<bash>printf %s {json.dumps(hook)} > conftest.py; mkdir -p tests; cp conftest.py tests/</bash>",
            "<bash>printf '[pytest]\\naddopts = -k nothing\\n' > pytest.ini</bash>",
            "<submit/>",
        ],
    )
    verification = outputs[-1]["metadata"]["verification"]
    assert outputs[-1]["reward"] == 0.0 and verification["outcome"] == "unresolved", verification
    assert verification["patch_lines"] == 0
    env.close()


def test_named_outcomes(bwrap):
    instance = CHECKED[0]
    module = instance.fix_patch.split(" b/", 1)[1].split("\n", 1)[0]  # the file the fix touches
    env = SWEEnv({**FAST, "test_timeout_s": 3}, extras(instance))
    outputs = play(env, [f"<bash>echo 'import time; time.sleep(60)' >> {module}</bash>", "<submit/>"])
    assert outputs[-1]["metadata"]["verification"]["outcome"] == "test_timeout"
    assert outputs[-1]["reward"] == 0.0 and outputs[-1]["metadata"]["end"] == "terminated"
    env.close()

    backend = make_backend("bwrap", instance, BackendSettings(test_timeout_s=120))
    backend.start()
    assert backend.verify(
        patch=f"diff --git a/{module} b/{module}\n--- a/{module}\n+++ b/{module}\n@@ -1 +1 @@\n-no such line\n+b\n"
    ).outcome == ("patch_failed")
    # a file outside the source folders is dropped (not applied), and named
    dropped = backend.verify(patch="diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert dropped.outcome == "unresolved" and "x.py" in dropped.note
    assert backend.verify(patch=instance.fix_patch).outcome == "resolved"
    backend.close()

    env = SWEEnv(FAST, extras(instance))
    env.init(None)
    import shutil

    shutil.rmtree(env.backend.root)  # the episode's folder is gone: the machinery failed, not the agent
    final = env.step("<submit/>")
    assert final["metadata"]["verification"]["outcome"] == "infra_error"
    assert final["metadata"]["end"] == "error" and final["reward"] == 0.0
    env.close()


def test_deferred_verification_and_infra_error_raises(bwrap):
    instance = CHECKED[0]
    env = SWEEnv(FAST, extras(instance))
    env.defer_verification()
    outputs = play(env, env.reference_action())
    assert outputs[-1]["reward"] == 0.0 and outputs[-1]["metadata"]["verification"] == "deferred"
    verdict = env.evaluate()
    assert verdict["reward"] == 1.0 and verdict["outcome"] == "resolved"
    assert env.get_metrics()["resolved"] and env.patch.startswith("diff --git")
    env.close()

    from skyrl_gym.envs.swe.backends import InfraError

    env = SWEEnv(FAST, extras(instance))
    env.defer_verification()
    play(env, ["<submit/>"])
    import shutil

    shutil.rmtree(env.backend.root)
    with pytest.raises(InfraError):
        env.evaluate()
    env.close()


def test_an_episode_its_runner_stopped_is_verified_as_it_stands(bwrap):
    """The runner's own budget ended the episode before <submit/>: evaluate() grades the diff made so far
    (the fix is in, so it is resolved), once; before init() there is nothing to verify."""
    instance = CHECKED[0]
    env = SWEEnv(FAST, extras(instance))
    env.defer_verification()
    assert env.evaluate() is None
    work, _submit = env.reference_action()
    outputs = play(env, [work])
    assert not outputs[-1]["done"]
    verdict = env.evaluate()
    assert verdict is not None and verdict["outcome"] == "resolved" and verdict["reward"] == 1.0, verdict
    assert env.evaluate() is None
    env.close()


def test_agent_layer_tools_work_on_the_workspace(bwrap):
    from skyrl_gym.tools.agent import TOOLS

    instance = CHECKED[0]
    env = SWEEnv(FAST, extras(instance))
    env.init(None)
    workspace = env.workspace()
    module = instance.fix_patch.split(" b/", 1)[1].split("\n", 1)[0]
    viewed = TOOLS.get("editor").call({"command": "view", "path": module}, workspace=workspace)
    assert viewed.ok and "1" in viewed.content
    searched = TOOLS.get("code_search").call({"query": "def "}, workspace=workspace)
    assert searched.ok
    ran = TOOLS.get("bash").call({"command": "git diff --stat | wc -l"}, workspace=workspace, timeout_s=10)
    assert ran.ok
    final = env.step(env.finish_action("done"))
    assert final["done"] and final["metadata"]["verification"]["outcome"] == "unresolved"
    env.close()


def test_react_agent_plays_the_reference_tool_calls(bwrap):
    from skyrl_gym.tools.react import ReActEnv

    env = ReActEnv(SWEEnv(FAST, extras(CHECKED[0])), {"tool_timeout_s": 30.0})
    env.init(None)
    assert {"bash", "editor", "code_search", "finish"} <= set(env.tools)
    outputs = [env.step(action) for action in env.reference_episode()]
    assert outputs[-1]["done"] and outputs[-1]["reward"] == 1.0
    env.close()


EDITS = st.sampled_from(
    [
        "rm -rf .git",
        "git reset --hard -q; git clean -fdxq",
        "git checkout --orphan other -q && git rm -rfq --cached .",
        "rm -rf *",
        "chmod -R 000 . 2>/dev/null; true",
        "ln -s /etc/passwd passwd; ln -s / root",
        "mkdir -p sub/.git && echo x > sub/.git/HEAD",
        "printf '\\x00\\xff\\xfe' > binary.bin; touch 'name with spaces.py'",
        "echo 'raise SystemExit(3)' > sitecustomize.py",
        "find . -name '*.py' -not -path './.git/*' | head -n 3 | xargs -r sed -i 's/return/yield/'",
        "git commit -qam edited --allow-empty; git tag -f x",
        "echo '[' > setup.cfg; echo broken > pyproject.toml",
        "dd if=/dev/zero of=big bs=1M count=20 2>/dev/null",
    ]
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(EDITS, min_size=1, max_size=3))
def test_adversarial_edits_never_error_and_never_earn(bwrap, edits):
    check_edits_earn_nothing(FAST, edits)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(episodes(tag_actions(["bash", "submit"]), max_turns=3))
def test_adversarial_episodes_never_end_in_error(bwrap, actions):
    play_adversarial(FAST, actions)


def test_users_rows_and_naming_rules(tmp_path, monkeypatch):
    base = {"instance_id": "django__django-11099", "repo": "django/django", "version": "3.0",
            "FAIL_TO_PASS": '["tests/a/test_x.py::test_one"]', "PASS_TO_PASS": "[]", "problem_statement": "p"}  # fmt: skip
    swebench = SWEInstance.from_row({**base, "base_commit": "abc", "patch": "fix", "test_patch": "tests"})
    assert swebench.kind == "swe-bench" and swebench.fail_to_pass == ("tests/a/test_x.py::test_one",)
    assert image_for(swebench, "swe-bench") == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert image_for(swebench, "swe-gym") == "xingyaoww/sweb.eval.x86_64.django_s_django-11099:latest"
    assert image_for(swebench, "mine/{repo_slug}:{version}") == "mine/django-django:3.0"
    assert swebench.command() == "python3 -m pytest -p no:cacheprovider tests/a/test_x.py"
    smith = SWEInstance.from_row({**base, "patch": "bug", "image_name": "jyangballin/swesmith.x86_64.x:1"})
    assert smith.kind == "swe-smith" and smith.bug_patch == "bug" and not smith.fix_patch
    assert image_for(smith) == "jyangballin/swesmith.x86_64.x:1"
    env = SWEEnv({"backend": "docker"}, {"instance": {**base, "base_commit": "abc", "patch": "fix"},
                                         "reward_spec": {"method": "rule", "ground_truth": "django__django-11099"}})  # fmt: skip
    assert env.instance.repo == "django/django"
    with pytest.raises(ValueError, match="FAIL_TO_PASS"):
        SWEInstance.from_row({**base, "FAIL_TO_PASS": "[]", "base_commit": "abc"})
    with pytest.raises(ValueError, match="ground_truth"):
        SWEEnv({}, {"reward_spec": {"method": "rule"}})
    with pytest.raises(ValueError, match="backend"):
        SWEEnv({"backend": "podman"})
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    backend = make_backend("bwrap", smith, BackendSettings())
    with pytest.raises(ValueError, match="bwrap backend"):
        backend.start()
    assert backend.root is None and list(temp.iterdir()) == []  # the failed set-up left no folder
