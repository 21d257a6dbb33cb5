# The two quick-start commands (see README): `make demo` and `make test`.
# Both create .venv with the core and the shipped family plugins (families.toml); nothing
# else is needed but Python 3.11 or newer, this make (GNU) and access to the package registries.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check
# The shipped families' distributions, one line each in families.toml (scripts/shipped.py).
FAMILIES ?= families.toml
SHIPPED  := $(PYTHON) scripts/shipped.py --list $(FAMILIES)
PLUGINS  := $(shell $(SHIPPED) pip-args)
ifeq ($(PLUGINS),)
$(error $(SHIPPED) listed no family plugin: it needs Python 3.11 or newer as $(PYTHON))
endif
# The codecs extra decodes compressed audio (docs/formats.md); the tests also decode
# WebM and MP4 through codecs-ffmpeg (PyAV), which a deployment opts into itself, and
# run `audiogate batch` (pyarrow) and its Ray engine and Ray Serve deployment (ray).
PACKAGES := -e ".[codecs]" $(PLUGINS)
TEST_PACKAGES := -e ".[codecs,codecs-ffmpeg,batch,ray]" $(PLUGINS)

.PHONY: demo test test-fast install install-test lint typecheck pytest clean soak

# What an install depends on: a change to any of these reinstalls, nothing else does.
INSTALL_INPUTS := pyproject.toml $(FAMILIES) $(shell $(SHIPPED) install-inputs) \
	requirements/test.txt Makefile

$(BIN)/python:
	@echo "==> Creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

install: $(VENV)/.installed
	@echo "==> $(VENV) is ready (reinstalled only when one of these changes: $(INSTALL_INPUTS))"
install-test: $(VENV)/.installed-test
	@echo "==> $(VENV) is ready for the tests (reinstalled only when an install input changes)"

# The packages are editable installs: code changes need no reinstall, so each stamp is
# remade only when an install input changed (or the venv is new).
$(VENV)/.installed: $(BIN)/python $(INSTALL_INPUTS)
	@echo "==> Installing audiogate, the shipped family plugins and transformers (about 2 minutes the first time)"
	$(PIP) install --progress-bar on $(PACKAGES) "transformers==5.24.0" "jinja2==3.1.6"
	@touch $@

# torch only for the reference processors and tiny models; the CPU build, never CUDA.
# On Linux, PyPI's torch 2.13.0 is the CUDA build (with about 3 GB of NVIDIA packages);
# PyTorch's CPU index serves 2.13.0+cpu, which sorts above it, so pip takes the CPU build
# (macOS and Windows wheels on PyPI are CPU builds already). A wheel already on the machine
# (pip's find-links) is used as it is; without that index pip falls back to it.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
$(VENV)/.installed-test: $(BIN)/python $(INSTALL_INPUTS)
	@echo "==> Installing torch 2.13.0, the CPU-only build, for the reference processors and tiny models"
	$(PIP) install --progress-bar on --extra-index-url $(TORCH_CPU_INDEX) "torch==2.13.0"
	@$(BIN)/python -c "import torch, sys; sys.exit(0 if torch.version.cuda is None else 'torch is a CUDA build: install the CPU one (make clean, then make test)')"
	@echo "==> Installing audiogate, the shipped family plugins and the test tools"
	$(PIP) install --progress-bar on $(TEST_PACKAGES) -r requirements/test.txt
	@touch $@ $(VENV)/.installed

# The main job on bundled examples: a real speech clip through Gemma 3n's pinned defaults,
# then the full chat path (template, sentinels, expansion) on a bundled checkpoint.
demo: install
	@echo "==> The installed families"
	$(BIN)/audiogate families
	@echo "==> A bundled speech clip through Gemma 3n's pinned defaults"
	$(BIN)/audiogate prepare --family gemma3n --audio examples/audio/speech_16k.wav
	@echo "==> Two clips through the chat path of a bundled Phi-4 MM checkpoint"
	$(BIN)/audiogate prepare --model examples/models/phi-4-multimodal-instruct \
		--audio examples/audio/speech_16k.wav --audio examples/audio/speech_44k1_stereo.wav \
		--prompt "Summarize what is said."

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck:
	$(BIN)/mypy

pytest:
	$(BIN)/python -m pytest

test: install-test lint typecheck pytest

# The fast lane: every test not marked slow (README: how long it takes), failures first; add
# PYTEST_ARGS=--lf to rerun only the last failures.
test-fast: install-test
	$(BIN)/python -m pytest -m "not slow" --ff -q $(PYTEST_ARGS)

# A few minutes of mixed, hostile traffic at the reference server, on 127.0.0.1 only
# (not run by CI): it must end with no 5xx, every byte gauge at 0 and the peak RSS within
# the budgets (benchmarks/soak_server.py, docs/server.md).
SOAK_SECONDS ?= 180
soak: install
	@echo "==> Soak: $(SOAK_SECONDS) s of mixed requests at concurrency 64 on 127.0.0.1"
	$(BIN)/python benchmarks/soak_server.py --duration $(SOAK_SECONDS) --concurrency 64

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
