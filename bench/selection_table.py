"""Every validation-split selection run of ``bench/multi30k_select.py`` as one Markdown table (the README's).

    python bench/selection_table.py                    # print the table
    python bench/selection_table.py --write README.md  # replace the README's copy with it
    python bench/selection_table.py --check README.md  # exit 1 if the README's copy differs

Reads every ``bench/results/selection_multi30k_cpu_*.json`` (one file per day and machine; candidates are
comparable only within one file) and writes one row per candidate and direction: the machine, the training steps
and speed of its 20-minute run, its best validation BLEU over the scored averages and length penalties (with
which one), and its test_2016_flickr score where it was the candidate scored on test. The row of each file's
choice (the highest validation BLEU of that file and direction) is marked. The README holds the table between
the lines ``<!-- selection-table -->`` and ``<!-- /selection-table -->``; a test checks that it equals what this
script prints from the committed files, so none of its numbers is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _common  # noqa: E402
from multi30k_select import best_setting  # noqa: E402

START, END = "<!-- selection-table -->", "<!-- /selection-table -->"
HEADER = (
    "| file (day, machine) | direction | candidate | steps | tokens/s | best valid BLEU (setting) | test BLEU |",
    "| --- | --- | --- | ---: | ---: | --- | ---: |",
)


def _machine(cpu: str) -> str:
    """A short name for the results file's CPU string."""
    for name in ("AMD EPYC", "Intel(R) Xeon(R)", "Intel Xeon"):
        if cpu.startswith(name):
            return name.replace("(R)", "")
    return cpu


def _files_in_run_order(results: pathlib.Path | None) -> list[tuple[pathlib.Path, dict]]:
    """The selection files with their records, ordered by their first candidate's start (their names sort
    ``_eve`` before ``_pm``)."""
    folder = _common.RESULTS if results is None else results
    files = [(path, json.loads(path.read_text())) for path in folder.glob("selection_multi30k_cpu_*.json")]
    return sorted(
        files, key=lambda item: min(c["date"] for e in item[1]["directions"].values() for c in e["candidates"].values())
    )


def rows(results: pathlib.Path | None = None) -> list[str]:
    """The table's body: one Markdown row per candidate, files in the order they were run, candidates as run.
    ``results``: the folder of the files (default ``bench/results``)."""
    body = []
    for path, record in _files_in_run_order(results):
        day = path.stem.removeprefix("selection_multi30k_cpu_")
        machine = _machine(record["hardware"]["cpu"])
        for direction, entry in record["directions"].items():
            chosen = entry.get("chosen_on_valid", {}).get("candidate")
            for name, candidate in entry["candidates"].items():
                setting, score = best_setting(candidate["valid_bleu_beam4"])
                test = candidate.get("test_at_chosen_setting")
                mark = "**" if name == chosen else ""
                body.append(
                    f"| {day}, {machine} | {direction} | {mark}{name}{mark} | {candidate['steps']:,} | "
                    f"{candidate['tokens_per_second']:,} | {mark}{score['bleu']:.2f}{mark} ({setting}) | "
                    f"{'' if test is None else format(test['bleu'], '.2f')} |"
                )
    return body


def table(results: pathlib.Path | None = None) -> str:
    """The whole table (header and rows), as the README holds it between the markers."""
    return "\n".join([*HEADER, *rows(results)])


def readme_copy(text: str) -> str:
    """The table between the markers of ``text`` (ValueError if the markers are missing or out of order)."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the text has no {START} ... {END} block")
    return text[start + len(START) : end].strip("\n")


def with_table(text: str, new_table: str) -> str:
    """``text`` with the block between the markers replaced by ``new_table``."""
    readme_copy(text)  # the markers must be there
    start, end = text.find(START) + len(START), text.find(END)
    return f"{text[:start]}\n{new_table}\n{text[end:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", type=pathlib.Path, metavar="FILE", help="replace FILE's table with the current one")
    action.add_argument("--check", type=pathlib.Path, metavar="FILE", help="exit 1 if FILE's table is not current")
    args = parser.parse_args(argv)
    current = table()
    target = args.write or args.check
    if target is None:
        print(current)
        return 0
    try:
        text = target.read_text()
        copy = readme_copy(text)
    except (OSError, ValueError) as error:
        print(f"{target}: {error}", file=sys.stderr)
        return 2
    if args.write:
        target.write_text(with_table(text, current))
    elif copy != current:
        print(f"{target}: the selection table is out of date; run bench/selection_table.py --write {target}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
