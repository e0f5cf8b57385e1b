"""The first (hidden) cell of every chapter: in Google Colab, fetches the repository and installs `companion`.

The repository URL and branch come from `_config.yml`, the single place they are written.

    python tools/colab_cell.py            # print the cell's source
    python tools/colab_cell.py --check    # exit 1 if a chapter's first cell differs from it
    python tools/colab_cell.py --write    # after changing the URL or branch: rewrite that cell in every chapter
                                          # (.md and .ipynb; the cell has no output, so nothing is re-executed)
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def repository() -> tuple[str, str]:
    """(url, branch) of the repository, from `_config.yml`."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]
    return repo["url"].rstrip("/"), repo.get("branch", "main")


def cell_source() -> str:
    """The cell: in Colab, clone the repository (the chapters read its committed benchmark results), install
    ``companion`` from the clone and work from its ``book`` folder; anywhere else, do nothing."""
    url, branch = repository()
    folder = "/content/" + url.rsplit("/", 1)[-1].removesuffix(".git")
    return (
        "# Runs only in Google Colab: fetch the repository, install the companion package from it, work in book/.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import os\n"
        "    import subprocess\n"
        "\n"
        f'    repository, folder = "{url}", "{folder}"\n'
        "    if not os.path.isdir(folder):\n"
        f'        subprocess.run(["git", "clone", "--depth", "1", "--branch", "{branch}", repository, folder], check=True)\n'  # noqa: E501
        f'    %pip install -q "{folder}[data,plots]"\n'
        '    os.chdir(os.path.join(folder, "book"))'
    )


def chapter_paths() -> list[pathlib.Path]:
    return sorted((ROOT / "book").glob("[0-9][0-9]_*.md"))


def check() -> list[str]:
    """Names of chapters whose first code cell is not the Colab cell."""
    import jupytext

    wrong = []
    for path in chapter_paths():
        cells = [c for c in jupytext.read(path).cells if c.cell_type == "code"]
        if not cells or cells[0].source.strip() != cell_source().strip():
            wrong.append(path.name)
    return wrong


_MD_HEADER = "```{code-cell} ipython3\n:tags: [remove-cell]\n\n"


def write() -> list[str]:
    """Put the current cell into every chapter's .md and .ipynb (first code cell); returns the changed names."""
    import nbformat

    new, changed = cell_source(), []
    for md_path in chapter_paths():
        text = md_path.read_text(encoding="utf-8")
        start = text.find(_MD_HEADER)
        if start < 0:
            raise SystemExit(f"{md_path.name}: no hidden first code cell ({_MD_HEADER.splitlines()[1]}) to replace")
        start += len(_MD_HEADER)
        end = text.index("\n```", start)
        ipynb_path = md_path.with_suffix(".ipynb")
        notebook = nbformat.read(ipynb_path, as_version=4)
        first = next(cell for cell in notebook.cells if cell.cell_type == "code")
        if text[start:end] == new and first.source == new:
            continue
        md_path.write_text(text[:start] + new + text[end:], encoding="utf-8")
        first.source = new
        nbformat.write(notebook, ipynb_path)
        changed.append(md_path.name)
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="check every chapter's first code cell")
    parser.add_argument("--write", action="store_true", help="rewrite every chapter's first code cell")
    args = parser.parse_args()
    if args.write:
        for name in write():
            print(f"updated {name} (and its .ipynb)")
        return 0
    if args.check:
        wrong = check()
        for name in wrong:
            print(f"{name}: first code cell is not the Colab install cell", file=sys.stderr)
        return 1 if wrong else 0
    print(cell_source())
    return 0


if __name__ == "__main__":
    sys.exit(main())
