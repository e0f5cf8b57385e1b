"""Checks of the book's sources that need no execution: pairing, the Colab cell, the table of contents."""

from __future__ import annotations

import pathlib
import sys

import jupytext
import nbformat
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
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
