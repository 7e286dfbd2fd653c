# The two set-up commands of the README are `make run` and `make test`; each installs what it
# needs on a fresh machine. The others assume `make test` (or `bash scripts/setup.sh test`) ran once.
.PHONY: run test test-fast lint generate generate-sample-data images cluster-up cluster-down test-cluster test-kfp screenshots

run:
	bash scripts/setup.sh run
	.venv/bin/invfold run

# The cluster lane (tests/cluster) runs here when the cluster's parts are already built into the
# cache (`make cluster-up` or `make test-cluster` once: a cold Go build of Kubernetes is too long for
# CI's budget); otherwise this run deselects it and says so.
# One worker per core, at most PYTEST_WORKERS (pytest-xdist), each taking a whole module at a time,
# longest first; the image and cluster tests stay on one worker (tests/conftest.py). One torch
# thread per process, so the workers do not fight over the cores.
PYTEST_WORKERS ?= 4
PARALLEL = OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python -m pytest -n auto --maxprocesses=$(PYTEST_WORKERS)
test:
	bash scripts/setup.sh test
	$(MAKE) lint
	if ! bash scripts/cluster/build.sh --built; then lane="not cluster"; \
	  echo "make test: the cluster parts are not built yet: the cluster lane is left out (make test-cluster builds and runs it)"; \
	elif [ "$${INVFOLD_CLUSTER_KFP:-1}" = 0 ] || ! bash scripts/cluster/build.sh --built kfp; then \
	  lane="not kfp"; export INVFOLD_CLUSTER_KFP=0; \
	  echo "make test: the cluster lane runs without Kubeflow Pipelines' backend (INVFOLD_CLUSTER_KFP=0, or its parts not built yet: make cluster-up builds them); the kfp tests are left out"; \
	else lane=""; fi; \
	INVFOLD_TEST_DURATIONS=runs/test-durations.json $(PARALLEL) --dist loadscope --no-loadscope-reorder \
	  -q --durations=25 $${lane:+-m "$$lane"}

# A few minutes: everything but the tests marked slow (images, whole pipelines, multi-process
# training, and what took over 20 s in tests/durations.json), spread test by test
test-fast:
	$(PARALLEL) -q -m "not slow"

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	bash scripts/lint_imports.sh
	.venv/bin/python scripts/lint_lazy_imports.py

# every generated file in the repository, rewritten from its source (see ARCHITECTURE.md's table)
generate:
	.venv/bin/python scripts/generate_signatures.py
	.venv/bin/invfold compile
	.venv/bin/invfold compile --pipeline design
	.venv/bin/python scripts/generate_schemas.py
	.venv/bin/python scripts/generate_k8s_base.py

images:
	bash scripts/build_images.sh

# the bundled sample (src/invfold/data/): needs the network (PyPI, Debian) and mmseqs2
generate-sample-data:
	.venv/bin/python scripts/build_sample_data.py

# A single-node Kubernetes with Kubeflow Trainer and JobSet, built into the cache on first use
# (docs/deploy.md, "Try it on one machine").
cluster-up:
	bash scripts/cluster/up.sh

cluster-down:
	bash scripts/cluster/down.sh

# The cluster lane alone (also in `make test` once built): builds what is missing, starts the cluster
# or reuses a running one.
test-cluster:
	.venv/bin/python -m pytest -q -m cluster tests/cluster --durations=10

# The lane's tests on Kubeflow Pipelines 2.17's own backend alone (API server, Argo, ML Metadata),
# built from upstream's source on first use and installed from its manifests by make cluster-up.
test-kfp:
	.venv/bin/python -m pytest -q -m kfp tests/cluster --durations=10

# The pictures of KFP's UI and the cluster's MLflow in docs/deploy.md (docs/screenshots/), taken by
# the lane's browser tests on a run they submit (a KFP cluster up: make cluster-up).
screenshots:
	INVFOLD_SCREENSHOTS=docs/screenshots .venv/bin/python -m pytest -q -m kfp tests/cluster/test_submitted_runs.py \
	  -k "kubeflow_ui or mlflow_shows" --timeout=3600 --durations=5
