"""`python -m bench.layout`: the CPU of one total-GPU layout pass (policies/gpu_layout.choose), before and after.

Issue 50's case: 300 GPU nodes of 8, all tainted, and a `gpus: 13` job (nothing fits, so each node event lays it out
again) whose Worker template has 20,000 tolerations, none of them the nodes' taint. Before, each node was matched
against every toleration: seconds per pass on the event loop. Printed per case, the median of `--passes` passes:

* `before`: the `choose` of another checkout (`--before`, default /work/main), loaded from its file;
* `after`: this checkout's, at the default --gpu-layout-max-entries (the 20,000 are over it: not matched at all);
* `after_unlimited`: this checkout's with the limit raised over the template (the indexes and node shapes alone);
* two worst cases at the default limit: as many distinct taints as nodes (300 shapes) against as many
  tolerations as the limit allows; and required node affinity of as many entries as the limit allows, every
  expression matching, with the hostname named so that each node is a shape of its own.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired.settings import DEFAULT_SETTINGS
from mpiop.policies import gpu_layout
from testkit.mpijobs import make_mpijob
from testkit.nodes import gpu_node, gpu_nodes, taint

Choose = Callable[[MPIJob, Iterable[JSON]], object]


def tolerations(count: int) -> list[JSON]:
    return [{"key": f"team-{i}", "operator": "Equal", "value": f"v{i}", "effect": "NoSchedule"} for i in range(count)]


def job(**worker_spec: Any) -> MPIJob:
    return MPIJob.model_validate(make_mpijob("big", "bench").total_gpus(13).pod_spec("Worker", **worker_spec)
                                 .manifest())


def affinity(entries: int) -> JSON:
    """One term: a hostname NotIn (so each node is a shape) and NotIn expressions of 2 values, all matching."""
    expressions = [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["elsewhere"]}]
    expressions += [{"key": f"zone-{i}", "operator": "NotIn", "values": ["a", "b"]}
                    for i in range((entries - 3) // 3)]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}


def seconds(choose: Choose, the_job: MPIJob, nodes: list[JSON], passes: int) -> float:
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        choose(the_job, nodes)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def checkout_choose(root: Path) -> Choose | None:
    """`choose` of policies/gpu_layout.py in another checkout (its own imports resolve to this one's mpiop)."""
    path = root / "mpiop" / "policies" / "gpu_layout.py"
    spec = importlib.util.spec_from_file_location("bench_gpu_layout_before", path)
    if not path.is_file() or spec is None or spec.loader is None:
        return None
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.choose  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.layout", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--tolerations", type=int, default=20_000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--before", type=Path, default=Path("/work/main"), help="the checkout to compare with")
    args = parser.parse_args()
    limit = DEFAULT_SETTINGS.gpu_layout_max_entries

    def after(max_entries: int) -> Choose:
        return lambda the_job, nodes: gpu_layout.choose(the_job, nodes, max_entries)

    tainted = gpu_nodes("n", args.nodes, 8, taints=[taint("dedicated", "infer")])
    distinct = [gpu_node(f"d-{i}", 8, taints=[taint(f"pool-{i}", "x")]) for i in range(args.nodes)]
    huge = job(tolerations=tolerations(args.tolerations))
    cases: list[tuple[str, Choose | None, MPIJob, list[JSON]]] = [
        (f"before ({args.before})", checkout_choose(args.before), huge, tainted),
        ("after", after(limit), huge, tainted),
        ("after_unlimited", after(args.tolerations), huge, tainted),
        (f"worst_taints ({args.nodes} shapes, {limit} tolerations)", after(limit), job(tolerations=tolerations(limit)),
         distinct),
        (f"worst_affinity ({args.nodes} shapes, {limit} entries)", after(limit), job(affinity=affinity(limit)),
         gpu_nodes("a", args.nodes, 8)),
    ]
    print(f"{args.nodes} tainted 8-GPU nodes, gpus 13, {args.tolerations} tolerations; per pass, the median of "
          f"{args.passes}; --gpu-layout-max-entries {limit}")
    for name, choose, the_job, nodes in cases:
        figure = "no policies/gpu_layout.py there" if choose is None else (
            f"{seconds(choose, the_job, nodes, args.passes) * 1000:.3f} ms")
        print(f"{name + ':':<50} {figure}")


if __name__ == "__main__":
    main()
