#!/usr/bin/env bash
# `make cluster-up`: build what is missing (scripts/cluster/build.sh), then start the single-node
# test cluster (scripts/cluster/cluster.py) or reuse the one running. Needs root (it runs a kubelet)
# and Go >= 1.26 for the first build. Prints the KUBECONFIG line at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "cluster-up: needs root (kubelet, containerd, a bridge, iptables)" >&2; exit 1; }
bash scripts/cluster/build.sh
# Kubeflow Pipelines' backend, from upstream's manifests; INVFOLD_CLUSTER_KFP=0 leaves it out (the
# object store alone; scripts/cluster/cluster.py start_store).
[ "${INVFOLD_CLUSTER_KFP:-1}" = 0 ] || bash scripts/cluster/build.sh argo kfp kfp_ui grpcwebproxy kfp_images
source scripts/cluster/parts.sh
[ -x "$KUBECTL" ] || { echo "cluster-up: kubectl is missing at $KUBECTL: run \`PYTHON=.venv/bin/python bash scripts/install_tools.sh\`" >&2; exit 1; }
exec "$CLUSTER_PY" scripts/cluster/cluster.py up
