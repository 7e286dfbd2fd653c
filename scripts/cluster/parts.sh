# Sourced by up.sh and down.sh: where build.sh put each part (folders named by version).
source scripts/cache.sh
source scripts/cluster/versions.sh
CLUSTER_CACHE="$BUILD_CACHE/cluster"
export INVFOLD_CACHE_DIR
export CLUSTER_K8S_BIN="$CLUSTER_CACHE/kubernetes-$K8S_VERSION/bin"
export CLUSTER_JOBSET_DIR="$CLUSTER_CACHE/jobset-$JOBSET_VERSION"
export CLUSTER_TRAINER_DIR="$CLUSTER_CACHE/trainer-$TRAINER_VERSION"
export CLUSTER_COREDNS_BIN="$CLUSTER_CACHE/coredns-$COREDNS_VERSION/bin"
export CLUSTER_KUBE_ROUTER_BIN="$CLUSTER_CACHE/kube-router-$KUBE_ROUTER_VERSION/bin"
export CLUSTER_SEAWEEDFS_IMAGE
export CLUSTER_SEAWEEDFS_DIR="$CLUSTER_CACHE/seaweedfs-$SEAWEEDFS_VERSION"
CLUSTER_DEBIAN_ROOT="$CLUSTER_CACHE/debian-$(printf '%s\n' "${DEBIAN_PACKAGES[@]}" | sha256sum | cut -c1-12)/root"
export CLUSTER_DEBIAN_ROOT
export CLUSTER_PAUSE_TAR="$CLUSTER_CACHE/pause-1/pause.tar"
# kubectl from scripts/install_tools.sh; the Python with PyYAML: the project's venv when there is one.
export KUBECTL=${KUBECTL:-$PWD/.cache/tools/bin/kubectl}
CLUSTER_PY=${PYTHON:-.venv/bin/python}
[ -x "$CLUSTER_PY" ] || CLUSTER_PY=python3
export CLUSTER_KFP_DIR="$CLUSTER_CACHE/kfp-$KFP_VERSION"
CLUSTER_KFP_IMAGES_DIR="$CLUSTER_CACHE/kfp-images-$KFP_VERSION-$(kfp_images_key)"
export CLUSTER_KFP_IMAGES_DIR
export KFP_VERSION ARGO_VERSION MLMD_VERSION SEAWEEDFS_VERSION KFP_IMAGE_PREFIX GRPCWEBPROXY_VERSION
