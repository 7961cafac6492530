"""What the host's ``/proc`` says about processes, read from real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from skyrl_gym.runtime.docker.procfs import _first_started, _is_zombie, _parent_pid, _process_start_ticks

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
"""A process's start is counted in clock ticks: two starts a few ticks apart are told apart."""


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def _gone_pid() -> int:
    """The id of a process that has exited and been reaped."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert _process_start_ticks(done.pid) is None
    return done.pid


def test_the_first_started_is_found_among_processes_that_went_away_while_listed():
    """A listed process gone by the time its start is read is not taken for the earliest (a container whose
    init reaps a fork bomb's zombies lists such processes, and the container's own command must be kept)."""
    first = _sleeper()
    time.sleep(5 * TICK_S)
    second = _sleeper()
    try:
        gone = _gone_pid()
        assert _first_started([gone, second.pid, first.pid]) == first.pid
        assert _first_started([second.pid, gone]) == second.pid
        assert _first_started([gone]) is None
        assert _first_started([]) is None
    finally:
        for process in (first, second):
            process.kill()
            process.wait()


def test_a_zombie_is_told_from_a_running_process_and_from_a_gone_one():
    running = _sleeper()
    try:
        assert not _is_zombie(running.pid)
        running.kill()
        os.waitid(os.P_PID, running.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        assert _is_zombie(running.pid)
    finally:
        running.wait()
    assert not _is_zombie(running.pid)


def test_a_parent_is_read_from_the_process_itself():
    child = _sleeper()
    try:
        assert _parent_pid(child.pid) == os.getpid()
    finally:
        child.kill()
        child.wait()
    assert _parent_pid(child.pid) is None
