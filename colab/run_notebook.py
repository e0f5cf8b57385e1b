"""Execute a notebook's code cells with this interpreter's kernel, as a notebook front end does (run by
colab/test_colab_environment.py inside the Colab-like environment, so the kernel, IPython, ipywidgets and
jupyter_client are Colab's versions).

    python colab/run_notebook.py IN.ipynb OUT.ipynb --cwd FOLDER [--timeout SECONDS]

Writes the notebook with its outputs to OUT.ipynb; exits 1 (after writing it) when a cell raises or times out.
It talks to the kernel with jupyter_client directly rather than through nbclient: nbclient's handling of widget
messages sometimes blocks after a widget cell (jupyter/nbclient#312, seen here with Colab's versions), and the
check needs no widget state, only the kernel's behaviour (the widget probe runs in the kernel).
"""

from __future__ import annotations

import argparse
import queue
import sys
import time

import nbformat
from jupyter_client.manager import start_new_kernel

OUTPUT_TYPES = ("stream", "display_data", "execute_result", "error")
KERNEL_START_ATTEMPTS = 3


def start_kernel(cwd: str, attempts: int = KERNEL_START_ATTEMPTS):
    """(manager, client) of a started kernel. jupyter_client picks free TCP ports and the kernel binds them a
    moment later; a kernel starting at the same time (the check runs chapters side by side) can take one in
    between, and the kernel dies with "Address already in use". Nothing has run yet then, so start again with
    fresh ports, at most ``attempts`` times."""
    for attempt in range(1, attempts + 1):
        try:
            return start_new_kernel(kernel_name="python3", startup_timeout=120, cwd=cwd)
        except RuntimeError as error:  # "Kernel died before replying to kernel_info"
            if attempt == attempts:
                raise
            print(f"kernel start {attempt} of {attempts} failed ({error}); starting again", file=sys.stderr)
    raise AssertionError("unreachable")


def run_cell(client, source: str, timeout: float) -> tuple[dict, list]:
    """(execute_reply content, outputs) of one cell; raises TimeoutError after ``timeout`` seconds."""
    outputs = []

    def keep(message: dict) -> None:
        if message["msg_type"] in OUTPUT_TYPES:
            outputs.append(nbformat.v4.output_from_msg(message))

    reply = client.execute_interactive(source, timeout=timeout, output_hook=keep, allow_stdin=False, stop_on_error=True)
    return reply["content"], outputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook")
    parser.add_argument("output")
    parser.add_argument("--cwd", required=True, help="the kernel's working directory (the chapter's folder)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    args = parser.parse_args()
    notebook = nbformat.read(args.notebook, as_version=4)
    start, status = time.perf_counter(), 0
    manager, client = start_kernel(args.cwd)
    try:
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            try:
                reply, cell.outputs = run_cell(client, cell.source, args.timeout)
            except (TimeoutError, queue.Empty):
                print(f"cell {index} did not finish within {args.timeout} s:\n{cell.source}", file=sys.stderr)
                status = 1
                break
            cell.execution_count = reply.get("execution_count")
            if reply["status"] != "ok":
                trace = "\n".join(reply.get("traceback", [])) or f"{reply.get('ename')}: {reply.get('evalue')}"
                print(f"cell {index} raised:\n{cell.source}\n{trace}", file=sys.stderr)
                status = 1
                break
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        nbformat.write(notebook, args.output)
    print(f"executed in {time.perf_counter() - start:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
