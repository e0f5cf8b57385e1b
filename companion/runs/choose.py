"""``companion choose-alpha``: choose beam search's length penalty on a held-out split and record it in the checkpoint.

The paper fixed ``alpha = 0.6`` for its models; for the book's small ones it is not the best (their translations
come out a few percent shorter than the references at 0.6: chapter 8). This command translates the validation
split once with beam search, re-ranks every sentence's finished hypotheses under each ``alpha`` of a grid
(:func:`companion.evaluate.choose_alpha`: one search serves every ``alpha``), and writes the best one into the
checkpoint file (:func:`companion.checkpoint.record_decoding`). From then on ``companion translate`` and
``companion evaluate`` decode that checkpoint with it unless ``--alpha`` says otherwise. Only a validation split
or the user's own held-out files are accepted: a setting chosen on the test set would make its score a
selection, not a measurement.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from typing import Any

from .._validation import check_integer
from .._version import __version__
from ..checkpoint import record_decoding
from ..decode import MAX_BEAM_SIZE, check_alphas
from ..devices import keep_freed_memory
from ..errors import ConfigError, RunError
from ..evaluate import ALPHA_GRID, choose_alpha
from ..options import check_declared, label, option
from ..pretrained import shipped_direction
from .infer import MAX_BATCH_SIZE, PAPER_BEAM_SIZE, check_held_out_options, load_for_inference, scoring_pairs

__all__ = ["ChooseAlphaConfig", "choose_alpha_run"]


@dataclass
class ChooseAlphaConfig:
    """Options of ``companion choose-alpha``: the checkpoint, the held-out sentences, the grid and the search."""

    checkpoint: str = option(
        None,
        "the checkpoint file, or a run folder (its averaged.pt if present, else its latest checkpoint), to choose "
        "for; the choice is written into that file",
        metavar="PATH",
        required=True,
    )
    split: str = option(
        "valid",
        "the split of the run's corpus to choose on: its validation split (never a test set: a setting chosen on "
        "it would make its score a selection, not a measurement) (default: {default})",
        choices=["valid"],
    )
    data_dir: str | None = option(
        None,
        "a folder of {split}.{lang} files in place of the run's (as for companion evaluate)",
        metavar="DIR",
    )
    src_file: str | None = option(
        None, "choose on these source sentences (UTF-8, one per line) instead of the split", metavar="FILE"
    )
    ref_file: str | None = option(None, "the reference translations of --src-file, line by line", metavar="FILE")
    limit: int | None = option(None, "use only the first N sentences", metavar="N")
    alphas: list[float] = option(
        ALPHA_GRID,
        "the length penalties to try (default: " + " ".join(f"{a:g}" for a in ALPHA_GRID) + ")",
        metavar="A",
        nargs="+",
    )
    beam_size: int = option(PAPER_BEAM_SIZE, "beam width the choice is made for (default: {default})", metavar="K")
    batch_size: int = option(64, "sentences decoded together (default: {default})", metavar="N")
    device: str = option(
        "auto", "auto (CUDA > MPS > CPU), cpu, cuda, cuda:N or mps (default: {default})", metavar="DEV"
    )
    dry_run: bool = option(False, "print the choice without writing it into the checkpoint")

    def __post_init__(self) -> None:
        cls = type(self)
        check_declared(self)
        if isinstance(self.checkpoint, os.PathLike):
            self.checkpoint = os.fspath(self.checkpoint)
        if not isinstance(self.checkpoint, str) or not self.checkpoint:
            raise ConfigError(f"{label(cls, 'checkpoint')} must be a path, got {self.checkpoint!r}")
        check_integer(label(cls, "beam_size"), self.beam_size, minimum=2, maximum=MAX_BEAM_SIZE, error=ConfigError)
        check_integer(label(cls, "batch_size"), self.batch_size, minimum=1, maximum=MAX_BATCH_SIZE, error=ConfigError)
        check_held_out_options(self)
        self.alphas = _alphas(label(cls, "alphas"), self.alphas)


def _alphas(name: str, values: Any) -> list[float]:
    """``values`` (numbers, or the command line's words) as a checked list of distinct alphas."""
    if isinstance(values, (list, tuple)):
        numbers = []
        for value in values:
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    raise ConfigError(f"{name} must be numbers, got {value!r}") from None
            numbers.append(value)
        values = numbers
    try:
        return check_alphas(values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{name}: {error}") from None


def choose_alpha_run(config: ChooseAlphaConfig) -> dict[str, Any]:
    """Choose ``alpha`` for ``config.checkpoint`` on the held-out sentences and, unless ``dry_run``, record it in
    the checkpoint file. Returns the record (:meth:`companion.evaluate.AlphaChoice.to_dict` plus ``chosen_on``,
    ``date`` and ``companion_version``) with ``checkpoint`` (the file), ``direction`` and ``recorded``."""
    keep_freed_memory()  # companion._allocator: faster decoding steps on CPU
    loaded = load_for_inference(config.checkpoint, config.device)
    shipped = None if config.dry_run else shipped_direction(loaded.path)
    if shipped is not None:  # before the search: nothing to record into
        raise RunError(
            f"{loaded.path} is the book's shipped {shipped} model, where load_pretrained finds it and checks its "
            f"SHA-256: its setting lives in companion.pretrained.SHIPPED_ALPHA instead. Record a choice in a copy "
            "of the file elsewhere, or pass --dry-run to see the choice only"
        )
    src, tgt, what, pairs = scoring_pairs(config, loaded.checkpoint, "choose-alpha")
    choice = choose_alpha(
        loaded.model, pairs, loaded.src_tokenizer, loaded.tgt_tokenizer,
        alphas=config.alphas, beam_size=config.beam_size, batch_size=config.batch_size, device=loaded.device,
        language=tgt,
    )  # fmt: skip
    record = {
        **choice.to_dict(),
        "chosen_on": what,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "companion_version": __version__,
    }
    if not config.dry_run:
        record_decoding(loaded.path, record)
    return {**record, "checkpoint": str(loaded.path), "direction": f"{src}->{tgt}", "recorded": not config.dry_run}
