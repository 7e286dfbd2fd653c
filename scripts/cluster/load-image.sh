#!/usr/bin/env bash
# Load images from the Docker engine (DOCKER_HOST) into the test cluster's node: nothing is pulled
# there, so pods run images that were loaded (imagePullPolicy IfNotPresent or Never).
#   scripts/cluster/load-image.sh IMAGE...      e.g. invfold/invfold-runtime:0.1.0-cpu
# An image already on the node is skipped. The node keeps them across `make cluster-down`;
# `scripts/cluster/down.sh --purge` removes them.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/cluster/parts.sh
ctr=("$CLUSTER_DEBIAN_ROOT/usr/bin/ctr" --address "$INVFOLD_CACHE_DIR/cluster/containerd/containerd.sock" -n k8s.io)
present=$("${ctr[@]}" images ls -q)
missing=()
for image in "$@"; do
  ref=$image
  [[ ${ref%%/*} == *.* ]] || ref="docker.io/$ref"  # containerd's name of a Docker Hub image
  if grep -qxF "$ref" <<< "$present"; then
    echo "==> $image is on the node"
  else
    missing+=("$image")
  fi
done
[ ${#missing[@]} -gt 0 ] || exit 0
# One stream for all: `docker save` writes the layers the images share once.
started=$(date +%s)
"${DOCKER:-docker}" save "${missing[@]}" | "${ctr[@]}" images import -
echo "==> loaded ${missing[*]} into the node in $(($(date +%s) - started)) s"
