#!/usr/bin/env bash
# The import-linter contracts of pyproject.toml ([tool.importlinter]), run by `make test`.
# import-linter finds a package's modules by walking the folder its import spec names, and
# invfold's names src/invfold only (components/ and pipelines/ come in through pyproject.toml's
# package-dir). So it lints a link tree of the installed layout instead: invfold/ holding
# src/invfold's entries, components/ and pipelines/, found first on the path for this one command.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
lint=${LINT_IMPORTS:-$repo/.venv/bin/lint-imports}
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/invfold"
for entry in src/invfold/* components pipelines; do
  ln -s "$repo/$entry" "$tree/invfold/"
done
cd "$tree"
"$lint" --config "$repo/pyproject.toml" --no-cache --no-logo "$@"
