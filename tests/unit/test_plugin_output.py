"""mpiop.plugin.main's pure parts: a log written to a terminal escaped (to a pipe as it is), and which pods a rank
or a worker may resolve to."""

from __future__ import annotations

import io

import click
import pytest

from mpiop.api.raw import JSON
from mpiop.plugin.main import LogOutput, Which, check_ours
from testkit.mpijobs import make_mpijob

JOB = make_mpijob("pi", "ns").uid("job-uid").workers(2).obj()
LOG = "step 1\tloss 0.3\n\x1b]0;pwned\x07 \u202eFAKE\n".encode()


class Terminal(io.TextIOWrapper):
    def __init__(self, tty: bool) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8")
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    def written(self) -> bytes:
        self.flush()
        return self.buffer.getvalue()  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize(("tty", "expected"), [
    (True, b"step 1\tloss 0.3\n\\x1b]0;pwned\\x07 \\u202eFAKE\n"),
    (False, LOG),  # to a file or a pipe: the bytes, as `kubectl logs` writes them
])
def test_a_log_is_escaped_on_a_terminal_only(tty: bool, expected: bytes) -> None:
    out = Terminal(tty)
    writer = LogOutput(out)
    for at in range(0, len(LOG), 5):  # chunks that end inside a character (U+202E is three bytes)
        writer.write(LOG[at:at + 5])
    writer.write(b"", final=True)
    assert out.written() == expected


def pod(owner: str = "job-uid", job: str = "pi", operator: str = "mpi-operator") -> JSON:
    return {"metadata": {"name": "pi-worker-0", "labels": {"training.kubeflow.org/job-name": job,
                                                           "training.kubeflow.org/operator-name": operator},
                         "ownerReferences": [{"kind": "MPIJob", "name": "pi", "uid": owner, "controller": True}]}}


@pytest.mark.parametrize(("found", "which", "ours"), [
    (pod(), Which(rank=0, worker=None, launcher=False), True),
    (pod(), Which(rank=None, worker=0, launcher=False), True),
    (pod(owner="other-uid"), Which(rank=0, worker=None, launcher=False), False),  # a job of the same name before
    (pod(job="other"), Which(rank=0, worker=None, launcher=False), False),
    (pod(operator="someone"), Which(rank=None, worker=0, launcher=False), False),
    ({"metadata": {"name": "victim", "labels": {"app": "db"}}}, Which(rank=3, worker=None, launcher=False), False),
    ({"metadata": {"name": "pi-launcher"}}, Which(rank=None, worker=None, launcher=True), True),  # named by the job
])
def test_a_rank_or_a_worker_is_a_pod_the_job_controls_with_its_labels(found: JSON, which: Which, ours: bool) -> None:
    if ours:
        check_ours(JOB, found, which)
        return
    with pytest.raises(click.ClickException, match=r"is not a pod of mpijob pi"):
        check_ours(JOB, found, which)
