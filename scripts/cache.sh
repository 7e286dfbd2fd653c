# Sourced by the set-up and image scripts: where what they build is kept between runs.
# The folder lies outside the clone (every clone and every CI run on this machine reuses it) and
# each entry is keyed by what went into it, so a change of pins builds a new entry beside the old.
# INVFOLD_CACHE_DIR is the same root prep's cache uses (components/prep/shards.py).
INVFOLD_CACHE_DIR=${INVFOLD_CACHE_DIR:-$HOME/.cache/invfold}
BUILD_CACHE="$INVFOLD_CACHE_DIR/build"

# The folder of the Horovod wheel built for this interpreter's Python and torch ($1: the python).
horovod_wheel_dir() {
  local key
  key=$("$1" -c "import sys, torch; print(f'py{sys.version_info.major}{sys.version_info.minor}-torch{torch.__version__}')")
  echo "$BUILD_CACHE/wheels/horovod-0.28.1-$key"
}
