"""The in-page translator's search (web/translator/search.js) is companion.decode's search: both run on the same
deterministic step tables (next-token logits by the prefix's last token and position), Python through
:func:`companion.decode.search_greedy` / :func:`~companion.decode.search_beam` and JavaScript under Node, and give
the same ids and scores. The JavaScript step also checks the parent rows search.js passes (what the page's
key/value cache is reordered by) and each result's trail (which call and row computed each output position, what
the page gathers its attention maps from). One node process (web/translator/search_cli.mjs) runs every case. The
page's own search over the exported model is compared with Python in Chromium by tests/website/test_translator.py."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
import torch
from _node import node

from companion.data import BOS_ID, EOS_ID, PAD_ID
from companion.decode import MAX_ALPHA, best_hypothesis, search_beam, search_greedy

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = ROOT / "web" / "translator" / "search_cli.mjs"
VOCAB = 12
POSITIONS = 16
# (beam size, alpha, length limit) per case: greedy, beams of several sizes, alphas up to the limit, short limits
CASES = [
    (1, 0.0, 10),
    (1, 0.0, 3),
    (2, 0.6, 10),
    (4, 0.6, 12),
    (4, 0.0, 12),
    (4, 1.0, 5),
    (8, 1.0, 15),
    (3, MAX_ALPHA, 9),
]
SEEDS = range(12)
# Entries per row that the JavaScript step gives beam search (the decoder graph's top_k): the default (wider than
# the tables' vocabulary: whole rows) and fewer, so that the search ranks beams of up to 4 from each row's best
# entries and beams of 8 from the whole rows (2k candidates need more than 2k entries a row).
WIDTHS = (32, 9)


def step_table(seed: int) -> torch.Tensor:
    """``[VOCAB, POSITIONS, VOCAB]`` float32 logits of the next token after a prefix ending with token ``last`` at
    ``position``; <pad> and <bos> at -inf. Peaked rows, with <eos> made likely late, so searches end both ways."""
    generator = torch.Generator().manual_seed(seed)
    logits = 2.5 * torch.randn(VOCAB, POSITIONS, VOCAB, generator=generator)
    logits[:, :, EOS_ID] += torch.linspace(-3.0, 3.0, POSITIONS)[None, :]
    logits[:, :, [PAD_ID, BOS_ID]] = float("-inf")
    return logits


class TableStep:
    """companion.decode's step protocol over a step table (the rows' sources do not matter: nothing to select)."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        return self.logits[prefixes[:, -1], prefixes.shape[1] - 1]

    def select(self, rows: torch.Tensor, *, same_sources: bool = False) -> None:
        pass


def python_search(logits: torch.Tensor, beam_size: int, alpha: float, limit: int) -> tuple[list[int], float | None]:
    if beam_size == 1:
        return search_greedy(TableStep(logits), [limit])[0], None
    best = best_hypothesis(search_beam(TableStep(logits), [limit], beam_size)[0], alpha)
    return list(best.tokens), best.score(alpha)


def as_json(values: torch.Tensor) -> list:
    """Nested lists of floats with -inf as None (JSON has no infinities); float32 values are exact as doubles."""
    return [
        [[None if v == float("-inf") else v for v in row] for row in by_position] for by_position in values.tolist()
    ]


def run_search_js(tables: list[torch.Tensor], width: int) -> list[list[dict]]:
    """search.js's result for every case on each step table (logits), with ``width`` entries per row."""
    requests = [
        {
            "config": {"bos_id": BOS_ID, "eos_id": EOS_ID},
            "vocab": VOCAB,
            "logits": as_json(logits),
            "log_probs": as_json(torch.log_softmax(logits, dim=-1)),  # what the decoder graph's log_probs hold
            "cases": [{"beamSize": k, "alpha": a, "limit": n} for k, a, n in CASES],
            "width": width,
        }
        for logits in tables
    ]
    completed = subprocess.run(
        [node("search (web/translator/search.js)"), str(CLI)],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


@pytest.fixture(scope="module")
def javascript_results() -> dict[tuple[int, int], list[dict]]:
    """Per (seed, width), search.js's result for every case, from one node process per width."""
    tables = [step_table(seed) for seed in SEEDS]
    return {(seed, width): results for width in WIDTHS for seed, results in zip(SEEDS, run_search_js(tables, width))}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("seed", SEEDS)
def test_javascript_search_equals_python(seed, width, javascript_results):
    logits = step_table(seed)
    ended = {True: 0, False: 0}
    for (beam_size, alpha, limit), result in zip(CASES, javascript_results[seed, width]):
        ids, score = python_search(logits, beam_size, alpha, limit)
        assert result["ids"] == ids, (beam_size, alpha, limit)
        if score is None:
            assert result["score"] is None
        else:
            assert result["score"] == pytest.approx(score, abs=1e-5), (beam_size, alpha, limit)
        assert result["trailMatches"], (beam_size, alpha, limit)  # the attention rows the page gathers
        ended[result["endedWithEos"]] += 1
        # whole rows only where the best entries cannot decide: never for greedy search, never for complete
        # rows; with 9 entries a row, at every step of a beam of 8 (16 candidates) and never for beams up to 4
        # (no two scores of these random tables are equal)
        if beam_size == 1 or width >= VOCAB or 2 * beam_size < width:
            assert result["fullRows"] == 0, (beam_size, alpha, limit)
        else:
            assert result["fullRows"] == result["decoderCalls"], (beam_size, alpha, limit)
    assert ended[True] > 0  # the cases exercise <eos>


def test_ties_at_the_cut_rank_the_whole_rows():
    """Step tables whose scores tie in every row (logits in steps of 0.5): with few entries a row, a tie reaches
    the cut at some steps, and the search ranks those steps' whole rows, so that it finds exactly what it finds
    from whole rows (no token tied with the cut is left out)."""
    tables = [torch.where(torch.isinf(t), t, (2 * t).round() / 2) for t in (step_table(seed) for seed in SEEDS)]
    narrow, whole = run_search_js(tables, 5), run_search_js(tables, VOCAB)
    fell_back = 0
    for narrow_cases, whole_cases in zip(narrow, whole):
        for (beam_size, _, _), a, b in zip(CASES, narrow_cases, whole_cases):
            assert b["fullRows"] == 0
            assert {k: v for k, v in a.items() if k != "fullRows"} == {k: v for k, v in b.items() if k != "fullRows"}
            if 2 * beam_size < 5:
                fell_back += a["fullRows"]
    assert fell_back > 0  # some steps of beams ranked from 5 entries met a tie at the cut


def test_search_unit_tests_pass_under_node():
    """web/translator/test/*.test.mjs (search.js's own unit tests) under ``node --test``."""
    completed = subprocess.run(
        [node("search (web/translator/search.js)"), "--test", str(ROOT / "web" / "translator" / "test")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_the_pages_widest_beam_ranks_from_the_graphs_best_entries():
    """The in-page translator's widest beam (tools/build_translator.py) takes its 2k candidates from the step
    graph's best entries per row (search.js ranks the whole rows only when 2k reaches their number)."""
    import sys

    from companion.export import TOP_K

    sys.path.insert(0, str(ROOT / "tools"))
    import build_translator

    assert 2 * build_translator.MAX_BEAM_SIZE < TOP_K
