"""Export a trained Transformer to ONNX, for decoding outside Python (the book's in-page translator).

:func:`export_onnx` writes two graphs that together do what :mod:`companion.decode` does with the model:

``encoder.onnx``
    ``src_ids`` int64 ``[batch, src_len]`` (token ids ending in ``<eos>``, right-padded with ``<pad>``) ->
    ``memory`` float32 ``[batch, src_len, d_model]`` and ``encoder_attention`` float32
    ``[encoder_layers, batch, heads, src_len, src_len]``.
``decoder.onnx``
    ``tgt_ids`` int64 ``[batch, tgt_len]`` (``<bos>`` and the tokens chosen so far), ``memory``, ``src_ids`` ->
    ``logits`` float32 ``[batch, tgt_vocab]`` for the token after the last position, with ``<pad>`` and
    ``<bos>`` at -inf exactly as the searches of :mod:`companion.decode` set them; ``log_probs`` (their
    log-softmax, what beam search adds up); ``self_attention`` ``[decoder_layers, batch, heads, tgt_len,
    tgt_len]`` and ``cross_attention`` ``[decoder_layers, batch, heads, tgt_len, src_len]`` for every position.

The decoder graph has no key/value cache: each step feeds the whole prefix again. For a model of the book's
size that costs little and keeps the graph's interface small; the attention weights of the final output then
come from one more call on the whole output. Each file holds its weights (no external-data file), so a web page
can fetch it as one asset. Exporting needs the ``onnx`` and ``onnxscript`` packages (``pip install
attention-executed[export]``); running the graphs needs ``onnxruntime`` (or ONNX Runtime Web in a browser).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._validation import check_integer
from .data import BOS_ID, EOS_ID, PAD_ID, pad_sequences
from .decode import max_output_lengths, search_greedy
from .model import Transformer, eval_mode

__all__ = ["EncoderGraph", "DecoderGraph", "export_onnx", "load_onnx", "OnnxStep", "onnx_greedy_decode", "ONNX_OPSET"]

ONNX_OPSET = 18


class EncoderGraph(nn.Module):
    """``src_ids [batch, src_len]`` -> ``(memory [batch, src_len, d_model], encoder_attention [layers, batch,
    heads, src_len, src_len])``: :meth:`~companion.model.Transformer.encode` with every layer's weights stacked.

    Uses :meth:`~companion.model.Transformer.encode_unchecked` (the id check of ``encode`` reads the ids back to
    the host, which graph capture cannot follow): callers of the exported graph must pass ids inside the source
    vocabulary.
    """

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        memory, _, maps = self.model.encode_unchecked(src_ids, need_weights=True)
        return memory, torch.stack(maps)


class DecoderGraph(nn.Module):
    """One decoding step on the whole prefix ``tgt_ids [batch, tgt_len]``.

    Returns ``(logits [batch, tgt_vocab], log_probs [batch, tgt_vocab], self_attention [layers, batch, heads,
    tgt_len, tgt_len], cross_attention [layers, batch, heads, tgt_len, src_len])``; ``logits`` are the last
    position's (the only one projected onto the vocabulary), with ``<pad>`` and ``<bos>`` set to -inf (they
    are never generated).
    """

    def __init__(self, model: Transformer, bos_id: int = BOS_ID) -> None:
        super().__init__()
        self.model = model
        self.bos_id = bos_id
        never = torch.zeros(model.config.tgt_vocab_size, dtype=torch.bool)
        never[[model.config.pad_id, bos_id]] = True
        self.register_buffer("never_generated", never, persistent=False)

    def forward(
        self, tgt_ids: torch.Tensor, memory: torch.Tensor, src_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        src_mask = (src_ids != self.model.config.pad_id)[:, None, None, :]
        all_logits, maps = self.model.decode_unchecked(tgt_ids, memory, src_mask, need_weights=True, last_only=True)
        logits = all_logits[:, -1].float().masked_fill(self.never_generated, float("-inf"))
        self_attention = torch.stack([weights for weights, _ in maps])
        cross_attention = torch.stack([weights for _, weights in maps])
        return logits, F.log_softmax(logits, dim=-1), self_attention, cross_attention


def export_onnx(model: Transformer, directory: str | os.PathLike, *, bos_id: int = BOS_ID) -> dict[str, Path]:
    """Write ``encoder.onnx`` and ``decoder.onnx`` for ``model`` into ``directory`` (see the module docstring).

    The graphs take any batch size and lengths up to the model's ``max_len``. Each file is written to a
    temporary name and renamed when complete, so an interrupted export leaves no half-written graph.

    Returns:
        the paths written, ``{"encoder": ..., "decoder": ...}``.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    check_integer("bos_id (a target token id)", bos_id, minimum=0, maximum=model.config.tgt_vocab_size - 1)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device
    src = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]], device=device)  # any in-vocabulary ids, one padded row
    tgt = torch.tensor([[bos_id, 5, 6], [bos_id, 7, 0]], device=device)
    batch, src_len, tgt_len = torch.export.Dim("batch"), torch.export.Dim("src_len"), torch.export.Dim("tgt_len")
    with eval_mode(model), torch.no_grad():
        memory, _ = EncoderGraph(model)(src)
        paths = {
            "encoder": _export(
                EncoderGraph(model),
                (src,),
                out / "encoder.onnx",
                ["src_ids"],
                ["memory", "encoder_attention"],
                {"src_ids": {0: batch, 1: src_len}},
            ),
            "decoder": _export(
                DecoderGraph(model, bos_id),
                (tgt, memory, src),
                out / "decoder.onnx",
                ["tgt_ids", "memory", "src_ids"],
                ["logits", "log_probs", "self_attention", "cross_attention"],
                {
                    "tgt_ids": {0: batch, 1: tgt_len},
                    "memory": {0: batch, 1: src_len},
                    "src_ids": {0: batch, 1: src_len},
                },
            ),
        }
    return paths


def _export(
    graph: nn.Module, args: tuple, path: Path, input_names: list[str], output_names: list[str], dynamic_shapes: dict
) -> Path:
    """Export one graph with ``torch.onnx.export(dynamo=True)`` into a single self-contained file at ``path``."""
    try:
        import onnx  # noqa: F401  (the exporter needs it; fail here with a clear message)
        import onnxscript  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "exporting to ONNX needs the onnx and onnxscript packages: pip install 'attention-executed[export]'"
        ) from error
    partial = path.with_name(path.name + ".partial")
    program = torch.onnx.export(
        graph,
        args,
        input_names=input_names,
        output_names=output_names,
        dynamic_shapes=dynamic_shapes,
        opset_version=ONNX_OPSET,
        dynamo=True,
        verbose=False,
    )
    assert program is not None
    program.optimize()
    program.save(str(partial), external_data=False)
    partial.replace(path)
    return path


def load_onnx(directory: str | os.PathLike, *, threads: int = 1) -> dict[str, Any]:
    """ONNX Runtime sessions ``{"encoder": ..., "decoder": ...}`` for the graphs :func:`export_onnx` wrote.

    ``threads`` is ONNX Runtime's intra-op thread count (1: deterministic and light on a shared machine).
    """
    try:
        import onnxruntime
    except ImportError as error:
        raise ImportError("running the exported graphs needs onnxruntime: pip install onnxruntime") from error
    folder = Path(directory)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    sessions = {}
    for name in ("encoder", "decoder"):
        path = folder / f"{name}.onnx"
        if not path.is_file():
            raise FileNotFoundError(f"directory must hold {name}.onnx (written by export_onnx), got {folder}")
        sessions[name] = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return sessions


class OnnxStep:
    """A step function (:class:`companion.decode.DecoderStep`) over the exported decoder graph: each step feeds the
    whole prefix ``[rows, t]`` (the graph has no cache) with each row's ``memory`` and source ids."""

    def __init__(self, decoder: Any, memory: np.ndarray, src: np.ndarray) -> None:
        self.decoder, self.memory, self.src = decoder, memory, src

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        feeds = {"tgt_ids": prefixes.numpy(), "memory": self.memory, "src_ids": self.src}
        return torch.from_numpy(self.decoder.run(["logits"], feeds)[0])  # <pad>, <bos> at -inf in the graph

    def select(self, rows: torch.Tensor, *, same_sources: bool = False) -> None:
        if not same_sources:
            index = rows.numpy()
            self.memory, self.src = self.memory[index], self.src[index]


def onnx_greedy_decode(
    sessions: dict[str, Any],
    sources: Sequence[Sequence[int]],
    *,
    max_len: int,
    max_extra_len: int = 50,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> list[list[int]]:
    """Greedy search over the exported graphs for a batch of sources (id lists ending in ``<eos>``).

    :func:`companion.decode.search_greedy` (the same search as :func:`companion.decode.greedy_decode`: length
    limit ``source length + max_extra_len``, capped at the model's ``max_len``; output ids without
    ``<bos>``/``<eos>``) over an :class:`OnnxStep`. ``sessions`` come from :func:`load_onnx`.
    """
    if not sources:
        return []
    src = pad_sequences([list(ids) for ids in sources], PAD_ID)
    limits = max_output_lengths(src, PAD_ID, max_extra_len, max_len)
    memory = sessions["encoder"].run(["memory"], {"src_ids": src.numpy()})[0]
    step = OnnxStep(sessions["decoder"], memory, src.numpy())
    return search_greedy(step, limits, bos_id=bos_id, eos_id=eos_id)
