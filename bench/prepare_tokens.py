"""Tokenize Multi30k here and save token ids for machines without spaCy / datasets / tokenizers (the GPU box).

    python bench/prepare_tokens.py --src de --tgt en --vocab-size 10000 --out bench/data/multi30k_de-en.pt

Saves a dict of plain tensors (loadable with ``torch.load(..., weights_only=True)``): the training pairs as flat
id arrays plus offsets, the shared BPE vocabulary size, and the tokenizer (JSON) so results can be decoded later.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import torch
from _common import flatten

from companion.data import SubwordTokenizer, encode_pairs, load_multi30k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", default="de")
    parser.add_argument("--tgt", default="en")
    parser.add_argument("--vocab-size", type=int, default=10000, help="shared BPE vocabulary size")
    parser.add_argument("--data-dir", default=None, help="local Multi30k folder (default: COMPANION_DATA_DIR/hub)")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args()

    splits = load_multi30k(args.src, args.tgt, data_dir=args.data_dir)
    train = splits["train"]
    tokenizer = SubwordTokenizer.train([s for s, _ in train] + [t for _, t in train], vocab_size=args.vocab_size)
    pairs = encode_pairs(train, tokenizer, tokenizer)
    src_flat, src_offsets = flatten([s for s, _ in pairs])
    tgt_flat, tgt_offsets = flatten([t for _, t in pairs])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "src_flat": src_flat,
            "src_offsets": src_offsets,
            "tgt_flat": tgt_flat,
            "tgt_offsets": tgt_offsets,
            "vocab_size": tokenizer.vocab_size,
            "tokenizer": json.dumps(tokenizer.to_dict()),
            "direction": f"{args.src}-{args.tgt}",
        },
        args.out,
    )
    print(
        f"wrote {args.out}: {len(pairs)} pairs, vocabulary {tokenizer.vocab_size}, "
        f"{int(src_flat.numel())} + {int(tgt_flat.numel())} tokens"
    )


if __name__ == "__main__":
    main()
