# Two commands a newcomer needs: `make demo` and `make test`. Each one bootstraps .venv on a fresh machine.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.focus-installed
export DAGSTER_DISABLE_TELEMETRY := 1
export TQDM_DISABLE := 1

.PHONY: demo test mutate ui install clean

install: $(INSTALLED)

# pip's own sources (index-url, extra-index-url, find-links from its config files and PIP_* variables) as uv arguments:
# uv reads no pip configuration, and the local torch/torchvision files of a machine are found through them.
PIP_SOURCES_FOR_UV := import ast,subprocess,sys; c={}; out=subprocess.run([sys.executable,"-m","pip","config","list"],capture_output=True,text=True).stdout.splitlines(); [c.update({k.rpartition(".")[2]: ast.literal_eval(v)}) for s in ("global","install",":env:") for k,_,v in (l.partition("=") for l in out) if k.rpartition(".")[0] == s]; print(*(f"--{o} {u}" for o in ("index-url","extra-index-url","find-links") for u in str(c.get(o,"")).split()))

# Reinstall only when the declared dependencies change. requirements.lock holds every pin, for uv and pip alike.
# uv: a first install (no cache, 2 cores, a test suite running) in 68-102 s against 278-288 s with pip alone
# (bench/results/install_cpu_2core.json); plain pip when uv cannot be installed or fails.
$(INSTALLED): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	{ $(BIN)/python -m pip install --quiet --disable-pip-version-check uv \
	  && $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode --index-strategy unsafe-best-match \
	       $$($(BIN)/python -c '$(PIP_SOURCES_FOR_UV)') -c requirements.lock -e '.[dev]'; } \
	|| $(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[dev]'
	touch $@

demo: $(INSTALLED)
	$(BIN)/focus demo

# The layering contracts (pyproject.toml, [tool.importlinter]) first: a broken layer fails in seconds.
# Two workers, each taking whole test files (module fixtures are built once), in collection order: the modules
# marked heavy first, longest first (tests/conftest.py), so no long module starts last. The slowest tests are
# listed at the end, where a suite growing past its budget shows first.
test: $(INSTALLED)
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=15

# Mutation testing of the modules whose numbers the platform promises (bench/mutate.py lists them with their tests),
# not part of `make test`: one mutmut worker at low priority, MUTATE_BUDGET seconds in all (default 40 minutes),
# MUTATE_ONLY=key,key for some modules. Results are kept in bench/out/mutate, so a run cut short resumes; the score
# per module is printed and written to bench/results/mutation_cpu_2core.json.
MUTATE_BUDGET ?= 2400
MUTATE_ONLY ?=
mutate: $(INSTALLED)
	$(BIN)/python bench/mutate.py --budget $(MUTATE_BUDGET) --only '$(MUTATE_ONLY)'

ui: $(INSTALLED)
	$(BIN)/focus ui

clean:
	rm -rf .focus
