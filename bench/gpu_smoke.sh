#!/usr/bin/env bash
# GPU smoke test (run by hand whenever a GPU machine is lent; not part of CI): each strategy
# trains 2 ranks in bf16 over NCCL for a few steps on the bundled sample, then the DDP model is
# exported to ONNX, whose parity gate fails the export when onnxruntime and PyTorch disagree.
# Exits non-zero on the first failure. Usage: [STRATEGIES="ddp deepspeed"] bash bench/gpu_smoke.sh [WORKDIR]
# Needs: the project venv (make test's install) with DeepSpeed and Horovod built for GPUs: the GPU
#   images' own wheels (`scripts/build_images.sh --variant gpu --wheels DIR` writes Horovod's, built
#   with NCCL, and DeepSpeed's, with its fused optimizers, 34 MB in all; they load only with the
#   torch they were built against, torch==2.13.0, and Python 3.11: `pip install --no-deps DIR/*.whl`),
#   or Horovod built there (HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_WITHOUT_MPI=1 bash
#   scripts/build_horovod.sh, 105 s on 16 cores); and 2 visible GPUs (one GPU shared by 2 ranks:
#   NCCL refuses that, so a single GPU runs 1 rank per strategy). Last run: bench/README.md, "GPU smoke".
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
INVFOLD=$(dirname "$PY")/invfold
work=${1:-$(mktemp -d -t invfold-gpu-smoke.XXXX)}
mkdir -p "$work"
log() { echo "[gpu_smoke $(date +%T)] $*"; }
fail() { echo "[gpu_smoke] FAILED: $*" >&2; exit 1; }

gpus=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
[ "$gpus" -ge 1 ] || fail "no CUDA device visible to torch ($("$PY" -c 'import torch; print(torch.__version__)'))"
"$PY" -c "import torch; assert torch.cuda.is_bf16_supported(), 'bf16 unsupported on this GPU'" || fail "bf16"
nproc=$(( gpus >= 2 ? 2 : 1 ))
log "torch $("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)'), $gpus GPU(s), $nproc rank(s) per strategy"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" bench/conditions.py  # CPU, torch's build, load: the conditions of this run

data=$("$PY" -c "import invfold.data, os; print(os.path.dirname(invfold.data.__file__))")
log "prep"
"$INVFOLD" prep "$data/sample_chain_set.jsonl.gz" --split-file "$data/sample_chain_set_splits.json" \
  --out "$work/prep" >"$work/prep.log" 2>&1 || fail "prep (see $work/prep.log)"

export NCCL_DEBUG=${NCCL_DEBUG:-WARN} TORCH_NCCL_ASYNC_ERROR_HANDLING=1
for strategy in ${STRATEGIES:-ddp deepspeed horovod}; do
  extra=()
  [ "$strategy" = deepspeed ] && extra=(--zero-stage 2)
  log "train $strategy: $nproc ranks, bf16, NCCL"
  start=$(date +%s)
  "$INVFOLD" train --data "$work/prep" --out "$work/$strategy" --strategy "$strategy" --nproc "$nproc" \
    --precision bf16 --preset default --max-steps 20 --validate-every 10 --checkpoint-every 10 \
    --threads 4 --no-resume "${extra[@]}" >"$work/$strategy.log" 2>&1 \
    || fail "train $strategy (see $work/$strategy.log)"
  grep -qiE "nccl" "$work/$strategy.log" "$work/$strategy"/*.json 2>/dev/null \
    || log "note: no NCCL mention in the $strategy log (check the backend in $work/$strategy.log)"
  [ -s "$work/$strategy/model.pt" ] || fail "$strategy wrote no model.pt"
  log "train $strategy: ok in $(( $(date +%s) - start )) s; summary: $(head -c 400 "$work/$strategy/summary.json")"
done

first=${STRATEGIES:-ddp}; first=${first%% *}
log "export the $first model to ONNX (parity gate inside)"
"$INVFOLD" export "$work/$first/model.pt" --data "$work/prep" --out "$work/model.onnx" \
  >"$work/export.log" 2>&1 || fail "export / parity (see $work/export.log)"
[ -s "$work/model.onnx" ] || fail "no ONNX file"
log "strategies ${STRATEGIES:-ddp deepspeed horovod} trained in bf16 over NCCL and the export passed parity; logs in $work"
