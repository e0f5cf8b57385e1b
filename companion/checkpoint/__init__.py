"""Checkpoints: atomic writes, safe loading, compatibility checks and checkpoint averaging.

A checkpoint is one file written with :func:`torch.save` and read back with ``weights_only=True``, so loading
never unpickles arbitrary objects: it holds only tensors and plain values (dicts, lists, strings, numbers).

Contents (a dict)::

    format, format_version      "companion-checkpoint", 1
    companion_version, torch_version, created (UTC, ISO 8601)
    model_config                TransformerConfig.to_dict()
    model_state                 the model's state_dict
    tokenizers                  {"src": Tokenizer.to_dict(), "tgt": ...} or None (synthetic tasks)
    step                        optimizer steps taken
    train_config                TrainConfig.to_dict() or None
    trainer_state               optimizer, scheduler, RNG and counters for an exact resume (None if averaged)
    metrics                     latest training/validation numbers
    run_info                    how the run was started (data, command line)
    averaged_from               names of the checkpoints averaged into this one (or absent)
    decoding                    the beam search chosen for these weights: {"beam_size", "alpha", how they were
                                chosen} (or absent; ``companion choose-alpha`` writes it with record_decoding)
    content_sha256              digest of every tensor's bytes and of the metadata, checked on load

Atomicity: :func:`atomic_save` writes to a temporary file in the destination folder, flushes it to disk and
renames it over the destination with :func:`os.replace` (atomic on POSIX and Windows). A crash mid-write
leaves at most a stray ``.*.tmp`` file; the previous file under the final name is untouched. Files get the
mode the umask gives (``0666 & ~umask``), as with a plain ``open``.

Validation: the digest is an integrity check, not a signature: anyone can change a file and recompute it. So
:func:`load_checkpoint` trusts nothing in the file. Before ``torch.load``, the file must be a zip archive
whose members are stored uncompressed (as ``torch.save`` writes them: no zip bomb); after it, every entry
is checked by :func:`check_checkpoint` (types, bounded nesting, finiteness, the config's sizes against the
stored shapes, the tokenizers against the vocabulary sizes) before anything is built from it.
"""

from __future__ import annotations

from ..errors import CheckpointError as CheckpointError  # raised by every function here
from .average import average_checkpoints
from .files import (
    atomic_save,
    checkpoint_path,
    latest_checkpoint,
    list_checkpoints,
    prune_checkpoints,
    run_weights,
)
from .files import follow_umask as follow_umask  # used by companion.pretrained
from .load import (
    check_compatible,
    latest_valid_checkpoint,
    load_checkpoint,
    load_model_weights,
    model_from_checkpoint,
    record_decoding,
    tokenizers_from_checkpoint,
)
from .validate import CHECKPOINT_FORMAT, CHECKPOINT_FORMAT_VERSION, check_checkpoint, nonfinite_tensors
from .write import save_checkpoint
from .write import write_checkpoint as write_checkpoint  # used by the runs and tools/

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_FORMAT_VERSION",
    "atomic_save",
    "save_checkpoint",
    "load_checkpoint",
    "check_checkpoint",
    "check_compatible",
    "load_model_weights",
    "model_from_checkpoint",
    "tokenizers_from_checkpoint",
    "checkpoint_path",
    "list_checkpoints",
    "latest_checkpoint",
    "run_weights",
    "latest_valid_checkpoint",
    "nonfinite_tensors",
    "prune_checkpoints",
    "average_checkpoints",
    "record_decoding",
]
