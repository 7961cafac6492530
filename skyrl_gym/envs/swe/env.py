"""``SWEEnv``: fix a real Python repository at a bugged state; its own hidden tests decide.

The stages are apart, as a dispatcher schedules them:

- set-up (``init``): the repository at the instance's ``base_commit``, in a container of the repository
  version's image (``env_config.backend = "docker"``, the default) or in a folder whose commands run in the
  bubblewrap sandbox (``"bwrap"``); the judging test files are removed and the git history holds one commit of
  what the agent sees (see :mod:`.backends`); ``info["setup_s"]``;
- the episode (``step``): shell commands as ``<bash>...</bash>`` blocks or ``bash`` tool calls, in the
  repository's root (a persistent shell in the container; a fresh sandbox per command with bwrap, where files
  persist but the current folder and variables do not). ``<submit/>`` (or a ``submit`` tool call) ends the
  episode; so do ``max_turns`` replies and ``max_episode_s`` seconds (truncated). The agent layer's tools
  (bash, editor, code search, finish) work on :meth:`SWEEnv.workspace`;
- verification (:meth:`SWEEnv.verify`, when the episode ends, or in :meth:`SWEEnv.evaluate` after
  ``defer_verification()``): the agent's diff against the starting commit (tests, ``conftest.py`` and pytest
  configuration excluded) is applied to a fresh copy at ``base_commit`` (a new container, or a new folder) and
  the suite runs; the outcome is ``resolved`` (reward 1.0: every ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` test
  passed), ``unresolved``, ``patch_failed`` (the diff does not apply or could not be read), ``test_timeout``
  or ``infra_error`` (the machinery failed: the step ends in error, ``evaluate()`` raises). The test lists are
  never shown: metadata holds only counts.

Made without a task, ``reset(seed=...)`` draws an instance of the test split of ``datasets/swe``.
"""

from __future__ import annotations

import base64
import tarfile
import time
from typing import Any

from skyrl_gym.core import Task
from skyrl_gym.envs.base_text_env import ConversationType, task_ground_truth
from skyrl_gym.envs.shell_task import CommandRun, ShellTaskEnv
from skyrl_gym.envs.swe.tasks import SWEInstance, instance_from_extras, load_split
from skyrl_gym.settings import Count, Flag, PathText, PositiveNumber, read_settings, settings

__all__ = ["SWEEnv", "SWEEnvConfig", "SYSTEM_PROMPT", "instance_prompt"]

SYSTEM_PROMPT = (
    "You are fixing a bug in a Python repository. Run shell commands by writing them in <bash>...</bash> "
    '(or with the bash tool: <tool_call>{"name": "bash", "arguments": {"command": "..."}}</tool_call>); you '
    "will see each command's output and exit code. Find the cause of the problem in the source and change "
    "the code so that it behaves correctly; the repository's tests that check it are hidden and run after "
    "you finish. There is no network. When the fix is done, write <submit/>."
)


def instance_prompt(instance: SWEInstance, workdir: str = "/testbed") -> ConversationType:
    """The chat prompt of an instance: the protocol as a system message, the problem as the user's."""
    where = f"The repository ({instance.repo} {instance.version}".rstrip() + f") is at {workdir}."
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{instance.problem_statement.strip()}\n\n{where}"},
    ]


@settings(frozen=True)
class SWEEnvConfig:
    """The environment's settings (``env_config``); every field has a default."""

    backend: str = "docker"
    """Where episodes run: ``docker`` (a container per episode) or ``bwrap`` (a folder, bubblewrap sandbox)."""
    max_turns: Count = 30
    """Replies per episode when the row's ``extras`` do not say (``extras["max_turns"]`` wins)."""
    max_episode_s: PositiveNumber = 1800.0
    """Wall-clock seconds of the episode (set-up and verification not counted); then it ends, truncated."""
    command_timeout_s: PositiveNumber = 60.0
    """Wall-clock seconds one command may run before it is stopped."""
    max_commands_per_turn: Count = 4
    """Commands run per reply; later ones are skipped with a note."""
    max_output_chars: Count = 4000
    """Characters of one command's output shown (its beginning and end are kept)."""
    test_timeout_s: PositiveNumber = 300.0
    """Wall-clock seconds of the test run at verification (``test_timeout`` past it)."""
    memory_mb: Count = 2048
    """Memory of the container, or of each sandboxed command."""
    cpus: PositiveNumber = 1.0
    """CPU quota in cores."""
    disk_mb: Count = 1024
    """Size of each writable place of the container (memory-backed)."""
    instances_path: PathText | None = None
    """The instance file rows name by ``instance_id`` (default ``$SKYRL_SWE_INSTANCES`` or
    ``datasets/swe/instances.jsonl.gz``)."""
    image_template: str | None = None
    """The image of rows without ``image_name``: ``swe-bench``, ``swe-gym``, ``local`` or a format string
    (see :data:`~skyrl_gym.envs.swe.tasks.IMAGE_RULES`)."""
    workdir: str = "/testbed"
    """Where the repository is in a row's image (docker)."""
    user: str = "1000:1000"
    """The container's user (docker); ``"0:0"`` for users' images whose repository belongs to root (SWE-bench's)."""
    container_env: dict[str, str] | None = None
    """Environment variables of the container's commands (docker), e.g. a ``PATH`` with the image's conda env."""
    test_command: str | None = None
    """How users' rows without ``test_command`` run their tests (``{test_files}`` is replaced); default pytest
    on the test files of the test ids."""
    timings: Flag = True
    """Show how long commands, set-up and verification took; ``False`` makes equal actions give equal
    episodes."""

    def __post_init__(self) -> None:
        from skyrl_gym.envs.swe.backends import BACKENDS

        if self.backend not in BACKENDS:
            raise ValueError(f"env_config.backend must be one of {sorted(BACKENDS)}, got {self.backend!r}")

    @classmethod
    def from_env_config(cls, env_config: Any) -> SWEEnvConfig:
        """Read the fields from a dict, an OmegaConf ``DictConfig``, a dataclass or ``None``."""
        return read_settings(cls, env_config, "swe")


class SWEEnv(ShellTaskEnv):
    """A SWE task (SkyRL constructor: ``SWEEnv(env_config, extras)``).

    ``extras`` names the instance: ``reward_spec["ground_truth"]`` = ``{"instance_id": ...}`` (an instance of
    the instance file), or a whole SWE-bench / SWE-Gym / SWE-smith row in ``extras["instance"]`` (SkyRL's SWE
    rows), ``extras["extra_info"]["instance"]`` or the ground truth. ``step`` metadata holds the ``turn``, the
    ``commands`` run (exit code, timed_out), ``submitted``, and on the last step the ``verification``
    (``outcome``, ``reward``, test counts). The episode protocol (parsing, budgets, observations, deferred
    verification) is :class:`~skyrl_gym.envs.shell_task.ShellTaskEnv`'s; a ``finish`` tool call submits too.
    """

    submit_tools = ("submit", "finish")
    work_noun = "fix"
    timeout_verb = "stopped"
    newline_after_cut = False
    hostile_actions = (
        "<bash>:(){ :|:& };:</bash>",
        "<bash>python3 -c 'x = bytearray(8 * 1024 ** 3)'</bash>",
        "<bash>yes 'gigabytes of output'</bash>",
        "<bash>rm -rf .git * ; git init</bash>",
        "<bash>(sleep 1000 &) ; nohup sleep 1000 &</bash>",
        "<bash>exit 7</bash>",
        "<bash>ln -s / rootlink; ln -s ../../.. up; ln -s /etc/passwd passwd.py; mkfifo fifo</bash>",
        "<bash>printf '* filter=x\\n' > .gitattributes; git config filter.x.clean 'touch /tmp/x; cat'</bash>",
        "<bash>for f in /proc/1/fd/* /proc/self/fd/*; do timeout 1 cat $f >/dev/null 2>&1; done; true</bash>",
        "<bash>chmod -R a-w . 2>/dev/null; dd if=/dev/zero of=fill bs=1M count=4000 2>/dev/null; true</bash>",
        "<bash>kill -9 -1</bash>",
        "<bash>echo 'import atexit' >> setup.py; mkdir -p x.dist-info; echo '[pytest11]' > x.dist-info/entry_points.txt</bash>",
    )
    """Commands the environment contains without failing: fork bomb, memory hog, endless output, the
    repository and its git history deleted, processes left behind, a shell that exits, links out of the
    workspace and a fifo, a git filter, every process of its user killed, reading every inherited descriptor, a read-only and full workspace, and
    test machinery planted (each is a scored failure, never an ``error``)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.config = SWEEnvConfig.from_env_config(env_config)
        self.instance: SWEInstance | None = None
        if extras is not None:
            ground_truth = task_ground_truth(extras, "swe")
            self.instance = instance_from_extras(
                self.extras,
                ground_truth,
                path=self.config.instances_path,
                test_command=self.config.test_command,
            )
        self.max_turns = self._episode_max_turns()
        self.backend: Any = None

    # -- tasks ----------------------------------------------------------------------------------------------
    def sample_task(self, seed: int | None = None) -> Task:
        """An instance of the test split, the same one for the same seed."""
        instances = load_split("test", self.config.instances_path)
        instance = instances[(seed or 0) % len(instances)]
        return {
            "prompt": instance_prompt(instance, self._workdir()),
            "extras": {
                "reward_spec": {"method": "rule", "ground_truth": {"instance_id": instance.instance_id}}
            },
        }

    def _workdir(self) -> str:
        return "/work" if self.config.backend == "bwrap" else self.config.workdir

    def _fix_command(self) -> str | None:
        instance = self.instance
        if instance is None:
            return None
        if instance.fix_patch:
            patch, reverse = instance.fix_patch, ""
        elif instance.bug_patch:
            patch, reverse = instance.bug_patch, " -R"  # SWE-smith: the fix is the bug undone
        else:
            return None
        encoded = base64.b64encode(patch.encode()).decode()
        return f"echo {encoded} | base64 -d | git apply{reverse} --whitespace=nowarn"

    def reference_action(self) -> list[str] | None:
        """The known fix applied with ``git apply``, then ``<submit/>`` (which earns 1.0)."""
        command = self._fix_command()
        return None if command is None else [f"<bash>{command}</bash>", "<submit/>"]

    def reference_tool_calls(self) -> list[dict[str, Any]] | None:
        """The known fix as OpenAI-style tool calls: ``bash`` applying it, then ``finish``."""
        command = self._fix_command()
        if command is None:
            return None
        return [
            {"name": "bash", "arguments": {"command": command}},
            {"name": "finish", "arguments": {"answer": "fixed"}},
        ]

    def workspace(self) -> Any:
        """The episode's repository: commands in its shell or sandbox, files through it."""
        self._start()
        return self.backend.workspace()

    # -- set-up ---------------------------------------------------------------------------------------------
    def _start(self) -> None:
        if self.backend is not None:
            return
        if self.instance is None:
            raise ValueError(
                "SWEEnv needs an instance: make it with extras={'reward_spec': {'method': 'rule', "
                "'ground_truth': {'instance_id': ...}}} (a row of datasets/swe), or start it with "
                "reset(seed=...) to draw one from the test split"
            )
        from skyrl_gym.envs.swe.backends import BackendSettings, make_backend

        config = self.config
        settings = BackendSettings(
            memory_mb=config.memory_mb,
            cpus=config.cpus,
            disk_mb=config.disk_mb,
            max_output_chars=config.max_output_chars,
            test_timeout_s=config.test_timeout_s,
            image_template=config.image_template,
            workdir=config.workdir,
            user=config.user,
            env=dict(config.container_env or {}),
        )
        backend = make_backend(config.backend, self.instance, settings)
        with self._lock:
            self.backend = backend
        backend.start()
        self._started_at = time.monotonic()

    def init(self, prompt: ConversationType | None = None) -> tuple[ConversationType, dict[str, Any]]:
        self._start()
        assert self.instance is not None
        if not prompt:
            prompt = instance_prompt(self.instance, self.backend.workdir)
        elif not any(isinstance(m, dict) and m.get("role") == "system" for m in prompt):
            # a row that only states the problem (SkyRL's SWE rows): the model still needs the protocol
            prompt = [{"role": "system", "content": SYSTEM_PROMPT}, *prompt]
        info: dict[str, Any] = {
            "instance_id": self.instance.instance_id,
            "repo": self.instance.repo,
            "max_turns": self.max_turns,
            "backend": self.backend.name,
        }
        if self.config.timings:
            info["setup_s"] = round(self.backend.setup_s, 4)
        return prompt, info

    # -- the episode ----------------------------------------------------------------------------------------
    def _time_budget(self) -> tuple[float, str] | None:
        """``config.max_episode_s``."""
        return self.config.max_episode_s, "max_episode_s"

    def _execute(self, command: str) -> CommandRun:
        """The command in the backend's workspace (its shell, or a fresh sandbox with bwrap)."""
        begin = time.monotonic()
        try:
            result = self.backend.workspace().run(command, timeout_s=self.config.command_timeout_s)
        except (OSError, ValueError, tarfile.TarError) as exc:
            # the sandbox ran the command but its folder could not come back (an absolute link, say): the
            # command's changes are dropped and the model is told so
            return CommandRun(
                record={"exit_code": None, "timed_out": False, "dropped": True},
                message=f"<output>\n</output>\n[the command's changes were dropped: {str(exc)[:300]}]",
            )
        took = time.monotonic() - begin
        record: dict[str, Any] = {"exit_code": result.exit_code, "timed_out": result.timed_out}
        if self.config.timings:
            record["duration_s"] = round(took, 4)
        return CommandRun(
            record=record,
            output=result.output,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=took,
        )

    # -- verification -----------------------------------------------------------------------------------------
    def _infra_failure(self, verification: dict[str, Any]) -> str | None:
        """The note of an ``infra_error`` outcome: the last step ends in error."""
        if verification["outcome"] != "infra_error":
            return None
        return verification.get("note", "the verification's machinery failed")

    def evaluate(self) -> dict[str, Any] | None:
        """The deferred verification (:meth:`verify`) of the episode that just ended: ``{"reward", "outcome",
        ...}``. An episode its caller stopped before it ended on its own (a runner's turn or context budget)
        is verified as it stands: its diff is graded, as SWE harnesses grade an agent that ran out of steps.
        ``None`` when verification was not deferred, before the episode started, or once verified. An
        ``infra_error`` raises (:class:`~skyrl_gym.envs.swe.backends.InfraError`): never a score of 0."""
        verification = super().evaluate()
        failure = None if verification is None else self._infra_failure(verification)
        if failure is not None:
            from skyrl_gym.envs.swe.backends import InfraError

            raise InfraError(failure)
        return verification

    def verify(self) -> dict[str, Any]:
        """Verify the episode's work once (later calls return the same result): the agent's diff applied to a
        fresh copy at ``base_commit``, the hidden tests run and graded. Returns ``outcome``, ``reward``, the
        test counts, ``patch_lines`` and, with timings, ``duration_s``."""
        if self.verification is not None:
            return self.verification
        self._start()
        begin = time.monotonic()
        verdict = self.backend.verify()
        verification = verdict.as_dict()
        if self.config.timings:
            verification["duration_s"] = round(time.monotonic() - begin, 4)
        self.verification = verification
        self.patch = verdict.patch
        return verification

    patch: str = ""
    """The agent's diff read at verification (SWE-bench's ``model_patch``)."""

    # -- the end ----------------------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            backend, self.backend = getattr(self, "backend", None), None
        if backend is not None:
            backend.close()

    def abandon(self) -> None:
        """Stop the episode's container in the background (nothing to stop for bwrap)."""
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.abandon()

    def get_metrics(self) -> dict[str, Any]:
        """``turns``, ``commands`` run, ``command_timeouts``, ``submitted``, the verification's ``outcome`` and
        ``reward``, and one flag per outcome (``resolved``, ``patch_failed``, ``test_timeout``...), which batch
        means turn into shares."""
        verification = self.verification or {}
        outcome = verification.get("outcome", "none")
        metrics: dict[str, Any] = {
            "turns": self.turns,
            "commands": self.commands,
            "command_timeouts": self.command_timeouts,
            "submitted": self.submitted,
            "outcome": outcome,
            "reward": verification.get("reward", 0.0),
        }
        from skyrl_gym.envs.swe.backends import OUTCOMES

        metrics.update({name: outcome == name for name in OUTCOMES})
        return metrics
