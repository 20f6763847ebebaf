# The two commands: `make demo` and `make test`. Each sets up .venv itself on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export OPENBLAS_NUM_THREADS := 1
export OMP_NUM_THREADS := 1
export MKL_NUM_THREADS := 1

.PHONY: demo test check venv system sandbox bytecode lint clean student-package

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Each re-installs whenever pyproject.toml changes. The demo needs only the core (the grader
# and tinyllm: no torch, no service); the tests need every extra.
$(VENV)/.installed-core: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[service]'
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.installed-core
	$(BIN)/python -m pip install --quiet -e '.[torch,dev,service]'
	touch $@

venv: $(VENV)/.installed

# As root it sets the sandbox up first; another user's workers each get a user namespace of
# their own where the kernel allows it; elsewhere the demo says so and runs its trusted example
# with no sandbox.
demo: $(VENV)/.installed-core sandbox bytecode
	$(BIN)/mutagrade demo

# Compiled once here, not in every process: the workers run as sandbox users, who cannot write
# __pycache__ in the checkout, and editable installs compile nothing. Skipped where the checkout
# is not writable (the modules then compile in memory, a little slower). The reference modules
# (rnn/*.py) are left out: no compiled copy of an answer lies beside it.
bytecode: $(VENV)/.installed-core
	@$(BIN)/python -m compileall -q -x 'reference/tinyllm/rnn/(?!__init__)\w+\.py$$' grader api reference > /dev/null || echo "note: could not compile grader/, api/, reference/ ahead (read-only checkout?)"

# The system services the service's tests run for real (PostgreSQL, Chromium, Redis).
system:
	bash scripts/setup-services.sh

# The sandbox student code runs in: bubblewrap, libseccomp, the mutagrade-sandbox-N users.
# Needs root (CI runs as root); idempotent. Without it untrusted grading refuses to start, except
# for a user without root where the kernel allows unprivileged user namespaces. Prints the doctor's lines.
sandbox: $(VENV)/.installed-core
	bash scripts/setup-sandbox.sh $(BIN)/python

test: venv system sandbox bytecode
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The inner loop: the unit, layout and docs tests, none of which starts a grading's workers, a
# server or a service (under a minute here; `make test` stays the whole suite).
CHECK_TESTS = tests/test_layout.py tests/test_docs.py \
	tests/grader/test_scoring_unit.py tests/grader/test_scheduler_unit.py tests/grader/test_protocol.py \
	tests/grader/test_caps.py tests/grader/test_assignment.py tests/grader/test_policy.py \
	tests/grader/test_copies.py tests/grader/test_lazymodule.py tests/grader/test_admission.py \
	tests/grader/test_judgement.py tests/grader/test_report.py tests/grader/test_variants.py \
	tests/grader/test_code_cache.py tests/grader/test_junit_schema.py tests/grader/test_student_text.py \
	tests/grader/test_deadlines.py tests/grader/test_points.py tests/grader/test_roster.py \
	tests/grader/test_gradebook_export.py

check: venv bytecode
	$(BIN)/python -m pytest -q $(CHECK_TESTS)

lint: venv
	$(BIN)/ruff check grader reference tests assignments bench

# The student package: the tdd, check and submit commands, the course tests and goldens, and
# nothing of the answer key (packaging/student/pyproject.toml lists what it holds). Built
# offline with the venv's setuptools; STUDENT_DIST=DIR writes it elsewhere.
STUDENT_DIST ?= dist
student-package: | $(BIN)/python
	$(BIN)/python packaging/student/build.py --dist $(STUDENT_DIST)

clean:
	rm -rf $(VENV) .pytest_cache
