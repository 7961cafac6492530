"""Bounds for tests that wait on something meant to stop work: a sandbox's timeout, a killed command.

A run that a sandbox failed to stop goes on for ever (the attacks loop, sleep for minutes or fork without end),
so a test tells a stopped run from an unstopped one by a bound far past any stop on a loaded machine, never by
how fast a quiet machine stops it. The verdict (timed out, killed, out of memory) is what the test asserts.
"""

STOPPED_WITHIN_S = 60.0
"""Seconds within which a call whose work the sandbox stops at its own timeout (a few seconds) returns, on a
machine however busy; an unstopped attack runs for minutes or for ever."""
