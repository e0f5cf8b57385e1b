"""Tests for companion.decode: greedy and beam search with the key/value cache, and translate()."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch
from _copy_model import COPY_MAX_LEN, COPY_VOCAB, copy_model, exact_match, random_model

from companion import KVCache, Transformer, TransformerConfig
from companion.attention import padding_mask
from companion.data import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, WordTokenizer, make_batches, synthetic_pairs
from companion.decode import (
    MAX_ALPHA,
    MAX_BEAM_SIZE,
    BeamStepRecord,
    GreedyStepRecord,
    beam_search,
    greedy_decode,
    length_penalty,
    max_output_lengths,
    score_hypotheses,
    search_beam,
    search_greedy,
    translate,
    translate_alphas,
    translate_ids,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _sources(num: int, seed: int, vocab: int, max_len: int = 9) -> torch.Tensor:
    """A right-padded ``[num, n]`` source batch of varied lengths, each row ending with <eos>."""
    pairs = synthetic_pairs("copy", num, min_len=1, max_len=max_len, vocab_size=vocab, seed=seed)
    return make_batches(pairs, 10**9, shuffle=False)[0].src


def _unpadded_rows(src: torch.Tensor) -> list[torch.Tensor]:
    return [row[row != PAD_ID][None] for row in src]


# -- the cache ------------------------------------------------------------------------------------------------


def test_incremental_cached_logits_equal_the_full_forward_pass():
    model = random_model()
    src = _sources(5, seed=0, vocab=model.config.src_vocab_size)
    tgt = torch.randint(4, model.config.tgt_vocab_size, (5, 12))
    tgt[:, 0] = BOS_ID
    with torch.no_grad():
        full = model(src, tgt)
        memory, src_mask = model.encode(src)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache) for t in range(tgt.shape[1])]
    assert cache.length == 12
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


def test_cache_reorder_keeps_each_row_consistent():
    """After reordering (as beam search does), each cached row continues the right sequence."""
    model = random_model()
    src = _sources(4, seed=1, vocab=model.config.src_vocab_size)
    tgt = torch.randint(4, model.config.tgt_vocab_size, (4, 6))
    tgt[:, 0] = BOS_ID
    order = torch.tensor([2, 2, 0, 3])
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        cache = model.new_cache()
        model.decode(tgt[:, :3], memory, src_mask, cache=cache)
        cache.reorder(order)
        rest = model.decode(tgt[order, 3:], memory[order], src_mask[order], cache=cache)
        full = model(src[order], tgt[order])
    assert torch.allclose(rest, full[:, 3:], atol=1e-5, rtol=0)


# -- greedy and beam search -----------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["random", "copy"])
def test_beam_size_one_equals_greedy(which):
    model = random_model() if which == "random" else copy_model()
    src = _sources(12, seed=2, vocab=model.config.src_vocab_size, max_len=COPY_MAX_LEN)
    greedy = greedy_decode(model, src, max_extra_len=8)
    assert beam_search(model, src, beam_size=1, max_extra_len=8) == greedy
    if which == "random":  # some sentences hit the length limit, others stop early
        limits = max_output_lengths(src, PAD_ID, 8, model.config.max_len)
        assert any(len(g) == n for g, n in zip(greedy, limits)) and any(len(g) < n for g, n in zip(greedy, limits))


@pytest.mark.parametrize("search", ["greedy", "beam"])
@pytest.mark.parametrize("which", ["random", "copy"])
def test_results_do_not_depend_on_batch_size_or_padding(search, which):
    model = random_model() if which == "random" else copy_model()
    decode = greedy_decode if search == "greedy" else beam_search
    src = _sources(7, seed=3, vocab=model.config.src_vocab_size, max_len=COPY_MAX_LEN)
    together = decode(model, src, max_extra_len=6)
    alone = [decode(model, row, max_extra_len=6)[0] for row in _unpadded_rows(src)]
    extra_padding = torch.cat([src, torch.full((7, 5), PAD_ID)], dim=1)
    assert together == alone == decode(model, extra_padding, max_extra_len=6)
    assert decode(model, src.flip(0), max_extra_len=6) == together[::-1]


def test_greedy_on_the_trained_copy_model_reproduces_the_input():
    held_out = synthetic_pairs("copy", 200, max_len=COPY_MAX_LEN, vocab_size=COPY_VOCAB, seed=99)
    assert exact_match(copy_model(), held_out) >= 0.98
    src = _sources(20, seed=98, vocab=COPY_VOCAB, max_len=COPY_MAX_LEN)
    beams = beam_search(copy_model(), src, beam_size=4)
    expected = [row[: row.index(EOS_ID)] for row in src.tolist()]
    assert sum(b == e for b, e in zip(beams, expected)) >= 19


def test_beam_scores_are_consistent_and_not_worse_than_greedy():
    model = copy_model()
    src = _sources(16, seed=4, vocab=COPY_VOCAB, max_len=COPY_MAX_LEN)
    hypotheses, scores = beam_search(model, src, beam_size=4, alpha=0.6, return_scores=True)
    # The score the search accumulated step by step (cache, reordering) equals a teacher-forced rescoring.
    rescored = score_hypotheses(model, src, hypotheses, alpha=0.6)
    assert scores == pytest.approx(rescored, abs=1e-4)
    greedy_scores = score_hypotheses(model, src, greedy_decode(model, src), alpha=0.6)
    assert all(b >= g - 1e-6 for b, g in zip(scores, greedy_scores))


def test_length_penalty_values():
    assert length_penalty(1, 0.6) == 1.0
    assert length_penalty(7, 0.6) == pytest.approx(2**0.6)
    assert length_penalty(30, 0.0) == 1.0
    assert torch.allclose(length_penalty(torch.tensor([1.0, 7.0]), 1.0), torch.tensor([1.0, 2.0]))


def test_max_output_length_is_input_length_plus_50_capped_by_the_model():
    src = torch.tensor([[5, 6, EOS_ID, PAD_ID], [5, 6, 7, EOS_ID]])
    assert max_output_lengths(src, PAD_ID, 50, 512) == [53, 54]
    assert max_output_lengths(src, PAD_ID, 50, 40) == [40, 40]


# -- the step functions and the observer ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["random", "copy"])
def test_greedy_without_the_cache_picks_the_same_tokens(which):
    model = random_model() if which == "random" else copy_model()
    src = _sources(9, seed=6, vocab=model.config.src_vocab_size, max_len=COPY_MAX_LEN)
    assert greedy_decode(model, src, max_extra_len=7, use_cache=False) == greedy_decode(model, src, max_extra_len=7)


@pytest.mark.parametrize("which", ["random", "copy"])
def test_beam_search_without_the_cache_finds_the_same_hypotheses(which):
    model = random_model() if which == "random" else copy_model()
    src = _sources(7, seed=9, vocab=model.config.src_vocab_size, max_len=COPY_MAX_LEN)
    cached, cached_scores = beam_search(model, src, beam_size=3, max_extra_len=6, return_scores=True)
    plain, plain_scores = beam_search(model, src, beam_size=3, max_extra_len=6, return_scores=True, use_cache=False)
    assert plain == cached
    assert plain_scores == pytest.approx(cached_scores, abs=1e-4)


def test_beam_search_use_cache_must_be_a_bool():
    model = random_model()
    with pytest.raises(ValueError, match="use_cache must be True or False"):
        beam_search(model, _sources(2, seed=1, vocab=model.config.src_vocab_size), use_cache="no")  # type: ignore[call-overload]


def test_the_recompute_baseline_projects_only_the_last_position():
    """Recomputing the prefix must not also recompute the output layer over every position (issue 24, item 1)."""
    model = random_model()
    src = _sources(4, seed=7, vocab=model.config.src_vocab_size)
    shapes = []
    handle = model.generator.register_forward_hook(lambda module, args, out: shapes.append(tuple(args[0].shape)))
    try:
        greedy_decode(model, src, max_extra_len=5, use_cache=False)
    finally:
        handle.remove()
    assert len(shapes) > 3 and all(shape[1] == 1 for shape in shapes), shapes


def test_the_source_ids_are_checked_once_not_at_every_step(monkeypatch):
    """``check_token_ids`` reads the ids' extremes back to the host (a device sync): once per call, at the entry."""
    model = random_model()
    src = _sources(3, seed=8, vocab=model.config.src_vocab_size)
    calls = []
    real = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda *a, **k: calls.append(1) or real(*a, **k))
    steps = []
    greedy_decode(model, src, max_extra_len=6, on_step=steps.append)
    assert len(steps) > 2 and len(calls) == 1
    calls.clear()
    beam_search(model, src, beam_size=3, max_extra_len=6)
    assert len(calls) == 1


def test_the_greedy_observer_sees_every_step():
    model = random_model()
    src = _sources(6, seed=9, vocab=model.config.src_vocab_size)
    records: list[GreedyStepRecord] = []
    outputs = greedy_decode(model, src, max_extra_len=6, on_step=records.append)
    assert [r.step for r in records] == list(range(1, len(records) + 1))
    rebuilt: list[list[int]] = [[] for _ in outputs]
    for record in records:
        assert record.logits.shape == (len(record.sentences), model.config.tgt_vocab_size)
        assert record.tokens.tolist() == record.logits.argmax(-1).tolist()
        for sentence, token in zip(record.sentences, record.tokens.tolist()):
            assert len(rebuilt[sentence]) == record.step - 1  # a sentence is seen at every step until it ends
            rebuilt[sentence].append(token)
    # each sentence's tokens, up to its <eos> (not part of the output), are the output
    assert [r[:-1] if r[-1] == EOS_ID else r for r in rebuilt] == outputs
    assert records[0].sentences == list(range(6))  # every sentence takes part in the first step


def test_the_beam_observer_sees_every_step_and_every_finished_hypothesis():
    model = random_model()
    src = _sources(5, seed=13, vocab=model.config.src_vocab_size)
    k = 3
    records: list[BeamStepRecord] = []
    tokens, scores = beam_search(
        model, src, beam_size=k, alpha=0.6, max_extra_len=4, return_scores=True, on_step=records.append
    )
    assert [r.step for r in records] == list(range(1, len(records) + 1))
    limits = max_output_lengths(src, PAD_ID, 4, model.config.max_len)
    assert len(records) <= max(limits)  # no sentence searches past its length limit
    finished: list[list] = [[] for _ in range(5)]
    last_step = [0] * 5
    for record in records:
        groups = len(record.sentences)
        assert record.candidates.scores.shape == (groups, 2 * k)
        assert record.parents.shape == (groups * k, record.step) and record.prefixes.shape == (
            groups * k,
            record.step + 1,
        )
        for group, sentence in enumerate(record.sentences):
            # a sentence is seen at every step until it stops: it was still searching after the step before
            assert last_step[sentence] == record.step - 1
            assert len(finished[sentence]) < k and record.step <= limits[sentence]
            finished[sentence] += record.finished[group]
            last_step[sentence] = record.step
    # Each sentence stopped for one of the two reasons: its length limit, or k finished hypotheses.
    assert records[0].sentences == list(range(5))
    for sentence in range(5):
        assert last_step[sentence] == limits[sentence] or len(finished[sentence]) >= k, sentence
    # the best of what the observer saw finish is what the search returns
    for sentence in range(5):
        best = max(finished[sentence], key=lambda h: h.score(0.6))
        assert list(best.tokens) == tokens[sentence] and best.score(0.6) == pytest.approx(scores[sentence])


def test_the_searches_run_over_any_step_function():
    """A step function that ignores the source: the next token is always (last token + 1), then <eos> after 7."""
    vocab = 10

    class Counting:
        def __call__(self, prefixes):
            logits = torch.full((prefixes.shape[0], vocab), -5.0)
            last = prefixes[:, -1]
            following = torch.where(last == BOS_ID, torch.tensor(4), last + 1).clamp(max=vocab - 1)
            following = torch.where(last >= 7, torch.tensor(EOS_ID), following)
            logits[torch.arange(prefixes.shape[0]), following] = 5.0
            logits[:, [PAD_ID, BOS_ID]] = float("-inf")
            return logits

        def select(self, rows, *, same_sources=False):
            pass

    assert search_greedy(Counting(), [10, 2]) == [[4, 5, 6, 7], [4, 5]]
    finished = search_beam(Counting(), [10, 2], 2)
    assert [list(max(f, key=lambda h: h.score(0.6)).tokens) for f in finished] == [[4, 5, 6, 7], [4, 5]]


# -- arguments are checked once, at the entry ------------------------------------------------------------------


def test_alpha_is_capped_at_the_command_line_limit():
    """alpha above ~320 used to overflow in length_penalty (OverflowError); the API caps it as the CLI does."""
    from companion.runs import MAX_ALPHA as CLI_MAX_ALPHA

    assert CLI_MAX_ALPHA is MAX_ALPHA
    model = random_model()
    src = _sources(2, seed=11, vocab=model.config.src_vocab_size)
    assert len(beam_search(model, src, beam_size=2, alpha=MAX_ALPHA, max_extra_len=3)) == 2
    for alpha in (500.0, MAX_ALPHA + 0.1):
        with pytest.raises(ValueError, match=r"alpha must be a number in \[0, 10\]"):
            beam_search(model, src, beam_size=2, alpha=alpha)
        with pytest.raises(ValueError, match="alpha"):
            translate_ids(model, [[5, EOS_ID]], alpha=alpha)
        with pytest.raises(ValueError, match="alpha"):
            score_hypotheses(model, src, [[5], [6]], alpha=alpha)


@pytest.mark.parametrize("value", [2.5, True, -1, 19])
@pytest.mark.parametrize("name", ["bos_id", "eos_id"])
def test_token_id_arguments_must_be_target_token_ids(name, value):
    model = random_model()  # 19 target tokens
    src = _sources(2, seed=12, vocab=model.config.src_vocab_size)
    pattern = rf"{name} \(a target token id\) must be an integer in \[0, 18\], got {value!r}"
    with pytest.raises(ValueError, match=pattern):
        greedy_decode(model, src, **{name: value})
    with pytest.raises(ValueError, match=pattern):
        beam_search(model, src, **{name: value})
    with pytest.raises(ValueError, match=pattern):
        translate_ids(model, [[5, EOS_ID]], **{name: value})


def test_bad_sources_are_named():
    model = random_model()
    with pytest.raises(TypeError, match="sources must be a list of token-id lists"):
        translate_ids(model, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sources must be a list of token-id lists"):
        translate_ids(model, "ein Hund")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"sources\[0\] must be a sequence of integer token ids"):
        translate_ids(model, [None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"sources\[1\]"):
        translate_ids(model, [[5, EOS_ID], ["5", EOS_ID]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"sources\[0\] holds 99"):
        translate_ids(model, [[99, EOS_ID]])


def test_token_ids_on_the_meta_device_are_refused_naming_the_argument():
    """A meta tensor has a shape but no values: it used to end in a RuntimeError from Tensor.item() (the searches)
    or a NotImplementedError (translate_ids); issue 21, item 24."""
    model = random_model()
    src = torch.tensor([[5, 6, EOS_ID]], device="meta")
    for search in (greedy_decode, beam_search):
        with pytest.raises(ValueError, match="src is a tensor on the meta device"):
            search(model, src)
    with pytest.raises(ValueError, match="src is a tensor on the meta device"):
        model(src, src)
    with pytest.raises(ValueError, match=r"sources\[0\] is a tensor on the meta device"):
        translate_ids(model, [src[0]])


# -- a scripted model where greedy search is provably suboptimal ----------------------------------------------

A, B = 4, 5


class _HistoryCache(KVCache):
    """Remembers the target tokens fed so far, per row."""

    def __init__(self) -> None:
        super().__init__(0)
        self.history: torch.Tensor | None = None

    def reorder(self, index: torch.Tensor, include_cross: bool = True) -> None:
        self.history = self.history.index_select(0, index)


class _ScriptedModel(Transformer):
    """Next-token probabilities depend only on the prefix:
    after <bos>: A 0.5, B 0.4, <eos> 0.1; after A...: A 0.4, B 0.3, <eos> 0.3; after B: <eos> 0.9, A/B 0.05.
    Greedy picks A and then keeps picking A; the best normalised hypothesis is "B <eos>"."""

    def __init__(self) -> None:
        super().__init__(
            TransformerConfig(
                src_vocab_size=6,
                tgt_vocab_size=6,
                d_model=4,
                num_heads=1,
                num_encoder_layers=0,
                num_decoder_layers=0,
                d_ff=4,
                max_len=64,
            )
        )

    def encode_unchecked(self, src, need_weights=False):
        return torch.zeros(src.shape[0], src.shape[1], 4), padding_mask(src, PAD_ID)

    def new_cache(self):
        return _HistoryCache()

    def decode_unchecked(self, tgt, memory, src_mask=None, cache=None, need_weights=False, *, last_only=False):
        cache.history = tgt if cache.history is None else torch.cat([cache.history, tgt], dim=1)
        cache.length = cache.history.shape[1]
        probs = torch.full((tgt.shape[0], 6), 1e-9)
        for row, history in enumerate(cache.history.tolist()):
            table = {(): (0.5, 0.4, 0.1), (A,): (0.4, 0.3, 0.3), (B,): (0.05, 0.05, 0.9)}
            key = tuple(history[1:2])
            probs[row, A], probs[row, B], probs[row, EOS_ID] = table[key]
        return probs.log()[:, None, :]


def test_beam_search_finds_what_greedy_misses():
    model = _ScriptedModel()
    src = torch.tensor([[A, A, EOS_ID], [A, EOS_ID, PAD_ID]])
    assert greedy_decode(model, src, max_extra_len=3) == [[A] * 6, [A] * 5]  # never <eos>: up to the limit
    hypotheses, scores = beam_search(model, src, beam_size=2, alpha=0.6, max_extra_len=3, return_scores=True)
    assert hypotheses == [[B], [B]]
    assert scores == pytest.approx([math.log(0.4 * 0.9) / length_penalty(2, 0.6)] * 2, abs=1e-6)
    # Without length penalty "B <eos>" (probability 0.36) wins as well.
    assert beam_search(model, src, beam_size=2, alpha=0.0, max_extra_len=3) == [[B], [B]]
    assert beam_search(model, src, beam_size=1, max_extra_len=3) == greedy_decode(model, src, max_extra_len=3)


# -- translate and bad input ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def copy_tokenizer() -> WordTokenizer:
    words = ["apple", "bear", "cat", "dog", "egg", "fox"]  # ids 4..9, the copy model's vocabulary
    assert len(words) == COPY_VOCAB - 4
    return WordTokenizer("en", list(SPECIAL_TOKENS) + words)


def test_translate_keeps_order_across_batches(copy_tokenizer):
    sentences = ["apple bear", "fox", "cat dog egg fox apple", "egg egg", "bear cat dog", "dog"]
    for beam_size in (1, 4):
        for batch_size in (1, 4, 64):
            out = translate(
                copy_model(), sentences, copy_tokenizer, copy_tokenizer, beam_size=beam_size, batch_size=batch_size
            )
            assert out == sentences
    assert translate(copy_model(), [], copy_tokenizer, copy_tokenizer) == []


def test_a_string_is_one_sentence_and_comes_back_as_one_string(copy_tokenizer):
    for beam_size in (1, 4):
        out = translate(copy_model(), "cat dog egg", copy_tokenizer, copy_tokenizer, beam_size=beam_size)
        assert out == "cat dog egg"  # one translation, not one per character


def test_translate_takes_any_ordered_collection_of_strings_and_names_what_it_refuses(copy_tokenizer):
    sentences = ["apple bear", "fox"]
    for given in (tuple(sentences), iter(sentences), (s for s in sentences)):
        assert translate(copy_model(), given, copy_tokenizer, copy_tokenizer, beam_size=1) == sentences
    for bad, named in ((5, "int"), (b"apple", "bytes"), ({"apple": 1}, "dict"), ({"apple", "fox"}, "set")):
        with pytest.raises(TypeError, match=f"sentences must be a string or a list of strings, got {named}$"):
            translate(copy_model(), bad, copy_tokenizer, copy_tokenizer)
    with pytest.raises(TypeError, match=r"sentences\[1\] must be a str, got NoneType"):
        translate(copy_model(), ["apple", None], copy_tokenizer, copy_tokenizer)


def test_translate_shows_progress_only_when_asked(copy_tokenizer, capsys):
    sentences = ["apple bear", "fox", "cat dog egg fox apple", "egg egg", "bear cat dog"]
    for beam_size in (1, 4):
        quiet = translate(copy_model(), sentences, copy_tokenizer, copy_tokenizer, beam_size=beam_size, batch_size=2)
        assert capsys.readouterr().err == ""
        shown = translate(
            copy_model(), sentences, copy_tokenizer, copy_tokenizer, beam_size=beam_size, batch_size=2, progress=True
        )
        assert shown == quiet == sentences  # the bar changes nothing else
        assert "translate" in (bar := capsys.readouterr().err) and f"{len(sentences)}/{len(sentences)}" in bar


def test_translate_ids_is_translate_without_the_tokenizers(copy_tokenizer):
    sentences = ["apple bear", "fox", "cat dog egg fox apple", "bear cat dog"]
    sources = [copy_tokenizer.encode(s) + [EOS_ID] for s in sentences]
    for beam_size in (1, 4):
        ids = translate_ids(copy_model(), sources, beam_size=beam_size, batch_size=3)
        assert ids == [copy_tokenizer.encode(s) for s in sentences]  # the copy model copies, order kept
        assert [copy_tokenizer.decode(i) for i in ids] == translate(
            copy_model(), sentences, copy_tokenizer, copy_tokenizer, beam_size=beam_size
        )
    with pytest.raises(ValueError, match=r"sources\[1\] is empty"):
        translate_ids(copy_model(), [[4, EOS_ID], []])
    with pytest.raises(ValueError, match="batch_size"):
        translate_ids(copy_model(), sources, batch_size=0)


def test_beam_size_is_capped_at_the_command_line_limit(copy_tokenizer):
    """beam_size=20000 through the API used to be accepted (and exhaust memory); the API caps it as the CLI does,
    from one constant."""
    from companion.runs.infer import MAX_BEAM_SIZE as CLI_MAX_BEAM_SIZE

    assert CLI_MAX_BEAM_SIZE is MAX_BEAM_SIZE
    model = random_model()
    src = _sources(2, seed=11, vocab=model.config.src_vocab_size)
    for beam_size in (MAX_BEAM_SIZE + 1, 20000):
        with pytest.raises(
            ValueError, match=rf"beam_size must be an integer in \[1, {MAX_BEAM_SIZE}\], got {beam_size}"
        ):
            beam_search(model, src, beam_size=beam_size)
        with pytest.raises(ValueError, match="beam_size"):
            translate_ids(model, [[5, EOS_ID]], beam_size=beam_size)
        with pytest.raises(ValueError, match="beam_size"):
            translate(copy_model(), "cat dog", copy_tokenizer, copy_tokenizer, beam_size=beam_size)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translate_handles_empty_and_overlong_input(copy_tokenizer, beam_size):
    # An empty sentence is decoded from <eos> alone. The random model's outputs depend on its source (the
    # copy model says nothing for <eos> and <unk> <eos> alike), so they show which source was decoded.
    model = random_model()
    src_words, tgt_words = model.config.src_vocab_size - 4, model.config.tgt_vocab_size - 4
    src_tokenizer = WordTokenizer("en", list(SPECIAL_TOKENS) + [f"s{i}" for i in range(src_words)])
    tgt_tokenizer = WordTokenizer("en", list(SPECIAL_TOKENS) + [f"t{i}" for i in range(tgt_words)])
    (from_eos,) = translate_ids(model, [[EOS_ID]], beam_size=beam_size)
    out = translate(model, ["", "s3 s1"], src_tokenizer, tgt_tokenizer, beam_size=beam_size)
    assert out[0] == tgt_tokenizer.decode(from_eos)
    (other,) = translate_ids(model, [src_tokenizer.encode("s3 s1") + [EOS_ID]], beam_size=beam_size)
    assert out[1] == tgt_tokenizer.decode(other)
    # An overlong sentence keeps its first max_len - 1 tokens, then <eos>: the copy model copies those.
    max_len = copy_model().config.max_len
    words = copy_tokenizer.itos[4:]
    sentence = " ".join(words[(i * i + i // 3) % len(words)] for i in range(max_len + 8))  # varied words
    ids = copy_tokenizer.encode(sentence)
    assert len(ids) == max_len + 8
    with pytest.warns(UserWarning, match=f"truncated 1 source sentence\\(s\\) to the model's max_len={max_len}"):
        (long_out,) = translate(copy_model(), [sentence], copy_tokenizer, copy_tokenizer, beam_size=beam_size)
    (truncated,) = translate_ids(copy_model(), [ids[: max_len - 1] + [EOS_ID]], beam_size=beam_size)
    assert long_out == copy_tokenizer.decode(truncated)


def test_translate_refuses_a_model_or_tokenizer_of_the_wrong_type(copy_tokenizer):
    model, tok = copy_model(), copy_tokenizer
    cases = [
        (
            lambda: translate(torch.nn.Linear(2, 2), ["apple"], tok, tok),
            "model must be a companion Transformer, got Linear",
        ),
        (lambda: translate_ids(None, [[4, EOS_ID]]), "model must be a companion Transformer, got NoneType"),
        (lambda: translate(model, ["apple"], "en", tok), "src_tokenizer must be a companion Tokenizer, got str"),
        (lambda: translate(model, ["apple"], tok, None), "tgt_tokenizer must be a companion Tokenizer, got NoneType"),
        (
            lambda: translate_alphas(model, ["apple"], {}, tok, alphas=[0.6]),
            "src_tokenizer must be a companion Tokenizer, got dict",
        ),
        (
            lambda: translate_alphas(model, ["apple"], tok, "en", alphas=[0.6]),
            "tgt_tokenizer must be a companion Tokenizer, got str",
        ),
        (
            lambda: translate_alphas(model, "apple", tok, tok, alphas=[0.6]),
            "sentences must be a list of strings, got str",
        ),
    ]
    for call, message in cases:
        with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
            call()


def test_bad_arguments_are_named():
    model = random_model()
    src = _sources(2, seed=0, vocab=model.config.src_vocab_size)
    with pytest.raises(TypeError, match="model must be a companion Transformer"):
        greedy_decode(torch.nn.Linear(2, 2), src)
    with pytest.raises(TypeError, match="src must hold integer token ids"):
        greedy_decode(model, src.float())
    with pytest.raises(ValueError, match="src holds token id"):
        beam_search(model, src + 100)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, beam_size=0)
    with pytest.raises(ValueError, match="alpha"):
        beam_search(model, src, alpha=-1.0)
    with pytest.raises(ValueError, match="max_extra_len"):
        greedy_decode(model, src, max_extra_len=-1)


@pytest.fixture(scope="module")
def dropout_model() -> Transformer:
    """The random model's shape with every kind of dropout well above 0, so that one left on changes the numbers."""
    config = dataclasses.replace(random_model().config, dropout=0.3, attention_dropout=0.3, ffn_dropout=0.3)
    torch.manual_seed(4321)
    return Transformer(config).eval()


def test_beam_search_and_scoring_in_train_mode_run_without_dropout_and_restore_the_mode(dropout_model):
    model = dropout_model
    src = _sources(4, seed=12, vocab=model.config.src_vocab_size)
    hypotheses, scores = beam_search(model, src, beam_size=3, max_extra_len=5, return_scores=True)
    scored = score_hypotheses(model, src, hypotheses)
    assert not model.training and sum(map(len, hypotheses)) > 10  # mostly long outputs: many dropout draws
    model.train()
    try:
        for _ in range(2):  # twice: dropout would draw other masks each time
            assert beam_search(model, src, beam_size=3, max_extra_len=5, return_scores=True) == (hypotheses, scores)
            assert model.training
            assert score_hypotheses(model, src, hypotheses) == scored
            assert model.training
    finally:
        model.eval()


def test_decoding_leaves_the_model_mode_alone():
    model = random_model()
    model.train()
    try:
        src = _sources(3, seed=5, vocab=model.config.src_vocab_size)
        assert greedy_decode(model, src) == greedy_decode(model, src)  # dropout was off while decoding
        assert model.training
    finally:
        model.eval()


def test_decoding_in_inference_mode_leaves_training_and_plain_decoding_working():
    """The searches run under torch.inference_mode; what they leave behind (the linear layers' kept transposed
    weights, built there) must not break a later training step or a decode under torch.no_grad."""
    model = random_model()
    src = _sources(3, seed=6, vocab=model.config.src_vocab_size)
    records = []
    first = greedy_decode(model, src, on_step=records.append)
    beam_search(model, src, beam_size=2)
    assert records and all(record.logits.is_inference() for record in records)
    assert not torch.is_inference_mode_enabled()  # the mode ends with the search
    with torch.no_grad():  # the kept weights (inference tensors) still serve a plain no-grad decode
        memory, mask = model.encode(src)
        logits = model.decode(torch.full((3, 1), BOS_ID), memory, mask)
    assert not logits.is_inference()
    model.train()
    try:
        tgt = torch.full((3, 2), BOS_ID)
        loss = model(src, tgt).logsumexp(-1).mean()
        loss.backward()  # gradients flow through the parameters, not through anything the search kept
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    assert greedy_decode(model, src) == first


# -- moved from test_reliability.py: non-finite scores, the decoder's mask and cache, named argument errors ----
def test_decoding_a_model_whose_scores_are_not_finite_fails_clearly(tiny_model, tokens):
    from companion.errors import NonFiniteOutputError

    model = tiny_model()
    with torch.no_grad():
        model.tgt_embed.weight.mul_(1e38)  # finite but absurd weights: the scores overflow
    src = tokens(2, 5, 23)
    with pytest.raises(NonFiniteOutputError, match="inf or nan"):
        greedy_decode(model, src)
    with pytest.raises(NonFiniteOutputError, match="inf or nan"):
        beam_search(model, src, beam_size=3)


def test_huge_but_finite_scores_are_not_mistaken_for_broken_ones():
    """The step's finiteness check sums the scores first; a sum that overflows falls back to the exact test."""
    from companion.decode.steps import _never_generated
    from companion.errors import NonFiniteOutputError

    huge = torch.full((2, 6), 3e38)  # every score finite, their sum is inf in float32
    assert not torch.isfinite(huge.sum())
    out = _never_generated(huge.clone(), pad_id=0, bos_id=1)
    assert torch.isinf(out[:, :2]).all() and (out[:, 2:] == 3e38).all()
    for bad in (float("nan"), float("-inf")):
        scores = torch.zeros(2, 6)
        scores[1, 4] = bad
        with pytest.raises(NonFiniteOutputError, match="inf or nan"):
            _never_generated(scores, pad_id=0, bos_id=1)


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_beam_search_refuses_a_nonfinite_alpha(value, tiny_model, tokens):
    with pytest.raises(ValueError, match="alpha"):
        beam_search(tiny_model(), tokens(1, 3, 23), alpha=value)


def test_decode_checks_the_source_mask_shape_exactly(tiny_model, tokens):
    model = tiny_model()
    src = torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8], [5, 6, 0, 0]])  # batch 3 == target length 3
    memory, mask = model.encode(src)
    tgt = tokens(3, 3, 19)
    with pytest.raises(ValueError, match=r"src_mask must be .*\[3, 1, 1, 4\].* shape \[3, 4\]"):
        model.decode(tgt, memory, src != 0)  # 2-D: used to broadcast silently over the target positions
    with pytest.raises(ValueError, match="src_mask must be"):
        model.decode(tgt, memory, mask.float())
    assert torch.equal(model.decode(tgt, memory, mask), model(src, tgt))


def test_decoding_api_errors_name_the_argument(tiny_model, tokens):
    model = tiny_model()
    with pytest.raises(TypeError, match=r"src must hold integer token ids \(torch.long\), got dtype torch.uint8"):
        model(tokens(2, 3, 23).to(torch.uint8), tokens(2, 3, 19))
    with pytest.raises(ValueError, match="device must be .*'gpu0'"):
        translate_ids(model, [[5, 3]], device="gpu0")
    memory, mask = model.encode(tokens(2, 3, 23))
    cache = model.new_cache()
    model.decode(tokens(2, 1, 19), memory, mask, cache=cache)
    with pytest.raises(ValueError, match="cache holds 2 rows but query has batch size 1"):
        model.decode(tokens(1, 1, 19), memory[:1], mask[:1], cache=cache)


@pytest.mark.parametrize("vocab", [7, 127, 128, 129, 6190, 8000])
def test_the_most_probable_token_is_argmax_first_among_ties(vocab):
    """Greedy's block-by-block search (best block of 64 scores, then the best inside it) picks argmax's index for any
    vocabulary size (short last block or not), with ties across and inside blocks and -inf scores."""
    from companion.decode.greedy import _most_probable

    generator = torch.Generator().manual_seed(vocab)
    logits = torch.randn(12, vocab, generator=generator)
    logits[:, :2] = float("-inf")  # <pad>, <bos> as the step functions return them
    logits[0] = 0.0  # every score tied: the first finite one
    logits[0, :2] = float("-inf")
    if vocab > 100:
        logits[1, [5, vocab - 1]] = 50.0  # a tie across blocks: the first one
        logits[2, [70, 71]] = 50.0  # a tie inside a block
        logits[3, vocab - 1] = 50.0  # the maximum in the (maybe short) last block
    logits[4] = float("-inf")  # no finite score: index 0, as argmax
    assert torch.equal(_most_probable(logits), logits.argmax(dim=-1))
    assert torch.equal(_most_probable(logits[5:6]), logits[5:6].argmax(dim=-1))  # one row
    columns_first = logits.t().contiguous().t()  # the same scores, stored column by column (a custom step's output)
    assert torch.equal(_most_probable(columns_first), logits.argmax(dim=-1))


@pytest.mark.parametrize("n", [10, 128, 200, 24760, 32000])
@pytest.mark.parametrize("k", [1, 2, 8])
def test_beam_candidates_are_topk_found_block_by_block(n, k):
    """Beam search's block-by-block top-k gives torch.topk's values and positions (no ties in random scores),
    with -inf entries (empty beams), maxima in a short last block, and rows with fewer than k finite scores."""
    from companion.decode._blocks import top_k

    generator = torch.Generator().manual_seed(n + k)
    scores = torch.randn(6, n, generator=generator)
    scores[1, n // 2 :] = float("-inf")  # an empty half (a beam that is not alive)
    scores[2, -3:] = 40.0 + torch.arange(3.0)  # the best ones at the very end
    scores[3, :] = float("-inf")
    scores[3, 0], scores[3, n - 1] = 1.0, 2.0  # two finite scores only: the rest of the top k are -inf
    values, columns = top_k(scores, k)
    expected_values, expected_columns = scores.topk(k, dim=-1)
    assert torch.equal(values, expected_values)
    assert torch.equal(scores.gather(1, columns), values), "the columns hold the values"
    finite = torch.isfinite(expected_values)
    assert torch.equal(columns[finite], expected_columns[finite])
    assert bool((columns < n).all())
    columns_first = scores.t().contiguous().t()  # the same scores, stored column by column
    assert torch.equal(top_k(columns_first, k)[0], expected_values)
