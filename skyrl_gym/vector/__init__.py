"""Many environments initialised and stepped concurrently; a failure in one stays with that one.

    from skyrl_gym.vector import make_vec

    with make_vec("math", 8, make_kwargs=[{"extras": row} for row in rows], step_timeout_s=30) as vec:
        starts = vec.init(prompts)              # list[InitResult], in order
        outputs = vec.step(actions)             # list[EnvStepOutput | None], in order
        # a step that raised or timed out: {"observations": [], "reward": 0.0, "done": True,
        #                                   "metadata": {"end": "error", "error": "step timed out after 30 s"}}

- :class:`VectorEnv` (``threaded.py``): blocking batch calls on a pool of daemon threads.
- :class:`AsyncVectorEnv`, :func:`astep`, :func:`ainit`, :func:`aclose`, :func:`acall` (``asyncio.py``): the
  same for asyncio callers.
- :class:`InitResult`, :class:`BatchStats`, :func:`error_output` (``results.py``): what comes back.
"""

from skyrl_gym.vector.asyncio import AsyncVectorEnv, CallTimedOut, acall, aclose, ainit, astep
from skyrl_gym.vector.factory import make_vec
from skyrl_gym.vector.results import BatchStats, InitResult, error_output
from skyrl_gym.vector.threaded import VectorEnv

__all__ = [
    "AsyncVectorEnv",
    "BatchStats",
    "CallTimedOut",
    "InitResult",
    "VectorEnv",
    "acall",
    "aclose",
    "ainit",
    "astep",
    "error_output",
    "make_vec",
]
