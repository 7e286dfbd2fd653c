# The two set-up commands of the README. Each installs what it needs on a fresh machine.
.PHONY: run test images

run:
	bash scripts/setup.sh run
	.venv/bin/invfold run

test:
	bash scripts/setup.sh test
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	bash scripts/lint_imports.sh
	.venv/bin/python -m pytest -q --durations=25

images:
	bash scripts/build_images.sh
