# Two commands do all the set-up on a fresh machine:
#   make run    set up, then run the default scenario on the embedded MNIST data
#   make test   set up, then run the test suite
PYTHON ?= python3
PIP := $(PYTHON) -m pip
# torch: on a machine without an NVIDIA GPU take the CPU build (a bare `torch` would pull several
# GB of CUDA packages); with a GPU, the default CUDA build. A pip wheel folder configured on the
# machine (find-links) is used first, so an offline CPU wheel is picked up as it is.
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)

.PHONY: setup run test figures bench gpu-wheels clean

setup: .setup-done

.setup-done: pyproject.toml
	@if $(PYTHON) -c "import torch" 2>/dev/null; then \
		echo "torch already installed: $$($(PYTHON) -c 'import torch; print(torch.__version__)')"; \
	elif [ -n "$(HAS_GPU)" ]; then \
		$(PIP) install "torch==$(TORCH_VERSION)"; \
	else \
		$(PIP) install "torch==$(TORCH_VERSION)" --extra-index-url $(TORCH_CPU_INDEX); \
	fi
	$(PIP) install -e ".[test,ns3]"
	@touch .setup-done

run: setup
	aiotsim run scenarios/iot10.toml

# pytest exits 5 when it collects no test: turn that into a failure, never a silent pass.
# -n auto: one pytest-xdist worker per CPU this process may use (2 on CI: the suite takes about
# 5 minutes instead of 8, well inside CI's 10); tests/conftest.py splits torch's threads between them.
test: setup
	$(PYTHON) -m pytest -n auto; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

figures: setup
	$(PYTHON) -m aiotsim.figures figures

bench: setup
	$(PYTHON) benchmarks/compressors.py
	$(PYTHON) benchmarks/network.py
	$(PYTHON) benchmarks/engine.py

# Wheels of the pure-Python dependencies a GPU machine's image may lack (simpy, mlxtend, tomli-w),
# at the versions installed here, into .whl/ for tools/gpu_checks.sh there (carry .whl: it is ignored).
gpu-wheels: setup
	rm -rf .whl && $(PIP) download --no-deps --only-binary=:all: -d .whl \
		$$(for p in simpy mlxtend tomli-w; do echo "$$p==$$($(PIP) show $$p | sed -n 's/^Version: //p')"; done)

clean:
	rm -rf .setup-done build dist *.egg-info .pytest_cache
