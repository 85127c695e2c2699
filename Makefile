# Developer entry points. README.md documents `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test host-packages lint docs unit cluster clean

# mpicluster alone (the demo); with the linters, tests and docs tools (everything else).
# First: $(PYTHON) is 3.11+ and can make a venv (as root, apt-get installs its pythonX.Y-venv).
$(BIN)/.installed-run: pyproject.toml
	bash scripts/ensure-python-venv.sh $(PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

$(BIN)/.installed: pyproject.toml
	bash scripts/ensure-python-venv.sh $(PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(BIN)/.installed-run

## demo: bring up the 3-node local cluster and provision it with `mpicluster up`
demo: $(BIN)/.installed-run
	$(BIN)/mpicluster local up
	$(BIN)/mpicluster up inventories/local.yaml

## test: what the tests need on this machine, lint and the docs' strict build, then unit and cluster tests
test: host-packages lint docs
	$(BIN)/pytest

## host-packages: install (as root, with apt-get) the packages the tests need and this machine lacks
host-packages: $(BIN)/.installed
	$(BIN)/python -m tests.host_packages

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/ansible-lint playbooks/

## docs: build the MkDocs site (mkdocs.yml, docs/) into build/site/; a warning fails it
# No --quiet: it hides warnings from --strict's count (mkdocs#4126). The variable silences
# mkdocs-material's banner about its successor.
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

unit: host-packages
	$(BIN)/pytest -m "not cluster"

cluster: host-packages
	$(BIN)/pytest -m cluster

clean:
	-$(BIN)/mpicluster local down
	rm -rf $(VENV) .pytest_cache .ruff_cache build/site
