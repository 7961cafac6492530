"""``TerminalEnv``: a Linux terminal task in a Docker container, verified by the task's tests after the episode.

The stages are apart, as a dispatcher schedules them:

- set-up (``init``): the task's image is built if needed (cached by the folder's content) and a container
  started for the episode (from a pool of started ones with ``env_config.pool``); ``info["setup_s"]``;
- the episode (``step``): each turn the model writes shell commands, as ``<bash>...</bash>`` blocks or ``bash``
  tool calls (``<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>``). They run, in order,
  in one persistent bash (cwd, variables and background jobs live across turns) as an unprivileged user without
  network; the observation shows each command's output (stdout and stderr together, as a terminal shows them),
  exit code and how long it took. A command that runs past ``command_timeout_s`` is interrupted and the shell
  stays usable. ``<submit/>`` (or a ``submit`` tool call) ends the episode; so do ``max_turns`` replies and the
  task's agent timeout (``[agent] timeout_sec``), as truncated;
- verification (:meth:`TerminalEnv.verify`, run when the episode ends): every process of the agent's is
  killed, and the task's ``tests/test.sh`` runs, under the task's verifier timeout, apart from anything the
  agent could prepare: in a new container holding a copy of the episode's work folder, with new root-owned
  ``/tests`` (the task's ``tests/``, which never enter the agent's container) and ``/logs``, as root with a
  clean environment; the reward is what it wrote to ``/logs/verifier/reward.txt``. Its
  time, exit code and reward are reported apart from the steps, in ``metadata["verification"]`` of the last step
  and in :attr:`TerminalEnv.verification`. After ``defer_verification()`` (a runner that schedules verification
  as its own stage) the last step does not verify (reward 0.0, ``metadata["verification"] == "deferred"``) and
  ``evaluate()`` does, returning the verification with its reward.

Made without a task, ``reset(seed=...)`` draws one from the test split of ``datasets/terminal``.
"""

from __future__ import annotations

import base64
import math
import threading
import time
from pathlib import Path
from typing import Any

from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import ConversationType, task_ground_truth
from skyrl_gym.envs.shell_task import CommandRun, ShellTaskEnv
from skyrl_gym.envs.terminal.tasks import TerminalTask, default_tasks_dir, load_split, load_task, task_image
from skyrl_gym.settings import Count, Flag, NonNegativeInt, PathText, PositiveNumber, read_settings, settings

__all__ = ["TerminalEnv", "TerminalEnvConfig", "instruction_prompt", "SYSTEM_PROMPT"]

SYSTEM_PROMPT = (
    "You are working in a Linux terminal (bash) to complete a task. Run shell commands by writing them in "
    "<bash>...</bash> (or with the bash tool: "
    '<tool_call>{"name": "bash", "arguments": {"command": "..."}}</tool_call>); you will see each '
    "command's output, exit code and duration. The shell keeps its state (current folder, variables, "
    "background jobs) between commands. There is no network. When the task is done, write <submit/>."
)


def instruction_prompt(task: TerminalTask) -> ConversationType:
    """The chat prompt of a task: the protocol as a system message, the instruction as the user's."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.instruction.strip()},
    ]


@settings(frozen=True)
class TerminalEnvConfig:
    """The environment's settings (``env_config``); every field has a default."""

    max_turns: Count = 30
    """Replies per episode when the task's ``extras`` do not say (``extras["max_turns"]`` wins)."""
    tasks_dir: PathText | None = None
    """Where task folders named by a row are found (default: ``$SKYRL_TERMINAL_TASKS`` or the repository's
    ``datasets/terminal/tasks``)."""
    command_timeout_s: PositiveNumber = 30.0
    """Wall-clock seconds one command may run before it is interrupted."""
    max_commands_per_turn: Count = 4
    """Commands run per reply; later ones are skipped with a note."""
    max_output_chars: Count = 4000
    """Characters of one command's output shown (its beginning and end are kept)."""
    max_processes: Count = 256
    """Processes and threads alive at once in the container."""
    pool: NonNegativeInt = 0
    """Containers per task image kept started ahead of time (shared by the episodes of this process)."""
    timings: Flag = True
    """Show how long each command and the verification took (observations and metadata); ``False`` makes equal
    actions give byte-equal episodes."""

    @classmethod
    def from_env_config(cls, env_config: Any) -> TerminalEnvConfig:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        return read_settings(cls, env_config, "terminal")


_pools: dict[tuple, Any] = {}
_pools_lock = threading.Lock()


def _pool_for(size: int, options: dict[str, Any]) -> Any:
    """The process's pool of started containers for one image and set of limits."""
    from skyrl_gym.runtime.docker import ContainerPool

    key = (size, tuple(sorted((k, repr(v)) for k, v in options.items())))
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ContainerPool(size, **options)
        return pool


class TerminalEnv(ShellTaskEnv):
    """A terminal task (SkyRL constructor: ``TerminalEnv(env_config, extras)``).

    ``extras`` names the task: ``task_path`` (a task folder) or ``reward_spec["ground_truth"]`` (a task name
    under ``tasks_dir``). ``step`` metadata holds the ``turn``, the ``commands`` run (exit code, duration,
    timed_out, oom, output_truncated, restarted), ``submitted``, and on the last step the ``verification``.
    The episode protocol (parsing, budgets, observations, deferred verification) is
    :class:`~skyrl_gym.envs.shell_task.ShellTaskEnv`'s.
    """

    supports_reuse = True
    hostile_actions = (
        "<bash>:(){ :|:& };:</bash>",
        "<bash>python3 -c 'x = bytearray(8 * 1024 ** 3)'</bash>",
        "<bash>dd if=/dev/zero of=fill bs=1M count=100000; dd if=/dev/zero of=/tmp/fill bs=1M</bash>",
        "<bash>yes 'gigabytes of output'</bash>",
        "<bash>curl -sS -m 3 http://1.1.1.1/ ; nc -w 2 -z 8.8.8.8 53</bash>",
        "<bash>mount -t tmpfs x /mnt; chroot / true; echo 1 > /proc/sys/kernel/panic; sudo true</bash>",
        "<bash>(sleep 1000 &) ; nohup sleep 1000 & setsid sleep 1000 &</bash>",
        "<bash>exit 7</bash>",
        "<bash>mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; chmod 444 /logs/verifier/reward.txt; "
        "chmod 555 /logs/verifier /logs</bash>",
        "<bash>d=$(python3 -c 'import site; print(site.getusersitepackages())'); mkdir -p $d; "
        "echo 'import os; os._exit(0)' > $d/forge.pth</bash>",
        "<bash>mkdir -p /tests/json; echo 'import os; os._exit(0)' > /tests/json/__init__.py; chmod 555 /tests/json"
        "</bash>",
        "<bash>( setsid nohup bash -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' "
        "</dev/null >/dev/null 2>&1 & ) ; disown -a</bash>",
        "<bash>touch /tests/x; chmod 555 /tests; dd if=/dev/zero of=/logs/fill bs=1M 2>/dev/null; chmod 555 /logs"
        "</bash>",
        "<bash>( setsid bash -c 'while :; do sleep 100000 & done' </dev/null >/dev/null 2>&1 & ) ; sleep 2</bash>",
        "<bash>kill -9 -1</bash>",
    )
    """Commands the container must contain without failing: fork bomb, memory hog, disk fill, gigabytes of output,
    network, privileged operations, processes left behind, a shell that exits; and attacks on the verification:
    a forged read-only reward, a user-site ``.pth`` and a module shadowing the checker's, a loop rewriting the
    reward, a read-only and full ``/tests`` and ``/logs``, every process id held, every process killed."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = TerminalEnvConfig.from_env_config(env_config)
        self.task: TerminalTask | None = None
        if extras is not None:
            ground_truth = task_ground_truth(extras, "terminal")
            self.task = self._resolve_task(self.extras.get("task_path"), ground_truth)
        self.max_turns = self._episode_max_turns()
        self.container: Any = None
        self.shell: Any = None
        self.setup_s = 0.0
        self._options: dict[str, Any] | None = None
        self._adopted: Any = getattr(self, "_adopted", None)
        """A started container handed over by :meth:`reuse`, restored, for the next ``init``."""
        self.container_reused = False
        """Whether this episode runs in a container an earlier task started (see :meth:`reuse`)."""
        self.reuses: int = getattr(self, "reuses", 0)
        """Tasks this environment took over with :meth:`reuse` (the container they did not start)."""

    def _resolve_task(self, task_path: Any, ground_truth: Any) -> TerminalTask:
        root = Path(self.config.tasks_dir) if self.config.tasks_dir else default_tasks_dir()
        if task_path:
            path = Path(str(task_path))
            return load_task(path if path.is_absolute() or path.is_dir() else root / path)
        name = ground_truth.get("task") if isinstance(ground_truth, dict) else ground_truth
        if not isinstance(name, str) or not name:
            raise ValueError(
                "terminal needs a task: extras={'task_path': '<task folder>'} or "
                "extras={'reward_spec': {'method': 'tests', 'ground_truth': '<task name>'}}"
            )
        return load_task(root / name)

    # -- tasks ----------------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """A task of the test split of ``datasets/terminal``, the same one for the same seed."""
        root = Path(self.config.tasks_dir) if self.config.tasks_dir else None
        tasks = load_split("test", root)
        task = tasks[(seed or 0) % len(tasks)]
        return {
            "prompt": instruction_prompt(task),
            "extras": {
                "reward_spec": {"method": "tests", "ground_truth": task.name},
                "task_path": str(task.path),
            },
        }

    def reference_action(self) -> list[str] | None:
        """The task's ``solution/solve.sh`` run in the shell, then ``<submit/>`` (which earns 1.0)."""
        solution = None if self.task is None else self.task.solution
        if solution is None:
            return None
        return [f"<bash>{self._solution_command(solution)}</bash>", "<submit/>"]

    @staticmethod
    def _solution_command(solution: str) -> str:
        encoded = base64.b64encode(solution.encode()).decode()
        return f"echo {encoded} | base64 -d > /tmp/solve.sh && bash /tmp/solve.sh"

    def reference_tool_calls(self) -> list[dict[str, Any]] | None:
        """The reference solution as OpenAI-style tool calls: ``bash`` running ``solve.sh``, then ``finish``."""
        solution = None if self.task is None else self.task.solution
        if solution is None:
            return None
        return [
            {"name": "bash", "arguments": {"command": self._solution_command(solution)}},
            {"name": "finish", "arguments": {"answer": "done"}},
        ]

    def workspace(self) -> Any:
        """The episode's container: commands in its persistent shell, files through the container."""
        self._start()
        from skyrl_gym.tools.workspace import ContainerWorkspace

        return ContainerWorkspace(self.container, self.shell, max_output_chars=self.config.max_output_chars)

    # -- set-up ---------------------------------------------------------------------------------------------
    def _container_options(self, task: TerminalTask, image: str) -> dict[str, Any]:
        from skyrl_gym.runtime import Limits

        limits = Limits(
            timeout_s=self.config.command_timeout_s,
            memory_mb=task.memory_mb,
            max_processes=self.config.max_processes,
            max_file_mb=min(task.storage_mb, 1024),
            max_output_bytes=64 * 1024,
        )
        return {
            "image": image,
            "limits": limits,
            "cpus": task.cpus,
            "disk_mb": task.storage_mb,
            "network": task.allow_internet,
        }

    def _start(self) -> None:
        """Set-up: build the task's image if needed and start the episode's container and shell."""
        if self.container is not None:
            return
        if self.task is None:
            raise ValueError(
                "TerminalEnv needs a task: make it with extras={'task_path': ...} (or a row of "
                "datasets/terminal), or start it with reset(seed=...) to draw one from the test split"
            )
        from skyrl_gym.runtime.docker import DockerContainer

        begin = time.monotonic()
        options = self._container_options(self.task, task_image(self.task))
        self._options = options
        adopted, self._adopted = self._adopted, None
        self.container_reused = adopted is not None
        if adopted is not None:
            container = adopted
        elif self.config.pool:
            container = _pool_for(self.config.pool, options).acquire()
        else:
            container = DockerContainer(**options)
        with self._lock:
            self.container = container
        self.shell = container.shell(max_output_bytes=max(4096, self.config.max_output_chars * 4))
        self.setup_s = time.monotonic() - begin
        self._started_at = time.monotonic()

    def init(self, prompt: ConversationType | None = None) -> tuple[ConversationType, dict[str, Any]]:
        self._start()
        assert self.task is not None
        if not prompt:
            prompt = instruction_prompt(self.task)
        info: dict[str, Any] = {
            "task": self.task.name,
            "max_turns": self.max_turns,
            "image": self.container.image,
            "sandbox": "docker",
        }
        if self.config.timings:
            info["setup_s"] = round(self.setup_s, 4)
        return prompt, info

    # -- the episode ----------------------------------------------------------------------------------------
    def _time_budget(self) -> tuple[float, str] | None:
        """The task's agent timeout (``[agent] timeout_sec``)."""
        return None if self.task is None else (self.task.agent_timeout_s, "agent_timeout")

    def _execute(self, command: str) -> CommandRun:
        """The command in the episode's persistent shell."""
        result = self.shell.run(command, timeout_s=self.config.command_timeout_s)
        record = result.to_metadata()
        if not self.config.timings:
            record.pop("duration_s")
        return CommandRun(
            record=record,
            output=result.output,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            result=result,
        )

    def _status_notes(self, run: CommandRun, cut: bool) -> list[str]:
        """A process killed for memory, a shell that exited or was restarted, a shortened output."""
        result = run.result
        notes = []
        if result.oom:
            notes.append("a process ran out of memory and was killed")
        if result.shell_exited:
            notes.append("the shell exited, the next command starts a new one")
        if result.restarted:
            notes.append("the shell had to be restarted: folder, variables and jobs were reset")
        if cut or result.output_truncated:
            notes.append("output shortened")
        return notes

    # -- verification -----------------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, Any] | None:
        """The deferred verification (:meth:`verify`) of the episode that just ended: ``{"reward", ...}``.

        An episode its caller stopped before it ended on its own (a runner's turn or context budget) is
        verified as it stands, as the task's harness grades an agent that ran out of time. ``None`` when
        verification was not deferred (the last step already verified), when the episode has not started, or
        once it was verified. A container that fails raises: an infrastructure failure, not a score of 0.
        """
        return super().evaluate()

    def verify(self) -> dict[str, Any]:
        """Run the task's tests on what the episode left (once; later calls return the same result).

        Nothing of the agent's can reach the verification: every process of the episode is killed (those that
        init adopted too, until the container's process listing shows none), then the tests run in a new
        container of the task's image holding a copy of the episode's work folder (owners and modes kept; the
        root file system is read-only, so the rest is the image's), with new, root-owned ``/tests`` and
        ``/logs``, as root (not the agent's user) with only the capabilities that reach the copy's files, a
        clean environment (``HOME=/root``, ``PYTHONNOUSERSITE=1``, no ``PYTHONPATH``) and no network.
        ``bash /tests/test.sh`` runs under the verifier timeout.

        Returns ``reward`` (from ``/logs/verifier/reward.txt``; 0.0 if it wrote none), ``exit_code``,
        ``timed_out``, ``oom``, ``duration_s``, a short ``output`` tail and a ``note`` on what the verification
        met. What the model can cause (a container whose own process it killed, tests that fail or cannot run)
        is a verification of 0.0 with a note; an engine that fails or an image that is missing raise.
        """
        if self.verification is not None:
            return self.verification
        self._start()
        assert self.task is not None
        begin = time.monotonic()
        container = self.container
        if self.shell is not None:
            self.shell.close()
        notes = []
        stopped, left = container.stop_all_processes()
        if stopped or left:
            notes.append("processes the episode left running were stopped before verification")
        if left:
            notes.append(f"{len(left)} of them could not be stopped; the verification ran apart from them")
        verification: dict[str, Any] = {"reward": 0.0, "exit_code": None, "timed_out": False, "oom": False}
        box = None
        if not container.alive():
            _engine_reachable(container)
            notes.append("the episode's container stopped before verification (its own process was killed)")
            verification["output"] = ""
        else:
            box = container.verification_copy()  # what fails here is the engine's, never the model's
        if box is not None:
            try:
                outcome = self._run_tests(box)
            finally:
                box.remove()
            reward, note = _read_reward(outcome.pop("reward_raw"))
            verification.update(outcome, reward=reward)
            notes.append(note)
        notes = [n for n in notes if n]
        if notes:
            verification["note"] = "; ".join(notes)
        if self.config.timings:
            verification["duration_s"] = round(time.monotonic() - begin, 4)
        self.verification = verification
        return verification

    def _run_tests(self, box: Any) -> dict[str, Any]:
        """``tests/`` copied to ``/tests`` of the verification's container, ``bash /tests/test.sh`` run there."""
        assert self.task is not None
        box.exec("mkdir -p /logs/verifier", timeout_s=30)
        files = self.task.test_files()
        if files:
            box.put_files(files, dest="/tests", mode=0o755)
        clean = ["env", "-u", "PYTHONPATH", "-u", "PYTHONSTARTUP", "-u", "PYTHONUSERBASE", "-u", "BASH_ENV"]
        result = box.exec(
            [*clean, "-u", "ENV", "bash", "/tests/test.sh"],
            timeout_s=self.task.verifier_timeout_s,
            max_output_bytes=64 * 1024,
        )
        box.stop_all_processes(wait_s=2.0)  # nothing the tests started writes after they ended
        return {
            "reward_raw": box.get_file("/logs/verifier/reward.txt", max_bytes=4096),
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "oom": result.oom,
            "output": (result.stdout + result.stderr)[-2000:],
        }

    # -- reuse ----------------------------------------------------------------------------------------------
    def reuse(self, extras: dict[str, Any] | None) -> bool:
        """Take another task keeping the started container when it fits (the same image and limits): its
        processes are killed and its writable places brought back to the image's state
        (:meth:`~skyrl_gym.runtime.docker.DockerContainer.restore`), a new shell is opened at ``init``."""
        container = self.container
        if container is None or self._options is None or extras is None:
            return False
        args, kwargs = list(self._init_args), dict(self._init_kwargs)
        if "extras" in kwargs or len(args) < 2:
            kwargs["extras"] = extras
        else:
            args[1] = extras
        probe = type(self).__new__(type(self), *args, **kwargs)
        type(self).__init__(probe, *args, **kwargs)  # the new task, resolved (a bad one raises here)
        assert probe.task is not None
        if (
            self._container_options(probe.task, task_image(probe.task)) != self._options
            or not container.alive()
        ):
            return False
        if self.shell is not None:
            self.shell.close()
        container.restore()
        with self._lock:
            self.container, self.shell = None, None
        spec, reuses = self.spec, self.reuses
        type(self).__init__(self, *args, **kwargs)
        self._init_args, self._init_kwargs = tuple(args), kwargs
        self.spec = spec
        self._adopted = container
        self.reuses = reuses + 1
        return True

    # -- the end ----------------------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            container, self.container = getattr(self, "container", None), None
            adopted, self._adopted = getattr(self, "_adopted", None), None
        if adopted is not None:
            adopted.remove()
        shell = getattr(self, "shell", None)
        if shell is not None:
            shell.close()
        if container is not None:
            container.remove()

    def abandon(self) -> None:
        """Remove the container in the background: whatever runs in it stops at once."""
        container = getattr(self, "container", None)
        if container is not None:
            threading.Thread(target=container.remove, name="terminal-abandon", daemon=True).start()

    def get_metrics(self) -> dict[str, Any]:
        """``turns``, ``commands`` run, ``command_timeouts``, ``submitted``, the verification's ``reward`` and
        whether the task was ``solved``."""
        reward = (self.verification or {}).get("reward", 0.0)
        return {
            "turns": self.turns,
            "commands": self.commands,
            "command_timeouts": self.command_timeouts,
            "submitted": self.submitted,
            "reused": self.container_reused,
            "reward": reward,
            "solved": reward >= 1.0,
        }


def _engine_reachable(container: Any) -> None:
    """Raise when the Docker engine no longer answers (an infrastructure failure, not the model's)."""
    from skyrl_gym.runtime.docker import DockerUnavailable

    try:
        container.engine.api.ping()
    except Exception as exc:
        raise DockerUnavailable(f"the Docker engine stopped answering during verification: {exc}") from exc


def _read_reward(raw: bytes | None) -> tuple[float, str]:
    if raw is None:
        return 0.0, "tests/test.sh wrote no /logs/verifier/reward.txt"
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        value = float(text)
    except ValueError:
        return 0.0, f"/logs/verifier/reward.txt holds {text[:50]!r}, not a number"
    if not math.isfinite(value):
        return 0.0, f"/logs/verifier/reward.txt holds {text[:50]!r}, not a finite number"
    return value, ""
