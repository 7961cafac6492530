"""`RemoteEngine`: any OpenAI-compatible server's `/v1/completions` as an inference engine.

Made for `vllm serve` and servers that speak its dialect: the prompt goes as a list of token ids, and the
reply must carry the generated token ids, either as `choices[i].token_ids` (`return_token_ids`, vLLM >= 0.10)
or as `logprobs.tokens` of the form "token_id:123" (`return_tokens_as_token_ids`); both are requested.
Text is never re-tokenised: a server that returns neither is refused with a clear error.

One HTTP request per prompt, through the project's HTTP client (`skyrl_gym.http_client`: httpx, with
retries) from a thread pool, so any server works; `max_concurrency` bounds the requests in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from skyrl_gym.http_client import HttpClient
from skyrl_train.inference.base import GenerationOutput, InferenceEngine, SamplingParams


def _completions_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    if "://" not in url:  # "host:port"
        url = "http://" + url
    return (url if url.endswith("/v1") else url + "/v1") + "/completions"


class RemoteEngineError(RuntimeError):
    """The server could not be reached, timed out, refused the request or answered something unusable."""


class RemoteEngine(InferenceEngine):
    """Client of an OpenAI-compatible completions server, token ids in and out.

    `base_url`: the server root, with or without `/v1` (e.g. "http://127.0.0.1:8000" or "127.0.0.1:8000"),
    or a list of them (replicas serving the same model): requests then go to them in turn.
    `model_name`: the served model name (`vllm serve NAME`); the server's only model when None.
    `timeout_s`: seconds one request may take. `max_retries`: retries on connection errors and 5xx/429
    answers, with exponential backoff. `api_key`: sent as a bearer token. `extra_body`: extra request fields
    (e.g. `{"repetition_penalty": 1.1}`).
    `weight_update_fn`: plain servers cannot receive weights, so `update_weights` raises unless a callable is
    given here that pushes `(name, tensor)` pairs to the server some other way.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        tokenizer: Any = None,
        model_name: str | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 2,
        max_concurrency: int = 64,
        api_key: str | None = None,
        extra_body: dict[str, Any] | None = None,
        weight_update_fn: Callable[[Iterable[tuple[str, Any]]], None] | None = None,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("RemoteEngine needs at least one server URL")
        self.urls = [_completions_url(url) for url in urls]
        self.url = self.urls[0]
        self._next = itertools.count()
        self._tokenizer = tokenizer
        self.model_name = model_name
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.api_key = api_key
        self.extra_body = dict(extra_body or {})
        self.weight_update_fn = weight_update_fn
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="remote-engine")
        # a request that timed out is not sent again: a server too slow to answer only gets slower with more
        self._http = HttpClient(retries=max_retries, retry_timeouts=False, max_connections=max_concurrency)

    @classmethod
    def from_config(
        cls,
        generator: Any,
        *,
        model_path: str,
        tokenizer: Any = None,
        model: Any = None,
        seed: int | None = None,
        device: str = "cpu",
    ) -> RemoteEngine:
        """Build from the config's `generator` section: a client of every server in
        `remote_inference_engine_urls`, asking for the model named `model_path` (its tokenizer is loaded
        from there when none is given)."""
        if tokenizer is None:
            from skyrl_train.models import load_tokenizer

            tokenizer = load_tokenizer(model_path)
        return cls(generator.remote_inference_engine_urls, tokenizer=tokenizer, model_name=model_path)

    @classmethod
    def create(
        cls, *, model_path: str | None = None, model: Any = None, tokenizer: Any = None, **options: Any
    ) -> RemoteEngine:
        """A client of `options["base_url"]` (one URL or several) serving `model_name` (default
        `model_path`, whose tokenizer is loaded when none is given); other options go to the constructor."""
        if "base_url" not in options:
            raise ValueError("make_engine('remote') needs base_url, e.g. 'http://127.0.0.1:8000'")
        if tokenizer is None and model_path is not None:
            from skyrl_train.models import load_tokenizer

            tokenizer = load_tokenizer(model_path)
        return cls(
            options.pop("base_url"),
            tokenizer=tokenizer,
            model_name=options.pop("model_name", model_path),
            **options,
        )

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerationOutput]:
        """One request per prompt, sent concurrently; raises `RemoteEngineError` if any fails."""
        loop = asyncio.get_running_loop()
        bodies = [self._body(prompt, params, i) for i, prompt in enumerate(prompts)]
        replies = await asyncio.gather(
            *(
                loop.run_in_executor(
                    self._pool, self._post, body, self.urls[next(self._next) % len(self.urls)]
                )
                for body in bodies
            )
        )
        return [self._parse(reply) for reply in replies]

    async def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        if self.weight_update_fn is None:
            raise NotImplementedError(
                "a plain OpenAI-compatible server cannot receive weights: use the remote engine for evaluation "
                "or a frozen policy, or pass RemoteEngine(weight_update_fn=...) that pushes them to your server"
            )
        await asyncio.to_thread(self.weight_update_fn, named_tensors)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()

    # ----------------------------------------------------------------- wire format

    def _body(self, prompt: Sequence[int], params: SamplingParams, index: int) -> dict[str, Any]:
        ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError(f"prompt {index} is empty")
        body: dict[str, Any] = {
            "prompt": ids,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 0,  # the sampled token's logprob only
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        if self.model_name is not None:
            body["model"] = self.model_name
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if params.min_p > 0:
            body["min_p"] = params.min_p
        if params.stop:
            body["stop"] = list(params.stop)
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        if params.ignore_eos:
            body["ignore_eos"] = True
        if params.seed is not None:  # a distinct stream per prompt, like the other engines
            body["seed"] = (params.seed * 0x9E3779B1 + index) % (1 << 63)
        body.update(self.extra_body)
        return body

    def _post(self, body: dict[str, Any], url: str | None = None) -> dict[str, Any]:
        from skyrl_gym.http_client import NoAnswer

        url = url or self.url
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            reply = self._http.post(url, json.dumps(body).encode(), headers=headers, timeout=self.timeout_s)
        except NoAnswer as error:
            if error.kind == "timeout":
                raise RemoteEngineError(f"no answer from {url} within {self.timeout_s} s") from error
            raise RemoteEngineError(
                f"cannot reach {url}: {error.reason}; is the server running and the URL right?"
            ) from error
        if reply.status >= 400:
            detail = reply.content.decode(errors="replace")[:1000]
            raise RemoteEngineError(f"{url} answered HTTP {reply.status}: {detail}")
        try:
            return json.loads(reply.content)
        except ValueError as error:
            raise RemoteEngineError(f"{url} answered non-JSON: {reply.content[:200]!r}") from error

    def _parse(self, reply: dict[str, Any]) -> GenerationOutput:
        try:
            choice = reply["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise RemoteEngineError(f"{self.url} answered without choices: {str(reply)[:300]}") from None
        logprobs = choice.get("logprobs") or {}
        token_ids = choice.get("token_ids")
        if token_ids is None:
            tokens = logprobs.get("tokens") or []
            if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
                token_ids = [int(t.split(":", 1)[1]) for t in tokens]
            elif not tokens and choice.get("text") == "":
                token_ids = []
            else:
                raise RemoteEngineError(
                    f"{self.url} returned no token ids; the engine needs a server that honours "
                    "return_token_ids or return_tokens_as_token_ids (vLLM does)"
                )
        token_logprobs = logprobs.get("token_logprobs")
        if token_logprobs is not None and len(token_logprobs) != len(token_ids):
            token_logprobs = None
        finish = choice.get("finish_reason")
        stop_reason = {"stop": "stop", "length": "length"}.get(finish, "abort")
        stop_value = choice.get("stop_reason")
        return GenerationOutput(
            token_ids=[int(t) for t in token_ids],
            logprobs=[float(x) for x in token_logprobs] if token_logprobs is not None else None,
            stop_reason=stop_reason,  # type: ignore[arg-type]
            stop_string=stop_value if isinstance(stop_value, str) else None,
        )
