"""The informer against the real apiserver: list+watch, indexes, watch restarts, write-through."""

from __future__ import annotations

import asyncio
from typing import Any

from mpiop.kube.client import CONFIGMAPS, KubeClient
from mpiop.kube.informer import Informer
from tests.integration.operator import eventually


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
    assert informer._handle({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}})
    assert not informer._handle({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}})
    assert informer._resource_version == "42"


async def test_our_own_write_is_not_undone_by_an_older_event(kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, namespace)
    first = await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "w"}, "data": {"v": "1"}})
    second = await kube.patch(CONFIGMAPS, namespace, "w", {"data": {"v": "2"}})
    informer.observe_write(second)
    informer._handle({"type": "MODIFIED", "object": first})  # a late event for the older version
    cached = informer.get(f"{namespace}/w")
    assert cached is not None and cached["data"] == {"v": "2"}


async def test_an_answer_that_arrives_after_the_deletion_event_does_not_resurrect(
        kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, namespace)
    created = await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "ghost"}})
    await kube.delete(CONFIGMAPS, namespace, "ghost")
    deleted = {**created, "metadata": {**created["metadata"], "resourceVersion": str(
        int(created["metadata"]["resourceVersion"]) + 1)}}
    informer._handle({"type": "ADDED", "object": created})
    informer._handle({"type": "DELETED", "object": deleted})
    informer.observe_write(created)  # our create's answer, processed late
    assert informer.get(f"{namespace}/ghost") is None
    recreated = {**created, "metadata": {**created["metadata"], "resourceVersion": str(
        int(created["metadata"]["resourceVersion"]) + 2)}}
    informer.observe_write(recreated)  # a newer object of that name is ours to cache
    assert informer.get(f"{namespace}/ghost") is not None
