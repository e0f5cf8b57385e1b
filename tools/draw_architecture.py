"""Draw the Transformer architecture figure (the paper's Figure 1) from a real model, for the landing page.

    python tools/draw_architecture.py                       # writes book/images/architecture.png
    python tools/draw_architecture.py --out /tmp/arch.png   # somewhere else

The figure is made the same way as in the chapter "The Transformer assembled": forward hooks on one batch of a
two-layer ``companion.Transformer`` record every sub-layer's output shape
(``companion.book.experiments.assembled.record_shapes``), and the boxes are drawn from those records
(``draw_architecture``). Seeded and written without a timestamp, so the same environment gives the same bytes.
"""

from __future__ import annotations

import argparse
import pathlib

import matplotlib

matplotlib.use("Agg")  # a file, no display

import torch  # noqa: E402

import companion  # noqa: E402
from companion.book.experiments.assembled import draw_architecture, record_shapes, shape_symbols  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "book" / "images" / "architecture.png"

# Sizes chosen all different, so that every number in a box names one thing (B, n, t, d_model, V).
BATCH, SRC_LEN, TGT_LEN = 2, 7, 5
CONFIG = dict(
    src_vocab_size=13,
    tgt_vocab_size=11,
    d_model=32,
    num_heads=4,
    num_encoder_layers=2,
    num_decoder_layers=2,
    d_ff=128,
    dropout=0.0,
)


def draw(out: pathlib.Path, dpi: int = 110) -> pathlib.Path:
    """Build the model, record its shapes on one batch, draw the figure and save it to ``out`` (PNG)."""
    torch.manual_seed(0)
    config = companion.TransformerConfig(**CONFIG)
    model = companion.Transformer(config).eval()
    src = torch.randint(4, config.src_vocab_size, (BATCH, SRC_LEN))
    tgt = torch.randint(4, config.tgt_vocab_size, (BATCH, TGT_LEN))
    records = record_shapes(model, src, tgt)
    fig = draw_architecture(records, shape_symbols(config, BATCH, SRC_LEN, TGT_LEN))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="PNG file to write")
    args = parser.parse_args(argv)
    if args.out.suffix.lower() != ".png":
        parser.error(f"--out must be a .png file, got {args.out}")
    print(f"wrote {draw(args.out)}")


if __name__ == "__main__":
    main()
