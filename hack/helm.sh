#!/usr/bin/env bash
# Print the path of a helm binary built from its Go module (helm.sh/helm/v3/cmd/helm) into the git-ignored
# .cache/, building it on first use (devcluster/helm.py: on the project's Kubernetes modules, after them).
#   hack/helm.sh                 -> prints .cache/helm/<version>/bin/helm
#   $(hack/helm.sh) template deploy/helm/mpiop
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$root/.venv/bin/python"
if [[ ! -x "$python" ]]; then
  echo "hack/helm.sh: helm is built by devcluster/helm.py, which needs the project's venv: run \`make venv\` first" >&2
  exit 1
fi
cd "$root"
exec "$python" -m devcluster.helm
