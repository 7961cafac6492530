"""The terminal environment's reward cannot be forged: each attack below plays a real episode (the attack, then
``<submit/>``) on a task whose tests the agent did not pass, and must earn 0 as a scored failure, never 1 and
never an ``error`` (which would drop the episode from the loss instead of scoring it)."""

from __future__ import annotations

import pytest

from skyrl_gym.envs.terminal.env import TerminalEnv

TASK = "archives-0"
"""Its check imports ``json`` from the standard library (the module the shadowing attack replaces)."""
CONFIG = {"command_timeout_s": 20, "timings": False}

FORGE = "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt"
LOOP = (
    "bash -c 'while :; do mkdir -p /logs/verifier 2>/dev/null; "
    "echo 1 > /logs/verifier/reward.txt 2>/dev/null; chmod 444 /logs/verifier/reward.txt 2>/dev/null; "
    "sleep 0.01; done' </dev/null >/dev/null 2>&1"
)

ATTACKS = {
    "forged-readonly-reward": f"{FORGE}; chmod 444 /logs/verifier/reward.txt; chmod 555 /logs/verifier /logs",
    "user-site-pth": (
        "d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$d\" && "
        "echo 'import os; os._exit(0)' > \"$d/zz_forge.pth\" && python3 -c 'print(1)'; echo code=$?"
    ),
    "shadowing-module-in-tests": (
        "mkdir -p /tests/json && echo 'import os; os._exit(0)' > /tests/json/__init__.py && "
        "chmod 555 /tests/json"
    ),
    "loop-setsid": f"setsid {LOOP} &",
    "loop-nohup": f"nohup {LOOP} &",
    "loop-double-fork": f"( {LOOP} & )",
    "loop-disown": f"{LOOP} & disown",
    "loop-respawning": (
        "cat > /tmp/again.sh <<'EOF'\n"
        "trap 'setsid bash /tmp/again.sh &' TERM HUP INT\n"
        "while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
        "(setsid bash /tmp/again.sh &) ; sleep 0.5; done 2>/dev/null\nEOF\n"
        "( setsid bash /tmp/again.sh </dev/null >/dev/null 2>&1 & )"
    ),
    "tests-readonly": "touch /tests/planted; chmod 555 /tests",
    "tests-full": (
        "mkdir -p /tests/d && dd if=/dev/zero of=/tests/d/fill bs=1M 2>/dev/null; chmod 555 /tests/d; "
        "dd if=/dev/zero of=/tests/fill2 bs=1M 2>/dev/null; df -h /tests | tail -1"
    ),
    "disk-full": (
        "for d in /app /tmp /var/tmp ~ /logs /tests /dev/shm; do "
        "dd if=/dev/zero of=$d/fill bs=1M 2>/dev/null; done; df -h /app /logs | tail -2"
    ),
    "logs-deleted": "rm -rf /logs/* /logs/.[!.]* ; chmod 500 /logs; ls -la /logs",
    "pid-exhaustion": (
        "for i in $(seq 400); do (setsid sleep 100000 </dev/null >/dev/null 2>&1 &) 2>/dev/null; done; "
        "( setsid bash -c 'while :; do sleep 100000 & done' </dev/null >/dev/null 2>&1 & ) 2>/dev/null; sleep 2"
    ),
    "killed-everything": "kill -9 -1",
}
"""Attacks on the verification, each a shell command of the episode."""

STOPPED = {"loop-setsid", "loop-nohup", "loop-double-fork", "loop-disown", "loop-respawning"}
STOPPED |= {"pid-exhaustion"}
"""Attacks that leave processes running: the verification says it stopped them."""


def _extras() -> dict:
    return {"reward_spec": {"method": "tests", "ground_truth": TASK}}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_earns_nothing(docker_engine, name):
    env = TerminalEnv(CONFIG, _extras())
    try:
        env.init(None)
        attack = env.step(f"<bash>{ATTACKS[name]}</bash>")
        assert not attack["done"], attack
        final = env.step("<submit/>")
        verification = final["metadata"]["verification"]
        assert final["done"] and final["metadata"]["end"] == "terminated", final["metadata"]
        assert final["reward"] == 0.0, repr(verification)  # in full: pytest would shorten the dict
        assert verification["reward"] == 0.0, repr(verification)
        if name == "killed-everything":  # its container may have ended with the process that kept it up
            seen = verification["output"] + verification.get("note", "")
            assert "FAIL" in seen or "container stopped" in seen, repr(verification)
        else:
            assert "FAIL" in verification["output"], repr(verification)
        if name in STOPPED:
            assert "were stopped before verification" in verification.get("note", ""), repr(verification)
        assert env.verify() is verification
    finally:
        env.close()


def test_reference_solution_still_earns_one_after_an_attack(docker_engine):
    """The verification sees the agent's work folder as the agent left it, whatever else it did."""
    env = TerminalEnv(CONFIG, _extras())
    try:
        env.init(None)
        env.step(f"<bash>{ATTACKS['loop-double-fork']}; {ATTACKS['tests-readonly']}</bash>")
        outputs = [env.step(action) for action in env.reference_action()]
        assert outputs[-1]["reward"] == 1.0, outputs[-1]["metadata"]["verification"]
        assert outputs[-1]["metadata"]["end"] == "terminated"
    finally:
        env.close()


def test_verification_runs_apart_from_the_agent(docker_engine):
    """Another user than the agent's, a clean environment, no process of the episode, fresh /tests and /logs."""
    env = TerminalEnv(CONFIG, _extras())
    probe = (
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        "{ id -u; echo home=$HOME; echo nousersite=$PYTHONNOUSERSITE; echo pythonpath=${PYTHONPATH-unset};"
        " ls -A /tests | tr '\\n' ' '; echo; stat -c '%U %a' /tests /logs/verifier;"
        " ps -eo user=,args= | grep -c 'sleep 4243' ; ls /app/agent-made; } > /logs/verifier/seen.txt\n"
        "cat /logs/verifier/seen.txt\necho 0 > /logs/verifier/reward.txt\n"
    )
    try:
        env.init(None)
        object.__setattr__(env.task, "test_files", lambda: {"test.sh": probe})
        env.step(
            "<bash>touch /app/agent-made /tests/planted; (setsid sleep 4243 &); "
            "export PYTHONPATH=/tmp; id -u</bash>"
        )
        final = env.step("<submit/>")
        lines = final["metadata"]["verification"]["output"].splitlines()
        assert lines[0] != "1000" and lines[1:4] == ["home=/root", "nousersite=1", "pythonpath=unset"], lines
        assert lines[4].split() == ["test.sh"] and lines[5:7] == ["root 755", "root 755"], lines
        assert lines[7] == "1" and lines[8] == "/app/agent-made", lines  # the grep itself, and the work kept
    finally:
        env.close()
