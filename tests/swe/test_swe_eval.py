"""``skyrl-train eval`` on the swe test split with the bwrap backend, end to end: a real OpenAI-compatible
server on 127.0.0.1 that plays each instance's known fix (every instance resolved: its hidden tests pass),
the same server doing nothing (none resolved), and the embedded model for one short episode (it runs; the
hidden tests judge whatever it did)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skyrl_gym.envs.swe.env import SWEEnv
from skyrl_gym.envs.swe.tasks import load_split
from skyrl_gym.tools.react import render_tool_call
from skyrl_train.cli import main

pytest.importorskip("transformers")

EMBEDDED = "embedded:smollm2-135m"
BWRAP = ["--env-config", "backend=bwrap", "--env-config", "timings=false"]


@pytest.fixture(scope="module", autouse=True)
def bwrap():
    from skyrl_gym.runtime.bwrap import bwrap_available

    ok, why = bwrap_available()
    if not ok:
        pytest.skip(f"no bubblewrap sandbox: {why} (make sysdeps)")


@pytest.fixture(scope="module")
def tokenizer():
    from skyrl_train.models import load_tokenizer

    return load_tokenizer(EMBEDDED)


class ReferenceServer(ThreadingHTTPServer):
    """A ``/v1/completions`` server (token ids in and out, as vLLM answers) that plays, for the instance whose
    problem statement is in the prompt, the environment's reference: its fix applied, then the submission
    (``reference_action`` as text, or ``reference_tool_calls`` as tool calls when the prompt lists tools).
    With ``solve=False`` it submits at once."""

    def __init__(self, tokenizer, solve: bool = True):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.tokenizer = tokenizer
        self.solve = solve
        self.references: dict[str, tuple[list[str], list[str]]] = {}
        for instance in load_split("test"):
            ground_truth = {"instance_id": instance.instance_id}
            env = SWEEnv(
                {"backend": "bwrap"}, {"reward_spec": {"method": "rule", "ground_truth": ground_truth}}
            )
            calls = [render_tool_call(c["name"], c["arguments"]) for c in env.reference_tool_calls()]
            self.references[instance.problem_statement.strip()] = (env.reference_action(), calls)
        self.requests: list[str] = []

    def reply(self, prompt: str) -> str:
        """The next reference reply for this conversation (the how-many-th assistant turn it is)."""
        self.requests.append(prompt)
        tool_calls = "<tools>" in prompt
        if not self.solve:
            return render_tool_call("finish", {"answer": "done"}) if tool_calls else "<submit/>"
        (actions,) = [pair for statement, pair in self.references.items() if statement in prompt]
        replies = actions[1] if tool_calls else actions[0]
        turn = prompt.count("<|im_start|>assistant") - 1  # the prompt ends with the next turn's header
        return replies[min(turn, len(replies) - 1)]


class _Handler(BaseHTTPRequestHandler):
    server: ReferenceServer

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tokenizer = self.server.tokenizer
        text = self.server.reply(tokenizer.decode(body["prompt"], skip_special_tokens=False))
        ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        finish = "length" if len(ids) > body["max_tokens"] else "stop"  # cut as a real server cuts
        ids = ids[: body["max_tokens"]]
        text = tokenizer.decode(ids, skip_special_tokens=True)
        choice = {"text": text, "token_ids": ids, "logprobs": {"token_logprobs": [-0.1] * len(ids)}}
        data = json.dumps({"choices": [{**choice, "finish_reason": finish}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve(tokenizer, solve: bool):
    server = ReferenceServer(tokenizer, solve)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


def run(argv: list[str], capsys) -> dict:
    """The ``--json`` result of ``skyrl-train eval``; ``result["shown"]`` is what it printed before it (the
    table and, with ``--show``, the episodes), for a failure's message."""
    assert main(["eval", "--env", "swe", *BWRAP, *argv, "--json"]) == 0
    out = capsys.readouterr().out
    start = out.rindex('{\n  "pass_at_k"')
    return {**json.loads(out[start:]), "shown": out[:start]}


@pytest.mark.parametrize("agent", ["multi_turn", "react"])
def test_a_server_playing_the_known_fix_resolves_every_instance(tokenizer, capsys, agent):
    server = serve(tokenizer, solve=True)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        # both instances at once: their set-ups and verifications run side by side on this machine
        argv = ["--base-url", url, "--model", EMBEDDED, "--agent", agent, "--limit", "2"]
        argv += ["--max-tokens", "16384"]  # the fix is one base64 command
        argv += ["--show", "2"]  # both episodes, with the verification's observation, for a failure's message
        result = run(argv, capsys)
    finally:
        server.shutdown()
        server.server_close()
    overall, metrics = result["pass_at_k"]["overall"], result["metrics"]
    shown = result["shown"][-6000:]
    assert overall["tasks"] == 2.0 and overall["errors"] == 0.0 and overall["pass@1"] == 1.0, shown
    # the hidden tests ran on a fresh copy with the agent's diff and all passed, for both instances
    assert metrics["environment/swe/resolved"] == 1.0 and metrics["environment/swe/infra_error"] == 0.0
    assert metrics["generate/end/terminated"] == 2.0
    assert len(server.requests) == 4  # two instances, the fix then the submission


def test_a_server_that_changes_nothing_resolves_nothing(tokenizer, capsys):
    server = serve(tokenizer, solve=False)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        result = run(["--base-url", url, "--model", EMBEDDED, "--limit", "2"], capsys)
    finally:
        server.shutdown()
        server.server_close()
    overall, metrics = result["pass_at_k"]["overall"], result["metrics"]
    assert overall["tasks"] == 2.0 and overall["errors"] == 0.0 and overall["pass@1"] == 0.0
    assert metrics["environment/swe/unresolved"] == 1.0 and metrics["environment/swe/resolved"] == 0.0
    assert len(server.requests) == 2


@pytest.mark.slow
def test_the_embedded_model_plays_one_short_episode_to_its_verification(capsys):
    # the environment ends the episode after one reply: its verification runs on whatever the model did
    argv = ["--env-config", "max_turns=1", "--limit", "1", "--max-tokens", "24"]
    result = run(argv, capsys)
    overall, metrics = result["pass_at_k"]["overall"], result["metrics"]
    assert overall["tasks"] == 1.0 and overall["errors"] == 0.0
    assert metrics["generate/num_trajectories"] == 1.0 and metrics["environment/swe/turns"] == 1.0
    judged = sum(metrics[f"environment/swe/{o}"] for o in ("resolved", "unresolved", "patch_failed"))
    assert judged == 1.0 and metrics["environment/swe/infra_error"] == 0.0


def test_a_setting_without_a_value_is_refused_by_name(capsys):
    # a user's error is one line on stderr and exit status 2 (--debug would add the traceback)
    assert main(["eval", "--env", "swe", "--env-config", "backend"]) == 2
    assert "error: --env-config takes KEY=VALUE, got 'backend'" in capsys.readouterr().err
    assert main(["eval", "--env", "swe", "--env-config", "backend=podman", "--limit", "1"]) == 2
    assert "env_config.backend must be one of" in capsys.readouterr().err
