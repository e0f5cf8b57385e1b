"""The label-smoothed cross-entropy of section 5.4, with padding positions ignored."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._validation import check_tensor


# --------------------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------------------
def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1, pad_id: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy over the non-padding positions (section 5.4).

    The smoothed target distribution puts ``1 - smoothing`` on the reference token and spreads ``smoothing``
    uniformly over the whole vocabulary (the definition of ``F.cross_entropy(label_smoothing=...)``), so
    the loss per position is ``(1 - smoothing) * nll + smoothing * mean_v(-log p_v)``. Positions whose target
    is ``pad_id`` contribute nothing.

    Args:
        logits: ``[batch, tgt_len, vocab]`` (or ``[positions, vocab]``) unnormalised scores.
        target: ``[batch, tgt_len]`` (or ``[positions]``) reference token ids.
        smoothing: eps_ls in ``[0, 1)``; 0 gives plain cross-entropy.
        pad_id: target id to ignore.

    Returns:
        ``(loss_sum, nll_sum, num_tokens)`` as 0-d tensors: the summed smoothed loss (what to minimise), the
        summed negative log-likelihood of the references (for perplexity), and the number of non-pad
        positions (long). Divide the sums by ``num_tokens`` for per-token values. Computed in float32.
    """
    check_tensor("logits", logits, dims=(2, 3))
    check_tensor("target", target, dims=(1, 2))
    if target.dtype.is_floating_point or target.dtype == torch.bool:
        raise TypeError(f"target must hold integer token ids, got dtype {target.dtype}")
    if logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits [..., vocab] must match target's shape in front, got logits {tuple(logits.shape)} "
            f"and target {tuple(target.shape)}"
        )
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be a number in [0, 1), got {smoothing!r}")
    vocab = logits.shape[-1]
    if target.numel():
        extremes = torch.aminmax(target.masked_fill(target == pad_id, 0))  # one pass, one host sync
        low, high = int(extremes.min), int(extremes.max)
        if low < 0 or high >= vocab:
            raise ValueError(
                f"target holds token id {low if low < 0 else high}, outside the vocabulary [0, {vocab}) of the logits"
            )
    log_probs = F.log_softmax(logits.float(), dim=-1)  # [..., vocab]
    keep = target != pad_id
    safe_target = target.masked_fill(~keep, 0)
    nll = -log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)  # [...]
    nll = nll.masked_fill(~keep, 0.0)
    nll_sum = nll.sum()
    if smoothing > 0.0:
        uniform = -log_probs.mean(dim=-1).masked_fill(~keep, 0.0)  # cross-entropy against uniform
        loss_sum = (1.0 - smoothing) * nll_sum + smoothing * uniform.sum()
    else:
        loss_sum = nll_sum
    return loss_sum, nll_sum, keep.sum()
