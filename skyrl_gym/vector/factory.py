"""``make_vec``: a vector of registered environments, blocking or asyncio.

Apart from :mod:`.threaded` and :mod:`.asyncio` so that neither imports the other.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_gym.envs.registration import make, spec
from skyrl_gym.vector.asyncio import AsyncVectorEnv
from skyrl_gym.vector.threaded import Timeouts, VectorEnv

__all__ = ["make_vec"]


def make_vec(
    env_id: str,
    num_envs: int,
    *,
    make_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    max_workers: int | None = None,
    step_timeout_s: Timeouts = None,
    init_timeout_s: Timeouts = None,
    close_timeout_s: float | None = 10.0,
    asynchronous: bool = False,
) -> VectorEnv:
    """Make ``num_envs`` copies of the registered environment ``env_id`` with :func:`skyrl_gym.make`.

    ``make_kwargs`` is one dict of :func:`~skyrl_gym.make` arguments for all (``env_config``, ``extras``,
    ``budget``, ``errors``; the same objects are passed to every environment) or one dict per environment.
    ``asynchronous=True`` returns an :class:`~skyrl_gym.vector.asyncio.AsyncVectorEnv`. The other arguments
    are :class:`VectorEnv`'s.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    spec(env_id)  # an unknown id fails here, with the registry's suggestions
    if make_kwargs is None or isinstance(make_kwargs, Mapping):
        per_env = [dict(make_kwargs or {})] * num_envs
    else:
        per_env = [dict(kwargs) for kwargs in make_kwargs]
        if len(per_env) != num_envs:
            raise ValueError(
                f"make_kwargs has {len(per_env)} entries; expected one per environment ({num_envs})"
            )
    factories = [functools.partial(make, env_id, **kwargs) for kwargs in per_env]
    cls: type[VectorEnv] = AsyncVectorEnv if asynchronous else VectorEnv
    return cls(
        factories,
        max_workers=max_workers,
        step_timeout_s=step_timeout_s,
        init_timeout_s=init_timeout_s,
        close_timeout_s=close_timeout_s,
    )
