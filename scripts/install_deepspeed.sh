#!/usr/bin/env bash
# DeepSpeed for CPU training: no prebuilt ops (DS_BUILD_OPS=0), torch kept at our pin.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if "$PY" -c "import deepspeed" 2>/dev/null; then exit 0; fi
echo "==> installing DeepSpeed (DS_BUILD_OPS=0)"
DS_BUILD_OPS=0 "$PY" -m pip install -q -c constraints/ci.txt --no-build-isolation deepspeed==0.19.8
