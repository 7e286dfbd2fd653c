#!/usr/bin/env bash
# Build invfold's container images, both variants from the same local Debian base (made by
# scripts/make_base_image.sh), every wheel downloaded on the host into the build context and
# installed with --no-index (images/bases/bookworm.args holds the apt pins of both):
#   --variant cpu (default): the images CI and laptops run, tagged <tag>-cpu; plus `invfold-ci-cpu`,
#       one image for every strategy (the horovod image built on top of the deepspeed one) that the
#       tests run.
#   --variant gpu: the production images for GPU node pools (images/bases/gpu.args on top): the
#       same runtime and MPI images (torch's CUDA 13 libraries are in both), Horovod built with NCCL
#       and DeepSpeed with its fused optimizers compiled, by CUDA's compiler from PyPI.
# Options: --registry R (image prefix, e.g. registry.example.com/invfold), --tag T (default: the
# package version), --push, --only NAME (runtime|mpi|deepspeed|horovod|mlflow|ci-cpu; repeatable),
# --wheels DIR (also write the compiled wheels, Horovod's and DeepSpeed's, and what they need
# beyond the runtime's, into DIR: bench/gpu_smoke.sh installs the GPU variant's on a lent GPU
# machine), --dry-run, --print-pins (print apt versions for images/bases/bookworm.args: every
# package a Dockerfile pins, installed in the base or not; a name the base lacks shows
# `Candidate: (none)`).
# Env: DOCKER (client, default /usr/bin/docker: BuildKit), DOCKER_HOST, PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cache.sh
PY=${PYTHON:-.venv/bin/python}
DOCKER=${DOCKER:-/usr/bin/docker}
variant=cpu registry=invfold tag="" push=0 dry_run=0 only=() wheels_out=""
# pyproject.toml extras installed in every image beside the base dependencies: the S3 client
# (s3fs) that reads s3:// data, checkpoints and models on a cluster (KFP's SeaweedFS / MinIO, S3).
IMAGE_EXTRAS="s3"
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) variant=$2; shift 2 ;;
    --registry) registry=${2%/}; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --push) push=1; shift ;;
    --only) only+=("$2"); shift 2 ;;
    --wheels) wheels_out=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --print-pins)
      base=$(sed -n 's/^BASE_IMAGE=//p' images/bases/bookworm.args)
      # per package: the version installed in the base, then each version with the pockets serving it
      exec "$DOCKER" run --rm "$base" bash -c 'apt-get update -qq >/dev/null && apt-cache policy python3 python3-venv python3-dev openmpi-bin libopenmpi-dev openssh-server openssh-client ca-certificates g++ make tini procps libgomp1 gcc-14-base | grep -E "^[a-z]|Installed|Candidate|^ +(\*\*\* )?[0-9a-z.:~+-]+ [0-9]+$|^ +[0-9]+ [a-z]+:"' ;;
    -h|--help) sed -n '2,/^# Env:/p' "$0"; exit 0 ;;
    *) echo "build_images: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$variant" in
  cpu) args_files=(images/bases/bookworm.args) ;;
  gpu) args_files=(images/bases/bookworm.args images/bases/gpu.args) ;;
  *) echo "build_images: --variant must be cpu or gpu, got '$variant'" >&2; exit 2 ;;
esac
[ -n "$tag" ] || tag=$("$PY" -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])")
[ "$variant" = cpu ] && tag="$tag-cpu"
wanted() { [ ${#only[@]} -eq 0 ] && return 0; local n; for n in "${only[@]}"; do [ "$n" = "${1%-deps}" ] && return 0; done; return 1; }

# The build arguments: each file's lines in turn, a later file's value replacing an earlier one.
declare -A arg=()
arg_keys=()
for file in "${args_files[@]}"; do
  while IFS='=' read -r key value; do
    [[ -z "$key" || "$key" == \#* ]] && continue
    [ -n "${arg[$key]+set}" ] || arg_keys+=("$key")
    arg[$key]=$value
  done < "$file"
done
build_args=()
for key in "${arg_keys[@]}"; do build_args+=(--build-arg "$key=${arg[$key]}"); done
arg_value() { echo "${arg[$1]:-}"; }

# The build context: images/ plus a wheelhouse made on the host (pip inside a build has no CA
# bundle for the registry proxy). torch is PyPI's build (CUDA libraries included: without them it
# does not import), the same pins as the venv's.
context=.cache/images/context
wheelhouse=$context/wheelhouse
make_context() {
  rm -rf "$context.new" && mkdir -p "$context.new/wheelhouse" "$context.new/dist"
  cp -r images/. "$context.new/"
  # invfold's own wheel goes to dist/, apart from its dependencies (requirements.txt, from
  # pyproject.toml: the base dependencies plus the extras every pod needs, IMAGE_EXTRAS, so a
  # step reads s3:// data with its S3 client): the runtime image installs them in separate layers.
  # A fixed SOURCE_DATE_EPOCH makes the wheel byte-identical for the same sources (build cache hits).
  SOURCE_DATE_EPOCH=315532800 "$PY" -m pip wheel -q --no-deps -w "$context.new/dist" . >/dev/null
  "$PY" -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\\n'.join(p['dependencies'] + [r for e in '$IMAGE_EXTRAS'.split() for r in p['optional-dependencies'][e]]))" \
    > "$context.new/wheelhouse/requirements.txt"
  cp constraints/ci.txt "$context.new/wheelhouse/constraints.txt"
  # Third-party wheels are downloaded once per set of pins, into the build cache. Both variants
  # take the same set (their runtime and MPI images are then the same layers).
  local deps stamp
  stamp=$(cat constraints/ci.txt pyproject.toml images/mlflow/requirements.txt | sha256sum | cut -c1-16)
  deps="$BUILD_CACHE/images/wheels-cpu-$stamp"
  # Each first from the folder alone (no index lookups), else from the index.
  fetch() {
    "$PY" -m pip download -q -d "$deps" --no-index --find-links "$deps" "$@" \
      || "$PY" -m pip download -q -d "$deps" "$@"
  }
  if [ ! -f "$deps/.complete" ]; then
    echo "==> downloading wheels for the images (once per set of pins)"
    # Seeded with hard links from earlier sets (other clones on this machine may still build
    # from them, so they stay): pip then fetches only what the new pins add.
    mkdir -p "$deps"
    for old in "$BUILD_CACHE"/images/wheels-cpu-*/; do
      [ "$old" = "$deps/" ] || cp -ln "$old"*.whl "$old"*.tar.gz "$deps/" 2>/dev/null || true
    done
    # Two resolutions: the runtime's set and the MLflow server's are installed in separate venvs
    # (resolved together, the server's boto3 pin and s3fs's aiobotocore range backtrack for ages);
    # the server's own boto3 pin replaces the dev venv's (aiobotocore caps botocore there).
    { fetch -c constraints/ci.txt -r "$context.new/wheelhouse/requirements.txt" \
        deepspeed==0.19.8 horovod==0.28.1 setuptools wheel packaging cmake cloudpickle psutil pyyaml cffi \
      && grep -vE '^(boto3|botocore|s3transfer)==' constraints/ci.txt > "$context.new/mlflow-constraints.txt" \
      && fetch -c "$context.new/mlflow-constraints.txt" -r images/mlflow/requirements.txt; } \
      > "$deps.log" 2>&1 || { tail -20 "$deps.log" >&2; echo "build_images: pip download failed" >&2; exit 1; }
    touch "$deps/.complete"
  fi
  cp -l "$deps"/*.whl "$deps"/*.tar.gz "$context.new/wheelhouse/" 2>/dev/null || cp "$deps"/* "$context.new/wheelhouse/"
  # Horovod: the wheel scripts/build_horovod.sh built on this host (same Debian, Python, torch
  # and OpenMPI as the CPU images), when there is one; otherwise the image builds it. (The GPU
  # variant always builds its own, with NCCL: its build stage never takes this one.)
  cp "$(horovod_wheel_dir "$PY")"/horovod-0.28.1-*.whl "$context.new/wheelhouse/" 2>/dev/null || true
  # toolchain/: what only the GPU variant's build stage and DeepSpeed's install take (CUDA's
  # compiler, the NVML bindings DeepSpeed's CUDA build requires); empty in the CPU variant.
  mkdir -p "$context.new/toolchain"
  local cuda_compiler extra
  cuda_compiler=$(arg_value CUDA_COMPILER) extra=$(arg_value GPU_BUILD_WHEELS)
  if [ -n "$cuda_compiler" ]; then
    deps="$BUILD_CACHE/images/toolchain-$(printf '%s\n' "$cuda_compiler" "$extra" | cat - constraints/ci.txt | sha256sum | cut -c1-16)"
    if [ ! -f "$deps/.complete" ]; then
      echo "==> downloading CUDA's compiler for the GPU images (once per set of pins)"
      mkdir -p "$deps"
      # shellcheck disable=SC2086  # GPU_BUILD_WHEELS: requirements separated by spaces
      fetch -c constraints/ci.txt "$cuda_compiler" $extra > "$deps.log" 2>&1 \
        || { tail -20 "$deps.log" >&2; echo "build_images: pip download of the CUDA toolchain failed" >&2; exit 1; }
      touch "$deps/.complete"
    fi
    cp -l "$deps"/*.whl "$context.new/toolchain/" 2>/dev/null || cp "$deps"/*.whl "$context.new/toolchain/"
  fi
  rm -rf "$context" && mv "$context.new" "$context"
}

build() {
  local name=$1 dockerfile=$2; shift 2
  local image="$registry/invfold-$name:$tag"
  [ "$name" = toolchain ] || wanted "$name" || return 0
  echo "==> $image"
  local cmd=(env DOCKER_BUILDKIT=1 "$DOCKER" build --progress=plain -f "$context/$dockerfile" -t "$image"
             "${build_args[@]}" "$@" "$context")
  if [ "$dry_run" = 1 ]; then echo "${cmd[*]}"; return 0; fi
  "${cmd[@]}" > ".cache/images/build-$name.log" 2>&1 || { tail -40 ".cache/images/build-$name.log" >&2; echo "build_images: $image failed (log: .cache/images/build-$name.log)" >&2; exit 1; }
  [ "$push" = 1 ] && [ "${name%-deps}" = "$name" ] && [ "$name" != toolchain ] && "$DOCKER" push "$image"
  return 0
}

mkdir -p .cache/images
if [ "$dry_run" = 0 ]; then
  bash scripts/make_base_image.sh "$(arg_value BASE_IMAGE)" >/dev/null
  make_context
else
  mkdir -p "$wheelhouse"
fi
img() { echo "$registry/invfold-$1:$tag"; }
# Each image chains on the one below *without* invfold (its `-deps` target, tagged
# <image>-deps, never pushed) and installs invfold's wheel as its own last layer: a code change
# rebuilds one small layer per image, the dependency layers stay cached.
deps() { echo "$registry/invfold-$1-deps:$tag"; }
build_pair() {  # NAME DOCKERFILE ARGS...: the -deps target, then the image
  local name=$1 dockerfile=$2; shift 2
  wanted "$name" || return 0
  build "$name-deps" "$dockerfile" --target "${DEPS_TARGET:-$name}-deps" "$@"
  build "$name" "$dockerfile" --target "${DEPS_TARGET:-$name}" "$@"
}
build_pair runtime runtime/Dockerfile
build_pair mpi mpi/Dockerfile --build-arg "BASE_IMAGE=$(deps runtime)"
# The build stage of the compiled wheels (images/toolchain; never pushed): the MPI image's venv
# plus compilers, CUDA's in the GPU variant.
if wanted deepspeed || wanted horovod || { [ "$variant" = cpu ] && wanted ci-cpu; }; then
  build toolchain toolchain/Dockerfile --build-arg "BASE_IMAGE=$(deps mpi)"
fi
compiled=(--build-arg "BASE_IMAGE=$(deps mpi)" --build-arg "DEVEL_IMAGE=$(img toolchain)")
build_pair deepspeed deepspeed/Dockerfile "${compiled[@]}"
hvd_from=$(arg_value HOROVOD_WHEEL_FROM)
if [ "$variant" = cpu ] && ls "$wheelhouse"/horovod-0.28.1-*.whl >/dev/null 2>&1; then hvd_from=horovod-prebuilt; fi
build_pair horovod horovod/Dockerfile "${compiled[@]}" --build-arg "HOROVOD_WHEEL_FROM=$hvd_from"
if [ "$variant" = cpu ]; then
  DEPS_TARGET=horovod build_pair ci-cpu horovod/Dockerfile "${compiled[@]}" --build-arg "BASE_IMAGE=$(deps deepspeed)" \
    --build-arg "HOROVOD_WHEEL_FROM=$hvd_from"
fi
if [ -n "$wheels_out" ] && [ "$dry_run" = 0 ]; then
  mkdir -p "$wheels_out"
  for name in deepspeed horovod; do
    wanted "$name" || continue
    env DOCKER_BUILDKIT=1 "$DOCKER" build -f "$context/$name/Dockerfile" --target "$name-wheel-file" \
      --output "type=local,dest=$wheels_out" "${build_args[@]}" "${compiled[@]}" \
      --build-arg "HOROVOD_WHEEL_FROM=$hvd_from" "$context" > ".cache/images/export-$name.log" 2>&1 \
      || { tail -20 ".cache/images/export-$name.log" >&2; echo "build_images: exporting the $name wheel failed" >&2; exit 1; }
  done
  # DeepSpeed's CUDA build declares the NVML bindings (GPU_BUILD_WHEELS): they go along
  cp "$context"/toolchain/nvidia_ml_py-*.whl "$wheels_out/" 2>/dev/null || true
  echo "==> wheels: $(cd "$wheels_out" && echo *.whl)"
fi
build mlflow mlflow/Dockerfile --build-arg "BASE_IMAGE=$(arg_value MLFLOW_BASE_IMAGE)"
echo "==> done: $registry/invfold-*:$tag"
