"""What the Ray tests share: their run config over the ``math_rows`` fixture and the Ray overrides."""

from __future__ import annotations

from skyrl_train.config import load_config


def ray_config(tiny_model, rows, run_dir, *overrides):
    """sql_cpu shrunk to the tiny model on ``rows``: two policy ranks, 2 prompts x 2 samples of 8 tokens, a
    checkpoint every step; ``overrides`` come last."""
    return load_config(
        "sql_cpu",
        [
            f"trainer.policy.model.path={tiny_model}",
            f"data.train_data=[{rows}]",
            "data.val_data=[]",
            f"trainer.run_dir={run_dir}",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.placement.policy_num_gpus_per_node=2",
            "trainer.micro_train_batch_size_per_gpu=2",
            "trainer.sft_warmup.steps=0",
            "trainer.eval_before_train=false",
            "trainer.ckpt_interval=1",
            "trainer.max_wall_time_s=null",
            "trainer.logger=[jsonl]",
            "generator.n_samples_per_prompt=2",
            "generator.sampling_params.max_generate_length=8",
            "generator.max_turns=2",
            "trainer.policy.optimizer_config.lr=1e-3",
            *overrides,
        ],
    )


RAY = ["trainer.placement.backend=ray", "trainer.placement.ray_num_cpus_per_worker=0.5"]
