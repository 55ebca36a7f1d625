# mpiop: `make test` on a fresh clone sets everything up and runs lint, types and all tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Independent steps run side by side (`make test`: lint beside the builds, the builds beside each other): one after
# the other, a first build kept the 2 cores 53% busy (links, module preparation, downloads); side by side, 98%.
# Each step's lines keep their own prefix; JOBS=1 runs one at a time.
JOBS ?= 3
MAKEFLAGS += -j$(JOBS)

.PHONY: help venv binaries test-binaries lint test test-stress unit integration dev-cluster dev-cluster-down crds podtemplate-schema krew run clean bench bench-node

help:
	@echo "make run          mpiop against KUBECONFIG, else on a local node (as root: runs an Open MPI pi job first)"
	@echo "make test         venv + binaries + ruff + mypy --strict + pytest (unit and integration)"
	@echo "make test-stress  every test with stress-ng keeping both cores busy (finds tests that race the operator)"
	@echo "make lint         ruff, mypy --strict and the import-layer contracts (.importlinter)"
	@echo "make dev-cluster  start the local control plane in the background"
	@echo "make crds         regenerate crds/ from the pydantic models"
	@echo "make krew         the kubectl mpijob krew archive (dist/) and manifest (deploy/krew/mpijob.yaml)"
	@echo "make podtemplate-schema  refresh the PodTemplateSpec schema snapshot from a local kube-apiserver"
	@echo "make bench        mpiop at scale on a simulated cluster (no root): a table, then one JSON line"
	@echo "make bench-node   time to first and last rank of a 2-worker Open MPI job, ssh or exec launch, on the real e2e node (root; not in make bench)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# Finds the pinned binaries (KUBEBUILDER_ASSETS, PATH; etcd only KUBEBUILDER_ASSETS) or builds them once into .cache/.
binaries: venv
	$(BIN)/python -m devcluster.binaries

# Every binary the test suite runs, built (or fetched) here so that none is made under a test's timeout; in CI the
# test session forbids it (MPIOP_NO_BUILD, tests/conftest.py), so one missing here fails loudly, naming this target.
# Tests render the Helm chart (helm, devcluster/helm.py through hack/helm.sh), check and unit-test the alerting
# rules with promtool, and have a real Prometheus scrape mpiop: both binaries are taken out of Debian's prometheus
# package into .cache/ (hack/prometheus.sh, hack/promtool.sh); run a simulated cluster (KWOK and its Stages,
# devcluster/kwok.py); install the gang schedulers' PodGroup CRDs: scheduler-plugins' from its module, Volcano's made by
# controller-gen, built once (devcluster/gang_crds.py); and compare the CRD with
# kubeflow/mpi-operator's, read from its Go module (testkit/kubeflow.py). Each step is a no-op once its output is
# there, and each is its own step, so that `make` runs them side by side (JOBS above). The Go tools are built
# after Kubernetes' binaries, on the same modules (devcluster/pinned.py): what they share with Kubernetes
# (client-go, api, grpc, ...) compiles once, out of Go's cache; Kueue's controller manager (test_kueue.py,
# test_kueue_dra.py) is one of them.
TEST_BINARY_STEPS := binaries build-oldest build-gang-crds build-kwok build-helm build-kueue build-prometheus fetch-kubeflow
.PHONY: $(TEST_BINARY_STEPS)
test-binaries: $(TEST_BINARY_STEPS)

# The oldest supported minor's apiserver and controller-manager (make test's second part), after the project's.
build-oldest: binaries
	$(BIN)/python -m devcluster.binaries --oldest

build-gang-crds: binaries
	$(BIN)/python -m devcluster.gang_crds >/dev/null

build-kwok: binaries
	$(BIN)/python -m devcluster.kwok >/dev/null

build-helm: binaries
	bash hack/helm.sh >/dev/null

build-kueue: binaries
	$(BIN)/python -m devcluster.kueue >/dev/null

# promtool and the server come out of one Debian package, fetched once: one step, one after the other.
build-prometheus:
	bash hack/promtool.sh >/dev/null
	bash hack/prometheus.sh >/dev/null

fetch-kubeflow: venv
	$(BIN)/python -m testkit.kubeflow >/dev/null

# Everything Python in the repo: ruff, mypy --strict, and the import contracts of .importlinter (the layers).
PY_DIRS := mpiop devcluster testkit tests bench e2e hack
lint: venv
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/mypy $(PY_DIRS)
	$(BIN)/lint-imports

# pytest's exit code 5 ("no tests collected") is a failure like any other non-zero code. TEST_WORKERS pytest-xdist
# processes, each with its own control plane: alone, one kept the 2 cores 30-50% busy (the tests wait on the
# apiserver, the controllers and the operator far more than they compute). The two Kueue modules share a worker
# (their xdist_group: one Kueue). TEST_WORKERS=0: one process, as before.
TEST_WORKERS ?= 2
# Then the tests marked oldest_minor again, on the oldest supported Kubernetes minor's control plane (README,
# "Kubernetes versions"; devcluster/versions.py OLDEST_KUBERNETES_VERSION).
test: lint test-binaries
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup
	MPIOP_KUBERNETES_VERSION=oldest $(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup -m oldest_minor

# The whole suite while stress-ng (Debian's, hack/stress-ng.sh) keeps $(STRESS_CPUS) cores busy: a test that
# races the operator (reads a soft write once, sleeps then asserts nothing happened) fails here first.
# stress-ng stops when pytest ends (and by itself after STRESS_SECONDS); PYTEST_ARGS narrows the run.
STRESS_CPUS ?= 2
STRESS_SECONDS ?= 7200
test-stress: test-binaries
	@stress=$$(bash hack/stress-ng.sh); \
	echo "$$stress --cpu $(STRESS_CPUS) --timeout $(STRESS_SECONDS)s --quiet &"; \
	$$stress --cpu $(STRESS_CPUS) --timeout $(STRESS_SECONDS)s --quiet & stress_pid=$$!; \
	trap 'kill $$stress_pid 2>/dev/null; wait $$stress_pid 2>/dev/null' EXIT; \
	echo "$(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS)"; \
	$(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS)

unit: venv
	$(BIN)/pytest -q tests/unit

integration: test-binaries
	$(BIN)/pytest -q tests/integration

dev-cluster: binaries
	$(BIN)/python -m devcluster up

# The main job: the operator against $KUBECONFIG; else, as root with apt, on the real node of the e2e suite,
# where an Open MPI pi job runs to completion first (MPIOP_RUN_NODE=0: a bare local control plane instead).
run: binaries
	@if [[ -z "$$KUBECONFIG" && "$${MPIOP_RUN_NODE:-1}" != 0 && $$(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then \
	  bash hack/install-e2e-deps.sh; fi
	$(BIN)/python -m devcluster.local_run

dev-cluster-down: venv
	$(BIN)/python -m devcluster down

# The CRD: pydantic models + the committed PodTemplateSpec snapshot, offline (tests/unit/test_crd.py checks it).
krew: venv
	$(BIN)/python hack/krew.py

crds: venv
	$(BIN)/mpiop crd > crds/kubeflow.org_mpijobs.yaml.tmp && mv crds/kubeflow.org_mpijobs.yaml.tmp crds/kubeflow.org_mpijobs.yaml

# After a Kubernetes version bump: the pod template schema from the pinned apiserver's OpenAPI, then `make crds`.
podtemplate-schema: binaries
	PYTHONPATH=$(CURDIR) $(BIN)/python hack/extract_podtemplate_schema.py

# mpiop at scale on a simulated cluster (kube-scheduler + KWOK fake GPU nodes; KWOK is built on first use):
# a table, then one JSON line with every figure. Not part of `make test`; ~15 minutes on 2 cores.
# BENCH_ARGS=--quick for a small run, --help for the knobs.
bench: binaries
	$(BIN)/python -m bench $(BENCH_ARGS)

# Time to first rank on the real node of the e2e suite (root, like `make e2e`): a 2-worker Open MPI job from
# create to each milestone, median (min-max) of 10 runs after a warm-up; a table, then one JSON line.
# BENCH_NODE_ARGS=--help for the knobs. Queues behind any other bench (the lock) and e2e node on the machine.
bench-node: binaries
	bash hack/install-e2e-deps.sh
	flock /tmp/mpiop-bench.lock $(BIN)/python -m bench.node $(BENCH_NODE_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# End to end on a real single node (root on Debian: containerd, runc, CNI plugins, CoreDNS, kubelet, kube-proxy),
# real MPI jobs through mpiop. Installs the e2e packages, builds binaries and images once into .cache/, runs e2e/.
# E2E_WORKERS xdist workers share the one node (brought up by pytest's controller; docs/e2e.md): node-wide scenarios
# (marker node_wide) run alone, host-network ones one after another on one worker. E2E_WORKERS=0: one process, serial.
E2E_WORKERS ?= 2
.PHONY: e2e
e2e: binaries
	bash hack/install-e2e-deps.sh
	$(BIN)/python -m devcluster.node prepare
	$(BIN)/pytest -q -p no:cacheprovider -rfExX -n $(E2E_WORKERS) --dist loadgroup e2e  # f, E: what failed, at the end
