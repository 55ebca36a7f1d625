"""Hypothesis strategies for MPIJob parts: DNS labels, words, quantities, pod templates."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

dns_labels = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
words = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
quantities = st.one_of(st.integers(0, 64), st.sampled_from(["500m", "1Gi", "2", "0.5", "16Gi", "100M", "1e3"]))
resource_names = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "amd.com/gpu", "example.com/fpga"])


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


containers = st.lists(
    st.fixed_dictionaries(
        {"name": dns_labels, "image": st.sampled_from(["mpioperator/mpi-pi:openmpi", "busybox:1.36"])},
        optional={
            "command": st.lists(words, max_size=3),
            "args": st.lists(words, max_size=4),
            "env": st.lists(
                st.fixed_dictionaries({"name": st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True),
                                       "value": words}),
                max_size=3, unique_by=lambda env: env["name"],
            ),
            "resources": st.fixed_dictionaries({}, optional={
                "limits": st.dictionaries(resource_names, quantities, max_size=3),
                "requests": st.dictionaries(resource_names, quantities, max_size=3),
            }),
            "workingDir": st.sampled_from(["/", "/home/mpiuser", "/workspace"]),
        },
    ),
    min_size=1, max_size=2, unique_by=lambda container: container["name"],
)
pod_templates = st.fixed_dictionaries(
    {"spec": st.fixed_dictionaries({"containers": containers}, optional={
        "restartPolicy": st.sampled_from(["Always", "OnFailure", "Never"]),
        "nodeSelector": st.dictionaries(dns_labels, dns_labels, max_size=2),
        "hostNetwork": st.booleans(),
        "terminationGracePeriodSeconds": st.integers(0, 3600),
        "priorityClassName": dns_labels,
    })},
    optional={"metadata": st.fixed_dictionaries({}, optional={
        "labels": st.dictionaries(dns_labels, dns_labels, max_size=3),
        "annotations": st.dictionaries(dns_labels, words, max_size=3),
    })},
)
