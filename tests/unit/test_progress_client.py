"""mpiop/progress_client.py: the standard library only (users copy it into images), a no-op outside an MPIJob's
pod, and posts paced by ProgressReporter."""

from __future__ import annotations

import ast
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mpiop import progress_client
from mpiop.progress_client import Answer, ProgressReporter, post_status

SOURCE = Path(progress_client.__file__)


def test_it_imports_nothing_but_the_standard_library() -> None:
    imported = set()
    for node in ast.walk(ast.parse(SOURCE.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__"} <= sys.stdlib_module_names, imported - set(sys.stdlib_module_names)


def test_outside_an_mpijob_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MPIOP_STATUS_URL", "MPIOP_STATUS_TOKEN", "MPIOP_STATUS_CA"):
        monkeypatch.delenv(name, raising=False)
    assert post_status(50) is None


def test_an_unreachable_endpoint_is_told_not_raised(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "token").write_text("t")
    monkeypatch.setenv("MPIOP_STATUS_URL", "https://127.0.0.1:1/status")
    monkeypatch.setenv("MPIOP_STATUS_TOKEN", str(tmp_path / "token"))
    monkeypatch.delenv("MPIOP_STATUS_CA", raising=False)
    assert post_status(50, timeout=2) is None
    assert "mpiop progress: not sent:" in capsys.readouterr().err


def test_the_reporter_paces_posts_and_estimates_the_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int | None, int | None, dict[str, object] | None]] = []

    def record(p: int | None = None, e: int | None = None, m: dict[str, object] | None = None,
               timeout: float = 5.0) -> Answer:
        sent.append((p, e, m))
        return Answer(202)

    monkeypatch.setattr(progress_client, "report", record)
    now = [0.0]
    reporter = ProgressReporter(100, every=10, clock=lambda: now[0])
    for done, at_seconds in ((10, 5.0), (20, 9.0), (30, 15.0), (40, 20.0), (100, 21.0)):
        now[0] = at_seconds
        reporter.step(done, loss="0.5")
    # 10 steps in 5 s: 90 left take 45 s; 20 at 9 s is within 10 s of the last post; the last step always posts.
    assert sent == [(10, 45, {"loss": "0.5"}), (30, 35, {"loss": "0.5"}), (100, 0, {"loss": "0.5"})]


def posted_from_a_fresh_process(tmp_path: Path, script: str, code: int, headers: dict[str, str], body: bytes,
                                 posts: list[bytes]) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh Python (the client remembers a stop for its life) in an MPIJob's pod's environment,
    against a server that answers every post `code`, `headers` and `body`; each post's body lands in `posts`."""
    class Answering(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posts.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(code)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    (tmp_path / "token").write_text("t")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answering)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "MPIOP_STATUS_URL": f"http://127.0.0.1:{server.server_port}/status",
               "MPIOP_STATUS_TOKEN": str(tmp_path / "token")}
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()


def test_a_refusal_with_retry_after_holds_the_next_post_back(tmp_path: Path) -> None:
    """mpiop's 429 (a pod past its review budget) says Retry-After: 30; the reporter posting every 10 s waits 30."""
    posts: list[bytes] = []
    script = ("from mpiop import progress_client as p; now = [0.0]; "
              "r = p.ProgressReporter(100, every=10, clock=lambda: now[0]); codes = []\n"
              "for t in (0, 11, 25, 31, 42): now[0] = t; codes.append(r.step(t + 1))\n"
              "print(codes)")
    ran = posted_from_a_fresh_process(tmp_path, script, 429, {"Retry-After": "30"}, b"", posts)
    # Posted at 0 (refused, Retry-After 30), held at 11 and 25, posted at 31 (refused again), held at 42.
    assert (ran.stdout.strip(), len(posts)) == ("[429, None, None, 429, None]", 2), ran.stderr


@pytest.mark.parametrize(("value", "seconds"), [("30", 30.0), (None, None), ("Wed, 21 Oct 2015 07:28:00 GMT", None),
                                                 ("999999", 3600.0), ("-5", None)])
def test_retry_after_in_seconds(value: str | None, seconds: float | None) -> None:
    answer = Answer(429, retry_after=progress_client.retry_after_seconds(value))
    assert answer.retry_after == seconds


STOPPING_ANSWER = b'{"kind": "Status", "status": "Success", "code": 202, ' \
                  b'"stop": {"reason": "Suspended", "deadline": "2024-05-01T12:02:00Z"}}'


@pytest.mark.parametrize(("answer", "expected"), [
    (b'{"kind": "Status", "status": "Success", "code": 202}', "202 None False False"),
    (STOPPING_ANSWER, "202 {'reason': 'Suspended', 'deadline': '2024-05-01T12:02:00Z'} True True"),
], ids=["running", "stopping"])
def test_a_post_answered_with_a_stop_asks_for_a_checkpoint(tmp_path: Path, answer: bytes, expected: str) -> None:
    """report(...).should_stop and stop_requested()."""
    script = ("from mpiop import progress_client as p; a = p.report(10); "
              "print(a.code, a.stop, a.should_stop, p.stop_requested())")
    ran = posted_from_a_fresh_process(tmp_path, script, 202, {"Content-Type": "application/json"}, answer, [])
    assert ran.stdout.strip() == expected, ran.stderr


def test_sigterm_is_a_stop_request_once_the_handler_is_installed() -> None:
    script = ("import os, signal; from mpiop import progress_client as p; before = p.stop_requested(); "
              "p.install_stop_handler(); os.kill(os.getpid(), signal.SIGTERM); print(before, p.stop_requested())")
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout.strip()) == (0, "False True"), ran.stderr
