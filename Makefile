# The README's two commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast lint clean

setup: $(STAMP)

# Reinstall only when requirements.txt changes.
$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

demo: $(STAMP)
	$(PY) scripts/demo.py

# pytest-xdist workers, one a core of CI's two; tests/conftest.py says which tests share a worker.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 tests

# The edit loop: every test but trainings, launches and processes that load torch (marked slow).
test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not slow" tests

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf runs cache data/synth
