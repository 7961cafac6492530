"""Guards for rewards a policy must not be able to forge: a kit for SWE and terminal datasets.

RL finds every way to earn reward without doing the task, and every way to turn its own failure into an
``error`` end (error episodes are left out of the loss). The built-in ``swe`` environment is graded with these
guards, and a user's own SWE or terminal dataset can use them the same way:

- :mod:`.diffscreen`: the agent's diff cut down to the instance's source folders (test files, pytest
  configuration, byte code and files elsewhere are dropped, and named), and screened for changes to the test
  machinery (``pytest``/``_pytest``, import hooks, ``atexit``, report paths, entry points, ``.pth`` and
  ``sitecustomize`` files): such a diff scores 0 with the reason named;
- :mod:`.runner`: the clean-interpreter pytest runner (``python3 -I``, plugin autoload off, the report plugin
  imported before the code under test, from a folder the agent's diff cannot reach);
- :mod:`.archive`: a tar archive of the agent's files unpacked on the host without following a link, so that
  the diff is taken outside anything the agent controlled;
- :mod:`.history`: the git history an agent is given, scrubbed to one commit (no future commits, tags,
  reflog, remotes or stashes), and a check of it.

Hidden tests never enter the agent's workspace: a backend copies them into the fresh copy that verification
runs in (see :mod:`skyrl_gym.envs.swe.backends`).
"""

from skyrl_gym.integrity.archive import UnsafeArchive, safe_extract
from skyrl_gym.integrity.diffscreen import MACHINERY_MARKERS, Screened, screen_diff, split_diff
from skyrl_gym.integrity.history import HistoryProblem, history_problems, scrub_history_script
from skyrl_gym.integrity.runner import RUNNER_MODULE, RUNNER_SOURCE, clean_pytest_command

__all__ = [
    "MACHINERY_MARKERS",
    "RUNNER_MODULE",
    "RUNNER_SOURCE",
    "HistoryProblem",
    "Screened",
    "UnsafeArchive",
    "clean_pytest_command",
    "history_problems",
    "safe_extract",
    "screen_diff",
    "scrub_history_script",
    "split_diff",
]
