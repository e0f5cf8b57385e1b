"""Can the in-page translator ship a smaller model? The exported graphs in float32 against 8-bit weights.

One command (from the repository root)::

    python bench/onnx_quantization.py

Exports the shipped de->en model (``pretrained/de-en-small.pt``) with :func:`companion.export.export_onnx`,
quantizes both graphs with ONNX Runtime's dynamic quantization (int8 weights of the matrix multiplications,
activations quantized on the fly), then decodes Multi30k's test_2016_flickr greedily with each version
(:func:`companion.export.onnx_greedy_decode`) and reports file sizes, sacreBLEU, chrF and how many outputs are
identical to float32's. Results go to ``bench/results/onnx_quantization.json`` with hardware and command.
The website ships float32: it is the only version whose outputs equal the Python package's token for token,
which the book's browser tests check.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import hardware, write_results  # noqa: E402

from companion import load_pretrained  # noqa: E402
from companion.data import EOS_ID, load_multi30k  # noqa: E402
from companion.evaluate import corpus_bleu, corpus_chrf  # noqa: E402
from companion.export import export_onnx, load_onnx, onnx_greedy_decode  # noqa: E402

BATCH = 100


def quantize(fp32: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out.mkdir()
    for name in ("encoder", "decoder"):
        quantize_dynamic(str(fp32 / f"{name}.onnx"), str(out / f"{name}.onnx"), weight_type=QuantType.QInt8)


def greedy_all(folder: Path, sources: list[list[int]], max_len: int) -> tuple[list[list[int]], float]:
    sessions = load_onnx(folder)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    outputs: dict[int, list[int]] = {}
    started = time.perf_counter()
    for start in range(0, len(order), BATCH):
        chunk = order[start : start + BATCH]
        for i, ids in zip(chunk, onnx_greedy_decode(sessions, [sources[i] for i in chunk], max_len=max_len)):
            outputs[i] = ids
    return [outputs[i] for i in range(len(sources))], time.perf_counter() - started


def main() -> int:
    pretrained = load_pretrained(download=False)
    pairs = load_multi30k("de", "en")["test"]
    sources = [ids + [EOS_ID] for ids in pretrained.src_tokenizer.encode_batch([de for de, _ in pairs])]
    references = [en for _, en in pairs]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        fp32, int8 = Path(tmp) / "float32", Path(tmp) / "int8"
        export_onnx(pretrained.model, fp32)
        quantize(fp32, int8)
        baseline: list[list[int]] = []
        for name, folder in (("float32", fp32), ("int8", int8)):
            ids, seconds = greedy_all(folder, sources, pretrained.model.config.max_len)
            baseline = baseline or ids
            texts = [pretrained.tgt_tokenizer.decode(h) for h in ids]
            bleu, bleu_signature = corpus_bleu(texts, references)
            chrf, chrf_signature = corpus_chrf(texts, references)
            results[name] = {
                "bytes": {p.stem: p.stat().st_size for p in sorted(folder.glob("*.onnx"))},
                "total_bytes": sum(p.stat().st_size for p in folder.glob("*.onnx")),
                "greedy_bleu": round(bleu, 2),
                "bleu_signature": bleu_signature,
                "greedy_chrf": round(chrf, 2),
                "chrf_signature": chrf_signature,
                "outputs_identical_to_float32": sum(a == b for a, b in zip(ids, baseline)),
                "sentences": len(ids),
                "decode_seconds_1_thread": round(seconds, 1),
            }
            print(name, results[name])
    path = write_results(
        "onnx_quantization",
        {"benchmark": "onnx_quantization", "hardware": hardware(), "split": "test_2016_flickr", "results": results},
    )
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
