#!/usr/bin/env bash
# Horovod 0.28.1 for torch 2.13, built from source with the two fixes it needs:
# a CMake policy floor for its bundled Gloo, and C++17 everywhere through the GPU image's own
# compiler wrapper, images/horovod/cxx17 (which also supplies the includes GCC 13 needs).
# The wheel is cached outside the clone (scripts/cache.sh), keyed by Python and torch version
# (PyPI's torch reports itself as 2.13.0+cu130: the CUDA build, which also runs on CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cache.sh
PY=${PYTHON:-python3}
if "$PY" -c "import horovod.torch" 2>/dev/null; then exit 0; fi
cache=$(horovod_wheel_dir "$PY")
mkdir -p "$cache"
if ! ls "$cache"/horovod-*.whl >/dev/null 2>&1; then
  echo "==> building Horovod 0.28.1 from source (about 4-5 minutes on 2 cores)"
  "$PY" -m pip install -q cmake wheel setuptools packaging
  mpi=HOROVOD_WITH_MPI=1  # HOROVOD_WITHOUT_MPI=1 in the environment builds Gloo alone (no MPI there)
  [ -n "${HOROVOD_WITHOUT_MPI:-}" ] && mpi=HOROVOD_WITHOUT_MPI=1
  env CXX="$PWD/images/horovod/cxx17" CMAKE_POLICY_VERSION_MINIMUM=3.5 \
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
  HOROVOD_WITH_GLOO=1 "$mpi" MAKEFLAGS="-j$(nproc)" \
    "$PY" -m pip wheel -q --no-build-isolation --no-deps --no-cache-dir -w "$cache" horovod==0.28.1
fi
"$PY" -m pip install -q --no-deps "$cache"/horovod-*.whl
"$PY" -m pip install -q -c constraints/ci.txt cloudpickle psutil pyyaml
"$PY" -c "import horovod.torch as hvd; print('horovod', hvd.__version__ if hasattr(hvd,'__version__') else 'ok')"
