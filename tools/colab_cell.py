"""The first (hidden) cell of every chapter: installs `companion` when the notebook runs in Google Colab.

The repository URL and branch come from `_config.yml`, the single place they are written.

    python tools/colab_cell.py            # print the cell's source
    python tools/colab_cell.py --check    # exit 1 if a chapter's first cell differs from it
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
    url, branch = repository()
    return (
        "# Runs only in Google Colab: install the companion package (and its extras) from the repository.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    %pip install -q "companion[data,plots] @ git+{url}@{branch}"'
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="check every chapter's first code cell")
    args = parser.parse_args()
    if args.check:
        wrong = check()
        for name in wrong:
            print(f"{name}: first code cell is not the Colab install cell", file=sys.stderr)
        return 1 if wrong else 0
    print(cell_source())
    return 0


if __name__ == "__main__":
    sys.exit(main())
