"""Nodes a job's pods must avoid, as a required node affinity merged into the template's own.

Node selector terms are ORed, so `kubernetes.io/hostname NotIn [...]` is added to every term the template has
(or makes the only term): whichever term the scheduler matches, the excluded nodes stay out.
"""

from __future__ import annotations

from typing import Any

HOSTNAME_LABEL = "kubernetes.io/hostname"


def exclude_nodes(spec: dict[str, Any], nodes: list[str]) -> None:
    """Add `HOSTNAME_LABEL NotIn nodes` to every required node selector term of this pod spec."""
    if not nodes:
        return
    expression = {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": sorted(nodes)}
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [{**term, "matchExpressions": [*(term.get("matchExpressions") or []), expression]}
                                     for term in terms]
