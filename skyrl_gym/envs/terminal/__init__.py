"""The ``terminal`` environment: tasks in the Harbor / Terminal-Bench 2 folder format, played with shell
commands in a Docker container and verified by the task's own tests after the episode (see :mod:`.env`)."""

from skyrl_gym.envs.terminal.tasks import TerminalTask, find_tasks, load_split, load_task

__all__ = ["TerminalTask", "find_tasks", "load_split", "load_task"]
