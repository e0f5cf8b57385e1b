"""Assemble the in-page translator's assets for the website (run by `make site` before the book is built).

Usage (from the repository root, virtual environment active)::

    python tools/build_translator.py            # writes book/_generated/translator/
    python tools/build_translator.py --checkpoint en-de=/tmp/run/averaged.pt   # another checkpoint for a direction
    python tools/build_translator.py --checkpoint en-de=/tmp/run                # a run folder, read as translate does

The folder is served as ``_static/translator/`` on every page (``html_static_path`` in ``_config.yml``) and
holds everything the translator needs, so the page loads nothing from another host:

- ``manifest.json``: the directions the page offers (``de-en`` and ``en-de``: each shipped model of
  :func:`companion.load_pretrained`), with their languages and folders; the first is the page's default;
- per direction, a folder ``de-en/``, ``en-de/`` with ``encoder.onnx`` and ``decoder.onnx`` (the model exported
  by :func:`companion.export.export_onnx`: the encoder, and one decoder step with a key/value cache) and
  ``model.json``: the model card (data, size, test BLEU with sacreBLEU signatures, training command, the
  Multi30k terms: from the card beside a shipped model; a checkpoint of your own without one gets its size and
  files only), the decoding settings (the ones :func:`companion.load_pretrained` decodes the file with, which the
  page must be able to offer), both tokenizers (``Tokenizer.to_dict()``; for a word tokenizer also
  spaCy's rules of the source language, for the page's tokenizer), and example sentences (the first
  ``--examples`` source sentences of test_2016_flickr);
- the page's scripts and stylesheet (copied from ``web/translator/``);
- ``ort/``: ONNX Runtime Web's WASM build, copied from ``web/node_modules`` (``npm ci --prefix web`` installs
  the version pinned in ``web/package-lock.json``).

The folder is written next to its final place and swapped in when complete: an interrupted build leaves the
previous one (or none), never a half-written one.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
WEB = ROOT / "web"
DEFAULT_OUT = ROOT / "book" / "_generated" / "translator"
ORT_DIST = WEB / "node_modules" / "onnxruntime-web" / "dist"
# The files of onnxruntime-web's WASM build that the page loads (the CPU backend; no WebGPU/WebGL).
ORT_FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.wasm", "ort-wasm-simd-threaded.mjs")
# The page loads them in this order (html_js_files in _config.yml): translator.js uses the other two scripts.
PAGE_FILES = ("tokenizer.js", "search.js", "heatmap.js", "translator.js", "translator.css")
# The widest beam the page offers (each step runs the decoder step graph on every beam). Its 2k candidates per
# step come from each row's best entries in the graph (companion.export.TOP_K of them: 2 * 8 < 17), so the page
# never copies out whole rows but where a tie reaches the cut (tests/integration/test_web_search.py checks this).
MAX_BEAM_SIZE = 8
# The directions the page offers, in this order (the first is the default): (id, source, target language)
DIRECTIONS = (("de-en", "de", "en"), ("en-de", "en", "de"))
LANGUAGE_NAMES = {"de": "German", "en": "English"}
CARD_KEYS = (
    "name", "task", "data", "steps", "training_command", "packaging_command", "history", "limitations",
    "outside_the_data", "terms", "date",
)  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    parser.add_argument("--examples", type=int, default=40, help="example sentences from the test set (default: 40)")
    parser.add_argument("--data-dir", default=None, help="Multi30k folder (default: COMPANION_DATA_DIR or the hub)")
    parser.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="DIRECTION=PATH",
        help="a checkpoint file or run folder to export for a direction instead of its shipped model (repeatable), "
        "e.g. en-de=runs/my-en-de",
    )
    return parser.parse_args(argv)


def parse_checkpoints(values: list[str]) -> dict[str, pathlib.Path]:
    """``["en-de=PATH", ...]`` -> ``{"en-de": PATH}`` (a checkpoint file or a run folder); a direction outside
    DIRECTIONS or a missing path stops."""
    known = [direction for direction, _, _ in DIRECTIONS]
    checkpoints = {}
    for value in values:
        direction, sep, path = value.partition("=")
        if not sep or direction not in known or not path:
            raise SystemExit(f"--checkpoint must be DIRECTION=PATH with DIRECTION one of {known}, got {value!r}")
        if not pathlib.Path(path).exists():
            raise SystemExit(f"--checkpoint {direction}: no checkpoint file or run folder at {path}")
        checkpoints[direction] = pathlib.Path(path)
    return checkpoints


def check_runtime_files() -> None:
    """Stop with instructions when ONNX Runtime Web or the page's own files are missing."""
    missing = [ORT_DIST / name for name in ORT_FILES if not (ORT_DIST / name).is_file()]
    if missing:
        raise SystemExit(
            f"build_translator: ONNX Runtime Web is not installed ({missing[0]} is missing); run "
            f"`npm ci --prefix web` (needs Node.js and npm; `make site` does it)"
        )
    missing = [WEB / "translator" / name for name in PAGE_FILES if not (WEB / "translator" / name).is_file()]
    if missing:
        raise SystemExit(f"build_translator: the page's file {missing[0]} is missing")


def model_card(pretrained, onnx_bytes: dict[str, int]) -> dict:
    """What the page says about the model: the card's facts (the ``.json`` beside a shipped model; a checkpoint
    without one has none, and the page leaves those rows out) plus the model's size and the exported files'."""
    card_file = pretrained.path.with_suffix(".json")
    card = json.loads(card_file.read_text(encoding="utf-8")) if card_file.is_file() else {}
    facts = {key: card[key] for key in (*CARD_KEYS, "test") if key in card}
    facts.setdefault("name", pretrained.path.name)
    facts.setdefault("task", "translation, {} -> {}".format(*pretrained.languages))
    facts.setdefault("data", "not recorded (a checkpoint without a model card)")
    facts["parameters"] = pretrained.model.num_parameters()
    facts["checkpoint_bytes"] = pretrained.path.stat().st_size
    path = pretrained.path.resolve()
    facts["checkpoint_file"] = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    facts["onnx_bytes"] = onnx_bytes
    return facts


def model_json(pretrained, onnx_bytes: dict[str, int], examples: list[str], direction: str = "de-en") -> dict:
    from companion.data.spacy_export import spacy_tokenizer_rules
    from companion.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID, WordTokenizer
    from companion.decode import MAX_ALPHA
    from companion.decode.limits import _MAX_EXTRA_LEN

    config = pretrained.model.config
    source, target = pretrained.languages
    check_decoding(pretrained.decoding, direction)
    record = {
        "direction": {
            "id": direction,
            "source": source,
            "target": target,
            "source_name": LANGUAGE_NAMES.get(source, source),
            "target_name": LANGUAGE_NAMES.get(target, target),
        },
        "card": model_card(pretrained, onnx_bytes),
        "config": {
            "d_model": config.d_model,
            "num_heads": config.num_heads,
            "num_encoder_layers": config.num_encoder_layers,
            "num_decoder_layers": config.num_decoder_layers,
            "src_vocab_size": config.src_vocab_size,
            "tgt_vocab_size": config.tgt_vocab_size,
            "max_len": config.max_len,
            "pad_id": PAD_ID,
            "unk_id": UNK_ID,
            "bos_id": BOS_ID,
            "eos_id": EOS_ID,
        },
        # the searches' settings and limits, as companion.decode has them (search.js reads the limits from here)
        "decoding": {
            "max_extra_len": _MAX_EXTRA_LEN,
            "beam_size": pretrained.decoding["beam_size"],  # companion.pretrained.default_decoding
            "alpha": pretrained.decoding["alpha"],
            "max_alpha": MAX_ALPHA,
            "max_beam_size": MAX_BEAM_SIZE,
        },
        "src_tokenizer": pretrained.src_tokenizer.to_dict(),
        "tgt_tokenizer": pretrained.tgt_tokenizer.to_dict(),
        "examples": examples,
    }
    if isinstance(pretrained.src_tokenizer, WordTokenizer):  # a subword tokenizer needs no spaCy rules
        record["src_rules"] = spacy_tokenizer_rules(source)
    return record


def check_decoding(decoding: dict, direction: str) -> None:
    """Stop when the page could not decode as the checkpoint says (a beam wider than the page offers): the page
    would otherwise refuse every default translation. (Any alpha the checkpoint records is within ``MAX_ALPHA``,
    which the page accepts; its slider widens to reach it.)"""
    if decoding["beam_size"] > MAX_BEAM_SIZE:
        raise SystemExit(
            f"build_translator: the {direction} checkpoint decodes with beam size {decoding['beam_size']}, wider than "
            f"the page's widest beam ({MAX_BEAM_SIZE}); record a narrower one (companion choose-alpha --beam-size N)"
        )


def build_direction(folder: pathlib.Path, direction: str, source: str, target: str, n_examples: int, data_dir, path):
    """Export one direction's model into ``folder`` and write its model.json; returns the manifest entry."""
    from companion import load_pretrained
    from companion.data import load_multi30k
    from companion.export import export_onnx

    pretrained = load_pretrained(direction=direction, path=path, download=False)
    languages = pretrained.languages
    if languages != (source, target):
        raise SystemExit(f"build_translator: the {direction} model translates {languages[0]} -> {languages[1]}")
    examples = [src for src, _ in load_multi30k(source, target, data_dir=data_dir)["test"][:n_examples]]
    folder.mkdir()
    paths = export_onnx(pretrained.model, folder)
    sizes = {name: p.stat().st_size for name, p in paths.items()}
    record = model_json(pretrained, sizes, examples, direction)
    (folder / "model.json").write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    print(
        f"build_translator: {direction} from {pretrained.path} (encoder {sizes['encoder'] / 1e6:.1f} MB, "
        f"decoder {sizes['decoder'] / 1e6:.1f} MB)"
    )
    return {"id": direction, **record["direction"], "folder": direction + "/"}


def build(out: pathlib.Path, n_examples: int, data_dir: str | None, checkpoints: dict | None = None) -> pathlib.Path:
    check_runtime_files()
    checkpoints = checkpoints or {}
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".translator-", dir=out.parent))
    try:
        entries = [
            build_direction(staging / direction, direction, src, tgt, n_examples, data_dir, checkpoints.get(direction))
            for direction, src, tgt in DIRECTIONS
        ]
        manifest = {"directions": entries, "default": entries[0]["id"]}
        (staging / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False) + "\n", encoding="utf-8")
        for name in PAGE_FILES:
            shutil.copy2(WEB / "translator" / name, staging / name)
        (staging / "ort").mkdir()
        for name in ORT_FILES:
            shutil.copy2(ORT_DIST / name, staging / "ort" / name)
        for folder in [staging, *(staging / e["id"] for e in entries)]:
            folder.chmod(0o755)  # mkdtemp makes it private; the site's files must be readable by a web server
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"build_translator: wrote {out} ({total / 1e6:.1f} MB; directions {', '.join(e['id'] for e in entries)})")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.examples < 1:
        raise SystemExit(f"--examples must be a positive integer, got {args.examples}")
    build(args.out.resolve(), args.examples, args.data_dir, parse_checkpoints(args.checkpoint))
    return 0


if __name__ == "__main__":
    sys.exit(main())
