"""A tinker-cookbook recipe, unchanged, against ``skyrl-train serve``: ``recipes/sl_basic`` (supervised
fine-tuning through ``tinker_cookbook.supervised.train``) on the cookbook's bundled
``example_data/conversations.jsonl``, the dataset swap that recipe documents, for two steps.

What the test sets around the recipe, none of it in the recipe: the model name is the embedded SmolLM2's
Hugging Face name, whose tokenizer is registered with the cookbook (``register_tokenizer``) because nothing
can be downloaded here; the renderer is the cookbook's generic ``role_colon`` (the cookbook recommends none
for SmolLM2); the cookbook's price-list download is switched off (no network); sizes are small.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
pytest.importorskip("fastapi")
cookbook = pytest.importorskip("tinker_cookbook")

import chz  # noqa: E402
from tinker import types  # noqa: E402
from tinker_cookbook import checkpoint_utils, tokenizer_utils  # noqa: E402
from tinker_cookbook.recipes import sl_basic  # noqa: E402
from tinker_cookbook.renderers import TrainOnWhat  # noqa: E402
from tinker_cookbook.supervised import train  # noqa: E402
from tinker_cookbook.supervised.data import FromConversationFileBuilder  # noqa: E402
from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig  # noqa: E402
from tinker_cookbook.utils import cost_estimation  # noqa: E402
from tinker_server import running_server  # noqa: E402

from skyrl_train.models import load_tokenizer  # noqa: E402
from skyrl_train.tinker.backend import EMBEDDED_SOURCE, TinkerBackend  # noqa: E402

pytestmark = pytest.mark.slow

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # a name the backend serves as the embedded model


def test_sl_basic_recipe_runs_against_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tml-local")
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(cost_estimation, "load_model_pricing", lambda **kwargs: None)
    tokenizer_utils.register_tokenizer(MODEL, lambda: load_tokenizer(EMBEDDED_SOURCE))
    conversations = Path(cookbook.__file__).parent / "example_data" / "conversations.jsonl"
    store, log_path = tmp_path / "store", tmp_path / "run"
    backend = TinkerBackend(store_dir=store)
    with running_server(backend, store) as (url, service):
        common = ChatDatasetBuilderCommonConfig(
            model_name_for_tokenizer=MODEL,
            renderer_name="role_colon",
            max_length=128,
            batch_size=4,
            train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES,
        )
        # sl_basic's own settings (learning rate, schedule, epochs), the bundled file as its dataset
        config = (
            chz.Blueprint(train.Config)
            .apply(
                {
                    "log_path": str(log_path),
                    "model_name": MODEL,
                    "recipe_name": "recipe_sl_basic",
                    "renderer_name": "role_colon",
                    "dataset_builder": FromConversationFileBuilder(
                        common_config=common, file_path=str(conversations)
                    ),
                    "learning_rate": 2e-4,
                    "lr_schedule": "linear",
                    "num_epochs": 1,
                    "eval_every": 0,
                    "save_every": 0,
                    "max_steps": 2,
                    "lora_rank": 8,
                    "base_url": url,
                }
            )
            .make()
        )
        sl_basic.main(config)

        rows = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in rows if "train_mean_nll" in r]
        assert [r["step"] for r in steps] == [0, 1]
        assert all(np.isfinite(r["train_mean_nll"]) and r["grad_norm:mean"] > 0 for r in steps)
        final = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()][-1]
        assert service.checkpoints.get(final["state_path"])["with_optimizer"]
        # the run as the cookbook's checkpoint tools look it up (the renderer it was trained with)
        run = tinker.RestClient(base_url=url).get_training_run_by_tinker_path(final["state_path"]).result()
        assert run.base_model == MODEL and run.lora_rank == 8
        assert (
            checkpoint_utils.get_renderer_name_from_checkpoint(
                tinker.ServiceClient(base_url=url), final["state_path"]
            )
            == "role_colon"
        )
        # the recipe's final weights serve a sampling client
        sc = tinker.ServiceClient(base_url=url)
        sampler = sc.create_sampling_client(model_path=final["sampler_path"]).result()
        prompt = load_tokenizer(EMBEDDED_SOURCE).encode("User: What is the capital of France?\n\nAssistant:")
        out = sampler.sample(
            types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=4)
        ).result()
        assert 1 <= len(out.sequences[0].tokens) <= 4
        sc.close("success").result()
    backend.close()
