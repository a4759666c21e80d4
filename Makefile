# Two commands a newcomer needs: `make demo` and `make test`. Each one bootstraps .venv on a fresh machine.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.focus-installed
export DAGSTER_DISABLE_TELEMETRY := 1
export TQDM_DISABLE := 1

.PHONY: demo test ui install clean

install: $(INSTALLED)

# Reinstall only when the declared dependencies change.
$(INSTALLED): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[dev]'
	touch $@

demo: $(INSTALLED)
	$(BIN)/focus demo

# The layering contracts (pyproject.toml, [tool.importlinter]) first: a broken layer fails in seconds.
# Two workers, each taking whole test files (module fixtures are built once); the slowest tests are listed last,
# where a suite growing past its budget shows first.
test: $(INSTALLED)
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -n 2 --dist loadfile --durations=15

ui: $(INSTALLED)
	$(BIN)/focus ui

clean:
	rm -rf .focus
