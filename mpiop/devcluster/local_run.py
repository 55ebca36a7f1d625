"""`make run`: the operator against KUBECONFIG's cluster, or against a local control plane started for it.

With KUBECONFIG unset, the dev control plane (`mpiop dev-cluster up`) is started in the background and
kept after the operator stops, so jobs and their state survive a restart of the operator.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mpiop.api.install import install_crd
from mpiop.cli import main as cli_main
from mpiop.devcluster import background
from mpiop.devcluster.binaries import kube_binary
from mpiop.kube.client import KubeClient


async def _install(kubeconfig: str) -> str:
    client = await KubeClient.connect(kubeconfig)
    try:
        await install_crd(client)
        version = await client.request("GET", "/version")
    finally:
        await client.close()
    return str(version.get("gitVersion"))


def main() -> int:
    kubeconfig = os.environ.get("KUBECONFIG", "")
    local = not kubeconfig
    if local:
        if background.up(scheduler=True) != 0:
            return 1
        state = background.read_state()
        assert state is not None
        kubeconfig = str(state["kubeconfig"])
    kubectl = kube_binary("kubectl")
    version = asyncio.run(_install(kubeconfig))
    print(f"\nCRD mpijobs.kubeflow.org installed on Kubernetes {version}. In another shell:\n"
          f"  export KUBECONFIG={kubeconfig}\n"
          f"  {kubectl} apply -f examples/pi-openmpi.yaml\n"
          f"  {kubectl} get mpij -w\n"
          + ("Stop the operator with Ctrl-C; the local control plane keeps running until\n"
             "  .venv/bin/mpiop dev-cluster down\n" if local else "")
          + "Starting the operator (all namespaces):\n", flush=True)
    return cli_main(["run", "--kubeconfig", kubeconfig, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
