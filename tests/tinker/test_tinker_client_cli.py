"""``skyrl-train serve`` as a user starts it: its own process on 127.0.0.1, the official client talking to it."""

from __future__ import annotations

import pytest

tinker = pytest.importorskip("tinker")
pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from tinker import types  # noqa: E402
from tinker_server import serve_command  # noqa: E402

pytestmark = pytest.mark.slow


def test_serve_command_answers_the_client(tmp_path, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tml-local")
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    with serve_command(tmp_path / "store", ["--base-model", "smol=embedded:smollm2-135m"]) as (url, proc):
        caps = tinker.RestClient(base_url=url).get_server_capabilities().result()
        assert [m.model_name for m in caps.supported_models] == ["smol"]  # --base-model replaced the default
        sc = tinker.ServiceClient(base_url=url)
        tc = sc.create_lora_training_client(base_model="smol", rank=2).result()
        ids = [1, 504, 3458, 282, 4649]
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(ids[:-1]), loss_fn_inputs={"target_tokens": ids[1:]}
        )
        out = tc.forward([datum], "cross_entropy").result()
        assert out.loss_fn_outputs[0]["logprobs"].shape == [4]
        saved = tc.save_state("cli").result().path
        sc.close("success").result()
    assert proc.returncode == 0, (tmp_path / "store" / "serve.log").read_text()[-3000:]
    index = (tmp_path / "store" / "tinker_checkpoints.json").read_text()
    assert saved in index  # the checkpoint index outlives the process
