"""``skyrl-train eval``: pass@k (hand-computed), against a real OpenAI-compatible server on 127.0.0.1 and a tiny
local model."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from envs_for_tests import CountdownEnv

import skyrl_gym
from skyrl_train.cli import main
from skyrl_train.evaluation.passk import pass_at_k, pass_at_k_table

from .tiny_models import tiny_llama

pytest.importorskip("transformers")


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 1, 1) == 0.25
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 3, 2) == 1.0
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)
    rows = [{"data_source": "a"}, {"data_source": "a"}, {"data_source": "b"}, {}]
    table = pass_at_k_table(rows, [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], []], [1, 2])
    assert table["a"] == {"tasks": 2.0, "errors": 0.0, "pass@1": 0.25, "pass@2": 0.5}
    assert table["b"]["pass@1"] == 1.0 and table["all"]["errors"] == 1.0
    assert table["overall"]["pass@2"] == pytest.approx((1 + 0 + 1) / 3)


@pytest.fixture(scope="module", autouse=True)
def countdown():
    skyrl_gym.register("eval_test_countdown", entry_point=CountdownEnv)
    yield "eval_test_countdown"
    skyrl_gym.deregister("eval_test_countdown")


class _Server(ThreadingHTTPServer):
    """A /v1/completions server that always answers ``<answer>3</answer>`` (as token ids) and stops."""

    def __init__(self, tokenizer):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer_ids = list(tokenizer.encode("<answer>3</answer>", add_special_tokens=False))
        self.answer_ids.append(tokenizer.eos_token_id)
        self.requests: list[dict] = []


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        ids = self.server.answer_ids
        reply = {
            "choices": [
                {
                    "text": "",
                    "token_ids": ids,
                    "logprobs": {"token_logprobs": [-0.1] * len(ids)},
                    "finish_reason": "stop",
                }
            ]
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server(tokenizer):
    found = _Server(tokenizer)
    thread = threading.Thread(target=found.serve_forever, daemon=True)
    thread.start()
    yield found
    found.shutdown()
    found.server_close()


def test_eval_against_an_openai_compatible_server_prints_pass_at_k_per_family(server, tmp_path, capsys):
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Guess the digit ({secret})."}],
            "env_class": "eval_test_countdown",
            "reward_spec": {"method": "rule", "ground_truth": secret},
            "max_turns": 1,
            "data_source": family,
        }
        for secret, family in (("3", "easy"), ("3", "easy"), ("5", "easy"), ("7", "hard"))
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    assert main(["eval", "--data", str(data), "--base-url", url, "--n", "2", "--json"]) == 0
    out = capsys.readouterr().out
    table = json.loads(out[out.index("{") :])["pass_at_k"]
    assert table["easy"]["pass@1"] == pytest.approx(2 / 3) and table["easy"]["pass@2"] == pytest.approx(2 / 3)
    assert table["hard"]["pass@1"] == 0.0 and table["overall"]["pass@2"] == 0.5
    assert out.splitlines()[0].split() == ["family", "tasks", "errors", "pass@1", "pass@2"]
    assert len(server.requests) == 8  # 4 tasks x 2 samples, one turn each


def test_eval_an_environments_task_set_with_a_local_model(tokenizer, tmp_path, capsys):
    path = tmp_path / "tiny"
    tokenizer.save_pretrained(path)
    tiny_llama(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    ).save_pretrained(path)
    argv = ["eval", "--env", "eval_test_countdown", "--model", str(path), "--n", "2", "--limit", "3"]
    assert main([*argv, "--max-tokens", "4", "--json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{") :])
    # three distinct tasks of the environment's own set, two samples each, none in error
    assert result["pass_at_k"]["overall"]["tasks"] == 3.0 and result["pass_at_k"]["overall"]["errors"] == 0.0
    assert result["metrics"]["generate/num_trajectories"] == 6.0


def _guess_rows(tmp_path, secrets):
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Guess the digit (task {i})."}],
            "env_class": "eval_test_countdown",
            "reward_spec": {"method": "rule", "ground_truth": secret},
            "max_turns": 2,
            "data_source": "digits",
        }
        for i, secret in enumerate(secrets)
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(data)


def test_eval_show_prints_episodes_and_progress_counts_on_stderr(server, tmp_path, capsys):
    # the server always answers 3: task 1 passes in one turn, task 2 is told "3 is wrong." and runs out of turns
    data = _guess_rows(tmp_path, ["3", "5", "7"])
    url = f"http://127.0.0.1:{server.server_address[1]}"
    assert main(["eval", "--data", data, "--base-url", url, "--show", "2", "--progress"]) == 0
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    table, _, shown = out.partition("episode 1/2")
    assert table.splitlines()[0].split()[:3] == ["family", "tasks", "errors"]
    assert "episode 2/2" in shown and "episode 3/" not in shown
    first, _, second = shown.partition("episode 2/2")
    assert "Guess the digit (task 0)." in first and "action 1 (model):" in first
    assert "<answer>3</answer>" in first and "result: reward 1.000 (passed), end terminated, 1 turn" in first
    assert "Guess the digit (task 1)." in second
    assert "action 1 (model):" in second and "action 2 (model):" in second
    assert "observation 1 (environment):" in second and "3 is wrong." in second
    # the observation that ended the episode is shown too
    assert "observation 2 (environment, final):" in second
    assert "result: reward 0.000 (failed), end truncated by max_turns, 2 turns" in second
    assert "task 2." not in shown  # only the two episodes asked for
    # progress: one line per finished episode (stderr is not a terminal), with the counts and the pass rate
    lines = [line for line in err.splitlines() if line.startswith("eval: ")]
    assert len(lines) == 3
    assert "eval: 3/3 ep, pass 1/3 (33%)" in lines[-1] and "elapsed" in lines[-1] and "ETA" in lines[-1]
    assert {line.split()[1] for line in lines} == {"1/3", "2/3", "3/3"}


def test_eval_progress_is_off_when_stderr_is_not_a_terminal(server, tmp_path, capsys):
    data = _guess_rows(tmp_path, ["3"])
    url = f"http://127.0.0.1:{server.server_address[1]}"
    assert main(["eval", "--data", data, "--base-url", url]) == 0
    captured = capsys.readouterr()
    assert "eval: " not in captured.err and "episode 1/" not in captured.out
    assert main(["eval", "--show", "1"]) == 2  # a recipe's evaluation has no episodes to show
    assert "--show applies to `skyrl-train eval --env/--data`" in capsys.readouterr().err


def test_show_clips_long_texts_with_a_note():
    from skyrl_train.evaluation.passk import format_episodes
    from skyrl_train.rollout.records import TrajectoryResult

    long = "x" * 600 + "THE-END"
    episode = TrajectoryResult(
        prompt_ids=[],
        messages=[{"role": "user", "content": "do it"}, {"role": "assistant", "content": long}],
        final_observations=[{"role": "user", "content": "done"}],
        turn_rewards=[0.5],
        reward=0.5,
        end="terminated",
        num_turns=1,
        env_class="somewhere",
    )
    text = format_episodes([{"prompt": "do it"}], [episode], 5, max_chars=300)
    assert "[... 307 characters left out ...]" in text and "THE-END" in text
    assert "episode 1/1: task 1/1, sample 1/1, somewhere" in text
    assert "observation 1 (environment, final):" in text and "[user] done" in text
    assert "result: reward 0.500 (failed), end terminated, 1 turn" in text
