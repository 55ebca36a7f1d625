"""A KubeClient whose transport records each request and answers it from a table: for table-driven unit tests
of the reconciler's write order and error paths (as kueue's TestReconciler drives its reconciler against a
fake client). Everything above the transport is the real client: paths, verbs, content, ApiError.

It is not an apiserver and does not pretend to be one: it keeps no objects, runs no admission and never
answers a list or a watch. A write is answered with what was sent (a PATCH with the object the test named
for that path, or else its name, the patch merged in), a GET of a pod's log with a line, any other GET with
404, unless a `Fault` of the table matches first. What the apiserver really does is the integration tests'
(real etcd and kube-apiserver); this is for what the reconciler does with an answer, 404, 409, 422, 403 or
none at all.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mpiop.api.merge import merged
from mpiop.api.raw import JSON
from mpiop.kube.access import ClusterAccess
from mpiop.kube.client import JSON_MEDIA_TYPE, ApiError, KubeClient
from mpiop.kube.codec import encode

LOG_LINE = b"rank 0: MPI_ABORT was invoked\n"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: Any

    @property
    def write(self) -> str:
        """`POST configmaps pi-config`, `PATCH mpijobs/pi/status`, `DELETE pods/pi-worker-0`: as a test reads it."""
        parts = self.path.split("/")
        rest = parts[parts.index("namespaces") + 2:] if "namespaces" in parts else parts[3:]
        posted = self.body if self.method == "POST" and isinstance(self.body, dict) else {}
        name = posted.get("metadata", {}).get("name")
        return f"{self.method} {'/'.join(rest)}" + (f" {name}" if name else "")


@dataclass
class Fault:
    """Answer requests matching `method` and `path` (a regular expression searched in the path) with an error:
    `status` and `reason` (an ApiError with the Status the apiserver sends), or no answer at all (`timeout`:
    the TimeoutError aiohttp raises). `times`: how many requests it answers (None: all)."""

    method: str
    path: str
    status: int = 0
    reason: str = ""
    timeout: bool = False
    times: int | None = None

    def matches(self, method: str, path: str) -> bool:
        return method == self.method and re.search(self.path, path) is not None and self.times != 0

    def answer(self, method: str, path: str) -> BaseException:
        if self.times is not None:
            self.times -= 1
        if self.timeout:
            return TimeoutError(f"{method} {path}: no answer")
        status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": self.status,
                  "reason": self.reason, "message": f"{self.reason or self.status} (from the test's table)"}
        return ApiError(self.status, status, method, path)


class RecordingClient(KubeClient):
    def __init__(self, faults: Iterable[Fault] = (), *, patched: Iterable[JSON] = ()) -> None:
        """`faults`: the table, first match wins. `patched`: objects (the MPIJob) whose PATCHes are answered
        with the object, the patch merged in."""
        super().__init__(ClusterAccess(server="http://recording.invalid"), qps=0, burst=1000)
        self.faults = list(faults)
        self.requests: list[Request] = []
        self.patched = {f"/{o['metadata']['namespace']}/{o['kind'].lower()}s/{o['metadata']['name']}":
                        copy.deepcopy(o) for o in patched}
        self._versions = itertools.count(1000)

    def writes(self) -> list[str]:
        """Every request but reads, in the order they left."""
        return [r.write for r in self.requests if r.method != "GET"]

    async def request_raw(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                          body: Any = None, content_type: str = "application/json",
                          timeout: float = 60.0, accept: str = JSON_MEDIA_TYPE) -> bytes:
        self.requests.append(Request(method, path, copy.deepcopy(body)))
        if self.on_request is not None:
            self.on_request(method, path, query or {})
        await asyncio.sleep(0)  # no time: the answer comes a tick later, so writes sent together all leave first
        fault = next((f for f in self.faults if f.matches(method, path)), None)
        if fault is not None:
            raise fault.answer(method, path)
        if method == "GET":
            if path.endswith("/log"):
                return LOG_LINE
            raise Fault(method, path, 404, "NotFound").answer(method, path)
        return encode(self._answer(method, path, body))

    def _answer(self, method: str, path: str, body: Any) -> JSON:
        version = str(next(self._versions))
        if method == "POST":
            meta = body.get("metadata", {})
            name = meta.get("name") or f"{meta.get('generateName', '')}{version}"
            created: JSON = merged(body, {"metadata": {"name": name, "resourceVersion": version,
                                                       "uid": f"uid-{version}"}})
            return created
        if method == "PATCH":
            namespace, _, name = _object_path(path).strip("/").split("/")
            target = self.patched.get(_object_path(path), {"metadata": {"namespace": namespace, "name": name}})
            patched: JSON = merged(merged(target, body) if isinstance(body, dict) else target,
                                   {"metadata": {"resourceVersion": version}})
            if _object_path(path) in self.patched:
                self.patched[_object_path(path)] = patched
            return patched
        if path.split("/")[-1] in ("pods",):  # DELETE collection: the test's pods go by name
            return {"kind": "PartialObjectMetadataList", "items": []}
        return {"kind": "Status", "status": "Success", "metadata": {}}


def _object_path(path: str) -> str:
    """`/namespaces/ns/mpijobs/pi` of `/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/pi/status`."""
    parts = path.split("/")
    start = parts.index("namespaces") + 1
    return "/" + "/".join(parts[start:start + 3])
