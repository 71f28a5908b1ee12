# Two commands do everything on a fresh machine with Python >= 3.11 and make:
#   make demo   set up .venv, train on 1 then 2 local Dask workers, print the speed-up, write a report
#   make test   set up .venv and run the test suite
# and `make lab` opens JupyterLab on the notebooks, `make docs` builds the documentation site.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# The suite runs in two pytest processes (pytest-xdist): most of its time is real kernels,
# Dask workers and subprocesses waiting on each other, so two keep a 2-core machine busy.
# Each takes whole files (module fixtures, such as a file's cluster, start once), the
# longest first (tests/conftest.py). Tests marked `alone` compare this machine's speed with
# itself (2 workers against 1 through every entry point): they run after, by themselves,
# as a user's comparison would. TEST_WORKERS=0 runs everything in this one process.
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadfile

.PHONY: setup demo test test-fast test-browser lint lab bench docs docs-clean address clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
# (the uninstall drops this venv's older install from when the distribution was called `workbench`)
	$(BIN)/python -m pip uninstall --quiet --yes workbench 2>/dev/null || true
	$(BIN)/python -m pip install --quiet -e ".[lab,test,docs]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

setup: $(STAMP)

# The same sync_sgd run on 1 worker and 2, interleaved 3 rounds: the medians, their range and the speed-up (workbench/apps/demo.py)
demo: setup
	$(BIN)/python -m workbench.apps.demo --out runs/demo
	@echo "open runs/demo/report.html"

# the suite includes tests/test_packaging.py::test_ruff_is_clean (the linter, configured in pyproject.toml)
# (the second command: pytest's exit 5, "no tests selected", is not a failure there)
ifeq ($(TEST_WORKERS),0)
test: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)
else
test: setup
	$(BIN)/python -m pytest -q $(XDIST) -m "not alone" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -q -m alone $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-fast: setup
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow and not alone" $(PYTEST_ARGS)
endif

lint: setup
	$(BIN)/ruff check .

test-browser: setup
	bash .ci/browser-setup.sh
	$(BIN)/python -m pytest -q -m browser $(PYTEST_ARGS)

lab: setup
	$(BIN)/jupyter lab notebooks/quickstart.ipynb

bench: setup
	$(BIN)/python -m workbench bench

# The documentation site, offline: every lesson executed in quick mode into docs/_lessons/
# (once; again when its notebook changes, or after `make docs-clean`), then Sphinx renders
# the pages, the lessons and the API reference into docs/_build/html.
LESSONS  := $(wildcard notebooks/*.ipynb)
EXECUTED := $(patsubst notebooks/%.ipynb,docs/_lessons/%.ipynb,$(LESSONS))

docs/_lessons/%.ipynb: notebooks/%.ipynb | $(STAMP)
	$(BIN)/python docs/execute_lessons.py $< --into docs/_lessons

docs: setup $(EXECUTED)
	$(BIN)/python -m sphinx -b html -q -j auto -d docs/_build/doctrees docs docs/_build/html
	@echo "open docs/_build/html/index.html"

docs-clean:
	rm -rf docs/_build docs/_lessons docs/_source_lessons docs/_api

# The repository's public address, in one place (binder/address.py): make address REPO=OWNER/NAME
address:
	@test -n "$(REPO)" || { echo "usage: make address REPO=OWNER/NAME"; exit 2; }
	$(PYTHON) binder/address.py $(REPO)

clean: docs-clean
	rm -rf $(VENV) runs .pytest_cache
