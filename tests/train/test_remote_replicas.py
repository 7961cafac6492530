"""The remote engine over several servers (``generator.remote_inference_engine_urls``): requests go to them in
turn, each answer comes back to its own prompt. Real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skyrl_train.config import SamplingParams, load_config
from skyrl_train.inference.remote import RemoteEngine


class _Replica(ThreadingHTTPServer):
    """A /v1/completions server that answers every prompt with its own id and the prompt's first token."""

    def __init__(self, replica_id: int):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replica_id = replica_id
        self.prompts: list[list[int]] = []


class _Handler(BaseHTTPRequestHandler):
    server: _Replica

    def log_message(self, *args: object) -> None:  # keep the test output clean
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.prompts.append(body["prompt"])
        tokens = [self.server.replica_id, body["prompt"][0]]
        reply = {
            "choices": [
                {
                    "text": "",
                    "token_ids": tokens,
                    "logprobs": {"token_logprobs": [-0.5, -0.5]},
                    "finish_reason": "length",
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
def replicas():
    servers = [_Replica(100), _Replica(200)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def test_requests_go_to_the_servers_in_turn(replicas):
    urls = [f"127.0.0.1:{server.server_address[1]}" for server in replicas]
    config = load_config(
        None,
        [
            "generator.backend=remote",
            f"generator.remote_inference_engine_urls=[{', '.join(urls)}]",
            "trainer.sync_weights=false",
        ],
    )
    engine = RemoteEngine.from_config(config.generator, model_path="served-model", tokenizer=object())
    try:
        prompts = [[1, 2], [3, 4], [5, 6], [7, 8]]
        outputs = asyncio.run(engine.generate(prompts, SamplingParams(max_tokens=2, temperature=0.0)))
    finally:
        engine.close()
    # every prompt got its own answer back, whichever server gave it
    assert [out.token_ids[1] for out in outputs] == [1, 3, 5, 7]
    assert sorted(out.token_ids[0] for out in outputs) == [100, 100, 200, 200]
    assert [len(server.prompts) for server in replicas] == [2, 2]
    assert engine.model_name == "served-model"


def test_one_url_is_one_server():
    engine = RemoteEngine("127.0.0.1:1")
    try:
        assert engine.urls == engine.urls[:1] == ["http://127.0.0.1:1/v1/completions"]
    finally:
        engine.close()
    with pytest.raises(ValueError, match="at least one server URL"):
        RemoteEngine([])
