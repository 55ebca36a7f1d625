"""Leader election rules against an in-memory Lease with the apiserver's resourceVersion semantics."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from typing import Any

import pytest

from mpiop.api.raw import JSON
from mpiop.kube.client import PODS, ApiError, KubeClient
from mpiop.leader import (
    ElectionConfig,
    LeaderElector,
    LeadershipLostError,
    NotLeaderError,
    format_micro_time,
    parse_micro_time,
)
from testkit.clock import FakeClock
from testkit.waits import until


class FakeLeases:
    """One Lease; GETs yield to the loop so concurrent candidates really interleave."""

    def __init__(self) -> None:
        self.obj: JSON | None = None
        self.rv = 0
        self.down = False
        self.writes: list[JSON] = []

    async def request(self, method: str, path: str, *, query: Any = None, body: Any = None, **_: Any) -> JSON:
        await asyncio.sleep(0)  # no time: a request's answer comes on a later tick, as over a socket
        if self.down:
            raise OSError("apiserver unreachable")
        if method == "GET":
            if self.obj is None:
                raise ApiError(404, {"reason": "NotFound"}, method, path)
            return copy.deepcopy(self.obj)
        if method == "POST":
            if self.obj is not None:
                raise ApiError(409, {"reason": "AlreadyExists"}, method, path)
        elif method == "PUT":
            assert self.obj is not None
            if body["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
                raise ApiError(409, {"reason": "Conflict"}, method, path)
        self.rv += 1
        self.obj = copy.deepcopy(body)
        self.obj["metadata"]["resourceVersion"] = str(self.rv)
        self.writes.append(copy.deepcopy(self.obj["spec"]))
        return copy.deepcopy(self.obj)

    @property
    def spec(self) -> JSON:
        assert self.obj is not None
        return dict(self.obj["spec"])


class FakeClient:
    field_manager = "mpiop"

    def __init__(self, leases: FakeLeases) -> None:
        self.request = leases.request


def elector(leases: FakeLeases, identity: str, clock: FakeClock | None = None, **timings: float) -> LeaderElector:
    config = ElectionConfig(namespace="ns", name="lock", identity=identity, **timings)
    kwargs: JSON = {"clock": clock.now} if clock is not None else {}
    return LeaderElector(FakeClient(leases), config, **kwargs)  # type: ignore[arg-type]


def test_micro_time_is_utc_with_six_fraction_digits() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert format_micro_time(dt.datetime(2024, 1, 2, 5, 4, 5, tzinfo=plus_two)) == "2024-01-02T03:04:05.000000Z"
    assert format_micro_time(dt.datetime(2024, 1, 2, 3, 4, 5, 120, tzinfo=dt.UTC)) == "2024-01-02T03:04:05.000120Z"
    with pytest.raises(ValueError, match="naive"):
        format_micro_time(dt.datetime(2024, 1, 2, 3, 4, 5))  # naive: refused


@pytest.mark.parametrize("text", ["2024-01-02T03:04:05Z", "2024-01-02T03:04:05.000000Z",
                                  "2024-01-02T05:04:05+02:00", "2024-01-02T03:04:05.000Z"])
def test_parse_micro_time_accepts_what_the_apiserver_returns(text: str) -> None:
    assert parse_micro_time(text) == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def test_timings_must_let_the_leader_stop_before_its_lease_ends() -> None:
    for bad in ({"lease_duration": 10, "renew_deadline": 10}, {"renew_deadline": 2.4, "retry_period": 2},
                {"retry_period": 0}):
        with pytest.raises(ValueError):
            ElectionConfig(namespace="n", name="l", identity="me", **bad).validate()
    ElectionConfig(namespace="n", name="l", identity="me").validate()


async def test_first_candidate_creates_the_lease_and_a_second_waits_a_full_lease() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a, b = elector(leases, "a", clock), elector(leases, "b", clock)
    assert await a.try_acquire_or_renew()
    assert leases.spec["holderIdentity"] == "a" and leases.spec["leaseDurationSeconds"] == 15
    parse_micro_time(leases.spec["renewTime"])
    assert leases.spec["renewTime"].endswith("Z") and len(leases.spec["renewTime"]) == 27
    assert a.is_leader()

    assert not await b.try_acquire_or_renew()
    clock.step(14)
    assert await a.try_acquire_or_renew()  # a renews: b's wait starts again
    clock.step(14)
    assert not await b.try_acquire_or_renew()
    assert b.healthy() and not b.is_leader()  # standing by cleanly


async def test_an_expired_lease_is_taken_over_and_counted_as_a_transition() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a, b = elector(leases, "a", clock), elector(leases, "b", clock)
    assert await a.try_acquire_or_renew()
    acquired = leases.spec["acquireTime"]
    clock.step(1)
    assert await a.try_acquire_or_renew()
    assert leases.spec["acquireTime"] == acquired and leases.spec["leaseTransitions"] == 0

    assert not await b.try_acquire_or_renew()  # first look at the record starts b's timer
    clock.step(10)
    assert not a.is_leader()  # past a's renew deadline: a must not write any more
    clock.step(5.5)
    assert await b.try_acquire_or_renew()
    assert leases.spec["holderIdentity"] == "b" and leases.spec["leaseTransitions"] == 1


async def test_two_candidates_racing_for_a_free_lease_cannot_both_win() -> None:
    leases, clock = FakeLeases(), FakeClock()
    leases.obj = {"metadata": {"name": "lock", "namespace": "ns", "resourceVersion": "0"},
                  "spec": {"holderIdentity": "", "leaseDurationSeconds": 1}}
    results = await asyncio.gather(*(elector(leases, name, clock).try_acquire_or_renew() for name in "abc"),
                                   return_exceptions=True)
    assert results.count(True) == 1
    assert all(isinstance(r, ApiError) and r.conflict for r in results if r is not True)
    assert leases.rv == 1


async def test_release_empties_the_holder_so_a_standby_takes_over_at_once() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a, b = elector(leases, "a", clock), elector(leases, "b", clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    await a.release()
    assert leases.spec["holderIdentity"] == "" and leases.spec["leaseDurationSeconds"] == 1
    assert await b.try_acquire_or_renew()
    writes = len(leases.writes)
    await a.release()  # no longer ours: nothing is written
    assert leases.spec["holderIdentity"] == "b" and len(leases.writes) == writes and not a.is_leader()


async def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline() -> None:
    leases = FakeLeases()
    changes: list[bool] = []
    a = elector(leases, "a", lease_duration=0.6, renew_deadline=0.4, retry_period=0.05)
    a.on_change = changes.append
    stop = asyncio.Event()
    task = asyncio.create_task(a.run(stop))
    await asyncio.wait_for(a.leading.wait(), 2)
    leases.down = True
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(LeadershipLostError):
        await asyncio.wait_for(task, 2)
    assert loop.time() - started < 0.6  # the deadline (0.4 s) plus scheduling slack
    assert changes == [True, False] and not a.is_leader()


async def test_stopping_releases_the_lease() -> None:
    leases = FakeLeases()
    a = elector(leases, "a", lease_duration=0.6, renew_deadline=0.4, retry_period=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(a.run(stop))
    await asyncio.wait_for(a.leading.wait(), 2)
    await until(lambda: len(leases.writes) >= 3, "the acquisition and two renewals")
    stop.set()
    await asyncio.wait_for(task, 2)
    assert leases.spec["holderIdentity"] == "" and not a.leading.is_set()


async def test_the_guarded_client_sends_no_write_while_not_leading() -> None:
    candidate = elector(FakeLeases(), "a")  # never elected
    client = KubeClient(None, qps=0, write_guard=candidate.guard_write)  # type: ignore[arg-type]
    with pytest.raises(NotLeaderError):
        await client.create(PODS, "ns", {"metadata": {"name": "p"}})
    with pytest.raises(NotLeaderError):
        await client.delete(PODS, "ns", "p")


def test_leader_election_flags_take_client_go_durations_and_refuse_impossible_timings() -> None:
    import argparse

    from mpiop.run_flags import add_run_arguments, duration, election_from_args
    from mpiop.server import parse_address

    assert [duration(t) for t in ("15s", "500ms", "1m", "2", "1.5s")] == [15.0, 0.5, 60.0, 2.0, 1.5]
    with pytest.raises(argparse.ArgumentTypeError):
        duration("soon")
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    assert election_from_args(parser.parse_args([])) is None
    config = election_from_args(parser.parse_args(["--leader-elect", "--leader-elect-namespace=ns"]))
    assert config is not None and (config.lease_duration, config.renew_deadline, config.retry_period) == (15, 10, 2)
    assert config.name == "mpiop" and config.identity.count("_") >= 1
    with pytest.raises(SystemExit, match="renew deadline"):
        election_from_args(parser.parse_args(["--leader-elect", "--leader-elect-namespace=ns",
                                              "--leader-elect-renew-deadline=20s"]))
    assert parse_address(":8080") == (None, 8080) and parse_address("[::1]:81") == ("::1", 81)
    assert parse_address("0") is None
