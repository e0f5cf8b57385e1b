"""Tokenizers: special tokens with fixed ids, spaCy word vocabularies and trained subword (BPE) models.

Every tokenizer shares the special ids ``<pad>=0, <unk>=1, <bos>=2, <eos>=3``. :class:`WordTokenizer` splits
text with spaCy's rule-based tokenizer (``spacy.blank``, no model download) and keeps a word vocabulary built
from the training texts only. :class:`SubwordTokenizer` trains a byte-pair-encoding (or unigram) model with
Hugging Face ``tokenizers``, meant to be shared by source and target as in the paper. Both turn text into ids
and ids back into detokenized text (for sacreBLEU), and both serialise to a JSON-friendly dict so that a
checkpoint can carry its vocabulary. ``encode("")`` is ``[]``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from typing import Any

import torch

from .._extras import import_optional
from .._validation import check_id_list, check_integer, check_positive_int

__all__ = [
    "PAD",
    "UNK",
    "BOS",
    "EOS",
    "PAD_ID",
    "UNK_ID",
    "BOS_ID",
    "EOS_ID",
    "SPECIAL_TOKENS",
    "Tokenizer",
    "WordTokenizer",
    "SubwordTokenizer",
    "tokenizer_from_dict",
]

# -- special tokens ----------------------------------------------------------------------------------------

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)  # position in this tuple == id

# -- tokenizers --------------------------------------------------------------------------------------------


class Tokenizer:
    """Common interface: text <-> ids, with the special ids fixed to ``PAD_ID, UNK_ID, BOS_ID, EOS_ID``.

    ``encode`` never adds ``<bos>``/``<eos>`` (batching does that). ``decode`` stops at the first ``<eos>``,
    skips ``<pad>`` and ``<bos>``, and writes ``<unk>`` for unknown tokens.
    """

    pad_id: int = PAD_ID
    unk_id: int = UNK_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """Text -> token ids (no ``<bos>``/``<eos>``); ``""`` gives ``[]``."""
        raise NotImplementedError

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Many texts at once (faster than calling :meth:`encode` in a loop)."""
        return [self.encode(text) for text in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids -> detokenized text (stops at ``<eos>``, skips ``<pad>``/``<bos>``)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description from which :func:`tokenizer_from_dict` rebuilds this tokenizer."""
        raise NotImplementedError

    def _content_ids(self, ids: Sequence[int] | torch.Tensor) -> list[int]:
        """The ids up to the first ``<eos>``, without ``<pad>``/``<bos>``; checks the id range."""
        kept = []
        for i in check_id_list("ids", ids, self.vocab_size):
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                kept.append(i)
        return kept


def _check_texts(name: str, texts: object) -> list[str]:
    """A list of strings (any iterable of ``str``), or a TypeError naming the argument."""
    if isinstance(texts, str):
        raise TypeError(f"{name} must be an iterable of strings, got a single string")
    if not isinstance(texts, Iterable):
        raise TypeError(f"{name} must be an iterable of strings, got {type(texts).__name__}")
    items: list[object] = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(text).__name__}")
        _check_unicode(f"{name}[{i}]", text)
    return [str(text) for text in items]


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return _check_unicode("text", text)


def _check_unicode(name: str, text: str) -> str:
    """``text`` unchanged, or a ValueError if it holds lone surrogates (what undecodable bytes become when
    they are read with ``errors="surrogateescape"``, as Python reads stdin in a C locale)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{name} is not valid Unicode text: character {text[error.start]!r} at position "
            f"{error.start} is a lone surrogate (bytes that were not UTF-8?)"
        ) from None
    return text


def _iter_texts(name: str, texts: object) -> Iterator[str]:
    """Like :func:`_check_texts` but lazy: the texts one at a time (checked as they come), so that a tokenizer
    trains on a corpus streamed from disk without holding it in a list."""
    if isinstance(texts, str):
        raise TypeError(f"{name} must be an iterable of strings, got a single string")
    if not isinstance(texts, Iterable):
        raise TypeError(f"{name} must be an iterable of strings, got {type(texts).__name__}")

    def checked() -> Iterator[str]:
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{name}[{i}] must be a str, got {type(text).__name__}")
            yield _check_unicode(f"{name}[{i}]", text)

    return checked()


# Languages whose spaCy tokenizer needs a package of its own (spacy.blank raises ImportError without it).
_SPACY_LANGUAGE_PACKAGES = {
    "ja": 'SudachiPy and its dictionary: pip install "spacy[ja]" (sudachipy, sudachidict_core)',
    "ko": 'mecab-ko, mecab-ko-dic and natto-py: pip install "spacy[ko]" (natto-py) plus the mecab-ko library',
    "th": 'PyThaiNLP: pip install "spacy[th]" (pythainlp)',
    "vi": "Pyvi: pip install pyvi",
    "zh": "jieba or spacy-pkuseg (pip install jieba / spacy-pkuseg), depending on the segmenter configured",
}


@cache
def spacy_tokenizer(language: str):
    """spaCy's rule-based tokenizer for ``language`` (``spacy.blank``: no trained model, no download).

    A code spaCy does not know is a ValueError naming it; a language whose tokenizer needs an extra package
    (ja, ko, th, vi, ...) is an ImportError naming that package. (Languages without spaCy rules can use the
    shared :class:`SubwordTokenizer`, which works for any script.)"""
    import spacy
    from spacy.util import get_lang_class

    if not isinstance(language, str):
        raise TypeError(f"language must be a language code (str), got {type(language).__name__}")
    try:
        get_lang_class(language)
    except Exception as error:  # spaCy raises ImportError (E048) or its own errors for unknown codes
        raise ValueError(
            f"language {language!r} is not a language code spaCy knows (e.g. 'en', 'de', 'fr', 'ru', 'zh'); "
            "use its ISO 639-1 code, 'xx' for spaCy's multi-language rules, or a SubwordTokenizer"
        ) from error
    try:
        return spacy.blank(language).tokenizer
    except ImportError as error:
        needs = _SPACY_LANGUAGE_PACKAGES.get(language, "the package spaCy names below")
        raise ImportError(
            f"spaCy's tokenizer for {language!r} needs {needs} (or use a SubwordTokenizer, which needs no "
            f"language package). spaCy says: {error}"
        ) from error


class WordTokenizer(Tokenizer):
    """Word-level tokenizer: spaCy's rule-based tokenizer plus a vocabulary from the training texts.

    Detokenization. Token ids do not record the spaces between tokens, so the tokenizer learns, from the
    training texts, which tokens usually stick to their left neighbour (``.``, ``,``, ``'s``, ``n't``) and
    which to their right one (``(``, ``„``), and joins with a space everywhere else. Measured on the Multi30k
    validation set: rebuilding each sentence from its spaCy tokens reproduces 99.9% (English) and 99.8%
    (German) of the sentences exactly; the rest differ only in spacing, which sacreBLEU's tokenizer ignores.
    """

    def __init__(
        self,
        language: str,
        itos: Sequence[str],
        glue_left: Iterable[str] = (),
        glue_right: Iterable[str] = (),
        min_freq: int = 1,
    ) -> None:
        """Use :meth:`build` to create one from texts; this constructor takes a finished vocabulary.

        ``itos`` lists the tokens by id and must start with ``<pad> <unk> <bos> <eos>``.
        """
        if not isinstance(language, str):
            raise TypeError(f"language must be a str, got {type(language).__name__}")
        itos = list(itos)
        if tuple(itos[:4]) != SPECIAL_TOKENS:
            raise ValueError(f"itos must start with the special tokens {list(SPECIAL_TOKENS)}, got {itos[:4]}")
        if len(set(itos)) != len(itos):
            raise ValueError("itos must not hold the same token twice")
        self.language = language
        self.itos = itos
        self.stoi = {token: i for i, token in enumerate(itos)}
        self.glue_left = frozenset(glue_left)
        self.glue_right = frozenset(glue_right)
        self.min_freq = min_freq
        self._tokenizer = spacy_tokenizer(language)

    # -- building -------------------------------------------------------------------------------------------
    @classmethod
    def build(
        cls, texts: Iterable[str], language: str, min_freq: int = 1, max_size: int | None = None
    ) -> WordTokenizer:
        """Build the vocabulary from ``texts`` (the training split only).

        Tokens seen fewer than ``min_freq`` times are left out (they become ``<unk>``). ``max_size`` caps the
        vocabulary size, specials included, keeping the most frequent tokens. Ids are assigned by decreasing
        frequency, ties broken alphabetically, so the same texts always give the same ids.
        """
        texts = _iter_texts("texts", texts)
        check_positive_int("min_freq", min_freq)
        if max_size is not None:
            check_integer("max_size (None, or more than the special tokens)", max_size, minimum=len(SPECIAL_TOKENS) + 1)
        counts, neighbours, touching = _count_tokens_and_glue(spacy_tokenizer(language), texts)
        ranked = sorted(
            (t for t, c in counts.items() if c >= min_freq and t not in SPECIAL_TOKENS), key=lambda t: (-counts[t], t)
        )
        if max_size is not None:
            ranked = ranked[: max_size - len(SPECIAL_TOKENS)]
        glue_left, glue_right = _learn_glue(neighbours, touching)
        kept = set(ranked)
        return cls(language, list(SPECIAL_TOKENS) + ranked, glue_left & kept, glue_right & kept, min_freq)

    # -- the interface --------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def tokenize(self, text: str) -> list[str]:
        """Text -> spaCy token strings (whitespace tokens dropped)."""
        return [t.text for t in self._tokenizer(_check_text(text)) if not t.is_space]

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(token, UNK_ID) for token in self.tokenize(text)]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        texts = _check_texts("texts", texts)
        return [
            [self.stoi.get(t.text, UNK_ID) for t in doc if not t.is_space]
            for doc in self._tokenizer.pipe(texts, batch_size=1000)
        ]

    def decode(self, ids: Sequence[int]) -> str:
        tokens = [self.itos[i] for i in self._content_ids(ids)]
        return self.detokenize(tokens)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Join tokens with spaces, except where the learned glue says they touch.

        A straight double quote ``"`` alternates: the first of a pair sticks to the token after it, the
        second to the token before it.
        """
        pieces: list[str] = []
        quote_open = False
        previous_glues_right = False
        for i, token in enumerate(tokens):
            if token == _STRAIGHT_QUOTE:
                quote_open = not quote_open
                glues_left, glues_right = not quote_open, quote_open
            else:
                glues_left, glues_right = token in self.glue_left, token in self.glue_right
            if i and not (glues_left or previous_glues_right):
                pieces.append(" ")
            pieces.append(token)
            previous_glues_right = glues_right
        return "".join(pieces)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "word",
            "language": self.language,
            "itos": list(self.itos),
            "glue_left": sorted(self.glue_left),
            "glue_right": sorted(self.glue_right),
            "min_freq": self.min_freq,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> WordTokenizer:
        itos = values["itos"]
        if not isinstance(itos, list) or not all(isinstance(token, str) for token in itos):
            raise ValueError("values['itos'] must be a list of token strings")
        for key in ("glue_left", "glue_right"):
            glue = values.get(key, [])
            if not isinstance(glue, list) or not all(isinstance(token, str) for token in glue):
                raise ValueError(f"values[{key!r}] must be a list of token strings")
        return cls(
            values["language"],
            itos,
            values.get("glue_left", ()),
            values.get("glue_right", ()),
            values.get("min_freq", 1),
        )

    def __repr__(self) -> str:
        return f"WordTokenizer(language={self.language!r}, vocab_size={self.vocab_size})"


def _count_tokens_and_glue(tokenizer, texts: Iterable[str]) -> tuple[Counter, Counter, Counter]:
    """Token counts, and for neighbouring tokens ``(a, b)`` how often they occur and how often they touch
    (no space between them), from the offsets spaCy records."""
    counts: Counter[str] = Counter()
    neighbours: Counter[tuple[str, str]] = Counter()
    touching: Counter[tuple[str, str]] = Counter()
    for doc in tokenizer.pipe(texts, batch_size=1000):
        tokens = [(t.text, t.idx) for t in doc if not t.is_space]
        words = [text for text, _ in tokens]
        counts.update(words)
        neighbours.update(zip(words, words[1:]))
        touching.update(
            (a, b) for (a, start), (b, next_start) in zip(tokens, tokens[1:]) if next_start == start + len(a)
        )
    return counts, neighbours, touching


def _learn_glue(neighbours: Counter, touching: Counter) -> tuple[set[str], set[str]]:
    """Tokens that mostly touch their left neighbour, then (among the remaining neighbours) their right one.

    The right side is measured only next to tokens that do not glue left, so that a word usually followed by
    ``.`` is not mistaken for a word that sticks to what follows it.
    """

    def majority(side: int, skip: set[str]) -> set[str]:
        tally: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
        for pair, total in neighbours.items():
            if pair[1 - side] in skip:
                continue
            tally[pair[side]][0] += touching[pair]
            tally[pair[side]][1] += total
        return {token for token, (touch, total) in tally.items() if 2 * touch > total}

    glue_left = majority(1, set())
    glue_right = majority(0, glue_left)
    return glue_left, glue_right


class SubwordTokenizer(Tokenizer):
    """Subword tokenizer (byte-pair encoding or unigram) from Hugging Face ``tokenizers``.

    Spaces are kept inside the tokens as ``▁`` (as in SentencePiece) and punctuation is split off, so
    ``decode(encode(text)) == text`` for any text made of characters seen in training (the text is first
    normalised: Unicode NFC, each run of whitespace becomes one space, no leading or trailing spaces).
    Unseen characters become ``<unk>``. Train one tokenizer on source and target texts together to get the
    paper's shared vocabulary.
    """

    def __init__(self, tokenizer) -> None:
        """Wrap a trained ``tokenizers.Tokenizer`` whose ids 0-3 are ``<pad> <unk> <bos> <eos>``."""
        from tokenizers import Tokenizer as HFTokenizer

        if not isinstance(tokenizer, HFTokenizer):
            raise TypeError(f"tokenizer must be a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        ids = [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS]
        if ids != [PAD_ID, UNK_ID, BOS_ID, EOS_ID]:
            raise ValueError(f"the special tokens {list(SPECIAL_TOKENS)} must have ids 0-3, got {ids}")
        self._tokenizer = tokenizer
        self._itos: list[str] | None = None  # built at the first use of itos

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int = 8000, model: str = "bpe", min_frequency: int = 2
    ) -> SubwordTokenizer:
        """Learn a ``model`` ("bpe" or "unigram") vocabulary of ``vocab_size`` ids (specials included)."""
        from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
        from tokenizers import Tokenizer as HFTokenizer

        texts = _iter_texts("texts", texts)
        check_positive_int("vocab_size", vocab_size)
        if vocab_size <= len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size must be larger than {len(SPECIAL_TOKENS)}, got {vocab_size}")
        specials = list(SPECIAL_TOKENS)
        if model == "bpe":
            tokenizer = HFTokenizer(models.BPE(unk_token=UNK))
            trainer: Any = trainers.BpeTrainer(
                vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials, show_progress=False
            )
        elif model == "unigram":
            tokenizer = HFTokenizer(models.Unigram())
            trainer = trainers.UnigramTrainer(
                vocab_size=vocab_size, special_tokens=specials, unk_token=UNK, show_progress=False
            )
        else:
            raise ValueError(f"model must be 'bpe' or 'unigram', got {model!r}")
        tokenizer.normalizer = normalizers.Sequence(  # NFC, runs of whitespace -> one space, no outer spaces
            [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
        )
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation()])
        tokenizer.decoder = decoders.Metaspace()
        tokenizer.train_from_iterator(texts, trainer)
        return cls(tokenizer)

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size()

    @property
    def itos(self) -> list[str]:
        """The subword string of every id (as ``WordTokenizer.itos`` has the words; ``▁`` marks a preceding space)."""
        if self._itos is None:
            self._itos = [token for token, _ in sorted(self._tokenizer.get_vocab().items(), key=lambda item: item[1])]
        return self._itos

    def tokenize(self, text: str) -> list[str]:
        """Text -> subword strings (``▁`` marks a preceding space)."""
        return self._tokenizer.encode(_check_text(text)).tokens

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(_check_text(text)).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._tokenizer.encode_batch(_check_texts("texts", texts))]

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(self._content_ids(ids), skip_special_tokens=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "subword", "tokenizer": self._tokenizer.to_str()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SubwordTokenizer:
        HFTokenizer = import_optional("tokenizers", "a subword tokenizer (e.g. a shipped model's)").Tokenizer

        text = values["tokenizer"]
        if not isinstance(text, str):
            raise ValueError(f"values['tokenizer'] must be the tokenizer's JSON text, got {type(text).__name__}")
        try:
            tokenizer = HFTokenizer.from_str(text)
        except Exception as error:  # the library raises a bare Exception for malformed JSON
            raise ValueError(f"values['tokenizer'] is not a valid tokenizers JSON ({str(error)[:200]})") from None
        return cls(tokenizer)

    def __repr__(self) -> str:
        return f"SubwordTokenizer(vocab_size={self.vocab_size})"


_STRAIGHT_QUOTE = '"'  # opens and closes alike, so glue alternates (see WordTokenizer.detokenize)

_TOKENIZER_TYPES = {"word": WordTokenizer, "subword": SubwordTokenizer}


def tokenizer_from_dict(values: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from :meth:`Tokenizer.to_dict` output (e.g. stored in a checkpoint)."""
    if not isinstance(values, dict):
        raise TypeError(f"values must be a dict from Tokenizer.to_dict(), got {type(values).__name__}")
    kind = values.get("type")
    if kind not in _TOKENIZER_TYPES:
        raise ValueError(f"values['type'] must be one of {sorted(_TOKENIZER_TYPES)}, got {kind!r}")
    try:
        return _TOKENIZER_TYPES[kind].from_dict(values)  # type: ignore[attr-defined]
    except KeyError as missing:
        raise ValueError(f"tokenizer dict of type {kind!r} lacks the key {missing}") from None
