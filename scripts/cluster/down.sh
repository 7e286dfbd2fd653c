#!/usr/bin/env bash
# `make cluster-down`: stop every process `make cluster-up` started (by pid), unmount, remove the
# bridge, the iptables rules and kubelet's cgroups. The images imported into the node stay for the
# next start; `scripts/cluster/down.sh --purge` removes them (and the cluster's PKI) too.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/cluster/parts.sh
exec "$CLUSTER_PY" scripts/cluster/cluster.py "$([ "${1:-}" = --purge ] && echo purge || echo down)"
