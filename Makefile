# The two commands: `make demo` and `make test`. Each sets up .venv itself on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export OPENBLAS_NUM_THREADS := 1
export OMP_NUM_THREADS := 1
export MKL_NUM_THREADS := 1

.PHONY: demo test venv lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Re-installs whenever pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[torch,dev,service]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(BIN)/mutagrade demo

test: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check grader reference fixtures tests

clean:
	rm -rf $(VENV) .pytest_cache
