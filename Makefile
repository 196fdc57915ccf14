# spt: two commands do everything, each setting itself up on a fresh machine.
#   make demo   - create .venv, install, run notebooks/00_quickstart.ipynb (its demo preset)
#   make test   - create .venv, install, run the test suite
#   make docs   - build the docs site into build/site, offline (docs/testing.md)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RESULTS ?= results
CKSUM  := $(shell cat pyproject.toml tools/install_torch.sh | cksum | cut -d' ' -f1)
BASE   := $(VENV)/.base-$(CKSUM)
STAMP  := $(VENV)/.installed-$(CKSUM)

export HF_HUB_OFFLINE ?= 1
export TQDM_MININTERVAL ?= 5

.PHONY: install install-base demo laptop-results test test-long test-wheel docs check-paper test-browser bench-gpu gpu-report clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Byte-compiled on purpose: where PYTHONDONTWRITEBYTECODE=1 (CI machines) nothing would be cached
# later, and every process would recompile what it imports. pip compiles one file at a time, so it
# installs without compiling and compileall then compiles on every core (half the install's time
# on two cores); a file compileall cannot compile (a package's Python 2 test data) is skipped, as
# pip skips it.
COMPILE = $(PY) -m compileall -q -j 0 $$($(PY) -c "import sysconfig; print(sysconfig.get_path('purelib'))") spt >/dev/null || true

# spt and what it runs with: what `make demo` needs
$(BASE): $(PY) pyproject.toml tools/install_torch.sh
	$(PY) -m pip install --quiet --upgrade pip
	tools/install_torch.sh $(PY) --no-compile
	$(PY) -m pip install --quiet --no-compile -e .
	$(COMPILE)
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	rm -f $(VENV)/.base-*; touch $(BASE)

# and the dev extra: tests, docs, the library references the tests compare with
$(STAMP): $(BASE)
	$(PY) -m pip install --quiet --no-compile -e ".[dev]"
	$(COMPILE)
	rm -f $(VENV)/.installed-*; touch $(STAMP)

install-base: $(BASE)

install: $(STAMP)
	@echo "spt is installed in $(VENV)/: 'source $(VENV)/bin/activate' puts spt, papermill and jupyter on PATH (or call $(VENV)/bin/spt)"

# the quickstart's demo preset (spt.studies.quickstart.DEMO, seeds 0-3) through papermill; its six
# seeds at full size: `spt study run 00_quickstart --preset laptop --out results`
demo: install-base
	$(VENV)/bin/spt study run 00_quickstart --preset demo --out $(RESULTS)
	@echo "wrote $(RESULTS)/quickstart.nc and $(RESULTS)/00_quickstart.ipynb"

# the laptop results: docs/laptop_results.md and the README's table, with the commit they ran on;
# every laptop study by default (finished cells in $(RESULTS) are reused; `make demo` runs cheaper
# cells than the quickstart's laptop preset, which shares none of them):
# STUDIES=00_quickstart,01_lra_transformers
STUDIES ?=
laptop-results: install
	$(PY) -m spt.studies.laptop_results --out $(RESULTS) $(if $(STUDIES),--studies $(STUDIES))

# the suite in one pytest-xdist worker per core (TEST_WORKERS=0: in this process); the tests
# marked `serial` run one at a time on one of them (tests/conftest.py)
TEST_WORKERS ?= auto
test: install
	$(VENV)/bin/ruff check spt tests bench tools
	$(PY) -m pytest -q -m "not long" -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# the end-to-end checks of a minute or more that make test leaves out (marked `long`): a SLURM
# array task pre-empted and requeued (submitit's local cluster, two notebook runs at once)
test-long: install
	$(PY) -m pytest -q -m long $(PYTEST_ARGS)

# the install a user makes on a GPU node: build the wheel, install it into a fresh venv outside the
# checkout (torch from tools/install_torch.sh), list the studies and run one smoke study from
# another folder (tools/test_wheel.sh; a few minutes, mostly pip)
test-wheel: install
	tools/test_wheel.sh $(PY)

# the docs site, offline: docs/ and the README as its home page, the API from the docstrings, the
# quick start (smoke setting) and the walkthrough executed into build/docs/notebooks and rendered
docs: install
	$(PY) tools/docs_notebooks.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
	@echo "wrote build/site/index.html"

# the dry run of every cell of every study's paper preset, on full-length fixtures in the official
# formats (two optimiser steps per stage at batch 2: spt.studies.commands.check.TIMED_STEPS); CHECK_DEVICE=cuda on a GPU node
FIXTURES ?= $(RESULTS)/fixtures
CHECK_DEVICE ?= auto
check-paper: install
	$(VENV)/bin/spt data fixtures $(FIXTURES)
	$(VENV)/bin/spt study check all --preset paper -p data_root $(FIXTURES) --device $(CHECK_DEVICE) \
	  --csv $(RESULTS)/check-paper.csv

# real JupyterLab + headless Chromium (Debian's /usr/bin/chromium); screenshots in results/browser
test-browser: install
	$(PY) -m pip install --quiet -e ".[browser]"
	SPT_BROWSER_TESTS=1 SPT_BROWSER_ARTIFACTS=$(RESULTS)/browser $(PY) -m pytest -m browser tests/browser -s

bench-gpu: install
	$(PY) bench/train_throughput.py --show-syncs
	$(PY) bench/attention_long.py
	$(PY) bench/pathx256_step.py

# the one-call GPU report (bench/gpu_report.py, docs/gpu.md): every GPU figure of spt in at most 8
# minutes, each section under its own time guard, into $(RESULTS)/gpu-report/report.md and its CSVs.
# It runs with .venv's Python when there is one, else python3 (a GPU image with torch needs no
# install: carry the wheels of tools/gpu_wheels.sh). GPU_REPORT_ARGS=--smoke rehearses it on a CPU.
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_REPORT_ARGS ?=
gpu-report:
	$(GPU_PY) bench/gpu_report.py --out $(RESULTS)/gpu-report $(GPU_REPORT_ARGS)

clean:
	rm -rf $(VENV) $(RESULTS) .pytest_cache
