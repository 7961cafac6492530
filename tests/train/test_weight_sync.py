"""Weight sync strategies: after a push, the engine's logits equal the trainer's model's logits.

``in_process`` runs against an hf engine in this process, ``shared_memory`` and ``gloo`` against an hf engine
in its own process (which loaded the model itself); ``nccl`` and ``cuda_ipc`` need a GPU and are marked.
"""

from __future__ import annotations

import concurrent.futures
import copy

import pytest

torch = pytest.importorskip("torch")

from skyrl_gym.registries import UnknownNameError  # noqa: E402
from skyrl_train.config import SamplingParams  # noqa: E402
from skyrl_train.inference.hf import HFEngine  # noqa: E402
from skyrl_train.inference.process import EngineProcess  # noqa: E402
from skyrl_train.inference.weight_sync import WEIGHT_SYNCS, make_weight_sync  # noqa: E402

from .tiny_models import special_ids, tiny_llama  # noqa: E402

PROBE = [1, 42, 7, 99, 5, 300, 12]


@pytest.fixture(scope="module")
def trained(tokenizer):
    """The model the engines start from (saved) and a trained one with other weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        other = tiny_llama(vocab_size=len(tokenizer), max_position_embeddings=512, **special_ids(tokenizer))
    return other.eval()


def _trainer_logits(model, threads: int | None = None) -> torch.Tensor:
    """The model's logits on PROBE, with ``threads`` threads if given: an engine process computes with its
    own thread count (``torch_threads``), another count may sum in another order, and these tests compare
    bit for bit."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        with torch.no_grad():
            return model(input_ids=torch.tensor([PROBE])).logits[0].float()
    finally:
        torch.set_num_threads(before)


def test_registry_names_and_did_you_mean():
    assert set(WEIGHT_SYNCS.names()) >= {"in_process", "shared_memory", "gloo", "nccl", "cuda_ipc"}
    with pytest.raises(UnknownNameError, match="did you mean 'gloo'"):
        make_weight_sync("glo")


def test_in_process_copies_in_place(tiny_model, tokenizer, trained):
    from skyrl_train.models import load_model

    with HFEngine(load_model(tiny_model), tokenizer) as engine:
        before = engine.logits(PROBE)
        assert not torch.allclose(before, _trainer_logits(trained))
        sync = make_weight_sync("in_process")
        report = sync.push(engine, trained.state_dict().items())
        assert torch.equal(engine.logits(PROBE), _trainer_logits(trained))
        assert report.version == engine.policy_version == 1
        assert report.tensors == len(trained.state_dict())


def test_in_process_shared_module_copies_nothing(tokenizer, trained):
    model = copy.deepcopy(trained)
    with HFEngine(model, tokenizer) as engine:
        report = make_weight_sync("in_process").push(engine, model.state_dict().items())
        assert engine.load_weights(model.state_dict().items()) == 0  # its own storage: skipped
        assert report.version == 1 and engine.policy_version == 2
        with torch.no_grad():
            model.lm_head.weight.mul_(2.0)  # a training step on the shared module reaches the engine at once
        assert torch.equal(engine.logits(PROBE), _trainer_logits(model))


@pytest.fixture(scope="module")
def engine_process(tiny_model, tokenizer):
    engine = EngineProcess(tiny_model, tokenizer=tokenizer, torch_threads=1)
    yield engine
    engine.close()


@pytest.mark.parametrize("strategy", ["shared_memory", "gloo"])
def test_engine_process_receives(strategy, engine_process, trained):
    engine = engine_process
    start = engine.policy_version
    sync = make_weight_sync(strategy)
    try:
        model = copy.deepcopy(trained)
        for step in range(2):  # the second push reuses the block / group set up by the first
            report = sync.push(engine, model.state_dict().items())
            assert torch.equal(engine.logits(PROBE), _trainer_logits(model, threads=1)), (strategy, step)
            assert report.version == start + step + 1
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.01 * torch.randn_like(p))
        params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
        (out,) = engine.generate_sync([PROBE], params)
        assert out.policy_versions == [start + 2] * 8
    finally:
        sync.close()


@pytest.mark.parametrize("strategy", ["shared_memory", "gloo"])
def test_a_tensor_damaged_in_transit_is_named(strategy, engine_process, trained, monkeypatch):
    """One byte of one tensor flipped after the trainer digested it and before the engine reads it: the
    engine's digest of what arrived differs, and the push fails naming that tensor."""
    import skyrl_train.inference.weight_sync.gloo as gloo
    import skyrl_train.inference.weight_sync.shared_memory as shared_memory
    from skyrl_train.inference.weight_sync.gate import WeightSyncError

    victim = "model.layers.1.self_attn.v_proj.weight"

    def flip(flat, slots) -> None:
        (slot,) = [s for s in slots if s.name == victim]
        flat[slot.offset + 3] ^= 0x10

    if strategy == "shared_memory":
        fill = shared_memory.SharedMemorySync._fill

        def damaging_fill(self, tensors):
            fill(self, tensors)
            flip(shared_memory._flat(self._block), self._slots)

        monkeypatch.setattr(shared_memory.SharedMemorySync, "_fill", damaging_fill)
    else:
        pack = gloo.pack

        def damaging_pack(tensors, device):
            slots, flat = pack(tensors, device)
            flip(flat, slots)
            return slots, flat

        monkeypatch.setattr(gloo, "pack", damaging_pack)
    sync = make_weight_sync(strategy)
    try:
        with pytest.raises(WeightSyncError, match=victim.replace(".", r"\.")):
            sync.push(engine_process, trained.state_dict().items())
    finally:
        sync.close()
    monkeypatch.undo()
    sync = make_weight_sync(strategy)  # a clean push puts the engine right again
    try:
        sync.push(engine_process, trained.state_dict().items())
        assert torch.equal(engine_process.logits(PROBE), _trainer_logits(trained, threads=1))
    finally:
        sync.close()


def test_strategies_refuse_the_wrong_placement(tokenizer, trained, engine_process):
    with HFEngine(copy.deepcopy(trained), tokenizer) as engine:
        for name in ("shared_memory", "gloo"):
            with pytest.raises(ValueError, match="engine_process=true"):
                make_weight_sync(name).push(engine, [])
    with pytest.raises(ValueError, match="use shared_memory or gloo"):
        make_weight_sync("in_process").push(engine_process, [])


def test_engine_process_generates_like_the_engine_here(tiny_model, tokenizer, engine_process):
    from skyrl_train.models import load_model

    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    with HFEngine(load_model(tiny_model), tokenizer) as here:
        start = engine_process.policy_version
        sync = make_weight_sync("shared_memory")
        sync.push(engine_process, here.model.state_dict().items())
        sync.close()
        expected = here.generate_sync([PROBE, PROBE[:3]], params)
    got = engine_process.generate_sync([PROBE, PROBE[:3]], params)
    assert [o.token_ids for o in got] == [o.token_ids for o in expected]
    assert all(o.policy_versions == [start + 1] * 12 for o in got)


def test_an_answer_to_a_cancelled_request_is_dropped_and_the_reader_goes_on(engine_process):
    """A caller that cancelled its request (the asynchronous loop cancels the groups in flight when it stops)
    before the answer came: the reader drops the answer and still answers the next requests."""
    cancelled: concurrent.futures.Future = concurrent.futures.Future()
    assert cancelled.cancel()
    with engine_process._lock:  # a request whose future is already cancelled when its answer arrives
        request_id = next(engine_process._ids)
        engine_process._futures[request_id] = cancelled
        engine_process._conn.send((request_id, "stats", (), {}))
    assert engine_process.call("stats", timeout=120)["generated_tokens"] >= 0  # answered after it
    assert engine_process._reader.is_alive() and request_id not in engine_process._futures


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["nccl", "cuda_ipc"])
def test_gpu_strategies_into_an_engine_process(strategy, tiny_model, tokenizer, trained):
    """nccl: the engine on a second GPU; cuda_ipc: on the trainer's own GPU."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if strategy == "nccl" and torch.cuda.device_count() < 2:
        pytest.skip("nccl needs the engine and the trainer on two different GPUs")
    engine_device = "cuda:1" if strategy == "nccl" else "cuda:0"
    engine = EngineProcess(tiny_model, tokenizer=tokenizer, device=engine_device)
    sync = make_weight_sync(strategy)
    try:
        model = copy.deepcopy(trained).to("cuda:0")
        report = sync.push(engine, model.state_dict().items())
        with torch.no_grad():
            expected = model(input_ids=torch.tensor([PROBE], device="cuda:0")).logits[0].float().cpu()
        torch.testing.assert_close(engine.logits(PROBE), expected)
        assert report.version == 1
    finally:
        sync.close()
        engine.close()
