"""What each of the training step's CPU speed-ups is worth: whole steps timed with and without them.

    python bench/train_step_speed.py                    # small preset, shared 8,000 vocabulary, 2 threads
    python bench/train_step_speed.py --rounds 9 --results train_step_speed_amd

Builds the CLI default model (the ``small`` preset with one shared 8,000-subword vocabulary and tied output layer)
and times full training steps (forward, label-smoothed loss, backward, Adam update) on a fixed batch of random
token ids shaped like the default's batches (``--batch`` sentences of ``--length`` tokens a side: 92 x 13 is
about the 2,230 source+target tokens per step of the 20-minute Multi30k runs at ``--max-tokens 1200``). Four
variants, each adding one change to the one before:

* ``autograd``: the loss through autograd (``log_softmax -> gather -> mean -> sums``, as the package computed it
  before) and ``nn.Dropout`` (Bernoulli masks);
* ``+ loss``: the package's :func:`companion.label_smoothed_loss` (closed-form gradient);
* ``+ dropout``: the package's dropout layers (masks from 31-bit random integers) = the package's default;
* ``+ cpu bf16``: the forward pass under bfloat16 autocast, as ``companion train --cpu-bf16`` runs it
  (``TrainConfig.cpu_bf16``: matrix products in bfloat16, attention and the loss in float32). It pays on CPUs
  with bfloat16 matrix units (Intel AMX); the results file's ``hardware`` names the CPU it was measured on.

Not adopted: ``torch.optim.Adam(fused=True)`` (one kernel instead of the per-parameter loop, ~1.6 against ~5-9 ms a
step here) changed the trajectory of tests/unit/test_train.py's copy task enough to miss its 99% target (Adam with
eps 1e-9 turns rounding differences in near-zero gradients into full-size updates), and a few milliseconds a step
did not justify a change of the optimizer's arithmetic without a study of its own.

The variants run in alternating order for ``--rounds`` rounds (the machine's speed drifts; each round times every
variant within seconds of the others) and the script reports each one's median milliseconds per step and its
speed-up over ``autograd`` per round (median, min, max). It also checks that the package's loss gives the
autograd loss's gradient (max abs difference recorded, asserted below 1e-5 relative). Writes
bench/results/train_step_speed.json (or ``--results STEM``.json). Keep the machine idle while it runs.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import results_stem, write_results  # noqa: E402

import companion._dropout as dropout_module  # noqa: E402
from companion import Transformer, TransformerConfig, label_smoothed_loss  # noqa: E402
from companion.presets import PRESETS  # noqa: E402

VARIANTS = ("autograd", "+ loss", "+ dropout", "+ cpu bf16")
FAST_DROPOUT = dropout_module.Dropout.forward


def autograd_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The label-smoothed loss as plain autograd computes it (the package's formula before the closed form)."""
    log_probs = F.log_softmax(logits.float(), dim=-1)
    keep = target != pad_id
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    nll_sum = nll.masked_fill(~keep, 0.0).sum()
    uniform = -log_probs.mean(dim=-1).masked_fill(~keep, 0.0).sum()
    return (1.0 - smoothing) * nll_sum + smoothing * uniform, nll_sum, keep.sum()


def build(variant: str, seed: int) -> tuple[Transformer, torch.optim.Optimizer, Callable]:
    torch.manual_seed(seed)
    config = TransformerConfig(
        src_vocab_size=8000, tgt_vocab_size=8000, share_embeddings=True, tie_output=True, **PRESETS["small"].model
    )
    model = Transformer(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss = autograd_loss if variant == "autograd" else label_smoothed_loss
    return model, optimizer, loss


def use_dropout(variant: str) -> None:
    """The package's dropout layers for the variants from ``+ dropout`` on, ``nn.Dropout``'s forward before."""
    fast = VARIANTS.index(variant) >= VARIANTS.index("+ dropout")
    dropout_module.Dropout.forward = FAST_DROPOUT if fast else nn.Dropout.forward  # type: ignore[method-assign,assignment]


def time_steps(variant: str, built: tuple, batch: tuple[torch.Tensor, torch.Tensor], steps: int) -> float:
    """Milliseconds per training step of ``variant`` (2 untimed warm-up steps first)."""
    model, optimizer, loss_fn = built
    src, tgt = batch
    use_dropout(variant)
    model.train()
    autocast = VARIANTS.index(variant) >= VARIANTS.index("+ cpu bf16")  # what TrainConfig(cpu_bf16=True) does

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(src, tgt[:, :-1])
        loss, _, tokens = loss_fn(logits, tgt[:, 1:], 0.1, 0)
        (loss / tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def gradient_check(batch: tuple[torch.Tensor, torch.Tensor]) -> float:
    """Max relative difference between the logits' gradients of the two losses on one model's output."""
    torch.manual_seed(0)
    logits = torch.randn(batch[1].shape[0], batch[1].shape[1] - 1, 8000, requires_grad=True)
    target = batch[1][:, 1:]
    grads = []
    for loss_fn in (autograd_loss, label_smoothed_loss):
        loss, _, _ = loss_fn(logits, target, 0.1, 0)
        (grad,) = torch.autograd.grad(loss, logits)
        grads.append(grad)
    return float((grads[0] - grads[1]).abs().max() / grads[0].abs().max())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=92, help="sentences per batch (default: %(default)s)")
    parser.add_argument("--length", type=int, default=13, help="tokens per sentence a side (default: %(default)s)")
    parser.add_argument(
        "--steps", type=int, default=15, help="timed steps per variant and round (default: %(default)s)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument("--results", type=results_stem, default="train_step_speed", help="results file stem")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, 8000, (args.batch, args.length), generator=generator)
    tgt = torch.randint(4, 8000, (args.batch, args.length + 1), generator=generator)
    gradient_gap = gradient_check((src, tgt))
    assert gradient_gap < 1e-5, f"the closed-form gradient differs from autograd's by {gradient_gap:.3g} (relative)"
    built = {variant: build(variant, seed=0) for variant in VARIANTS}
    per_round: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for round_index in range(args.rounds):
        order = VARIANTS if round_index % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            per_round[variant].append(time_steps(variant, built[variant], (src, tgt), args.steps))
        print(f"round {round_index + 1}: " + ", ".join(f"{v} {per_round[v][-1]:.1f} ms" for v in VARIANTS), flush=True)
    use_dropout("+ dropout")
    tokens = args.batch * (2 * args.length)
    summary = {}
    for variant in VARIANTS:
        ratios = [a / b for a, b in zip(per_round["autograd"], per_round[variant])]
        median_ms = statistics.median(per_round[variant])
        summary[variant] = {
            "ms_per_step_per_round": [round(x, 2) for x in per_round[variant]],
            "median_ms_per_step": round(median_ms, 2),
            "median_tokens_per_second": round(tokens / median_ms * 1e3),
            "speedup_over_autograd": {
                "median": round(statistics.median(ratios), 3),
                "min": round(min(ratios), 3),
                "max": round(max(ratios), 3),
            },
        }
        print(f"{variant:>14}: {median_ms:6.1f} ms/step, x{statistics.median(ratios):.2f} over autograd")
    payload = {
        "batch": {"sentences": args.batch, "tokens_per_side": args.length, "tokens_per_step": tokens},
        "model": "small preset, shared 8,000 vocabulary, tied output layer, dropout 0.1",
        "rounds": args.rounds,
        "steps_per_round": args.steps,
        "torch_threads": args.threads,
        "closed_form_gradient_max_relative_gap": gradient_gap,
        "variants": summary,
    }
    path = write_results(args.results, payload)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
