"""A persistent ``bash`` in a container, whose state (cwd, variables, jobs) lives across commands like a
terminal's, and the result of each command."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import selectors
import signal
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from skyrl_gym.runtime.docker.errors import DockerUnavailable
from skyrl_gym.runtime.docker.exec_io import _TOKEN_VAR, _Output, _raw

if TYPE_CHECKING:
    from skyrl_gym.runtime.docker.container import DockerContainer


ANSWER_AFTER_KILL_S = 10.0
"""How long a shell whose foreground job was killed may take to answer before it is replaced: the kill is
final, so the answer comes as soon as bash has reaped the job and its line has come through the engine's
stream, which on a busy machine can take seconds (the wait ends when it comes)."""


@dataclass
class ShellResult:
    """One command of a :class:`ShellSession`: what it printed (stdout and stderr together, as a terminal shows
    them), its exit code (``None`` when it was killed at the timeout), how long it took, and what happened."""

    output: str
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    oom: bool = False
    output_truncated: bool = False
    restarted: bool = False
    """The shell had to be replaced (it exited, or could not be interrupted): cwd, variables and jobs are gone."""
    shell_exited: bool = False
    """The command ended the shell itself (``exit``); the next command gets a new one."""

    def to_metadata(self) -> dict[str, Any]:
        """The result without its output, for metadata."""
        data = asdict(self)
        del data["output"]
        data["duration_s"] = round(self.duration_s, 4)
        return data


_SHELL_SETUP = (
    "stty -echo -icanon -onlcr 2>/dev/null; PS1=''; PS2=''; PS0=''; PROMPT_COMMAND=''; set +o history; "
    "unset HISTFILE; builtin printf '\\036READY %s\\036\\n' {token}\n"
)
_STALE_MARKER = re.compile("\n?\x1eDONE [0-9a-f]{24} \\d+\x1e\n")
"""A marker of an earlier, interrupted command that arrived late: never part of the output."""


class ShellSession:
    """One interactive ``bash`` in a container whose state (cwd, variables, functions, background jobs) lives
    across commands, like a terminal's.

    Each command goes to the shell as one line (base64, so that quotes, heredocs and a ``read`` in it cannot
    swallow what follows) and is ``eval``-ed there; a marker with a fresh random token and the exit status ends
    its output. At the timeout the foreground job gets a Ctrl-C through the terminal, then, if it ignores it,
    its process group is killed; a shell that still does not answer (a builtin loop with SIGINT trapped, or
    no process slot left to it) is replaced by a new one, its session's background jobs killed with it, and
    the result says ``restarted``. Output past ``max_output_bytes`` is dropped from
    the middle (the beginning and the last quarter are kept).
    """

    def __init__(
        self,
        container: DockerContainer,
        *,
        max_output_bytes: int = 64 * 1024,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ):
        self.container = container
        self.max_output_bytes = max_output_bytes
        self.env = dict(env or {})
        self.user = user
        self._sock: Any = None
        self._raw: socket.socket | None = None
        self._exec_id = ""
        self.host_pid: int | None = None
        self.starts = 0
        self._pending = bytearray()

    # -- life ----------------------------------------------------------------------------------------------
    def _open(self) -> None:
        api = self.container.engine.api
        token = secrets.token_hex(12)
        environment = {
            **self.container.env, **self.env, "TERM": "dumb", "PS1": "", "HISTFILE": "/dev/null",
            _TOKEN_VAR: "shell-" + token,
        }  # fmt: skip
        self._exec_id = api.exec_create(
            self.container.id, ["/bin/bash", "--noprofile", "--norc", "--noediting", "-i"], stdin=True,
            tty=True, environment=environment, user=self.user or self.container.user,
            workdir=self.container.workdir,
        )["Id"]  # fmt: skip
        self._sock = api.exec_start(self._exec_id, socket=True, tty=True)
        self._raw = _raw(self._sock)
        self._raw.setblocking(False)
        self._pending = bytearray()
        self._send(_SHELL_SETUP.format(token=token).encode())
        found, _, _ = self._read_until(
            b"\x1eREADY " + token.encode() + b"\x1e\n", time.monotonic() + 30, None
        )
        if not found:
            self._discard()
            raise DockerUnavailable("the container's bash did not start (is /bin/bash in the image?)")
        with contextlib.suppress(Exception):
            self.host_pid = int(api.exec_inspect(self._exec_id)["Pid"]) or None
        self.starts += 1

    def _discard(self) -> None:
        for thing in (self._sock, self._raw):
            with contextlib.suppress(Exception):
                if thing is not None:
                    thing.close()
        self._sock = self._raw = None
        if self.host_pid:
            with contextlib.suppress(OSError):
                os.kill(self.host_pid, signal.SIGKILL)
        self.host_pid = None

    def close(self) -> None:
        """End the shell (its background jobs go with the container)."""
        self._discard()

    def alive(self) -> bool:
        """Whether the shell is running (a command may have ended it)."""
        if self._raw is None:
            return False
        try:
            return bool(self.container.engine.api.exec_inspect(self._exec_id).get("Running"))
        except Exception:
            return False

    # -- i/o -------------------------------------------------------------------------------------------------
    def _send(self, data: bytes) -> bool:
        raw = self._raw
        if raw is None:
            return False
        view = memoryview(data)
        deadline = time.monotonic() + 10
        while view:
            try:
                view = view[raw.send(view[:65536]) :]
            except (BlockingIOError, InterruptedError):
                if time.monotonic() > deadline:
                    return False
                selectors.DefaultSelector().select(0.01)
                time.sleep(0.001)
            except OSError:
                return False
        return True

    def _read_until(
        self, marker: bytes | re.Pattern, deadline: float, output: _Output | None
    ) -> tuple[bool, bool, re.Match | None]:
        """Read into ``output`` until ``marker`` (bytes or a regex) shows up; returns (found, eof, match). What
        follows the marker stays pending for the next read."""
        raw = self._raw
        keep = 256  # enough of the stream's end to find a marker that a chunk boundary cut
        if raw is None:
            return False, True, None
        selector = selectors.DefaultSelector()
        selector.register(raw, selectors.EVENT_READ)
        try:
            while True:
                buffer = self._pending
                if isinstance(marker, bytes):
                    at = buffer.find(marker)
                    match = None
                    end = at + len(marker)
                else:
                    match = marker.search(buffer)
                    at = match.start() if match else -1
                    end = match.end() if match else -1
                if at >= 0:
                    if output is not None:
                        output.add(bytes(buffer[:at]))
                    self._pending = bytearray(buffer[end:])
                    return True, False, match
                if len(buffer) > keep and output is not None:
                    output.add(bytes(buffer[:-keep]))
                    del buffer[:-keep]
                left = deadline - time.monotonic()
                if left <= 0:
                    return False, False, None
                if not selector.select(left):
                    continue
                try:
                    chunk = raw.recv(262144)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    if output is not None:
                        output.add(bytes(self._pending))
                    self._pending = bytearray()
                    return False, True, None
                self._pending += chunk
        finally:
            selector.close()

    # -- commands ----------------------------------------------------------------------------------------
    def run(self, command: str, timeout_s: float = 30.0) -> ShellResult:
        """Run ``command`` (any bash text, several lines too) in the shell; returns within ``timeout_s`` plus
        about two seconds, or plus :data:`ANSWER_AFTER_KILL_S` when a killed job's shell is slow to answer."""
        import base64

        restarted = False
        if self._raw is None:
            restarted = self.starts > 0
            self._open()
        token = secrets.token_hex(12)
        encoded = base64.b64encode(command.encode("utf-8", errors="surrogatepass")).decode()
        line = (
            f'eval "$(builtin printf %s {encoded} | command base64 -d)"; '
            f"builtin printf '\\n\\036DONE {token} %s\\036\\n' \"$?\"\n"
        )
        done = re.compile(rb"\n?\x1eDONE " + token.encode() + rb" (\d+)\x1e\n")
        output = _Output(self.max_output_bytes, self.max_output_bytes // 4)
        engine = self.container.engine
        with engine.execs:
            start = time.monotonic()
            self._send(line.encode())
            found, eof, match = self._read_until(done, start + timeout_s, output)
            timed_out = not found and not eof
            if timed_out:
                found, eof, match = self._interrupt(token, output)
                if not found and not eof:
                    # the shell does not answer: it goes, and its session's jobs with it (a fork bomb's would
                    # otherwise hold every process slot, and no new shell could start)
                    if self.host_pid:
                        self.container.kill_session(self.host_pid)
                    self._discard()
                    restarted = True
            duration = time.monotonic() - start
        exit_code = int(match.group(1)) if match else None
        shell_exited = eof and not timed_out
        if eof:
            exit_code = self._final_code() if shell_exited else None
            self._discard()
        if timed_out:
            exit_code = None
        oom = exit_code == 137 and self.container.oom_killed()
        return ShellResult(
            output=_STALE_MARKER.sub("", output.text()),
            exit_code=exit_code,
            duration_s=duration,
            timed_out=timed_out,
            oom=oom,
            output_truncated=output.dropped > 0,
            restarted=restarted,
            shell_exited=shell_exited,
        )

    def _interrupt(self, token: str, output: _Output) -> tuple[bool, bool, re.Match | None]:
        """Stop the foreground job: Ctrl-C, then its process group killed; found once the shell answers again
        (with the command's own marker, or, as bash drops the rest of a line on Ctrl-C, a second one asked for)."""
        ask_token = secrets.token_hex(12)
        either = re.compile(
            rb"\n?\x1eDONE (?:" + token.encode() + b"|" + ask_token.encode() + rb") (\d+)\x1e\n"
        )
        ask = f"builtin printf '\\n\\036DONE {ask_token} 130\\036\\n'\n".encode()
        self._send(b"\x03")
        found, eof, match = self._read_until(either, time.monotonic() + 0.3, output)
        if found or eof:
            return found, eof, match
        self._send(ask)
        found, eof, match = self._read_until(either, time.monotonic() + 0.5, output)
        if found or eof:
            return found, eof, match
        group = self._foreground_group()
        if group is not None:
            self.container.kill_process_group(group)
            found, eof, match = self._read_until(either, time.monotonic() + 0.5, output)
            if not (found or eof):  # the job read our request from the terminal before it died: ask again
                self._send(ask)
                found, eof, match = self._read_until(either, time.monotonic() + ANSWER_AFTER_KILL_S, output)
        return found, eof, match

    def _foreground_group(self) -> int | None:
        """The host id of the terminal's foreground process group, if it is not the shell's own."""
        if not self.host_pid:
            return None
        try:
            with open(f"/proc/{self.host_pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            pgrp, tpgid = int(fields[2]), int(fields[5])
        except (OSError, IndexError, ValueError):
            return None
        return tpgid if tpgid > 0 and tpgid != pgrp else None

    def _final_code(self) -> int | None:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                info = self.container.engine.api.exec_inspect(self._exec_id)
            except Exception:
                return None
            if not info.get("Running"):
                return info.get("ExitCode")
            time.sleep(0.02)
        return None

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
