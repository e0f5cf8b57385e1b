"""Text-to-text and id-to-id translation: length-sorted batches through greedy or beam search."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TypeVar, overload

import torch

from .._validation import check_integer, check_number, check_positive_int
from ..data import BOS_ID, EOS_ID, Tokenizer, pad_sequences
from ..data.tokenizers import _check_texts
from ..devices import resolve_device
from ..model import Transformer
from .beam import Finished, _beam_finished, best_hypothesis
from .greedy import _greedy
from .limits import _MAX_EXTRA_LEN, MAX_ALPHA, _check_id_lists, check_beam_size

_T = TypeVar("_T")


def _check_translation_options(
    model: object, beam_size: object, alpha: object, batch_size: object, bos_id: object, eos_id: object
) -> float:
    """The checks of :func:`translate` and :func:`translate_ids`; returns ``alpha`` as a float."""
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    check_positive_int("batch_size", batch_size)
    check_beam_size(beam_size)
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        check_integer(f"{name} (a target token id)", value, minimum=0, maximum=model.config.tgt_vocab_size - 1)
    return check_number("alpha", alpha, low=0, high=MAX_ALPHA)


@overload
def translate(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]; the str case comes first
    model: Transformer,
    sentences: str,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    *,
    beam_size: int = ...,
    alpha: float = ...,
    batch_size: int = ...,
    device: torch.device | str | None = ...,
    progress: bool = ...,
) -> str: ...
@overload
def translate(
    model: Transformer,
    sentences: Sequence[str],
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    *,
    beam_size: int = ...,
    alpha: float = ...,
    batch_size: int = ...,
    device: torch.device | str | None = ...,
    progress: bool = ...,
) -> list[str]: ...
def translate(
    model: Transformer,
    sentences: str | Sequence[str],
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    batch_size: int = 64,
    device: torch.device | str | None = None,
    progress: bool = False,
) -> str | list[str]:
    """Translate ``sentences`` (plain text) and return detokenized translations in the same order.

    A single string is one sentence, and its translation comes back as one string (as from
    :meth:`companion.pretrained.PretrainedModel.translate`); a list of strings gives a list.

    Sentences are sorted by length into batches of ``batch_size`` to limit padding. ``beam_size=1`` is
    greedy search. ``device`` (default: where the model is) receives the model and the batches. A source
    longer than the model's ``max_len`` is truncated with a warning; an empty sentence is decoded from
    ``<eos>`` alone. ``progress`` shows a tqdm bar of the sentences translated (on stderr; ``companion
    translate`` shows it for more than one batch when stderr is a terminal).
    """
    if isinstance(sentences, str):
        return translate(
            model, [sentences], src_tokenizer, tgt_tokenizer,
            beam_size=beam_size, alpha=alpha, batch_size=batch_size, device=device, progress=progress,
        )[0]  # fmt: skip
    sentences = _check_sentences(sentences)
    if not isinstance(tgt_tokenizer, Tokenizer):
        raise TypeError(f"tgt_tokenizer must be a companion Tokenizer, got {type(tgt_tokenizer).__name__}")
    bos_id, eos_id = tgt_tokenizer.bos_id, tgt_tokenizer.eos_id
    alpha = _check_translation_options(model, beam_size, alpha, batch_size, bos_id, eos_id)
    sources = _encode_sources(sentences, src_tokenizer, model.config.max_len)
    ids = _decode_sources(model, sources, beam_size, alpha, batch_size, device, bos_id, eos_id, progress=progress)
    return [tgt_tokenizer.decode(hypothesis) for hypothesis in ids]


def translate_ids(
    model: Transformer,
    sources: Sequence[Sequence[int]],
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    batch_size: int = 64,
    device: torch.device | str | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> list[list[int]]:
    """Decode already tokenized sources (id lists ending in ``<eos>``); returns output ids in the same order.

    The id-level half of :func:`translate`, for machines without the tokenizers' libraries: sources are sorted
    by length into batches of ``batch_size``, decoded with beam search (``beam_size=1``: greedy search) on
    ``device`` (default: where the model is), and returned without ``<bos>``/``<eos>``.
    """
    alpha = _check_translation_options(model, beam_size, alpha, batch_size, bos_id, eos_id)
    rows = _check_sources(model, sources)
    return _decode_sources(model, rows, beam_size, alpha, batch_size, device, bos_id, eos_id)


def _check_sources(model: Transformer, sources: object) -> list[list[int]]:
    """``sources`` as lists of source ids, each non-empty (at least its ``<eos>``) and within the vocabulary."""
    rows = _check_id_lists("sources", sources, model.config.src_vocab_size)
    for i, row in enumerate(rows):
        if not row:
            raise ValueError(f"sources[{i}] is empty: every source needs at least its <eos> id")
    return rows


def _decode_sources(
    model: Transformer,
    rows: list[list[int]],
    beam_size: int,
    alpha: float,
    batch_size: int,
    device: torch.device | str | None,
    bos_id: int,
    eos_id: int,
    *,
    progress: bool = False,
) -> list[list[int]]:
    """Decode checked source id lists in length-sorted batches; the outputs in the order of ``rows``."""
    if beam_size == 1:
        return _in_batches(
            model,
            rows,
            batch_size,
            device,
            lambda src: _greedy(model, src, _MAX_EXTRA_LEN, bos_id, eos_id),
            progress=progress,
        )
    found = _decode_sources_alphas(
        model, rows, [alpha], beam_size, batch_size, device, bos_id, eos_id, progress=progress
    )
    return found[alpha]


def _in_batches(
    model: Transformer,
    rows: list[list[int]],
    batch_size: int,
    device: torch.device | str | None,
    search: Callable[[torch.Tensor], list[_T]],
    *,
    progress: bool = False,
) -> list[_T]:
    """``search`` over checked source id lists in length-sorted batches (``src [batch, n]``, right-padded, on
    ``device``: default where the model is); one result per source, in the order of ``rows``. ``progress``: a
    tqdm bar of the sources done, on stderr."""
    from tqdm.auto import tqdm

    device = resolve_device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]), reverse=True)
    outputs: list[_T | None] = [None] * len(rows)
    with (
        torch.inference_mode(),  # the searches' own mode (see greedy_decode)
        tqdm(total=len(rows), unit="sentence", desc="translate", disable=not progress, dynamic_ncols=True) as bar,
    ):
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            src = pad_sequences([rows[i] for i in chunk], model.config.pad_id).to(device)
            for i, result in zip(chunk, search(src)):
                outputs[i] = result
            bar.update(len(chunk))
    return outputs  # type: ignore[return-value]  # every position was filled


def translate_alphas(
    model: Transformer,
    sentences: Sequence[str],
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    *,
    alphas: Sequence[float],
    beam_size: int = 4,
    batch_size: int = 64,
    device: torch.device | str | None = None,
) -> dict[float, list[str]]:
    """:func:`translate` at several length penalties for the price of one search: ``{alpha: translations}``.

    In this beam search ``alpha`` only ranks the finished hypotheses (which ones finish does not depend on it),
    so one search keeps every sentence's finished hypotheses and each ``alpha`` picks its winner among them:
    ``result[a]`` equals ``translate(..., beam_size=beam_size, alpha=a)``. ``alphas`` holds distinct numbers in
    ``[0, MAX_ALPHA]``; with ``beam_size=1`` (greedy search) every ``alpha`` gives the same translations. For
    choosing ``alpha`` on a validation split (:func:`companion.evaluate.choose_alpha`).
    """
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise TypeError(f"sentences must be a list of strings, got {type(sentences).__name__}")
    if not isinstance(tgt_tokenizer, Tokenizer):
        raise TypeError(f"tgt_tokenizer must be a companion Tokenizer, got {type(tgt_tokenizer).__name__}")
    checked = check_alphas(alphas)
    bos_id, eos_id = tgt_tokenizer.bos_id, tgt_tokenizer.eos_id
    _check_translation_options(model, beam_size, checked[0], batch_size, bos_id, eos_id)
    sources = _encode_sources(list(sentences), src_tokenizer, model.config.max_len)
    found = _decode_sources_alphas(model, sources, checked, beam_size, batch_size, device, bos_id, eos_id)
    return {alpha: [tgt_tokenizer.decode(ids) for ids in outputs] for alpha, outputs in found.items()}


def translate_ids_alphas(
    model: Transformer,
    sources: Sequence[Sequence[int]],
    *,
    alphas: Sequence[float],
    beam_size: int = 4,
    batch_size: int = 64,
    device: torch.device | str | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> dict[float, list[list[int]]]:
    """:func:`translate_ids` at several length penalties for the price of one search (as :func:`translate_alphas`,
    on id lists ending in ``<eos>``): ``{alpha: output ids per source}``, each equal to ``translate_ids`` at that
    ``alpha``. For machines without the tokenizers' libraries (``bench/multi30k_gpu.py``)."""
    checked = check_alphas(alphas)
    _check_translation_options(model, beam_size, checked[0], batch_size, bos_id, eos_id)
    rows = _check_sources(model, sources)
    return _decode_sources_alphas(model, rows, checked, beam_size, batch_size, device, bos_id, eos_id)


def _decode_sources_alphas(
    model: Transformer,
    rows: list[list[int]],
    alphas: list[float],
    beam_size: int,
    batch_size: int,
    device: torch.device | str | None,
    bos_id: int,
    eos_id: int,
    *,
    progress: bool = False,
) -> dict[float, list[list[int]]]:
    """One search over checked source id lists; each alpha's winners, in the order of ``rows``."""
    if beam_size == 1:
        greedy = _decode_sources(model, rows, 1, alphas[0], batch_size, device, bos_id, eos_id, progress=progress)
        return {alpha: [list(ids) for ids in greedy] for alpha in alphas}
    found: list[list[Finished]] = _in_batches(
        model,
        rows,
        batch_size,
        device,
        lambda src: _beam_finished(model, src, beam_size, _MAX_EXTRA_LEN, bos_id, eos_id),
        progress=progress,
    )
    return {alpha: [list(best_hypothesis(hypotheses, alpha).tokens) for hypotheses in found] for alpha in alphas}


def check_alphas(alphas: object) -> list[float]:
    """``alphas`` as a list of floats: a non-empty sequence of distinct numbers in ``[0, MAX_ALPHA]``."""
    if isinstance(alphas, (str, bytes)) or not isinstance(alphas, Sequence) or not alphas:
        raise ValueError(f"alphas must be a non-empty list of numbers in [0, {MAX_ALPHA}], got {alphas!r:.80}")
    checked = [check_number(f"alphas[{i}]", alpha, low=0, high=MAX_ALPHA) for i, alpha in enumerate(alphas)]
    repeated = sorted({alpha for alpha in checked if checked.count(alpha) > 1})
    if repeated:
        raise ValueError(f"alphas must be distinct, got {repeated[0]} more than once")
    return checked


def _check_sentences(sentences: object) -> list[str]:
    """``sentences`` as a list, or a TypeError naming it: an ordered collection of strings (a list, a tuple, the
    lines of a file); bytes, a mapping or a set are refused rather than read as numbers or keys in no set order."""
    if isinstance(sentences, (bytes, bytearray, Mapping, AbstractSet)) or not isinstance(sentences, Iterable):
        raise TypeError(f"sentences must be a string or a list of strings, got {type(sentences).__name__}")
    return _check_texts("sentences", sentences)


def _encode_sources(sentences: list[str], tokenizer: Tokenizer, max_len: int) -> list[list[int]]:
    """Token ids + ``<eos>`` per sentence, truncated (with one warning) to ``max_len`` ids."""
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"src_tokenizer must be a companion Tokenizer, got {type(tokenizer).__name__}")
    encoded = [ids + [tokenizer.eos_id] for ids in tokenizer.encode_batch(sentences)]
    too_long = sum(len(ids) > max_len for ids in encoded)
    if too_long:
        warnings.warn(
            f"translate: truncated {too_long} source sentence(s) to the model's max_len={max_len} tokens", stacklevel=3
        )
        encoded = [ids[: max_len - 1] + [tokenizer.eos_id] if len(ids) > max_len else ids for ids in encoded]
    return encoded
