"""The Colab path, checked in an environment with Colab's package versions (`make colab-check`).

`make colab-check` builds the environment once (colab/.venv: Colab's pins from colab/packages.txt with
COLAB_TORCH, in CI the local CPU torch wheel) and runs this file with the main environment's pytest;
``COLAB_ENV_PYTHON`` names the environment's interpreter. The tests

1. run the chapters' Colab cell (tools/colab_cell.py) in that environment's IPython, as Colab runs it, against a
   local clone of this repository's HEAD, and check that its ``%pip install`` changed the version of no package
   the environment had, and added only packages Colab lacks;
2. execute, with the environment's own kernel, IPython, ipywidgets and jupyter_client (colab/run_notebook.py),
   every chapter's setup and widget cells (with the earlier cells those need: colab/cells.py), moving every
   control of every widget once, and one whole chapter (WHOLE_CHAPTER), JOBS chapters at a time.

After the run the installed packages are removed again, so the cached environment stays Colab's.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys

import jupytext
import nbformat
import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(HERE))
import cells  # noqa: E402
import colab_cell  # noqa: E402

# The longest chapter that runs whole in under two minutes on 2 shared CPU cores (81 s; the training chapter
# takes about 7 min; see the README for the measured times).
WHOLE_CHAPTER = "01_history"
CELL_TIMEOUT_S = 600
JOBS = int(os.environ.get("COLAB_CHECK_JOBS", "2"))  # chapters executed side by side
PIP_TIMEOUT_S = 600


def _committed_chapters() -> list[str]:
    """The chapters at HEAD: the Colab cell clones the repository, so uncommitted chapters are not there."""
    listing = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", "HEAD", "book/"], capture_output=True, text=True, check=True
    ).stdout.split()
    return sorted(
        pathlib.Path(name).stem
        for name in listing
        if pathlib.Path(name).suffix == ".md" and pathlib.Path(name).name[:2].isdigit()
    )


def _pins() -> dict[str, str]:
    """{name: version} pinned in colab/packages.txt."""
    pins = {}
    for line in (HERE / "packages.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


CHAPTERS = _committed_chapters()


def _python() -> pathlib.Path:
    value = os.environ.get("COLAB_ENV_PYTHON")
    if not value or not pathlib.Path(value).exists():
        pytest.fail(
            "COLAB_ENV_PYTHON must name the Python of the Colab-like environment: run `make colab-check`, "
            f"got {value!r}"
        )
    return pathlib.Path(value)


def _packages(python: pathlib.Path) -> dict[str, str]:
    """{lower-case name: version} of every distribution in the environment."""
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, check=True, timeout=120
    )
    return {item["name"].lower().replace("_", "-"): item["version"] for item in json.loads(listing.stdout)}


def _base_packages(python: pathlib.Path) -> dict[str, str]:
    """The environment as `make colab-check` built it (recorded in base-packages.json)."""
    record = python.parent.parent / "base-packages.json"
    return {item["name"].lower().replace("_", "-"): item["version"] for item in json.loads(record.read_text())}


def _not_in_colab() -> set[str]:
    """Packages Colab lacks, listed by colab/refresh.py in the header of colab/packages.txt."""
    for line in (HERE / "packages.txt").read_text().splitlines():
        if line.startswith("# not-in-colab:"):
            return {name.lower().replace("_", "-") for name in line.split(":", 1)[1].split()}
    raise AssertionError("colab/packages.txt has no '# not-in-colab:' line: regenerate it with colab/refresh.py")


def _restore(python: pathlib.Path, base: dict[str, str]) -> None:
    """Remove what an earlier run installed; refuse to go on if a base version itself was changed."""
    current = _packages(python)
    extra = sorted(set(current) - set(base))
    if extra:
        subprocess.run(
            [str(python), "-m", "pip", "uninstall", "--quiet", "--yes", *extra], check=True, timeout=PIP_TIMEOUT_S
        )
    changed = {name: (version, current.get(name)) for name, version in base.items() if current.get(name) != version}
    if changed:
        pytest.fail(
            f"{python.parent.parent} no longer matches colab/packages.txt ({changed}): "
            "delete it and rerun `make colab-check`"
        )


def _git(*args: str, cwd: pathlib.Path = ROOT) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """Run the Colab cell in the environment as Colab would; yields (packages before, packages after, clone)."""
    python = _python()
    base = _base_packages(python)
    _restore(python, base)
    tmp = tmp_path_factory.mktemp("colab")
    url, branch = colab_cell.repository()
    content_folder = "/content/" + url.rsplit("/", 1)[-1].removesuffix(".git")
    remote, clone = tmp / "remote.git", tmp / "content" / "clone"
    _git("init", "-q", "--bare", str(remote))
    _git("push", "-q", str(remote), f"{_git('rev-parse', 'HEAD')}:refs/heads/{branch}")
    source = colab_cell.cell_source()
    assert source.count(url) == 1 and source.count(content_folder) >= 1
    cell = tmp / "colab_cell.py"
    cell.write_text(source.replace(url, f"file://{remote}").replace(content_folder, str(clone)))
    runner = tmp / "run_cell.py"
    runner.write_text(
        "import os, sys, types\n"
        "sys.modules['google.colab'] = types.ModuleType('google.colab')  # what makes the cell act\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "result = InteractiveShell.instance().run_cell(open(sys.argv[1]).read())\n"
        "result.raise_error()\n"
        "print('WORKING DIRECTORY', os.getcwd())\n"
    )
    run = subprocess.run(
        [str(python), str(runner), str(cell)], cwd=tmp, capture_output=True, text=True, timeout=PIP_TIMEOUT_S
    )
    assert run.returncode == 0, f"the Colab cell failed:\n{run.stdout}\n{run.stderr}"
    assert f"WORKING DIRECTORY {clone / 'book'}" in run.stdout, run.stdout
    after = _packages(python)
    yield {"base": base, "after": after, "clone": clone, "python": python, "log": run.stdout + run.stderr}
    _restore(python, base)


def test_the_environment_has_colabs_versions(colab):
    pins = _pins()
    wrong = {
        name: (version, colab["base"].get(name)) for name, version in pins.items() if colab["base"].get(name) != version
    }
    assert not wrong, f"colab/.venv differs from colab/packages.txt (pinned, found): {wrong}"


def test_installing_companion_changes_no_preinstalled_package(colab):
    changed = {
        name: f"{version} -> {colab['after'].get(name, 'removed')}"
        for name, version in colab["base"].items()
        if colab["after"].get(name) != version
    }
    assert not changed, f"the Colab cell's install changed packages Colab preinstalls: {changed}\n{colab['log']}"


def test_installing_companion_adds_only_packages_colab_lacks(colab):
    added = set(colab["after"]) - set(colab["base"])
    assert "attention-executed" in added, f"the package was not installed: {sorted(added)}\n{colab['log']}"
    unexpected = added - _not_in_colab() - {"attention-executed"}
    assert not unexpected, (
        f"the install added {sorted(unexpected)}, which colab/packages.txt does not list as missing from Colab: "
        "if Colab has them, their versions must be pinned (rerun colab/refresh.py)"
    )


def _notebook(chapter: str, clone: pathlib.Path, whole: bool) -> tuple[nbformat.NotebookNode, int]:
    """The chapter's code cells to run (from the clone, as Colab opens them), each widget cell followed by the
    widget probe; returns it and the number of widget cells."""
    sources = [c.source for c in jupytext.read(clone / "book" / f"{chapter}.md").cells if c.cell_type == "code"]
    chosen = range(len(sources)) if whole else cells.cells_for_widgets(sources)
    notebook, widget_cells = nbformat.v4.new_notebook(), 0
    for i in chosen:
        notebook.cells.append(nbformat.v4.new_code_cell(sources[i]))
        if cells.is_widget_cell(sources[i]):
            notebook.cells.append(nbformat.v4.new_code_cell(cells.WIDGET_PROBE))
            widget_cells += 1
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook, widget_cells


def _run(python: pathlib.Path, clone: pathlib.Path, chapter: str, whole: bool, folder: pathlib.Path) -> dict:
    """Execute one chapter's chosen cells in the environment; returns what the tests check."""
    notebook, widget_cells = _notebook(chapter, clone, whole)
    source, executed = folder / f"{chapter}.ipynb", folder / f"{chapter}.executed.ipynb"
    nbformat.write(notebook, source)
    env = {key: value for key, value in os.environ.items() if key != "MPLBACKEND"}
    # Multi30k comes from COMPANION_DATA_DIR (`make` sets it when ../shared/data/multi30k exists), else the hub.
    env.update(TQDM_DISABLE="1", HF_DATASETS_DISABLE_PROGRESS_BARS="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    run = subprocess.run(
        [
            str(python),
            str(HERE / "run_notebook.py"),
            str(source),
            str(executed),
            "--cwd",
            str(clone / "book"),
            "--timeout",
            str(CELL_TIMEOUT_S),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=CELL_TIMEOUT_S * 3,
    )
    return {
        "returncode": run.returncode,
        "log": run.stdout + run.stderr[-6000:],
        "widget_cells": widget_cells,
        "executed": nbformat.read(executed, as_version=4) if executed.exists() else None,
    }


@pytest.fixture(scope="module")
def chapter_runs(colab, tmp_path_factory):
    """Every chapter's run, JOBS at a time (the chapters use one or two threads each), the whole chapter first."""
    folder = tmp_path_factory.mktemp("chapters")
    plan = [(WHOLE_CHAPTER, True)] + [(name, False) for name in CHAPTERS if name != WHOLE_CHAPTER]
    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        futures = {
            (name, whole): pool.submit(_run, colab["python"], colab["clone"], name, whole, folder)
            for name, whole in plan
        }
        return {key: future.result() for key, future in futures.items()}


def _check(result: dict, chapter: str) -> nbformat.NotebookNode:
    assert result["returncode"] == 0, f"{chapter} failed in the Colab environment:\n{result['log']}"
    executed = result["executed"]
    printed = "".join(out.get("text", "") for cell in executed.cells for out in cell.get("outputs", []))
    assert printed.count("widget probe:") == result["widget_cells"]
    assert not result["widget_cells"] or f"ipywidgets {_pins()['ipywidgets']}" in printed, (
        "the widgets ran with another ipywidgets than Colab's"
    )
    return executed


@pytest.mark.parametrize("chapter", [name for name in CHAPTERS if name != WHOLE_CHAPTER])
def test_chapter_imports_and_widgets_run_in_colabs_environment(chapter_runs, chapter):
    """The whole-chapter test below covers WHOLE_CHAPTER's widgets as well."""
    _check(chapter_runs[(chapter, False)], chapter)


def test_one_whole_chapter_runs_in_colabs_environment(chapter_runs, colab):
    assert WHOLE_CHAPTER in CHAPTERS
    executed = _check(chapter_runs[(WHOLE_CHAPTER, True)], WHOLE_CHAPTER)
    chapter = [c for c in jupytext.read(colab["clone"] / "book" / f"{WHOLE_CHAPTER}.md").cells if c.cell_type == "code"]
    assert len([c for c in executed.cells if "widget probe" not in c.source]) == len(chapter)
