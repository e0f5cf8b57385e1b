"""companion.Transformer against torch.nn.Transformer on the CPU: same process, same config, same batches.

    python bench/cpu_vs_pytorch.py [--rounds 7] [--batches 4] [--max-tokens 3000]

Both models have the same structure (post-LN, no final stack norms, dropout on attention weights, inside the
feed-forward network and on every sub-layer output, tied output projection, identical embeddings and positions)
and the same parameter count, which the script asserts. Each round times a training step (forward, label-smoothed
loss, backward, Adam) and an evaluation forward pass over the same real Multi30k batches for both models, in
alternating order; the machine is noisy, so the script reports the median over rounds of the per-round ratio
companion / PyTorch. Targets: training step <= 1.05, evaluation forward <= 1.05.
A third model, companion with ``fuse_qkv=False`` (three Q/K/V products instead of one, same weights), is timed in
the same rounds to measure what the fused projection brings on this machine (median ratio fused / separate).
Writes bench/results/cpu_vs_pytorch.json.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from _common import write_results
from torch import nn

import companion
from companion.data import WordTokenizer, encode_pairs, load_multi30k, make_batches


class TorchTransformer(nn.Module):
    """``torch.nn.Transformer`` wrapped with the same embeddings, positions and output layer as companion's."""

    def __init__(self, config: companion.TransformerConfig) -> None:
        super().__init__()
        d, h = config.d_model, config.num_heads
        self.config = config
        self.src_embed = nn.Embedding(config.src_vocab_size, d)
        self.tgt_embed = self.src_embed if config.share_embeddings else nn.Embedding(config.tgt_vocab_size, d)
        self.src_pos = companion.PositionalEncoding(d, config.max_len, config.dropout)
        self.tgt_pos = companion.PositionalEncoding(d, config.max_len, config.dropout)
        layer_args = dict(
            d_model=d,
            nhead=h,
            dim_feedforward=config.d_ff,
            dropout=config.dropout,
            batch_first=True,
            norm_first=config.norm_first,
            layer_norm_eps=config.layer_norm_eps,
        )
        final_norm = (lambda: nn.LayerNorm(d, eps=config.layer_norm_eps)) if config.norm_first else (lambda: None)
        encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(**layer_args),
            config.num_encoder_layers,
            norm=final_norm(),
            enable_nested_tensor=False,
        )
        decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(**layer_args), config.num_decoder_layers, norm=final_norm()
        )
        self.transformer = nn.Transformer(
            d_model=d, nhead=h, custom_encoder=encoder, custom_decoder=decoder, batch_first=True
        )
        self.generator = nn.Linear(d, config.tgt_vocab_size, bias=not config.tie_output)
        if config.tie_output:
            self.generator.weight = self.tgt_embed.weight

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.config.d_model)
        src_pad = src == self.config.pad_id  # nn.Transformer: True = ignore this key
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        hidden = self.transformer(
            self.src_pos(self.src_embed(src) * scale),
            self.tgt_pos(self.tgt_embed(tgt) * scale),
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=src_pad,
            memory_key_padding_mask=src_pad,
        )
        return self.generator(hidden)


def real_batches(args) -> tuple[list, int, int]:
    splits = load_multi30k(args.src, args.tgt)
    train = splits["train"][: args.sentences]
    src_tok = WordTokenizer.build([s for s, _ in train], args.src, min_freq=2)
    tgt_tok = WordTokenizer.build([t for _, t in train], args.tgt, min_freq=2)
    pairs = encode_pairs(train, src_tok, tgt_tok)
    batches = make_batches(pairs, args.max_tokens, shuffle=True, seed=0)[: args.batches]
    return batches, src_tok.vocab_size, tgt_tok.vocab_size


def train_step(model, optimizer, batch) -> None:
    optimizer.zero_grad(set_to_none=True)
    logits = model(batch.src, batch.tgt_in)
    loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0, label_smoothing=0.1)
    loss.backward()
    optimizer.step()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds, alternating model order (default 7)")
    parser.add_argument("--batches", type=int, default=4, help="Multi30k batches per round (default 4)")
    parser.add_argument("--max-tokens", type=int, default=3000, help="padded tokens per batch side (default 3000)")
    parser.add_argument("--sentences", type=int, default=29000, help="training pairs to build vocabularies from")
    parser.add_argument("--src", default="de")
    parser.add_argument("--tgt", default="en")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--d-ff", type=int, default=1024)
    args = parser.parse_args()

    batches, src_vocab, tgt_vocab = real_batches(args)
    config = companion.TransformerConfig(
        src_vocab,
        tgt_vocab,
        d_model=args.d_model,
        num_heads=args.heads,
        num_encoder_layers=args.layers,
        num_decoder_layers=args.layers,
        d_ff=args.d_ff,
        dropout=0.1,
        attention_dropout=0.1,
        ffn_dropout=0.1,
        tie_output=True,
    )
    torch.manual_seed(0)
    models = {"companion": companion.Transformer(config), "pytorch": TorchTransformer(config)}
    separate = companion.Transformer(config)
    separate.load_state_dict(models["companion"].state_dict())
    for module in separate.modules():
        if isinstance(module, companion.MultiHeadAttention):
            module.fuse_qkv = False
    models["companion_separate_qkv"] = separate
    counts = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    assert counts["companion"] == counts["pytorch"], f"structures differ: {counts}"
    optimizers = {
        name: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9) for name, m in models.items()
    }

    def train_round(name):
        models[name].train()
        return timed(lambda: [train_step(models[name], optimizers[name], b) for b in batches])

    def eval_round(name):
        models[name].eval()
        with torch.no_grad():
            return timed(lambda: [models[name](b.src, b.tgt_in) for b in batches])

    for name in models:  # warm-up, not timed
        train_round(name)
        eval_round(name)
    times = {kind: {name: [] for name in models} for kind in ("train", "eval")}
    for r in range(args.rounds):
        order = list(models)[r % len(models) :] + list(models)[: r % len(models)]  # rotate the order
        for name in order:
            times["train"][name].append(train_round(name))
        for name in order:
            times["eval"][name].append(eval_round(name))
    ratios = {kind: [c / p for c, p in zip(t["companion"], t["pytorch"])] for kind, t in times.items()}
    summary = {kind: statistics.median(r) for kind, r in ratios.items()}
    fused = {
        kind: statistics.median(c / s for c, s in zip(t["companion"], t["companion_separate_qkv"]))
        for kind, t in times.items()
    }
    tokens = sum(b.num_src_tokens + b.num_tgt_tokens for b in batches)
    for kind in ("train", "eval"):
        print(
            f"{kind:5s}: companion/pytorch median ratio {summary[kind]:.3f} "
            f"(companion {statistics.median(times[kind]['companion']):.3f} s, "
            f"pytorch {statistics.median(times[kind]['pytorch']):.3f} s per round of {len(batches)} batches); "
            f"fused/separate QKV {fused[kind]:.3f}"
        )
    path = write_results(
        "cpu_vs_pytorch",
        {
            "config": config.to_dict(),
            "parameters": counts["companion"],
            "batches": len(batches),
            "real_tokens_per_round": tokens,
            "max_tokens": args.max_tokens,
            "rounds": args.rounds,
            "seconds_per_round": times,
            "ratios": ratios,
            "median_ratio": summary,
            "median_ratio_fused_vs_separate_qkv": fused,
            "targets": {"train": 1.05, "eval": 1.05},
            "meets_targets": {k: summary[k] <= 1.05 for k in summary},
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
