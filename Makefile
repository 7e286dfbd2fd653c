# The two set-up commands of the README are `make run` and `make test`; each installs what it
# needs on a fresh machine. The others assume `make test` (or `bash scripts/setup.sh test`) ran once.
.PHONY: run test test-fast lint generate generate-sample-data images

run:
	bash scripts/setup.sh run
	.venv/bin/invfold run

test:
	bash scripts/setup.sh test
	$(MAKE) lint
	INVFOLD_TEST_DURATIONS=runs/test-durations.json .venv/bin/python -m pytest -q --durations=25

# minutes, not half an hour: everything but the tests marked slow (images, whole pipelines,
# multi-process training, and what took over 20 s in tests/durations.json)
test-fast:
	.venv/bin/python -m pytest -q -m "not slow"

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	bash scripts/lint_imports.sh

# every generated file in the repository, rewritten from its source (see ARCHITECTURE.md's table)
generate:
	.venv/bin/invfold compile
	.venv/bin/invfold compile --pipeline design
	.venv/bin/python scripts/generate_schemas.py

images:
	bash scripts/build_images.sh

# the bundled sample (src/invfold/data/): needs the network (PyPI, Debian) and mmseqs2
generate-sample-data:
	.venv/bin/python scripts/build_sample_data.py
