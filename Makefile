# Two commands for readers and CI (see README.md):
#   make book   create .venv, install everything, execute every chapter and build the website into _build/html
#   make test   unit tests + nbval over the executed chapters, then a strict build of the website
#
# Variables:
#   PYTHON      interpreter that creates the virtual environment (default: python3, needs >= 3.10)
#   TORCH_SPEC  how torch is installed first (default "torch>=2.6"; CI uses the local CPU wheel "torch==2.13.0")
#   TORCH_INDEX optional package index for torch, e.g. https://download.pytorch.org/whl/cpu for a CPU-only build
#   COMPANION_DATA_DIR  folder with the Multi30k files; defaults to ../shared/data/multi30k when that exists,
#               otherwise chapters and tests load Multi30k from the Hugging Face hub (or skip when offline).

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch>=2.6
TORCH_INDEX ?=
BIN := $(VENV)/bin
COMPANION_DATA_DIR ?= $(abspath $(wildcard ../shared/data/multi30k))
export COMPANION_DATA_DIR

# Figures must not be dropped, and stored outputs must not contain progress bars.
unexport MPLBACKEND
export TQDM_DISABLE := 1
export HF_DATASETS_DISABLE_PROGRESS_BARS := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1

BOOK_BUILD := $(BIN)/jupyter-book build -W -n --keep-going .

.PHONY: install book execute site test unit lint unit-and-notebooks website-tests chromium clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python >= 3.10 is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

install: $(VENV)/.installed

## make book: execute every chapter (refreshing its .ipynb from the .md) and build the website.
book: install execute site

execute: install
	$(BIN)/python tools/execute_chapters.py

## make test: every test. Chapters are executed once, by nbval, against their stored outputs; the website then shows those stored outputs,
## and a headless browser opens every page of it.
test: install lint unit-and-notebooks site website-tests colab-check

## make unit: the package's fast tests only (no chapters, nothing marked slow): the loop to run while editing.
unit: install
	$(BIN)/python -m pytest tests -m "not slow" --ignore=tests/website -p no:cacheprovider -q

## make lint: ruff (lint and format check) and mypy over the package.
lint: install
	$(BIN)/ruff check companion bench tools tests colab
	$(BIN)/ruff format --check companion bench tools tests colab
	$(BIN)/mypy

unit-and-notebooks: install
	$(BIN)/python -m pytest tests book/[0-9][0-9]_*.ipynb --ignore=tests/website --nbval --nbval-current-env \
		--nbval-sanitize-with book/nbval_sanitize.cfg -p no:cacheprovider

website-tests: install chromium
	$(BIN)/python -m pytest tests/website -p no:cacheprovider

# The browser tests drive Debian's Chromium (or the browser named by CHROMIUM) through Playwright.
chromium:
	@if [ -z "$$CHROMIUM" ] && ! command -v chromium >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else \
			echo "make test needs Chromium for the browser tests: install it (e.g. sudo apt-get install chromium)"; \
			echo "or point CHROMIUM at a Chromium/Chrome binary"; exit 1; \
		fi; \
	fi

site: install translator
	rm -rf _build
	$(BOOK_BUILD)

## make translator: the in-page translator's assets (book/_generated/translator): the shipped model exported to
## ONNX, its tokenizers, and ONNX Runtime Web from npm (version pinned in web/package-lock.json).
.PHONY: translator
translator: install web/node_modules/.package-lock.json
	$(BIN)/python tools/build_translator.py

web/node_modules/.package-lock.json: web/package.json web/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "make site needs Node.js and npm for ONNX Runtime Web (e.g. apt-get install nodejs npm)"; exit 1; }
	npm ci --prefix web --no-audit --no-fund

clean:
	rm -rf _build

## make lab: JupyterLab from .venv. Jupytext's contents manager (installed with jupytext) keeps each chapter's .md
## and .ipynb paired on save (formats in jupytext.toml); binder/jupyterlab/overrides.json makes a double click open
## a .md as a notebook. LAB_ARGS passes options, e.g. LAB_ARGS=--no-browser.
.PHONY: lab colab-check
LAB_SETTINGS := --LabApp.app_settings_dir=$(CURDIR)/binder/jupyterlab
LAB_ARGS ?=
lab: install
	@# Jupytext will not open a .md older than its paired, differing .ipynb (execute_chapters.py writes the .ipynb
	@# last); the .md is the source and the .ipynb only adds outputs, so mark the .md files as the newer ones.
	touch $(wildcard book/[0-9][0-9]_*.md)
	$(BIN)/jupyter lab $(LAB_SETTINGS) $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

## make colab-check: an environment with Colab's versions of the packages that matter (colab/packages.txt, and
## COLAB_TORCH for torch), the chapters' Colab cell run in it as Colab runs it, a check that the install changed
## none of those versions, then every chapter's imports and widgets executed there (see colab/README.md).
## COLAB_PYTHON and COLAB_TORCH default to PYTHON and TORCH_SPEC (CI: the local CPU wheel torch==2.13.0).
COLAB_PYTHON ?= $(PYTHON)
COLAB_TORCH ?= $(TORCH_SPEC)
COLAB_VENV ?= colab/.venv

$(COLAB_VENV)/.installed: colab/packages.txt
	rm -rf $(COLAB_VENV)
	$(COLAB_PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/python -m pip install --quiet "$$(grep '^pip==' colab/packages.txt)"
	$(COLAB_VENV)/bin/python -m pip install --quiet "$(COLAB_TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(COLAB_VENV)/bin/python -m pip install --quiet --no-deps -r colab/packages.txt
	$(COLAB_VENV)/bin/python -m pip list --format json > $(COLAB_VENV)/base-packages.json
	touch $@

colab-check: install $(COLAB_VENV)/.installed
	COLAB_ENV_PYTHON=$(abspath $(COLAB_VENV))/bin/python $(BIN)/python -m pytest colab -p no:cacheprovider -v --durations=5
