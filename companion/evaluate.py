"""Scoring translations: corpus BLEU and chrF with sacreBLEU, and teacher-forced perplexity.

BLEU here is always sacreBLEU's corpus BLEU on detokenized text against the raw reference sentences, reported
with its signature (reference count, casing, tokenizer, smoothing, version) so that numbers can be compared
across papers and runs. It is computed on translations the model *generated* (greedy or beam search), never on
teacher-forced predictions. Perplexity is the teacher-forced measure: ``exp`` of the mean negative
log-likelihood per target token, padding excluded.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._extras import import_optional
from ._validation import check_bool
from .data import Batch, Tokenizer
from .decode import check_alphas, translate, translate_alphas
from .model import Transformer, eval_mode

__all__ = [
    "corpus_bleu",
    "tokenized_bleu",
    "corpus_chrf",
    "perplexity",
    "evaluate_translation",
    "ALPHA_GRID",
    "AlphaChoice",
    "choose_alpha",
    "alpha_choice",
]

# The length penalties choose_alpha tries by default: the paper's 0.6, then 1.0 and every half up to 3. At 0.6 the
# book's small models write translations 4-6% shorter than the references on the validation split
# (bench/results/decoding_select_2026-12-06.json), so the better values for them lie above it.
ALPHA_GRID = (0.6, 1.0, 1.5, 2.0, 2.5, 3.0)


def _check_corpus(hypotheses: object, references: object) -> tuple[list[str], list[str]]:
    """Two equally long, non-empty lists of strings (one reference per hypothesis)."""
    checked = []
    for name, texts in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise TypeError(f"{name} must be a list of strings, got {type(texts).__name__}")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{name}[{i}] must be a str, got {type(text).__name__}")
        checked.append(list(texts))
    if len(checked[0]) != len(checked[1]):
        raise ValueError(
            f"hypotheses and references must have the same length, got {len(checked[0])} and {len(checked[1])}"
        )
    if not checked[0]:
        raise ValueError("hypotheses must not be empty")
    return checked[0], checked[1]


# Target languages written without spaces between words, for which sacreBLEU's default tokenizer (13a) would see a
# whole sentence as one word: Chinese, Japanese and Korean get the tokenizer sacreBLEU itself picks for them
# (BLEU(trg_lang=...): zh, ja-mecab, ko-mecab); Thai, Lao, Khmer and Burmese, for which it has none that works
# offline, are scored over characters.
_SACREBLEU_OWN_TOKENIZER = ("zh", "ja", "ko")
_CHARACTER_BLEU = ("th", "lo", "km", "my")


def _bleu_metric(language: str | None = None):
    """sacreBLEU's ``BLEU`` for translations into ``language`` (an ISO code such as ``"de"`` or ``"zh"``; None:
    unknown): tokenizer 13a, except for the languages above. Japanese and Korean need sacreBLEU's extra
    (``pip install "sacrebleu[ja]"`` or ``"sacrebleu[ko]"``); without it they are scored over characters, with a
    warning. The tokenizer is in the signature (``tok:zh``, ``tok:char``)."""
    BLEU = import_optional("sacrebleu.metrics", "scoring BLEU").BLEU
    if language is None:
        return BLEU()
    if not isinstance(language, str):
        raise TypeError(f"language must be a language code such as 'de', got {type(language).__name__}")
    base = language.replace("_", "-").split("-")[0].lower()  # zh-Hans, zh_CN -> zh
    if base in _CHARACTER_BLEU:
        return BLEU(tokenize="char")
    if base not in _SACREBLEU_OWN_TOKENIZER:
        return BLEU()
    try:
        return BLEU(trg_lang=base)
    except RuntimeError as error:  # sacreBLEU: "... requires extra dependencies ... pip install sacrebleu[ja]"
        if "pip install" not in str(error):
            raise
        warnings.warn(
            f'BLEU into {language!r}: sacreBLEU\'s tokenizer for it needs `pip install "sacrebleu[{base}]"`; '
            "scoring BLEU over characters instead (tok:char in the signature)",
            stacklevel=3,
        )
        return BLEU(tokenize="char")


def corpus_bleu(
    hypotheses: Sequence[str], references: Sequence[str], *, language: str | None = None
) -> tuple[float, str]:
    """sacreBLEU corpus BLEU (0-100) of detokenized ``hypotheses`` against one reference each.

    ``language`` is the target language's code: for Chinese, Japanese and Korean it selects the tokenizer
    sacreBLEU uses for them (``tok:zh``, ``tok:ja-mecab``, ``tok:ko-mecab``), for Thai, Lao, Khmer and Burmese
    character n-grams (``tok:char``): the default tokenizer, 13a, splits words at spaces and punctuation and
    would see a whole sentence of these scripts as one word. For any other language, or None, 13a.

    Returns ``(score, signature)``, e.g. ``(35.2, "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0")``.
    """
    hypotheses, references = _check_corpus(hypotheses, references)
    metric = _bleu_metric(language)
    return float(metric.corpus_score(hypotheses, [references]).score), str(metric.get_signature())


def tokenized_bleu(
    hypotheses: Sequence[str], references: Sequence[str], language: str, *, lowercase: bool = False
) -> tuple[float, str]:
    """Tokenized BLEU, as the papers of 2017 reported it: BLEU over word tokens, not over detokenized text.

    The exact definition: each hypothesis and reference is split into words by spaCy's rule-based tokenizer for
    ``language`` (the target language; ``companion.data.tokenizers.spacy_tokenizer``, the rules of the
    word tokenizer), the words are joined with single spaces, and sacreBLEU scores these strings with
    ``tokenize="none"`` (no further splitting), case-sensitive, exponential smoothing, one reference: the
    computation of Moses' ``multi-bleu.perl`` on tokenized text. ``lowercase=True`` compares the words
    case-insensitively (``multi-bleu.perl -lc``), as the Multi30k literature usually reports BLEU. It is not
    comparable to :func:`corpus_bleu` (tokenized BLEU is usually higher), nor exactly to a paper's number when the
    paper used another tokenizer (the Transformer paper: Moses' tokenizer and, for en-de, compound splitting).
    Chinese or Japanese text is split into characters by spaCy's defaults, which makes this a character-level BLEU.

    Returns ``(score, signature)``; the signature is sacreBLEU's (``tok:none``) followed by
    ``|pretok:spacy-<language>``.
    """
    BLEU = import_optional("sacrebleu.metrics", "scoring BLEU").BLEU

    from .data.tokenizers import spacy_tokenizer

    hypotheses, references = _check_corpus(hypotheses, references)
    split = spacy_tokenizer(language)

    def tokenized(texts: list[str]) -> list[str]:
        return [" ".join(token.text for token in split(text) if not token.is_space) for text in texts]

    check_bool("lowercase", lowercase)
    metric = BLEU(tokenize="none", lowercase=lowercase, force=True)  # tokenized on purpose: no detokenize warning
    score = metric.corpus_score(tokenized(hypotheses), [tokenized(references)])
    return float(score.score), f"{metric.get_signature()}|pretok:spacy-{language}"


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """sacreBLEU corpus chrF (character n-gram F-score, 0-100); returns ``(score, signature)``."""
    CHRF = import_optional("sacrebleu.metrics", "scoring chrF").CHRF

    hypotheses, references = _check_corpus(hypotheses, references)
    metric = CHRF()
    return float(metric.corpus_score(hypotheses, [references]).score), str(metric.get_signature())


@torch.no_grad()
def perplexity(model: Transformer, batches: Iterable[Batch], device: torch.device | str | None = None) -> float:
    """Teacher-forced perplexity ``exp(sum of -log p(target token) / number of target tokens)``.

    Each :class:`~companion.data.batching.Batch` supplies ``src [batch, n]``, ``tgt_in`` and ``tgt_out [batch, t]``;
    positions where ``tgt_out`` is padding are ignored. Runs with dropout off (the model's mode is restored).
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    total_nll, total_tokens = 0.0, 0
    with eval_mode(model):
        for batch in batches:
            if not isinstance(batch, Batch):
                raise TypeError(f"batches must hold companion Batch objects, got {type(batch).__name__}")
            batch = batch.to(device)
            logits = model(batch.src, batch.tgt_in).float()
            total_nll += float(
                F.cross_entropy(
                    logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=model.config.pad_id, reduction="sum"
                )
            )
            total_tokens += int((batch.tgt_out != model.config.pad_id).sum())
    if total_tokens == 0:
        raise ValueError("batches hold no target tokens: perplexity is undefined")
    return math.exp(total_nll / total_tokens)


def _target_language(language: str | None, tgt_tokenizer: Tokenizer) -> str | None:
    """``language``, else the target tokenizer's language where it records one (a word tokenizer does)."""
    return language if language is not None else getattr(tgt_tokenizer, "language", None)


def evaluate_translation(
    model: Transformer,
    pairs: Sequence[tuple[str, str]],
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    batch_size: int = 64,
    device: torch.device | str | None = None,
    language: str | None = None,
) -> dict:
    """Translate the sources of ``pairs`` (raw text) and score them against the raw targets.

    ``language``: the target language, for BLEU's tokenizer (:func:`corpus_bleu`; default: the target
    tokenizer's language where it records one, as a word tokenizer does).
    Returns ``{"bleu", "bleu_signature", "chrf", "chrf_signature", "hypotheses"}`` (hypotheses in the order
    of ``pairs``).
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("pairs must not be empty")
    sources = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    hypotheses = translate(
        model,
        sources,
        src_tokenizer,
        tgt_tokenizer,
        beam_size=beam_size,
        alpha=alpha,
        batch_size=batch_size,
        device=device,
    )
    bleu, bleu_signature = corpus_bleu(hypotheses, references, language=_target_language(language, tgt_tokenizer))
    chrf, chrf_signature = corpus_chrf(hypotheses, references)
    return {
        "bleu": bleu,
        "bleu_signature": bleu_signature,
        "chrf": chrf,
        "chrf_signature": chrf_signature,
        "hypotheses": hypotheses,
    }


@dataclass(frozen=True)
class AlphaChoice:
    """What :func:`choose_alpha` found: the chosen ``alpha`` and, for every ``alpha`` tried, the corpus BLEU
    (``bleu``, sacreBLEU, rounded to 2 decimals as reported) and the translations' length over the references'
    (``length_ratio``, sacreBLEU's ``sys_len / ref_len``: below 1 the brevity penalty applies)."""

    alpha: float
    beam_size: int
    bleu: dict[float, float]
    length_ratio: dict[float, float]
    sentences: int
    bleu_signature: str

    def to_dict(self) -> dict:
        """Plain values (alphas as strings, for JSON): what ``companion choose-alpha`` records in a checkpoint."""
        return {
            "alpha": self.alpha,
            "beam_size": self.beam_size,
            "bleu": {f"{a:g}": b for a, b in self.bleu.items()},
            "length_ratio": {f"{a:g}": r for a, r in self.length_ratio.items()},
            "sentences": self.sentences,
            "bleu_signature": self.bleu_signature,
        }


def choose_alpha(
    model: Transformer,
    pairs: Sequence[tuple[str, str]],
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    *,
    alphas: Sequence[float] = ALPHA_GRID,
    beam_size: int = 4,
    batch_size: int = 64,
    device: torch.device | str | None = None,
    language: str | None = None,
) -> AlphaChoice:
    """The length penalty ``alpha`` under which beam search scores the highest corpus BLEU on ``pairs``.

    ``pairs`` are ``(source, reference)`` texts of a held-out split: choose on the validation split and report
    the test set with the choice, never the other way round. One beam search serves every ``alpha``
    (:func:`companion.decode.translate_alphas`); the translations are scored by :func:`alpha_choice` (BLEU with
    the tokenizer for ``language``, as in :func:`evaluate_translation`). Returns an :class:`AlphaChoice`.
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("pairs must not be empty")
    checked = check_alphas(alphas)
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    _check_corpus(sources, references)
    outputs = translate_alphas(
        model, sources, src_tokenizer, tgt_tokenizer, alphas=checked, beam_size=beam_size, batch_size=batch_size,
        device=device,
    )  # fmt: skip
    language = _target_language(language, tgt_tokenizer)
    return alpha_choice(outputs, references, beam_size=beam_size, language=language)


def alpha_choice(
    outputs: Mapping[float, Sequence[str]],
    references: Sequence[str],
    *,
    beam_size: int,
    language: str | None = None,
) -> AlphaChoice:
    """Score each ``alpha``'s translations ``outputs[alpha]`` against ``references`` with sacreBLEU and choose:
    the highest BLEU (rounded to 2 decimals, as reported) wins, the smaller ``alpha`` where two tie (the paper's 0.6
    when the grid holds it and nothing beats it). ``beam_size`` is the search's, recorded with the choice;
    ``language``, the target language, selects BLEU's tokenizer as in :func:`corpus_bleu`. For
    translations made elsewhere (``bench/multi30k_gpu.py`` decodes on a machine without sacreBLEU)."""
    if not isinstance(outputs, Mapping) or not outputs:
        raise ValueError(f"outputs must map each alpha to its translations, got {outputs!r:.80}")
    checked = check_alphas(list(outputs))
    metric = _bleu_metric(language)
    scores = {}
    for alpha in checked:
        hypotheses, refs = _check_corpus(outputs[alpha], references)
        scores[alpha] = metric.corpus_score(hypotheses, [refs])
    bleu = {alpha: round(float(score.score), 2) for alpha, score in scores.items()}
    ratio = {alpha: round(score.sys_len / max(score.ref_len, 1), 3) for alpha, score in scores.items()}
    best = max(checked, key=lambda alpha: (bleu[alpha], -alpha))
    return AlphaChoice(best, beam_size, bleu, ratio, len(references), str(metric.get_signature()))
