"""A small synchronous apiserver client for the e2e tests (JSON over the admin client cert), and waits."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mpiop.api.raw import JSON

T = TypeVar("T")
MPIJOBS = "/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs"
PODS = "/api/v1/namespaces/{ns}/pods"


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: {status} {body[:500]}")
        self.status = status


@dataclass
class Api:
    server: str
    context: ssl.SSLContext

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                timeout: float = 30) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise ApiError(method, path, err.code, err.read().decode(errors="replace")) from None
        text = raw.decode(errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def create(self, path: str, obj: JSON) -> JSON:
        result: JSON = self.request("POST", path, obj)
        return result

    def merge_patch(self, path: str, patch: JSON) -> JSON:
        result: JSON = self.request("PATCH", path, patch, content_type="application/merge-patch+json")
        return result

    def delete(self, path: str, grace_seconds: int | None = None) -> None:
        query = "" if grace_seconds is None else f"?gracePeriodSeconds={grace_seconds}"
        try:
            self.request("DELETE", path + query)
        except ApiError as err:
            if err.status != 404:
                raise

    # -- MPIJobs and pods -------------------------------------------------------------------------------
    def mpijob(self, ns: str, name: str) -> JSON | None:
        job: JSON | None = self.get_or_none(f"{MPIJOBS.format(ns=ns)}/{name}")
        return job

    def pods(self, ns: str, selector: str = "") -> list[JSON]:
        query = f"?labelSelector={urllib.parse.quote(selector)}" if selector else ""
        items: list[JSON] = self.get(f"{PODS.format(ns=ns)}{query}")["items"]
        return items

    def pod(self, ns: str, name: str) -> JSON | None:
        pod: JSON | None = self.get_or_none(f"{PODS.format(ns=ns)}/{name}")
        return pod

    def logs(self, ns: str, pod: str, container: str | None = None, previous: bool = False) -> str:
        params = {k: v for k, v in (("container", container), ("previous", "true" if previous else None)) if v}
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return str(self.request("GET", f"{PODS.format(ns=ns)}/{pod}/log{query}"))

    def events(self, ns: str) -> list[JSON]:
        items: list[JSON] = self.get(f"/api/v1/namespaces/{ns}/events")["items"]
        return items


def condition(obj: JSON | None, kind: str) -> JSON | None:
    """The status condition of that type, if the object has one."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: JSON = cond
            return found
    return None


def is_true(obj: JSON | None, kind: str) -> bool:
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25,
             describe: Callable[[], str] | None = None) -> T:
    """Poll `probe` until it returns something truthy; fail after `timeout` seconds saying `what`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)  # poll interval of `probe`
    detail = describe() if describe else repr(last)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{detail}")
