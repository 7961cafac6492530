"""The HTTP client the search tool and the remote engine share, against real servers on this machine."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from skyrl_gym.http_client import HttpClient, NoAnswer, is_loopback


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers each POST with the next status of the server's script (the last one repeats)."""

    def do_POST(self):  # noqa: N802 - http.server's name
        server = self.server
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with server.lock:
            server.calls += 1
            status = server.script[min(server.calls, len(server.script)) - 1]
        if status == "hang":
            server.release.wait(30)  # until the test is done with it: longer than any timeout below
            status = 200
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"echo": ' + body + b"}")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (the timeout tests)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    servers = []

    def start(*script):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
        server.script, server.calls, server.lock, server.release = (
            list(script),
            0,
            threading.Lock(),
            threading.Event(),
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server, f"http://127.0.0.1:{server.server_address[1]}/x"

    yield start
    for server in servers:
        server.release.set()
        server.shutdown()
        server.server_close()


HEADERS = {"Content-Type": "application/json"}


def test_a_server_error_is_tried_again_until_an_answer(scripted):
    server, url = scripted(500, 429, 200)
    failures = []
    reply = HttpClient(retries=2, backoff_s=0).post(
        url, b"[1]", headers=HEADERS, timeout=10, after_failure=lambda *a: failures.append(a)
    )
    assert (reply.status, reply.content, reply.attempts) == (200, b'{"echo": [1]}', 3)
    assert server.calls == 3 and failures == [(1, 3, "HTTP 500"), (2, 3, "HTTP 429")]


def test_the_last_server_error_is_handed_back_after_the_retries(scripted):
    server, url = scripted(503)
    reply = HttpClient(retries=1, backoff_s=0).post(url, b"{}", headers=HEADERS, timeout=10)
    assert (reply.status, reply.attempts, server.calls) == (503, 2, 2)


def test_a_client_error_is_not_tried_again(scripted):
    server, url = scripted(400, 200)
    reply = HttpClient(retries=3, backoff_s=0).post(url, b"{}", headers=HEADERS, timeout=10)
    assert (reply.status, reply.attempts, server.calls) == (400, 1, 1)


def test_no_server_is_a_connection_failure_after_the_retries():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    attempts = []
    with pytest.raises(NoAnswer) as caught:
        HttpClient(retries=2, backoff_s=0).post(
            f"http://127.0.0.1:{port}/x",
            b"{}",
            headers=HEADERS,
            timeout=10,
            before_attempt=lambda *a: attempts.append(a),
        )
    assert caught.value.kind == "connection" and caught.value.attempts == 3
    assert attempts == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.parametrize("retry_timeouts, calls", [(False, 1), (True, 2)])
def test_a_timeout_is_tried_again_only_when_the_client_says_so(scripted, retry_timeouts, calls):
    server, url = scripted("hang")
    client = HttpClient(retries=1, backoff_s=0, retry_timeouts=retry_timeouts)
    with pytest.raises(NoAnswer) as caught:
        client.post(url, b"{}", headers=HEADERS, timeout=0.5)
    assert caught.value.kind == "timeout" and caught.value.attempts == calls
    deadline = time.monotonic() + 10  # the server counts a request when its handler starts
    while server.calls < calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.calls == calls


def test_a_proxy_in_the_environment_is_not_used_for_this_machine(scripted, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{dead}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    server, url = scripted(200)
    assert HttpClient(retries=0).post(url, b"{}", headers=HEADERS, timeout=10).status == 200
    assert server.calls == 1
    assert (
        is_loopback("http://localhost:1/x")
        and is_loopback("http://[::1]:1/")
        and not is_loopback("http://10.0.0.1/")
    )


def test_one_attempt_can_go_through_another_sender():
    sent = []

    def send(url, content, headers, timeout):
        sent.append((url, content, dict(headers), timeout))
        return (502, b"") if len(sent) == 1 else (200, b"ok")

    reply = HttpClient(retries=1, backoff_s=0).post("http://h/x", b"a", headers=HEADERS, timeout=3, send=send)
    assert reply == type(reply)(200, b"ok", 2) and sent[0] == ("http://h/x", b"a", HEADERS, 3)


@pytest.mark.parametrize("retries, backoff", [(-1, 0.5), (True, 0.5), (1, -0.1), (1, "1")])
def test_bad_settings_are_refused(retries, backoff):
    with pytest.raises(ValueError):
        HttpClient(retries=retries, backoff_s=backoff)
