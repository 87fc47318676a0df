# Two commands do all the set-up on a fresh machine:
#   make run    install what a run needs, then run the default scenario on the embedded MNIST data
#   make test   install that plus the test tools and the ns-3 and Ray extras, then run the test suite
PYTHON ?= python3
PIP := $(PYTHON) -m pip
# The aiotsim command of $(PYTHON)'s environment: a bare `aiotsim` is whichever one PATH finds first.
AIOTSIM := $(PYTHON) -c 'import sys; from aiotsim.cli import main; sys.argv[0] = "aiotsim"; main()'
# torch: on a machine without an NVIDIA GPU take the CPU build (a bare `torch` would pull several
# GB of CUDA packages); with a GPU, the default CUDA build. A wheel in pip's configured wheel
# folders (find-links) that satisfies the pin is installed as it is, without asking any index; the
# PyTorch CPU index is asked only when none does, with a short timeout and one retry (pip's
# defaults retry an index that does not answer for minutes).
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
INDEX_TIMEOUT := --timeout 10 --retries 1
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
# Stamps of the two set-up levels, in build/ (ignored by git, removed by `make clean`).
SETUP_RUN := build/.setup-run
SETUP_TEST := build/.setup-test

.PHONY: setup setup-test run test docs readme figures figures-network bench gpu-wheels clean

setup: $(SETUP_RUN)

setup-test: $(SETUP_TEST)

# What a run needs: torch, then the package and its required dependencies. torch is installed
# without its dependencies here (the CPU index need not serve them); `pip install -e .` then
# installs them, as it does for every installed requirement.
$(SETUP_RUN): pyproject.toml
	@if $(PYTHON) -c "import torch" 2>/dev/null; then \
		echo "torch already installed: $$($(PYTHON) -c 'import torch; print(torch.__version__)')"; \
	elif [ -n "$(HAS_GPU)" ]; then \
		$(PIP) install "torch==$(TORCH_VERSION)"; \
	elif $(PIP) install --dry-run --no-deps --no-index --quiet "torch==$(TORCH_VERSION)" >/dev/null 2>&1; then \
		echo "torch $(TORCH_VERSION) from the configured wheel folder (pip find-links)"; \
		$(PIP) install --no-deps --no-index "torch==$(TORCH_VERSION)"; \
	else \
		echo "no configured wheel has torch $(TORCH_VERSION): asking the PyTorch CPU index $(TORCH_CPU_INDEX)"; \
		$(PIP) install --no-deps $(INDEX_TIMEOUT) --index-url $(TORCH_CPU_INDEX) "torch==$(TORCH_VERSION)"; \
	fi
	$(PIP) install -e .
	@mkdir -p $(@D) && touch $@

# What the suite needs on top: pytest, xdist, Hypothesis and Ray (`test`), ns-3 (`ns3`), as CI runs it.
$(SETUP_TEST): $(SETUP_RUN)
	$(PIP) install -e ".[test,ns3]"
	@touch $@

run: $(SETUP_RUN)
	$(AIOTSIM) run scenarios/iot10.toml

# pytest exits 5 when it collects no test: turn that into a failure, never a silent pass.
# -n auto: one pytest-xdist worker per CPU this process may use (2 on CI: the suite took 6.5-11.5
# minutes in fresh clones, 7:44 once ns-3's workers were reused; CI's budget is 10); tests/conftest.py
# splits torch's threads between them.
test: $(SETUP_TEST)
	$(PYTHON) -m pytest -n auto; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

# Every result the README and figures/ show, made by the current code (~35 min on 2 cores);
# tests/test_docs_provenance.py fails until this has run after a change of code or scenarios.
docs: readme figures figures-network

readme: $(SETUP_RUN)
	$(PYTHON) -m aiotsim.figures readme

figures: $(SETUP_RUN)
	$(PYTHON) -m aiotsim.figures figures

# The network-sweep figures (figures/README.md): 20 trainings and 780 timing replays, ~20 min on 2 cores.
figures-network: $(SETUP_RUN)
	d=$$($(PYTHON) -m aiotsim.figures versioned sweep-network) && \
	$(PYTHON) -m aiotsim.cli sweep scenarios/sweep_network.toml -q -o $$d && \
	$(PYTHON) -m aiotsim.cli plot $$d -o $$d/plots && \
	for f in winner tta budget_accuracy; do for x in png svg; do \
		cp $$d/plots/sweep_network_$$f.$$x figures/; done; done
	$(PYTHON) -m aiotsim.figures record figures-network scenarios/sweep_network.toml "make figures-network"

bench: $(SETUP_RUN)
	$(PYTHON) benchmarks/compressors.py
	$(PYTHON) benchmarks/network.py
	$(PYTHON) benchmarks/engine.py

# Wheels of the pure-Python dependencies a GPU machine's image may lack (simpy, mlxtend, tomli-w),
# at the versions installed here, into .whl/ for tools/gpu_checks.sh there (carry .whl: it is ignored).
gpu-wheels: $(SETUP_RUN)
	rm -rf .whl && $(PIP) download --no-deps --only-binary=:all: -d .whl \
		$$(for p in simpy mlxtend tomli-w; do echo "$$p==$$($(PIP) show $$p | sed -n 's/^Version: //p')"; done)

# .setup-done: the stamp of earlier versions of this Makefile.
clean:
	rm -rf .setup-done build dist *.egg-info .pytest_cache
