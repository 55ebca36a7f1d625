"""`mpiop run` flags: the client-side rate limiter is off unless asked for, and is a real limit when it is on."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from mpiop import run_flags
from mpiop.controller.caches import Caches
from mpiop.controller.manager import ManagerConfig
from mpiop.desired.hostnetwork import PortRange
from mpiop.desired.launch import DEFAULT_KUBECTL_IMAGE
from mpiop.desired.settings import Settings
from mpiop.kube.client import KubeClient
from mpiop.kube.ratelimit import TokenBucket
from mpiop.run_flags import add_run_arguments, config_from_args
from mpiop.server import Limits
from mpiop.serving.layout_webhook import WebhookLimits
from mpiop.serving.token_reviews import ReviewLimits
from mpiop.status_serving import ServingConfig


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_leave_the_client_side_limiter_off() -> None:
    args = parse()
    assert args.kube_api_qps == 0
    assert args.kube_api_burst == 100
    assert args.workers == 32
    config = config_from_args(args)
    assert config.workers == 32
    assert config.namespace is None


@pytest.mark.parametrize(("argv", "scheduler", "volcano"), [
    ((), None, False),
    (("--gang-scheduling", ""), None, False),
    (("--gang-scheduling", "volcano"), "volcano", True),
    (("--gang-scheduling=scheduler-plugins-scheduler",), "scheduler-plugins-scheduler", False),
], ids=["off", "empty", "volcano", "scheduler-plugins"])
def test_gang_scheduling_flag(argv: tuple[str, ...], scheduler: str | None, volcano: bool) -> None:
    gang = config_from_args(parse(*argv)).settings.gang_scheduler
    assert (gang.scheduler_name if gang else None) == scheduler
    assert (gang is not None and gang.volcano) == volcano


@pytest.mark.parametrize(
    ("argv", "lifecycle_events", "discover_hosts"),
    [((), True, True), (("--no-lifecycle-events",), False, True), (("--no-discover-hosts",), True, False),
     (("--no-lifecycle-events", "--discover-hosts", "--no-discover-hosts"), False, False)],
    ids=["kubeflow-defaults", "no-events", "no-discover-hosts", "both-last-wins"],
)
def test_lean_flags(argv: tuple[str, ...], lifecycle_events: bool, discover_hosts: bool) -> None:
    config = config_from_args(parse(*argv))
    assert (config.lifecycle_events, config.settings.discover_hosts) == (lifecycle_events, discover_hosts)


def test_workers_must_be_positive() -> None:
    with pytest.raises(SystemExit, match="--workers must be at least 1"):
        config_from_args(parse("--workers", "0"))


def test_host_network_port_range() -> None:
    assert config_from_args(parse()).settings.port_range == PortRange(20000, 30000)
    config = config_from_args(parse("--host-network-port-range", "40000-40999"))
    assert config.settings.port_range == PortRange(40000, 40999)


def test_bad_host_network_port_range_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--host-network-port-range", "30000-20000")
    err = capsys.readouterr().err
    assert "argument --host-network-port-range: host network port range 30000-20000: need 1 <= first" in err


# Slow refills (one token every 2 s), so the real time the loop takes cannot add a token.
@pytest.mark.parametrize(("qps", "burst", "requests", "sleeps"), [
    (0, 100, 1000, 0),      # off: never waits, whatever the count
    (0.5, 100, 100, 0),     # the burst passes at once
    (0.5, 100, 103, 3),     # every request past the burst waits for a token
    (0.5, 1, 5, 4),
], ids=["off", "within-burst", "past-burst", "burst-of-one"])
async def test_token_bucket_waits_only_past_the_burst(monkeypatch: pytest.MonkeyPatch, qps: float, burst: int,
                                                     requests: int, sleeps: int) -> None:
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    bucket = TokenBucket(qps, burst)
    for _ in range(requests):
        await bucket.acquire()
    assert len(waits) == sleeps
    assert all(0 < w <= 1 / qps for w in waits)


@pytest.mark.parametrize(("argv", "cap"), [((), 10), (("--max-disruption-restarts", "0"), 0),
                                           (("--max-disruption-restarts=3",), 3)], ids=["default", "zero", "three"])
def test_max_disruption_restarts_flag(argv: tuple[str, ...], cap: int) -> None:
    assert config_from_args(parse(*argv)).settings.max_disruption_restarts == cap


@pytest.mark.parametrize("bad", ["-1", "two"])
def test_max_disruption_restarts_refuses_what_is_not_a_count(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--max-disruption-restarts", bad)
    assert "--max-disruption-restarts: not a whole number >= 0" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "kept"), [((), 3), (("--kept-attempts", "1"), 1)], ids=["default", "one"])
def test_kept_attempts_flag(argv: tuple[str, ...], kept: int) -> None:
    assert config_from_args(parse(*argv)).settings.kept_attempts == kept


def test_kept_attempts_keeps_at_least_the_last(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--kept-attempts", "0")
    assert "--kept-attempts: not a whole number >= 1: '0'" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "codes", "most"), [
    ((), frozenset(), 8), (("--node-fault-exit-codes", "74, 75,", "--max-excluded-nodes", "2"), frozenset({74, 75}), 2),
], ids=["defaults", "set"])
def test_node_exclusion_flags(argv: tuple[str, ...], codes: frozenset[int], most: int) -> None:
    settings = config_from_args(parse(*argv)).settings
    assert (settings.node_fault_exit_codes, settings.max_excluded_nodes) == (codes, most)


@pytest.mark.parametrize(("argv", "most"), [((), 1000), (("--gpu-layout-max-entries", "20000"), 20_000)],
                         ids=["default", "raised"])
def test_gpu_layout_max_entries_flag(argv: tuple[str, ...], most: int) -> None:
    assert config_from_args(parse(*argv)).settings.gpu_layout_max_entries == most


@pytest.mark.parametrize("bad", ["0", "256", "x"])
def test_node_fault_exit_codes_refuses_what_is_not_an_exit_code(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--node-fault-exit-codes", f"74,{bad}")
    assert f"--node-fault-exit-codes: not an exit code from 1 to 255: {bad!r}" in capsys.readouterr().err
@pytest.mark.parametrize(("argv", "launch", "image"), [
    ((), "ssh", DEFAULT_KUBECTL_IMAGE),
    (("--default-launch", "exec"), "exec", DEFAULT_KUBECTL_IMAGE),
    (("--default-launch=exec", "--kubectl-image", "example.org/kubectl:v1"), "exec", "example.org/kubectl:v1"),
], ids=["kubeflow-default", "exec", "own-kubectl"])
def test_launch_flags_reach_the_settings(argv: tuple[str, ...], launch: str, image: str) -> None:
    settings = config_from_args(parse(*argv)).settings
    assert (settings.default_launch, settings.kubectl_image) == (launch, image)


@pytest.mark.parametrize(("argv", "grace"), [((), 300), (("--kubectl-image-grace-seconds", "0"), 0),
                                             (("--kubectl-image-grace-seconds=900",), 900)],
                         ids=["default", "none", "fifteen-minutes"])
def test_kubectl_image_grace_flag(argv: tuple[str, ...], grace: int) -> None:
    assert config_from_args(parse(*argv)).settings.kubectl_image_grace_seconds == grace


@pytest.mark.parametrize("bad", ["-1", "5m", "1.5"])
def test_kubectl_image_grace_refuses_what_is_not_seconds(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--kubectl-image-grace-seconds", bad)
    assert "--kubectl-image-grace-seconds: not a whole number >= 0" in capsys.readouterr().err


def test_an_unknown_default_launch_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--default-launch", "rsh")
    assert "--default-launch: invalid choice: 'rsh'" in capsys.readouterr().err


def test_no_flags_give_the_config_and_settings_defaults() -> None:
    """Each default lives once, in ManagerConfig or Settings: the flags take theirs from there."""
    assert config_from_args(parse()) == ManagerConfig()
    assert config_from_args(parse()).settings == Settings()


def test_help_text_reads_the_default_where_it_lives(monkeypatch: pytest.MonkeyPatch) -> None:
    """Change a default in Settings or ManagerConfig and both the flag and its help text follow."""
    monkeypatch.setattr(run_flags, "_SETTINGS", Settings(max_disruption_restarts=7, kept_attempts=5))
    monkeypatch.setattr(run_flags, "_CONFIG", ManagerConfig(workers=9, lifecycle_events=False))
    parser = argparse.ArgumentParser(formatter_class=lambda prog: argparse.HelpFormatter(prog, width=1000))
    add_run_arguments(parser)
    text = parser.format_help()
    assert "past N they do (default 7)" in text
    assert "<job>-attempt-<n> (default 5)" in text
    assert "reconcile workers (default 9)" in text
    assert "they are only logged (default off)" in text
    config = config_from_args(parser.parse_args([]))
    assert (config.settings.max_disruption_restarts, config.settings.kept_attempts, config.workers,
            config.lifecycle_events) == (7, 5, 9, False)


@pytest.mark.parametrize(("argv", "watched"), [((), True), (("--no-gpu-layout",), False), (("--gpu-layout",), True)],
                         ids=["default", "off", "on"])
def test_gpu_layout_flag_decides_whether_nodes_are_watched(argv: tuple[str, ...], watched: bool) -> None:
    """Off (a namespaced Role cannot list nodes), the manager starts no Node informer."""
    config = config_from_args(parse(*argv))
    assert config.gpu_layout is watched
    caches = Caches.build(KubeClient.__new__(KubeClient), None, watch_nodes=config.gpu_layout)
    assert (caches.nodes is not None) is watched


def test_status_endpoint_limits_default_to_their_dataclasses_and_reach_them() -> None:
    defaults = ServingConfig.from_args(parse())
    assert (defaults.limits, defaults.reviews, defaults.webhook_limits) == (Limits(), ReviewLimits(), WebhookLimits())
    webhook = parse("--gpu-layout-per-source-qps=2.5", "--gpu-layout-per-source-burst=3")
    assert ServingConfig.from_args(webhook).webhook_limits == WebhookLimits(per_source_qps=2.5, per_source_burst=3)
    args = parse("--status-max-connections=50", "--status-max-connections-per-source=4", "--status-idle-seconds=2.5",
                 "--status-max-headers=16", "--status-max-header-bytes=4096", "--status-review-in-flight=2",
                 "--status-review-per-source-qps=0.5", "--status-review-per-source-burst=3",
                 "--status-token-cache-size=100", "--status-request-seconds=3", "--status-review-queue=7",
                 "--status-body-bytes-in-flight=2000000", "--status-connections-per-source-qps=2.5",
                 "--status-connections-per-source-burst=6")
    serving = ServingConfig.from_args(args)
    assert serving.limits == Limits(max_connections=50, max_connections_per_source=4, connections_per_source_qps=2.5,
                                    connections_per_source_burst=6, idle_seconds=2.5, max_headers=16,
                                    max_header_bytes=4096, request_seconds=3, body_bytes_in_flight=2_000_000)
    assert serving.reviews == ReviewLimits(in_flight=2, per_source_qps=0.5, per_source_burst=3, cache_size=100,
                                           queue=7)


@pytest.mark.parametrize(("argv", "webhook", "client_ca"), [
    ((), "mpiop-gpu-layout", ""),
    (("--gpu-layout-client-ca=/ca.pem",), "mpiop-gpu-layout", "/ca.pem"),
    (("--no-gpu-layout", "--gpu-layout-client-ca=/ca.pem"), "", ""),
    (("--gpu-layout-webhook=", "--gpu-layout-client-ca=/ca.pem"), "", ""),
], ids=["default", "client-ca", "no-gpu-layout", "no-webhook"])
def test_the_webhook_and_its_client_ca_are_served_only_with_the_gpu_layout(argv: tuple[str, ...], webhook: str,
                                                                           client_ca: str) -> None:
    serving = ServingConfig.from_args(parse(*argv))
    assert (serving.webhook, serving.client_ca) == (webhook, client_ca)


@pytest.mark.parametrize("argv", ["--status-max-connections=0", "--status-idle-seconds=0",
                                  "--status-review-per-source-qps=-1", "--status-max-header-bytes=100",
                                  "--status-request-seconds=soon", "--status-review-queue=0",
                                  "--status-body-bytes-in-flight=1000", "--gpu-layout-per-source-qps=0",
                                  "--gpu-layout-per-source-burst=0"])
def test_status_endpoint_limits_refuse_what_would_turn_them_off(argv: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)
    assert argv.split("=")[0] in capsys.readouterr().err
