"""The label-smoothed cross-entropy of section 5.4, with padding positions ignored."""

from __future__ import annotations

from typing import Any

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
        positions (long). Divide the sums by ``num_tokens`` for per-token values. Computed in float32 (float64
        logits in float64); the gradient with respect to ``logits`` comes from its closed form (``softmax``
        minus the smoothed target), not from autograd through every step (:class:`_SmoothedCrossEntropy`).
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
    keep = target != pad_id
    flat_logits = logits.reshape(-1, vocab)  # [positions, vocab]
    flat_target = target.masked_fill(~keep, 0).reshape(-1).long()  # [positions], padding pointed at id 0
    loss_sum, nll_sum = _SmoothedCrossEntropy.apply(flat_logits, flat_target, keep.reshape(-1), float(smoothing))
    return loss_sum, nll_sum, keep.sum()


def _rows_per_chunk(logits: torch.Tensor) -> int:
    """How many rows of ``logits [positions, vocab]`` :class:`_SmoothedCrossEntropy` takes at a time: 16-bit logits
    on CPU in chunks of about 512K scores (2 MiB in float32, which a core's cache holds), so that each chunk is
    made float32 and passed over while it is in the cache; otherwise all rows at once."""
    if logits.device.type != "cpu" or logits.dtype in _EXACT:
        return max(1, logits.shape[0])
    return max(1, _CHUNK_SCORES // max(1, logits.shape[-1]))


_CHUNK_SCORES = 1 << 19
_EXACT = (torch.float32, torch.float64)  # score types computed as they are; 16-bit ones are computed in float32


class _SmoothedCrossEntropy(torch.autograd.Function):
    """``(loss_sum, nll_sum)`` of :func:`label_smoothed_loss` with a hand-written backward.

    Autograd through ``log_softmax -> gather -> mean -> masked sums`` passes over the ``[positions, vocab]``
    logits five times in the backward (log-softmax's own backward, a zero-filled gather gradient, the mean's
    broadcast, their sum); at the ``small`` preset's 8,000-subword vocabulary the closed form below made a CPU
    training step 1.18x faster (``bench/train_step_speed.py``, the median of its per-round ratios). The gradient
    has a closed form: with ``p = softmax(logits)`` and
    ``q = (1 - smoothing) * onehot(target) + smoothing / vocab``, ``d loss_sum / d logits = p - q`` and
    ``d nll_sum / d logits = p - onehot(target)`` at every kept position (zero at padding), so the backward is
    one ``exp`` of the saved log-probabilities, one scaling and a scatter at the targets.

    16-bit logits on CPU (bfloat16 autocast, ``TrainConfig.cpu_bf16``) go through the rows in chunks that fit in a
    core's cache (:func:`_rows_per_chunk`): each chunk is made float32, the forward keeps only each row's two
    reductions (the reference's log-probability and the mean) instead of float32 log-probabilities of the whole
    array, and the backward computes each chunk's log-softmax again and writes the gradient in the logits' type.
    That avoids two float32 copies of the whole ``[positions, vocab]`` array; the numbers are those of the
    whole-array computation to the bit (row by row, log-softmax does not depend on the other rows).

    Inputs: ``logits [positions, vocab]`` (float16/bfloat16 are computed in float32), ``target [positions]``
    (padding already replaced by a valid id), ``keep [positions]`` (bool, False at padding), ``smoothing``.
    """

    @staticmethod
    def _log_probs(logits: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """``log_softmax`` of rows ``start:stop`` of ``logits`` (float32, or float64 for float64 logits)."""
        chunk = logits[start:stop]
        exact = chunk if chunk.dtype in _EXACT else chunk.float()
        return F.log_softmax(exact, dim=-1)

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, logits: torch.Tensor, target: torch.Tensor, keep: torch.Tensor, smoothing: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows = _rows_per_chunk(logits)
        nll_parts, uniform_parts = [], []
        for start in range(0, max(1, logits.shape[0]), rows):
            log_probs = _SmoothedCrossEntropy._log_probs(logits, start, start + rows)  # [rows, vocab]
            nll_parts.append(-log_probs.gather(-1, target[start : start + rows, None]).squeeze(-1))
            uniform_parts.append(-log_probs.mean(dim=-1))  # cross-entropy against uniform
        nll = torch.cat(nll_parts)  # [positions]
        nll_sum = nll.masked_fill(~keep, 0.0).sum()
        if smoothing > 0.0:
            loss_sum = (1.0 - smoothing) * nll_sum + smoothing * torch.cat(uniform_parts).masked_fill(~keep, 0.0).sum()
        else:
            loss_sum = nll_sum.clone()
        whole = rows >= logits.shape[0]  # one chunk: keep its log-probabilities for the backward
        ctx.save_for_backward(log_probs if whole else logits, target, keep)
        ctx.whole, ctx.smoothing, ctx.logits_dtype = whole, smoothing, logits.dtype
        return loss_sum, nll_sum

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(  # type: ignore[override]
        ctx: Any, grad_loss: torch.Tensor | None, grad_nll: torch.Tensor | None
    ) -> tuple[torch.Tensor, None, None, None]:
        saved, target, keep = ctx.saved_tensors  # saved: the log-probabilities (one chunk) or the logits
        smoothing = ctx.smoothing
        dtype = saved.dtype if saved.dtype in _EXACT else torch.float32
        zero = torch.zeros((), dtype=dtype, device=saved.device)
        g_loss = zero if grad_loss is None else grad_loss.to(dtype)
        g_nll = zero if grad_nll is None else grad_nll.to(dtype)
        at_target = -(g_loss * (1.0 - smoothing) + g_nll)

        def gradient(probs: torch.Tensor, rows: slice) -> torch.Tensor:
            """``probs [rows, vocab]`` (p, overwritten) -> the gradient of those rows."""
            grad = probs.mul_(g_loss + g_nll)  # (g_loss + g_nll) * p
            if smoothing > 0.0:
                grad.sub_(g_loss * (smoothing / probs.shape[-1]))
            return grad.scatter_add_(-1, target[rows, None], at_target.expand(grad.shape[0], 1))

        if ctx.whole:
            grad = gradient(saved.exp(), slice(None)).to(ctx.logits_dtype)
        else:
            grad = torch.empty_like(saved)  # [positions, vocab] in the logits' 16-bit type
            rows = _rows_per_chunk(saved)
            for start in range(0, saved.shape[0], rows):
                part = slice(start, start + rows)
                grad[part] = gradient(_SmoothedCrossEntropy._log_probs(saved, start, start + rows).exp_(), part)
        padded = (~keep).nonzero().squeeze(-1)
        if padded.numel():
            grad.index_fill_(0, padded, 0.0)
        return grad, None, None, None
