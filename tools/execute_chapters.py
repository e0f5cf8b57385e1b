"""Refresh each chapter's .ipynb from its MyST .md source and execute it in place.

    python tools/execute_chapters.py                 # every chapter in book/
    python tools/execute_chapters.py book/02_*.md    # some chapters
    python tools/execute_chapters.py --prose-only book/02_*.md   # markdown edits only: no execution

The .md is the source of truth: its inputs replace the notebook's (`jupytext --update` semantics), then the
notebook runs top to bottom in the chapter's folder with the current environment's kernel, and is written back
with its outputs and widget state. Per-cell timings are not stored in the notebook (re-running yields a small
diff); the slowest cells are printed instead, to show where a chapter's run time goes.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import sys
import time

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]


def refresh_inputs(md_path: pathlib.Path) -> nbformat.NotebookNode:
    """The notebook for ``md_path``: inputs from the .md, outputs kept from an existing .ipynb."""
    source = jupytext.read(md_path)
    ipynb = md_path.with_suffix(".ipynb")
    if ipynb.exists():
        from jupytext.combine import combine_inputs_with_outputs

        source = combine_inputs_with_outputs(source, nbformat.read(ipynb, as_version=4))
    source.metadata["jupytext"] = {"formats": "ipynb,md:myst"}
    source.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return source


def cell_seconds(cell: nbformat.NotebookNode) -> float:
    """Wall time of an executed code cell from nbclient's timing metadata (0.0 when it has none)."""
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = lambda stamp: datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def report_slowest(notebook: nbformat.NotebookNode, count: int = 5) -> None:
    """Print the ``count`` slowest code cells (seconds, index, first source line) and drop their timing metadata."""
    timed = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            timed.append((cell_seconds(cell), index, (cell.source.strip().splitlines() or [""])[0][:70]))
            cell.get("metadata", {}).pop("execution", None)
    for seconds, index, first_line in sorted(timed, reverse=True)[:count]:
        print(f"  {seconds:7.1f} s  cell {index:3d}  {first_line}")


def execute(md_path: pathlib.Path, timeout: int) -> float:
    """Execute one chapter and write its .ipynb; returns the wall time in seconds."""
    notebook = refresh_inputs(md_path)
    env_note = os.environ.get("MPLBACKEND")
    if env_note and env_note.lower() == "agg":
        raise SystemExit("MPLBACKEND=Agg drops every figure from executed notebooks: unset it first")
    start = time.perf_counter()
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(md_path.parent)}},
        record_timing=True,  # read by report_slowest, then removed
        store_widget_state=True,
    )
    client.execute()
    elapsed = time.perf_counter() - start
    report_slowest(notebook)
    nbformat.write(notebook, md_path.with_suffix(".ipynb"))
    return elapsed


def update_prose(md_path: pathlib.Path) -> None:
    """Copy markdown-cell edits from the .md into the .ipynb without executing (code must be unchanged)."""
    ipynb = md_path.with_suffix(".ipynb")
    if not ipynb.exists():
        raise SystemExit(f"{ipynb} does not exist: execute the chapter first")
    old = nbformat.read(ipynb, as_version=4)
    new = refresh_inputs(md_path)
    code = lambda nb: [c.source for c in nb.cells if c.cell_type == "code"]  # noqa: E731
    if code(old) != code(new):
        raise SystemExit(f"{md_path.name}: code cells changed, so outputs would be stale: execute the chapter")
    nbformat.write(new, ipynb)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", type=pathlib.Path, help="chapter .md files (default: all)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per cell (default 900)")
    parser.add_argument(
        "--prose-only",
        action="store_true",
        help="only copy markdown edits into the .ipynb (refuses if code cells changed)",
    )
    args = parser.parse_args()
    chapters = args.chapters or sorted((ROOT / "book").glob("[0-9][0-9]_*.md"))
    for md_path in chapters:
        if md_path.suffix != ".md" or not md_path.exists():
            parser.error(f"chapters must be existing .md files, got {md_path}")
        if args.prose_only:
            update_prose(md_path.resolve())
            print(f"updated the prose of {md_path.with_suffix('.ipynb')}")
            continue
        print(f"executing {md_path} ...", flush=True)
        print(f"  done in {execute(md_path.resolve(), args.timeout):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
