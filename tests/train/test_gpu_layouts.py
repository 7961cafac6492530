"""What the GPU layouts decide, checked on a CPU: the process-group backend, the FSDP2 precision, the random
state a seeded build leaves alone, the engine process's GPU, layouts NCCL refuses, vLLM's temperature range,
sleep and wake-up around each update of a colocated engine, a sharded model built without a whole copy per
rank, and ranks whose token budgets cut different numbers of micro-batches (two gloo processes, which hung
FSDP2 before every rank ran as many as the busiest one).
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import traceback

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from skyrl_train import distributed as dist_utils  # noqa: E402
from skyrl_train.config import AlgorithmConfig, ConfigError, OptimizerConfig, load_config  # noqa: E402
from skyrl_train.inference import process as engine_process  # noqa: E402
from skyrl_train.training.workers import CriticWorker, PolicyWorker  # noqa: E402
from skyrl_train.training.workers.base import local_shard, mixed_precision_policy  # noqa: E402
from skyrl_train.training.workers.batching import balance_micro_batches, iter_token_micro_batches  # noqa: E402
from skyrl_train.training.workers.plan import engine_sleeps_while_training  # noqa: E402

from .ray_common import ray_config  # noqa: E402
from .tiny_models import VOCAB, tiny_llama  # noqa: E402

pytestmark = pytest.mark.timeout(240)

CUDA = ["trainer.placement.backend=cuda", "trainer.placement.policy_num_gpus_per_node=2"]
VLLM = ["generator.backend=vllm", *CUDA]
RAY_CUDA = [
    "trainer.placement.backend=ray",
    "trainer.placement.ray_device=cuda",
    "trainer.placement.policy_num_gpus_per_node=2",
    "generator.backend=vllm",
]


# ---------------------------------------------------------------------------------- process groups, precision


@pytest.mark.parametrize(
    "device, expected",
    [("cpu", "gloo"), ("cuda", "cpu:gloo,cuda:nccl"), ("cuda:3", "cpu:gloo,cuda:nccl")],
)
def test_gpu_process_groups_reduce_cpu_tensors_with_gloo(device, expected):
    assert dist_utils.default_backend(device) == expected


@pytest.mark.parametrize("role", ["policy", "ref", "critic"])
@pytest.mark.parametrize("cpu_offload", [False, True])
def test_every_cuda_role_gets_gloo_beside_nccl(role, cpu_offload):
    # cpu_offload keeps gradients on the CPU and the gradient clip reduces their norms there, which an
    # NCCL-only group cannot do; without offloading the CPU half serves the models broadcast at start
    overrides = [
        "trainer.placement.backend=cuda",
        f"trainer.placement.{role}_num_gpus_per_node=2",
        f"trainer.{role}.fsdp_config.cpu_offload={str(cpu_offload).lower()}",
    ]
    if role == "ref":
        overrides.append("trainer.algorithm.use_kl_loss=true")
    if role == "critic":
        overrides += ["trainer.algorithm.advantage_estimator=gae", "trainer.critic.model.path=x"]
    config = load_config(None, overrides)
    assert dist_utils.default_backend(config.trainer.placement.device) == "cpu:gloo,cuda:nccl"


def test_fsdp_gathers_bf16_parameters_on_cuda_and_reduces_in_float32():
    on_gpu = mixed_precision_policy(torch.device("cuda", 0), bf16=True)
    assert (on_gpu.param_dtype, on_gpu.reduce_dtype) == (torch.bfloat16, torch.float32)
    float32_gpu = mixed_precision_policy(torch.device("cuda"), bf16=False)
    assert (float32_gpu.param_dtype, float32_gpu.reduce_dtype) == (None, torch.float32)
    for bf16 in (False, True):  # a CPU trains in float32 whatever is asked (the config refuses bf16 there)
        on_cpu = mixed_precision_policy(torch.device("cpu"), bf16=bf16)
        assert (on_cpu.param_dtype, on_cpu.reduce_dtype) == (None, torch.float32)


def test_local_shard_is_fsdp2_chunk_of_dim_zero():
    full = torch.arange(10.0).view(5, 2)
    assert torch.equal(local_shard(full, 0, 2), full[:3]) and torch.equal(local_shard(full, 1, 2), full[3:])
    head = torch.ones(1, 4)  # a value head's [1, H] weight: rank 1 holds nothing
    assert local_shard(head, 1, 2).shape == (0, 4) and torch.equal(local_shard(head, 0, 2), head)


# ---------------------------------------------------------------------------------- the random state


def test_fork_rng_saves_every_visible_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert dist_utils.fork_rng_devices() == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert dist_utils.fork_rng_devices() == [0, 1, 2]


def _recording_fork_rng(monkeypatch) -> list[list[int]]:
    """``torch.random.fork_rng`` recording the devices it is asked to save (run over none: no GPU here)."""
    seen: list[list[int]] = []
    real = torch.random.fork_rng

    def recording(devices=None, **kwargs):
        seen.append(list(devices) if devices is not None else None)
        return real(devices=[], **kwargs)

    monkeypatch.setattr(torch.random, "fork_rng", recording)
    monkeypatch.setattr(dist_utils, "fork_rng_devices", lambda: [0, 1])
    return seen


def test_seeded_builds_leave_the_gpus_random_state_alone(monkeypatch):
    seen = _recording_fork_rng(monkeypatch)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    PolicyWorker(tiny_llama, seed=7)
    assert [0, 1] in seen
    assert torch.equal(torch.rand(3), expected)  # the caller's CPU state too

    pytest.importorskip("peft")
    from skyrl_train.training.lora import apply_lora

    seen.clear()
    apply_lora(tiny_llama(), rank=2, alpha=4, targets=["model.layers.0.self_attn.q_proj"], seed=0)
    assert [0, 1] in seen


# ---------------------------------------------------------------------------------- the engine process's GPU


class _DeviceEngine:
    """Just enough of an engine for the engine process's loop: a model with one parameter, counters."""

    def __init__(self) -> None:
        self.model = torch.nn.Linear(1, 1)
        self.stats = {"calls": 1}

    @classmethod
    def create(cls, **options):
        return cls()

    def close(self) -> None:
        pass


def test_engine_process_binds_its_gpu_in_every_thread_that_touches_it(monkeypatch):
    """A receiver's buffer on plain "cuda" lands on the current device, which CUDA keeps per thread: the
    process's main thread and the thread that runs the calls (weight receivers) both bind the engine's GPU,
    so an engine on cuda:1 no longer receives into cuda:0."""
    bound: list[tuple[str, torch.device]] = []
    monkeypatch.setattr(
        torch.cuda, "set_device", lambda d: bound.append((threading.current_thread().name, torch.device(d)))
    )
    for device in ("cpu", "cuda", None):  # nothing to choose: the current device is the engine's
        engine_process.bind_cuda_device(device)
    assert bound == []

    import skyrl_train.inference.base as inference_base

    monkeypatch.setattr(inference_base, "engine_class", lambda backend: _DeviceEngine)
    parent, child = multiprocessing.Pipe()
    serving = threading.Thread(
        target=engine_process._serve, args=(child, "fake", "model", {"device": "cuda:1"}, None), name="serve"
    )
    serving.start()
    try:
        assert parent.poll(30) and parent.recv()[1] == "ready"
        parent.send((1, "stats", (), {}))
        assert parent.poll(30) and parent.recv() == (1, "ok", {"calls": 1})
    finally:
        parent.send((None, "close", (), {}))
        serving.join(30)
    gpu = torch.device("cuda", 1)
    assert ("serve", gpu) in bound
    assert any(name.startswith("engine-calls") and device == gpu for name, device in bound)


# ---------------------------------------------------------------------------------- config rules


@pytest.mark.parametrize(
    "overrides, where",
    [
        ([*VLLM], "trainer.placement.backend=cuda"),
        (["generator.engine_process=true", *CUDA], "trainer.placement.backend=cuda"),
        ([*RAY_CUDA], "colocate_all=true"),
        ([*RAY_CUDA, "trainer.placement.colocate_all=false"], "starts in the engine actor"),
    ],
)
def test_nccl_weight_sync_is_refused_where_two_of_its_ranks_share_a_gpu(overrides, where):
    with pytest.raises(ConfigError) as info:
        load_config(None, [*overrides, "generator.weight_sync_backend=nccl"])
    text = str(info.value)
    assert "two ranks of one NCCL group on one GPU" in text and where in text
    assert "generator.weight_sync_backend=cuda_ipc" in text
    # the strategy for an engine on the trainer's own GPU is accepted there
    load_config(None, [*overrides, "generator.weight_sync_backend=cuda_ipc"])


def test_vllm_temperatures_above_two_are_refused_when_the_config_loads():
    for key in ("sampling_params", "eval_sampling_params"):
        with pytest.raises(ConfigError, match=rf"generator.{key}.temperature=2.5 is above 2.*\[0, 2\]"):
            load_config(None, [*VLLM, f"generator.{key}.temperature=2.5"])
    load_config(None, [*VLLM, "generator.sampling_params.temperature=2.0"])
    load_config(None, ["generator.sampling_params.temperature=2.5"])  # the hf engine samples at any


def test_which_engines_sleep_while_the_policy_trains():
    assert engine_sleeps_while_training(load_config(None, VLLM))  # vllm on the policy's GPUs
    assert engine_sleeps_while_training(load_config(None, RAY_CUDA))
    assert not engine_sleeps_while_training(
        load_config(None, [*RAY_CUDA, "trainer.placement.colocate_all=false"])  # GPUs of its own
    )
    assert not engine_sleeps_while_training(load_config(None, []))  # hf runs the policy's own model
    assert not engine_sleeps_while_training(load_config(None, ["trainer.mode=async"]))  # generates meanwhile
    remote = ["generator.backend=remote", "generator.remote_inference_engine_urls=[h:1]"]
    assert not engine_sleeps_while_training(load_config(None, [*remote, "trainer.sync_weights=false"]))


# ---------------------------------------------------------------------------------- sleep and wake-up


def _recording_engine_class(events: list[str]):
    from skyrl_train.inference.hf import HFEngine

    class RecordingEngine(HFEngine):
        """The hf engine with a model of its own, writing down the calls the trainer makes."""

        runs_shared_model = False

        async def generate(self, prompts, params):
            if not events or events[-1] != "generate":
                events.append("generate")
            return await super().generate(prompts, params)

        async def sleep(self) -> None:
            events.append("sleep")

        async def wake_up(self, tags=None) -> None:
            events.append("wake_up:" + ",".join(tags or ["all"]))

        async def update_weights(self, named_tensors, *, version=None) -> None:
            events.append("sync")
            await super().update_weights(named_tensors, version=version)

    return RecordingEngine


@pytest.mark.slow
def test_a_colocated_engine_sleeps_for_the_update_and_wakes_weights_first(
    tiny_model, math_rows, tmp_path, monkeypatch
):
    import skyrl_train.inference.base as inference_base
    from skyrl_train.loop.trainer import Trainer

    events: list[str] = []
    engine_cls = _recording_engine_class(events)
    monkeypatch.setattr(inference_base, "engine_class", lambda backend: engine_cls)
    config = ray_config(
        tiny_model, math_rows, tmp_path / "run", "trainer.placement.policy_num_gpus_per_node=1"
    )
    assert config.trainer.placement.colocate_all
    with Trainer(config) as trainer:
        assert isinstance(trainer.engine, engine_cls)
        train_batch = trainer.policy.train_batch

        def recording_train_batch(*args, **kwargs):
            events.append("train")
            return train_batch(*args, **kwargs)

        trainer.policy.train_batch = recording_train_batch
        batches = iter(trainer.iterator)
        trainer.train_step(next(batches))
        trainer.train_step(next(batches))
    step = ["generate", "sleep", "train", "wake_up:weights", "sync", "wake_up:kv_cache"]
    assert events == step + step

    # the trainer's side of a layout where the engine has GPUs of its own (which only Ray builds)
    events.clear()
    config.trainer.placement.colocate_all = False
    config.trainer.run_dir = str(tmp_path / "separate")
    with Trainer(config) as trainer:
        trainer.train_step(next(iter(trainer.iterator)))
    assert events == ["generate", "sync"]


# ------------------------------------------------------------------------------ micro-batches and sharding


def _rows(response_lengths: list[int], prompt_len: int = 3, seed: int = 0) -> dict:
    """Rows of distinct prompts with responses of the given lengths (right-padded), random advantages."""
    gen = torch.Generator().manual_seed(seed)
    width = max(response_lengths)
    rows = len(response_lengths)
    input_ids = torch.randint(1, VOCAB, (rows, prompt_len + width), generator=gen)
    attention_mask = torch.ones_like(input_ids)
    for row, length in enumerate(response_lengths):
        attention_mask[row, prompt_len + length :] = 0
    input_ids = input_ids * attention_mask
    response_mask = attention_mask[:, prompt_len:].clone()
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "advantages": torch.randn(rows, width, generator=gen) * response_mask,
    }


def test_balance_splits_the_largest_micro_batches_then_pads():
    tensors = _rows([2, 8, 3])
    whole = list(iter_token_micro_batches(tensors, 3, None))
    assert len(whole) == 1
    three = balance_micro_batches(whole, 3)
    assert [(int(mb["input_ids"].shape[0]), padding) for mb, padding in three] == [(1, False)] * 3
    assert torch.equal(torch.cat([mb["input_ids"] for mb, _ in three]), tensors["input_ids"])
    five = balance_micro_batches(whole, 5)
    assert [padding for _, padding in five] == [False, False, False, True, True]
    assert all(torch.equal(mb["input_ids"], tensors["input_ids"][:1]) for mb, padding in five if padding)
    with pytest.raises(ValueError, match="cannot fit 3 micro-batches into 2"):
        balance_micro_batches([mb for mb, _ in three], 2)


SHORT_AND_LONG = [2, 2, 8, 8]
"""Rank 0's two rows fit in one micro-batch of MAX_TOKENS; rank 1's two need one each."""
MAX_TOKENS = 12
TRAIN_KWARGS = {
    "optimizer_cfg": OptimizerConfig(lr=1e-2, max_grad_norm=1.0),
    "algorithm_cfg": AlgorithmConfig(loss_reduction="token_mean"),
    "micro_batch_size": 2,
    "max_tokens_per_micro_batch": MAX_TOKENS,
    "seed": 0,
}


def rank0_tiny_llama():
    """The model rank 0 builds."""
    torch.manual_seed(1000)
    return tiny_llama()


def rank_dependent_tiny_llama():
    """Each rank builds other weights (and may not move the whole model to its device): the sharded worker
    must end up with rank 0's, one shard each."""
    torch.manual_seed(1000 + dist_utils.get_rank())
    model = tiny_llama()

    def whole_model_to(*args, **kwargs):
        raise AssertionError("the whole model was moved to the device before sharding")

    model.to = whole_model_to
    return model


def _plain(state: dict) -> dict:
    """Tensors as numpy arrays: they cross the queue by value, not in memory of a process that exits."""
    return {name: tensor.numpy() for name, tensor in state.items()}


def _tensors(state: dict) -> dict:
    return {name: torch.from_numpy(array) for name, array in state.items()}


def _rank_main(rank: int, world_size: int, port: int, batch: dict, results) -> None:
    try:
        torch.set_num_threads(1)
        dist_utils.init_process_group(rank, world_size, backend="gloo", master_port=port)
        policy = PolicyWorker(rank_dependent_tiny_llama, **TRAIN_KWARGS)
        initial = policy.full_state_dict()
        rows = len(SHORT_AND_LONG) // world_size
        shard = {key: value[rank * rows : (rank + 1) * rows] for key, value in batch.items()}
        local_count = len(list(iter_token_micro_batches(shard, 2, MAX_TOKENS)))
        metrics = policy.train_step(shard)
        trained = policy.full_state_dict()
        critic = CriticWorker(rank_dependent_tiny_llama, seed=0)
        states = [_plain(state) for state in (initial, trained, critic.full_state_dict())]
        results.put((rank, "ok", (local_count, metrics, *states)))
        dist_utils.destroy_process_group()
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))


@pytest.mark.slow
def test_ranks_with_different_micro_batch_counts_take_the_single_process_step():
    batch = _rows(SHORT_AND_LONG, seed=3)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = dist_utils.find_free_port()
    processes = [
        context.Process(target=_rank_main, args=(rank, 2, port, batch, results), daemon=True)
        for rank in range(2)
    ]
    for process in processes:
        process.start()
    answers = {}
    try:
        for _ in processes:
            try:
                rank, status, payload = results.get(timeout=150)
            except queue.Empty:
                pytest.fail("the two ranks did not finish within 150 s: their collectives no longer pair up")
            assert status == "ok", f"rank {rank} failed:\n{payload}"
            answers[rank] = payload
    finally:
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()
    counts = [answers[rank][0] for rank in range(2)]
    assert counts == [1, 2]  # what the token budget cuts: the ranks needed padding to stay in step

    reference = PolicyWorker(rank0_tiny_llama, **{**TRAIN_KWARGS, "micro_batch_size": 4})
    _, metrics, *states = answers[0]
    initial, trained, critic_state = (_tensors(state) for state in states)
    expected_initial = reference.full_state_dict()
    for name, tensor in expected_initial.items():  # rank 0's weights in every shard, not rank 1's own
        torch.testing.assert_close(initial[name], tensor, atol=0, rtol=0)
    expected_metrics = reference.train_step(batch)
    for key in ("policy/loss", "policy/pg_loss", "policy/grad_norm", "policy/entropy"):
        assert metrics[key] == pytest.approx(expected_metrics[key], rel=1e-4, abs=1e-6), key
    for name, tensor in reference.full_state_dict().items():
        torch.testing.assert_close(trained[name], tensor, atol=1e-5, rtol=0)
    assert any(not torch.equal(trained[name], initial[name]) for name in initial), "the step moved nothing"
    # the critic's [1, H] value head has one row: rank 1 holds none of it and still gets rank 0's
    for name, tensor in CriticWorker(rank0_tiny_llama, seed=0).full_state_dict().items():
        torch.testing.assert_close(critic_state[name], tensor, atol=0, rtol=0)
