"""The informer against the real apiserver: list+watch, indexes, watch restarts, write-through."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.kube.access import load_access
from mpiop.kube.backoff import Backoff
from mpiop.kube.client import CONFIGMAPS, KubeClient
from mpiop.kube.informer import Informer
from mpiop.kube.reachability import Reachability
from testkit.operator import eventually


def _by_team(obj: dict[str, Any]) -> list[str]:
    team = (obj["metadata"].get("labels") or {}).get("team")
    return [team] if team else []


async def _run(informer: Informer) -> asyncio.Task[None]:
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(informer.synced.wait(), 30)
    return task


async def test_lists_then_watches_adds_updates_and_deletes(kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "before", "labels": {"team": "a"}}})
    changes: list[tuple[str | None, str | None]] = []
    informer = Informer(kube, CONFIGMAPS, namespace, label_selector="team", indexers={"team": _by_team},
                        handlers=[lambda old, new: changes.append(
                            (old["metadata"]["name"] if old else None, new["metadata"]["name"] if new else None))])
    task = await _run(informer)
    try:
        assert [o["metadata"]["name"] for o in informer.by_index("team", "a")] == ["before"]
        await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "after", "labels": {"team": "b"}}})
        await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "unlabelled"}})
        await kube.patch(CONFIGMAPS, namespace, "before", {"metadata": {"labels": {"team": "b"}}})
        await kube.delete(CONFIGMAPS, namespace, "after")

        async def settled() -> bool:
            return ([o["metadata"]["name"] for o in informer.by_index("team", "b")] == ["before"]
                    and not informer.by_index("team", "a"))

        await eventually(settled, what="index moved and delete seen")
        assert informer.get(f"{namespace}/unlabelled") is None  # outside the label selector
        assert (None, "before") in changes and ("before", "before") in changes and ("after", None) in changes
    finally:
        task.cancel()


async def test_a_closed_watch_is_reopened_without_losing_events(kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, namespace, watch_timeout_seconds=1)
    task = await _run(informer)
    try:
        await eventually(lambda: _restarted(informer), timeout=15, what="the server closing the 1 s watch")
        lists = informer.stats.lists
        await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "late"}, "data": {"k": "v"}})
        found = await eventually(lambda: _get(informer, f"{namespace}/late"), what="event after the restart")
        assert found["data"] == {"k": "v"}
        assert informer.stats.lists == lists, "a closed stream resumes from its resourceVersion, no re-list"
    finally:
        task.cancel()


async def _restarted(informer: Informer) -> bool:
    return informer.stats.watch_restarts >= 1


async def _get(informer: Informer, key: str) -> dict[str, Any] | None:
    return informer.get(key)


async def test_a_410_gone_event_asks_for_a_relist(kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, namespace)
    assert informer.apply_event({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}})
    assert not informer.apply_event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}})
    assert informer.resource_version == "42"


async def test_our_own_write_is_not_undone_by_an_older_event(kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, namespace)
    first = await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "w"}, "data": {"v": "1"}})
    second = await kube.patch(CONFIGMAPS, namespace, "w", {"data": {"v": "2"}})
    informer.observe_write(second)
    informer.apply_event({"type": "MODIFIED", "object": first})  # a late event for the older version
    cached = informer.get(f"{namespace}/w")
    assert cached is not None and cached["data"] == {"v": "2"}


async def test_an_answer_that_arrives_after_the_deletion_event_does_not_resurrect(
        kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, namespace)
    created = await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "ghost"}})
    await kube.delete(CONFIGMAPS, namespace, "ghost")
    deleted = {**created, "metadata": {**created["metadata"], "resourceVersion": str(
        int(created["metadata"]["resourceVersion"]) + 1)}}
    informer.apply_event({"type": "ADDED", "object": created})
    informer.apply_event({"type": "DELETED", "object": deleted})
    informer.observe_write(created)  # our create's answer, processed late
    assert informer.get(f"{namespace}/ghost") is None
    recreated = {**created, "metadata": {**created["metadata"], "resourceVersion": str(
        int(created["metadata"]["resourceVersion"]) + 2)}}
    informer.observe_write(recreated)  # a newer object of that name is ours to cache
    assert informer.get(f"{namespace}/ghost") is not None


class InjectingClient(KubeClient):
    """The informer's own seam, its client: watch streams that also carry the lines put in `inject`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inject: list[Any] = []

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[JSON]:
        async for event in super().watch(*args, **kwargs):
            yield event
            while self.inject:
                yield self.inject.pop(0)


async def test_a_watch_line_that_is_not_an_event_is_logged_and_answered_with_a_relist(
        control_plane: ControlPlane, namespace: str) -> None:
    client = InjectingClient(await load_access(str(control_plane.kubeconfig)), qps=0, burst=10)
    informer = Informer(client, CONFIGMAPS, namespace)
    with capture_logs() as logs:
        task = await _run(informer)
        try:
            client.inject.append([])  # valid JSON, not an event: an AttributeError killed the informer before
            await client.create(CONFIGMAPS, namespace, {"metadata": {"name": "a"}})

            async def relisted() -> bool:
                return informer.stats.lists >= 2

            await eventually(relisted, what="a re-list after the bad line")
            await client.create(CONFIGMAPS, namespace, {"metadata": {"name": "b"}})
            await eventually(lambda: _get(informer, f"{namespace}/b"), what="events after the re-list")
            assert not task.done(), "the informer lives on"
        finally:
            task.cancel()
            await client.close()
    warned = [e for e in logs if e["event"] == "informer error; re-listing"]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning", warned
    assert warned[0]["error_type"] == "BadWatchEventError" and warned[0]["error"] == "not a watch event: []"
    assert 0.8 <= warned[0]["retry_in"] <= 1.6, "client-go's first backoff step, jittered"


class FlakyProxy:
    """A TCP proxy in front of the apiserver that can go down: while down it accepts and drops every connection
    (counting them), as a restarting apiserver's address behind a load balancer does."""

    def __init__(self, target: str) -> None:
        self.host, port = target.removeprefix("https://").rsplit(":", 1)
        self.target_port = int(port)
        self.down = False
        self.tries_while_down = 0
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def go_down(self) -> None:
        self.down = True
        for writer in self._open:
            writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            self.tries_while_down += 1
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        self._open |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except OSError:
                pass
            finally:
                sink.close()
                self._open.discard(sink)

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        self.go_down()
        if self._server is not None:
            self._server.close()


async def test_watch_reconnects_back_off_while_the_apiserver_is_unreachable(
        control_plane: ControlPlane, namespace: str) -> None:
    """0.2 s fixed reconnects made 24.5 tries a second against a down apiserver; now 0.8 s doubling, jittered."""
    access = await load_access(str(control_plane.kubeconfig))
    proxy = FlakyProxy(access.server)
    await proxy.start()
    access.server = f"https://127.0.0.1:{proxy.port}"
    client = KubeClient(access, qps=0)
    Reachability.of(client).interval = 3600.0  # the informer's own schedule alone (the probe: the next test)
    informer = Informer(client, CONFIGMAPS, namespace)
    task = await _run(informer)
    try:
        proxy.go_down()
        await asyncio.sleep(6.5)
        tries = proxy.tries_while_down
        print(f"\nconnections tried in 6.5 s while the apiserver was unreachable: {tries}")
        assert 2 <= tries <= 4, tries  # waits of 0.8-1.6, 1.6-3.2, 3.2-6.4 s: at most 4 tries in 6.5 s
        proxy.down = False
        await client.create(CONFIGMAPS, namespace, {"metadata": {"name": "back"}})
        await eventually(lambda: _get(informer, f"{namespace}/back"), timeout=30, what="the informer recovered")
    finally:
        task.cancel()
        await Reachability.of(client).close()
        await proxy.close()
        await client.close()


async def test_every_informer_lists_again_once_the_apiserver_answers_whatever_its_backoff(
        control_plane: ControlPlane, namespace: str) -> None:
    """Informers whose backoff grew to minutes (as in a long outage) do not sleep it out: one probe of the client
    (not one per informer) asks while they wait, and its first answer wakes them all."""
    access = await load_access(str(control_plane.kubeconfig))
    proxy = FlakyProxy(access.server)
    await proxy.start()
    access.server = f"https://127.0.0.1:{proxy.port}"
    client = KubeClient(access, qps=0)
    informers = [Informer(client, CONFIGMAPS, namespace, label_selector=f"n={n}", backoff=Backoff(initial=600.0))
                 for n in range(3)]
    tasks = [await _run(informer) for informer in informers]
    try:
        proxy.go_down()
        await asyncio.sleep(6.5)
        tries = proxy.tries_while_down
        print(f"\nconnections tried in 6.5 s by 3 informers waiting 600 s and their probe: {tries}")
        assert 1 <= tries <= 14, tries  # the probe: every 0.5-1.5 s; each informer: once, before its wait
        proxy.down = False
        for n in range(3):
            await client.create(CONFIGMAPS, namespace, {"metadata": {"name": f"back-{n}", "labels": {"n": str(n)}}})
        for n, informer in enumerate(informers):
            await eventually(functools.partial(_get, informer, f"{namespace}/back-{n}"),
                             what=f"informer {n} back long before its 600 s backoff")
    finally:
        for task in tasks:
            task.cancel()
        await Reachability.of(client).close()
        await proxy.close()
        await client.close()


async def test_a_silent_watch_times_out_and_one_that_delivers_does_not(kube: KubeClient, namespace: str) -> None:
    """The watch's watchdog (`idle_timeout`): a stream with nothing to say for longer raises TimeoutError (the
    informer re-opens it from its last version); one whose events keep coming, each sooner than that, does not.

    Both watch only the test's own ConfigMaps (by label): the controller-manager publishes the namespace's
    kube-root-ca.crt whenever it gets to it, seconds late on a busy machine, and that is no event of this test's."""
    own = "test.mpiop.dev/tick"
    version = str((await kube.list(CONFIGMAPS, namespace))["metadata"]["resourceVersion"])
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async for _ in kube.watch(CONFIGMAPS, namespace, resource_version=version, label_selector=own,
                                  timeout_seconds=60, idle_timeout=1.0):
            pass
    silent = time.monotonic() - started
    assert 1.0 <= silent < 5.0, f"the watchdog fired after {silent:.2f}s"

    async def write_every(seconds: float, count: int) -> None:
        for n in range(count):
            await asyncio.sleep(seconds)
            await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": f"tick-{n}", "labels": {own: "yes"}}})

    writer = asyncio.create_task(write_every(0.4, 8))
    names = []
    try:
        async for event in kube.watch(CONFIGMAPS, namespace, resource_version=version, label_selector=own,
                                      timeout_seconds=60, idle_timeout=1.0):
            names.append(event["object"]["metadata"]["name"])
            if len(names) == 8:
                break
    finally:
        await writer
    assert names == [f"tick-{n}" for n in range(8)], "3.2 s of events, none more than 1 s apart: no timeout"
