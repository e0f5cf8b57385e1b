"""Checks of the book's sources that need no execution: pairing, the Colab cell, the table of contents."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys
import types

import jupytext
import nbformat
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import colab_cell  # noqa: E402

CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.md"))


def _code_sources(notebook) -> list[str]:
    return [cell.source.strip() for cell in notebook.cells if cell.cell_type == "code"]


def test_there_are_chapters():
    assert CHAPTERS, "book/ holds no paired chapter"


@pytest.mark.parametrize("md_path", CHAPTERS, ids=lambda p: p.name)
def test_ipynb_has_the_same_inputs_as_md(md_path):
    ipynb = md_path.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} is missing: run `python tools/execute_chapters.py {md_path}`"
    md_nb, executed = jupytext.read(md_path), nbformat.read(ipynb, as_version=4)
    assert _code_sources(md_nb) == _code_sources(executed), f"{ipynb.name} is out of sync with {md_path.name}"
    assert all(cell.get("execution_count") for cell in executed.cells if cell.cell_type == "code"), (
        f"{ipynb.name} has unexecuted cells"
    )


@pytest.mark.parametrize("md_path", CHAPTERS, ids=lambda p: p.name)
def test_first_code_cell_installs_companion_in_colab(md_path):
    first = [c for c in jupytext.read(md_path).cells if c.cell_type == "code"][0]
    assert first.source.strip() == colab_cell.cell_source().strip()
    assert "remove-cell" in first.metadata.get("tags", []), "the Colab cell must be hidden on the website"


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_colab_cell_as_colab_runs_it_clones_installs_and_enters_book(tmp_path, monkeypatch):
    """Run the cell's code the way Colab would (``google.colab`` imported), with a local clone of this checkout
    standing in for the configured repository and a temporary folder for /content. Afterwards the kernel works in
    the clone's book/ folder, where the chapters find bench/results, and pip installed the clone with extras."""
    from IPython.core.inputtransformer2 import TransformerManager

    url, branch = colab_cell.repository()
    content_folder = "/content/" + url.rsplit("/", 1)[-1]
    remote, folder = tmp_path / "remote", tmp_path / "content" / "clone"
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(
        ["git", "-C", str(ROOT), "push", "-q", str(remote), f"{head.stdout.strip()}:refs/heads/{branch}"], check=True
    )
    code = TransformerManager().transform_cell(colab_cell.cell_source())  # %pip -> get_ipython().run_line_magic
    assert code.count(url) == 1 and content_folder in code
    code = code.replace(url, f"file://{remote}").replace(content_folder, str(folder))
    magics = []
    shell = types.SimpleNamespace(run_line_magic=lambda name, line: magics.append((name, line)))
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "colab_cell", "exec"), {"get_ipython": lambda: shell})
    assert pathlib.Path(os.getcwd()) == folder / "book"
    assert (folder / "companion" / "__init__.py").exists()
    assert sorted((folder / "bench" / "results").glob("multi30k_*.json")), "chapter 6 reads these from the clone"
    assert magics == [("pip", f'install -q "{folder}[data,plots]"')]
    exec(compile(code, "colab_cell", "exec"), {"get_ipython": lambda: shell})  # a second run: no second clone
    assert len(magics) == 2


def test_colab_cell_does_nothing_outside_colab(monkeypatch, tmp_path):
    from IPython.core.inputtransformer2 import TransformerManager

    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir(tmp_path)
    calls = []
    shell = types.SimpleNamespace(run_line_magic=lambda *args: calls.append(args))
    exec(
        compile(TransformerManager().transform_cell(colab_cell.cell_source()), "colab_cell", "exec"),
        {"get_ipython": lambda: shell},
    )
    assert calls == [] and pathlib.Path(os.getcwd()) == tmp_path


def test_colab_cell_write_updates_md_and_ipynb_after_a_url_change(tmp_path, monkeypatch):
    chapter = CHAPTERS[0]
    for suffix in (".md", ".ipynb"):
        shutil.copy(chapter.with_suffix(suffix), tmp_path / (chapter.stem + suffix))
    copy = tmp_path / chapter.name
    monkeypatch.setattr(colab_cell, "chapter_paths", lambda: [copy])
    assert colab_cell.write() == []  # already current: nothing rewritten
    monkeypatch.setattr(colab_cell, "repository", lambda: ("https://github.com/someone/fork", "dev"))
    assert colab_cell.write() == [copy.name]
    md_first = [c for c in jupytext.read(copy).cells if c.cell_type == "code"][0]
    ipynb_first = [c for c in nbformat.read(copy.with_suffix(".ipynb"), as_version=4).cells if c.cell_type == "code"][0]
    assert md_first.source == ipynb_first.source == colab_cell.cell_source()
    assert '"--branch", "dev"' in md_first.source and "/content/fork" in md_first.source
    assert "remove-cell" in md_first.metadata.get("tags", [])

    def others(path):  # every cell but the Colab cell
        return [c.source for c in jupytext.read(path).cells if "google.colab" not in c.source]

    assert others(copy) == others(chapter)  # only the Colab cell changed


def _toc_files(entries) -> list[str]:
    files = []
    for entry in entries:
        if "file" in entry:
            files.append(entry["file"])
        files += _toc_files(entry.get("chapters", []) + entry.get("sections", []))
    return files


def test_every_chapter_is_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = set(_toc_files(toc.get("parts", [])))
    for md_path in CHAPTERS:
        assert f"book/{md_path.stem}" in listed, f"{md_path.name} is not in _toc.yml"


CLOCK_CALLS = ("perf_counter", "process_time", "time.time(", "monotonic", "getloadavg", "chapter_minutes")


def _clock_names(tree: ast.AST) -> set[str]:
    """Names assigned from a clock reading anywhere in a cell (``elapsed = time.perf_counter() - start``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
            value = ast.unparse(node.value)
            if any(call in value for call in CLOCK_CALLS) or names & _names_in(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names |= _names_in(target)
    return names


def _names_in(node: ast.AST) -> set[str]:
    return {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}


@pytest.mark.parametrize("md_path", CHAPTERS, ids=lambda p: p.name)
def test_no_chapter_asserts_a_wall_clock_time(md_path):
    """Run times are printed, never asserted: a time depends on the machine and its load (the book's standard).

    Catches a clock call inside the assert and a name computed from a clock reading earlier in the chapter.
    """
    trees = []
    for source in _code_sources(jupytext.read(md_path)):
        try:
            trees.append(ast.parse(source))
        except SyntaxError:  # a cell with IPython magics
            continue
    clock_names = set().union(*map(_clock_names, trees))
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                text = ast.unparse(node.test)
                assert not any(call in text for call in CLOCK_CALLS), f"{md_path.name}: assert {text}"
                used = _names_in(node.test) & clock_names
                assert not used, f"{md_path.name}: assert {text} uses the clock reading(s) {sorted(used)}"


MAP_HIGHLIGHTS = {"02": "attention", "03": "masking", "04": "multi-head", "05": "positional"}


@pytest.mark.parametrize("number", sorted(MAP_HIGHLIGHTS))
def test_chapters_open_with_the_architecture_map(number):
    """Chapters 2-5 draw the "you are here" map, with their own part lit, before their first section."""
    (md_path,) = (ROOT / "book").glob(f"{number}_*.md")
    text = md_path.read_text()
    call = f'draw_architecture_map("{MAP_HIGHLIGHTS[number]}")'
    assert call in text, f"{md_path.name} does not draw {call}"
    first_section = text.index("\n## ")
    assert text.index(call) < first_section, f"{md_path.name}: the map comes after the first section"


@pytest.mark.parametrize("md_path", CHAPTERS, ids=lambda p: p.name)
def test_a_map_drawn_as_a_cell_value_is_ignored_by_nbval(md_path):
    """``draw_architecture_map(...);`` shows its figure once when the chapter executes and twice under nbval
    (the returned figure is displayed again), so such a cell's output cannot be compared: it must carry the
    ``nbval-ignore-output`` tag (chapter 7's map failed CI this way)."""
    for cell in jupytext.read(md_path).cells:
        if cell.cell_type == "code" and re.search(r"^draw_architecture_map\(.*\);\s*$", cell.source, re.MULTILINE):
            assert "nbval-ignore-output" in cell.metadata.get("tags", []), f"{md_path.name}: {cell.source[:80]!r}"
