# The two set-up commands of the README. Each installs what it needs on a fresh machine.
.PHONY: run test images cluster-up cluster-down test-cluster

run:
	bash scripts/setup.sh run
	.venv/bin/invfold run

test:
	bash scripts/setup.sh test
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	bash scripts/lint_imports.sh
	.venv/bin/python -m pytest -q --durations=25

images:
	bash scripts/build_images.sh

# A single-node Kubernetes with Kubeflow Trainer and JobSet, built into the cache on first use
# (docs/deploy.md, "Try it on one machine").
cluster-up:
	bash scripts/cluster/up.sh

cluster-down:
	bash scripts/cluster/down.sh

# The cluster lane alone (it also runs in `make test`): starts the cluster or reuses a running one.
test-cluster:
	bash scripts/setup.sh test
	.venv/bin/python -m pytest -q -m cluster tests/cluster --durations=10
