"""The checkpoint file before ``torch.load`` reads it: a zip archive of uncompressed members (no zip bomb), or
a clear message naming what the file is instead."""

from __future__ import annotations

import zipfile
from pathlib import Path

from ..errors import CheckpointError

# -- the file before torch.load reads it --------------------------------------------------------------------
_ZIP_MAGIC = b"PK\x03\x04"


def _check_archive(path: Path) -> None:
    """Refuse what is no checkpoint file before ``torch.load`` reads it: folders, missing or empty files, files
    that are no zip archive (named for what they are), and zip archives whose members are compressed or claim
    more bytes than the file holds (torch.save stores every member uncompressed, so a checkpoint's contents
    are never larger than the file)."""
    if path.is_dir():
        averaged = path / "averaged.pt"  # a run folder's final weights, when its run averages checkpoints
        example = averaged if averaged.is_file() else f"{path}/checkpoints/step_*.pt"
        raise CheckpointError(
            f"{path} is a folder; pass a checkpoint file (e.g. {example}), or use latest_checkpoint(folder)"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(
            f"checkpoint {path} is empty (0 bytes): it was truncated, probably by a crash "
            "during an old-style write; use an earlier checkpoint"
        )
    with path.open("rb") as handle:
        head = handle.read(1024)
    if not head.startswith(_ZIP_MAGIC):
        raise CheckpointError(f"{path} is {_what_the_file_is(head, size)}")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as error:
        raise CheckpointError(
            f"{path} is not a readable checkpoint: it looks truncated or corrupt ({type(error).__name__}: "
            f"{str(error)[:200]}). Delete it and use an earlier checkpoint."
        ) from error
    compressed = [m for m in members if m.compress_type != zipfile.ZIP_STORED]
    if compressed:
        largest = max(compressed, key=lambda m: m.file_size)
        raise CheckpointError(
            f"{path} holds {len(compressed)} compressed member(s) (e.g. {largest.filename}: {largest.compress_size:,} "
            f"bytes that inflate to {largest.file_size:,}); torch.save stores every member uncompressed, so the file "
            "was not written by torch.save and is refused unread (it may be a zip bomb)"
        )
    declared = sum(m.file_size for m in members)
    if declared > size:
        raise CheckpointError(
            f"{path} is corrupt: its zip directory declares {declared:,} bytes of contents in a {size:,}-byte file"
        )


def _what_the_file_is(head: bytes, size: int) -> str:
    """What a file that is no zip archive is, from its first bytes (for the message after "PATH is ...")."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"version https://git-lfs.github.com/spec/"):
        return (
            f"a Git LFS pointer ({size} bytes), not the file it stands for: the repository was cloned without "
            "Git LFS. Run `git lfs install && git lfs pull`, or download the file itself"
        )
    lowered = text[:200].lower()
    if lowered.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml")) or b"<html" in lowered:
        return (
            "an HTML page, not a checkpoint: a download saved a web page (an error, login or redirect page) in "
            "place of the file. Download the file itself (on GitHub: the raw file or its Download button)"
        )
    if head.startswith(b"\x1f\x8b"):
        return "a gzip-compressed file, not a checkpoint (checkpoints are zip archives); decompress it first"
    if head[:1] == b"\x80":
        return (
            "a Python pickle or a PyTorch file in the legacy (pre-1.6, non-zip) format, not a companion "
            "checkpoint (a zip archive written by torch.save); it is refused unread"
        )
    try:
        decoded = head.decode("utf-8")
    except UnicodeDecodeError:
        decoded = ""
    if decoded and all(ch.isprintable() or ch in "\t\r\n" for ch in decoded[:-4] or decoded):
        first = decoded.strip().splitlines()[0][:60] if decoded.strip() else ""
        return f"a text file ({size} bytes, starting {first!r}), not a checkpoint"
    return (
        f"not a zip archive (it starts with the bytes {head[:8].hex(' ')}), so not a checkpoint written by "
        "torch.save: it is damaged, or another kind of file"
    )


def _unreadable(path: Path, error: Exception) -> str:
    """The message for a zip archive that ``torch.load(weights_only=True)`` cannot read."""
    text = str(error)
    message = text.splitlines()[0][:300] if text else type(error).__name__
    if "weights only" in text.lower() or "weights_only" in text:
        detail = [line.strip() for line in text.splitlines() if "Unsupported" in line]
        message = detail[0][:300] if detail else message
        return (
            f"{path} holds Python objects that weights_only=True loading refuses to unpickle (it was not "
            f"written by companion, or was tampered with): {message}"
        )
    return (
        f"{path} is not a readable checkpoint: it looks truncated or corrupt ({type(error).__name__}: "
        f"{message}). Delete it and use an earlier checkpoint."
    )
