"""Assemble the in-page translator's assets for the website (run by `make site` before the book is built).

Usage (from the repository root, virtual environment active)::

    python tools/build_translator.py            # writes book/_generated/translator/

The folder is served as ``_static/translator/`` on every page (``html_static_path`` in ``_config.yml``) and
holds everything the translator needs, so the page loads nothing from another host:

- ``encoder.onnx``, ``decoder.onnx``: the shipped model (``pretrained/de-en-small.pt``) exported by
  :func:`companion.export.export_onnx`;
- ``model.json``: the model card (data, size, test BLEU with sacreBLEU signatures, training command, the
  Multi30k terms), the decoding settings, both vocabularies, spaCy's German tokenizer rules for the page's
  tokenizer, and example sentences (the first ``--examples`` German sentences of test_2016_flickr);
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
# The widest beam the page offers (each step runs the decoder graph on every beam, without a cache).
MAX_BEAM_SIZE = 8
CARD_KEYS = ("name", "task", "data", "steps", "training_command", "packaging_command", "history", "terms", "date")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    parser.add_argument("--examples", type=int, default=40, help="example sentences from the test set (default: 40)")
    parser.add_argument("--data-dir", default=None, help="Multi30k folder (default: COMPANION_DATA_DIR or the hub)")
    return parser.parse_args(argv)


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
    """What the page says about the model: the shipped card's facts plus the exported files' sizes."""
    card = json.loads(pretrained.path.with_suffix(".json").read_text(encoding="utf-8"))
    facts = {key: card[key] for key in CARD_KEYS if key in card}
    facts["parameters"] = pretrained.model.num_parameters()
    facts["test"] = card["test"]
    facts["checkpoint_bytes"] = pretrained.path.stat().st_size
    facts["onnx_bytes"] = onnx_bytes
    return facts


def model_json(pretrained, onnx_bytes: dict[str, int], examples: list[str]) -> dict:
    from companion.data.spacy_export import spacy_tokenizer_rules
    from companion.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID
    from companion.decode import MAX_ALPHA

    config = pretrained.model.config
    return {
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
            "max_extra_len": 50,
            "beam_size": 4,
            "alpha": 0.6,
            "max_alpha": MAX_ALPHA,
            "max_beam_size": MAX_BEAM_SIZE,
        },
        "src_tokenizer": pretrained.src_tokenizer.to_dict(),
        "tgt_tokenizer": pretrained.tgt_tokenizer.to_dict(),
        "src_rules": spacy_tokenizer_rules(pretrained.src_tokenizer.language),
        "examples": examples,
    }


def build(out: pathlib.Path, n_examples: int, data_dir: str | None) -> pathlib.Path:
    from companion import load_pretrained
    from companion.data import load_multi30k
    from companion.export import export_onnx

    check_runtime_files()
    pretrained = load_pretrained(download=False)
    examples = [german for german, _ in load_multi30k("de", "en", data_dir=data_dir)["test"][:n_examples]]
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".translator-", dir=out.parent))
    try:
        paths = export_onnx(pretrained.model, staging)
        sizes = {name: path.stat().st_size for name, path in paths.items()}
        record = model_json(pretrained, sizes, examples)
        (staging / "model.json").write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
        for name in PAGE_FILES:
            shutil.copy2(WEB / "translator" / name, staging / name)
        (staging / "ort").mkdir()
        for name in ORT_FILES:
            shutil.copy2(ORT_DIST / name, staging / "ort" / name)
        if out.exists():
            shutil.rmtree(out)
        staging.chmod(0o755)  # mkdtemp makes it private; the site's files must be readable by a web server
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(
        f"build_translator: wrote {out} ({total / 1e6:.1f} MB; encoder {sizes['encoder'] / 1e6:.1f} MB, "
        f"decoder {sizes['decoder'] / 1e6:.1f} MB)"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.examples < 1:
        raise SystemExit(f"--examples must be a positive integer, got {args.examples}")
    build(args.out.resolve(), args.examples, args.data_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
