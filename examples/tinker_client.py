"""A client of `skyrl-train serve`, written with the official `tinker` client: one training step, one sample.

    skyrl-train serve --port 8000 --store-dir runs/tinker       # in another shell (the embedded model, CPU)
    TINKER_API_KEY=tml-local python examples/tinker_client.py --base-url http://127.0.0.1:8000

The same script runs against any Tinker service; here the base model is the server's "embedded" SmolLM2,
trained through a LoRA adapter.
"""

from __future__ import annotations

import argparse
import math
import os

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="the server (default %(default)s)")
parser.add_argument("--base-model", default="embedded", help="a base model the server offers")
args = parser.parse_args()

os.environ.setdefault(
    "TINKER_API_KEY", "tml-local"
)  # the client wants a key in this format; the server checks none
os.environ.setdefault("TINKER_TELEMETRY", "0")
import tinker  # noqa: E402  (reads the variables above)
from tinker import types  # noqa: E402

service = tinker.ServiceClient(base_url=args.base_url)
training = service.create_lora_training_client(base_model=args.base_model, rank=4, seed=0).result()
tokenizer = training.get_tokenizer()  # the model's tokenizer, from a local folder

# One supervised example: next-token prediction on prompt + answer, the loss on the answer's tokens only.
prompt = tokenizer.encode("Question: what is the capital of France?\nAnswer:")
answer = tokenizer.encode(" Paris.")
tokens = prompt + answer
datum = types.Datum(
    model_input=types.ModelInput.from_ints(tokens[:-1]),  # inputs, and the next token as the target
    loss_fn_inputs={"target_tokens": tokens[1:], "weights": [0.0] * (len(prompt) - 1) + [1.0] * len(answer)},
)

# A training step: the gradients of the loss, then one Adam update of the adapter.
backward = training.forward_backward([datum], "cross_entropy").result()
step = training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
loss = backward.metrics["loss:sum"]
print(f"loss: {loss:.4f} (finite: {math.isfinite(loss)})  grad norm: {step.metrics.get('grad_norm:mean')}")

# Sample from the updated weights.
sampler = training.save_weights_and_get_sampling_client().result()
params = types.SamplingParams(max_tokens=8, temperature=0.0, seed=0)
result = sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result()
print("sampled:", repr(tokenizer.decode(result.sequences[0].tokens)))
service.close("success").result()
