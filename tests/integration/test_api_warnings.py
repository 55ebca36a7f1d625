"""The apiserver's Warning headers reach KubeClient.warnings: a pod whose env repeats a name (what mpiop's
variables would do to a template that set one of them) is created with a 299 warning, logged once and counted
(mpiop/kube/warnings.py). testkit's running_operator fails a test whose operator was warned at all."""

from __future__ import annotations

import pytest
import structlog

from mpiop.kube.client import PODS, KubeClient

pytestmark = pytest.mark.integration


async def test_a_warned_write_is_seen_once(kube: KubeClient, namespace: str) -> None:
    container = {"name": "main", "image": "busybox",
                 "env": [{"name": "OMPI_MCA_x", "value": "1"}, {"name": "OMPI_MCA_x", "value": "2"}]}
    with structlog.testing.capture_logs() as logs:
        for name in ("a", "b"):
            await kube.create(PODS, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                                "spec": {"containers": [container]}})
    warned = [text for text in kube.warnings.counts if "OMPI_MCA_x" in text]
    assert len(warned) == 1, kube.warnings.counts
    assert kube.warnings.counts[warned[0]] == 2
    assert [line["resource"] for line in logs if line.get("warning") == warned[0]] == ["pods"]
