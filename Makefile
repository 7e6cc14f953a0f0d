# Shortcuts; the README's two quick-start commands remain the shortest path.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
IMAGE ?= rootbound:latest
# Touched after a successful install: the editable install needs redoing only when pyproject.toml changes.
STAMP := $(VENV)/.rootbound-installed

.PHONY: install run test lint bench bench-peers docker-build docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $@

install: $(STAMP)  ## install rootbound with the test tools into .venv (again only when pyproject.toml changed)

run: $(STAMP)  ## serve the current directory as root "workspace" over stdio
	$(BIN)/rootbound

test: $(STAMP)  ## the whole test suite
	$(BIN)/python -m pytest -q

lint: $(STAMP)  ## ruff and mypy
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

bench: $(STAMP)  ## every benchmark, each against its baseline in the same run (bench-peers apart: it installs peers)
	@for b in bench/*.py; do case $$b in */_*|*/peers.py) continue;; esac; echo "== $$b"; $(BIN)/python $$b || exit 1; done

bench-peers: $(STAMP)  ## rootbound beside the reference filesystem server, Desktop Commander and mcp-shell-server (needs node and npm; ARGS="--help" for options)
	$(BIN)/python bench/peers.py $(ARGS)

docs: $(STAMP)  ## regenerate docs/tools.md and the config JSON Schema from the code
	$(BIN)/rootbound tools --markdown --allow-commands "*" > docs/tools.md
	$(BIN)/python -c "import json, rootbound.config as c; print(json.dumps(c.config_json_schema(), indent=2))" \
		> src/rootbound/config.schema.json

docker-build:  ## build the container image (needs a Docker engine)
	docker build -t $(IMAGE) .

clean:
	rm -rf $(VENV) .venv-ci build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
