# Two commands for readers and CI (see README.md):
#   make book   create .venv, install everything, execute every chapter and build the website into _build/html
#   make test   unit tests + nbval over the executed chapters, then a strict build of the website
#
# Variables:
#   PYTHON      interpreter that creates the virtual environment (default: python3, needs >= 3.10)
#   TORCH_SPEC  how torch is installed first (default "torch>=2.3"; CI uses the local CPU wheel "torch==2.13.0")
#   COMPANION_DATA_DIR  folder with the Multi30k files; defaults to ../shared/data/multi30k when that exists,
#               otherwise chapters and tests load Multi30k from the Hugging Face hub (or skip when offline).

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch>=2.3
BIN := $(VENV)/bin
COMPANION_DATA_DIR ?= $(abspath $(wildcard ../shared/data/multi30k))
export COMPANION_DATA_DIR

# Figures must not be dropped, and stored outputs must not contain progress bars.
unexport MPLBACKEND
export TQDM_DISABLE := 1
export HF_DATASETS_DISABLE_PROGRESS_BARS := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1

BOOK_BUILD := $(BIN)/jupyter-book build -W -n --keep-going .

.PHONY: install book execute site test unit-and-notebooks clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python >= 3.10 is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

install: $(VENV)/.installed

## make book: execute every chapter (refreshing its .ipynb from the .md) and build the website.
book: install execute site

execute: install
	$(BIN)/python tools/execute_chapters.py

## make test: every test. Chapters are executed once, by nbval; the website then shows those verified outputs.
test: install unit-and-notebooks site

unit-and-notebooks: install
	$(BIN)/python -m pytest tests book/[0-9][0-9]_*.ipynb --nbval --nbval-current-env \
		--nbval-sanitize-with book/nbval_sanitize.cfg -p no:cacheprovider

site: install
	rm -rf _build
	$(BOOK_BUILD)

clean:
	rm -rf _build
