"""Export a trained Transformer to ONNX, for decoding outside Python (the book's in-page translator).

:func:`export_onnx` writes two graphs that together do what :mod:`companion.decode` does with the model, with a
key/value cache as :class:`companion.decode.CachedStep` keeps one (``L`` decoder layers, ``H`` heads of width
``D``):

``encoder.onnx``
    ``src_ids`` int64 ``[batch, src_len]`` (token ids ending in ``<eos>``, right-padded with ``<pad>``) ->
    ``memory`` float32 ``[batch, src_len, d_model]``, ``encoder_attention`` ``[encoder_layers, batch, heads,
    src_len, src_len]``, and the cross-attention keys and values of every decoder layer, ``cross_kv`` ``[2, L,
    batch, H, src_len, D]`` (keys, then values; they depend on the source alone: computed once per sentence).
``decoder.onnx``
    one decoding step: ``token_ids`` int64 ``[batch, 1]`` (the last token of each prefix, ``<bos>`` at the first
    step), ``src_ids`` (for the padding mask), ``cross_kv`` and the self-attention cache ``past_kv`` ``[2, L,
    batch, H, past_len, D]`` (keys, then values, of the ``past_len`` tokens before this one; 0 at the first step)
    -> ``logits`` float32 ``[batch, tgt_vocab]`` for the next token, with ``<pad>`` and ``<bos>`` at -inf as the
    searches of :mod:`companion.decode` set them; ``log_probs`` (their log-softmax, what beam search adds up);
    ``new_kv`` ``[2, L, batch, H, 1, D]``, this position's keys and values (the next step's ``past_kv`` is
    ``past_kv`` with them appended along the positions; beam search first reorders its rows by parent
    hypothesis); ``attention`` ``[L, batch, H, 1, past_len + 1 + src_len]``, this position's attention rows (its
    self-attention over the earlier positions and itself, then its cross-attention over the source); and what a
    search takes from the scores, so that a caller need not copy and scan the whole vocabulary at every step:
    ``top_ids`` int64 ``[batch, top_k]`` (each row's ``top_k`` highest-scoring tokens, best first, the lower id
    first among equal scores: ONNX ``TopK``'s order), ``top_log_probs`` float32 ``[batch, top_k]`` (their
    log-probabilities, taken from ``log_probs``, so never increasing along a row) and ``next_ids`` int64
    ``[batch]`` (``top_ids[:, 0]``: the most probable token, the first of equal maxima, greedy search's choice).
    Beam search with ``k < top_k / 2`` beams can rank its ``2k`` candidates from these.

A graph runtime pays a fixed price for every input and output of a call, besides copying it (in a browser, more
than for a small operation), so the keys and values travel as one tensor each way, and the cache grows on the
caller's side by the one new position.

The step graph is built from the layers' weights by :class:`DecoderStepGraph` (the same arithmetic as
:class:`~companion.model.DecoderLayer` on one new position), not from the model's own cache objects, so the
graph's interface is its own. Each file holds its weights (no external-data file), so a web page can fetch it as
one asset. Exporting needs the ``onnx`` and ``onnxscript`` packages (``pip install attention-executed[export]``);
running the graphs needs ``onnxruntime`` (or ONNX Runtime Web in a browser).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._validation import check_integer
from .data import BOS_ID, EOS_ID, PAD_ID, pad_sequences
from .decode import Finished, max_output_lengths, search_beam, search_greedy
from .model import DecoderLayer, Transformer, eval_mode

__all__ = [
    "EncoderGraph",
    "DecoderStepGraph",
    "export_onnx",
    "load_onnx",
    "OnnxStep",
    "onnx_greedy_decode",
    "onnx_beam_search",
    "ONNX_OPSET",
    "TOP_K",
    "ENCODER_OUTPUTS",
    "DECODER_INPUTS",
    "DECODER_OUTPUTS",
]

ONNX_OPSET = 18
ENCODER_OUTPUTS = ["memory", "encoder_attention", "cross_kv"]
DECODER_INPUTS = ["token_ids", "src_ids", "cross_kv", "past_kv"]
DECODER_OUTPUTS = ["logits", "log_probs", "new_kv", "attention", "next_ids", "top_log_probs", "top_ids"]
TOP_K = 17  # the default width of top_log_probs/top_ids: 2k + 1 for beams of up to 8 (2k candidates, and one more)


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``[batch, seq, d_model]`` -> ``[batch, heads, seq, d_head]``."""
    b, n, d = x.shape
    return x.reshape(b, n, heads, d // heads).transpose(1, 2)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocked: torch.Tensor | None):
    """softmax(q k^T) v over heads ``[batch, heads, seq, d_head]``, with ``q`` already scaled by ``1 / sqrt(d_head)``
    (:func:`_scaled_query`); ``blocked [batch, 1, 1, n]`` (True = may not attend: ``<pad>``). Returns ``(heads_out,
    weights [batch, heads, m, n])``."""
    scores = q @ k.transpose(-2, -1)
    if blocked is not None:
        scores = scores.masked_fill(blocked, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _scaled_query(weight: torch.Tensor, bias: torch.Tensor | None, width: int, heads: int):
    """``(weight, bias)`` of a projection whose first ``width`` outputs are the queries, those rows multiplied by
    ``1 / sqrt(d_head)``: the scaling of the scores done once, on the constant weights, instead of dividing the
    scores at every step (a graph runtime folds the product into one constant)."""
    scale = torch.ones(weight.shape[0], dtype=weight.dtype, device=weight.device)
    scale[:width] = 1 / math.sqrt(width // heads)
    return weight * scale[:, None], None if bias is None else bias * scale


def _never_generated_mask(model: Transformer, bos_id: int = BOS_ID) -> torch.Tensor:
    """Boolean ``[tgt_vocab]``, True at ``<pad>`` and ``bos_id``: the tokens a graph's next-token scores hold at -inf,
    as the searches of :mod:`companion.decode` set them."""
    never = torch.zeros(model.config.tgt_vocab_size, dtype=torch.bool)
    never[[model.config.pad_id, bos_id]] = True
    return never


def _output_bias(model: Transformer, bos_id: int = BOS_ID) -> torch.Tensor:
    """The output layer's bias ``[tgt_vocab]`` (zeros for a tied output layer, which has none) with -inf at the
    never-generated tokens: one matrix product then gives the masked scores, with no separate masking pass over
    the vocabulary (``x + 0`` is ``x``, ``x + -inf`` is ``-inf`` for finite ``x``: the same numbers)."""
    bias = model.generator.bias
    base = torch.zeros(model.config.tgt_vocab_size) if bias is None else bias.detach().float().cpu()
    return base.masked_fill(_never_generated_mask(model, bos_id), float("-inf"))


def _top_k(model: Transformer, top_k: int | None) -> int:
    """``top_k`` checked (a whole number from 1 to the target vocabulary size), or its default."""
    vocab = model.config.tgt_vocab_size
    return min(TOP_K, vocab) if top_k is None else check_integer("top_k", top_k, minimum=1, maximum=vocab)


def _search_outputs(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the searches take from next-token ``logits [rows, vocab]`` (see the module docstring): ``(log_probs,
    next_ids [rows], top_log_probs, top_ids [rows, top_k])``."""
    log_probs = F.log_softmax(logits, dim=-1)
    _, top_ids = logits.topk(top_k, dim=-1)
    return log_probs, top_ids[:, 0], log_probs.gather(1, top_ids), top_ids


def _decoder_layers(model: Transformer) -> list[DecoderLayer]:
    return [cast(DecoderLayer, layer) for layer in model.decoder.layers]


class EncoderGraph(nn.Module):
    """``src_ids [batch, src_len]`` -> ``(memory [batch, src_len, d_model], encoder_attention [layers, batch,
    heads, src_len, src_len], cross_kv [2, decoder_layers, batch, heads, src_len, d_head])``:
    :meth:`~companion.model.Transformer.encode` with every layer's weights stacked, and each decoder layer's
    cross-attention key and value projections of the memory.

    Uses :meth:`~companion.model.Transformer.encode_unchecked` (the id check of ``encode`` reads the ids back to
    the host, which graph capture cannot follow): callers of the exported graph must pass ids inside the source
    vocabulary.
    """

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        memory, _, maps = self.model.encode_unchecked(src_ids, need_weights=True)
        heads = self.model.config.num_heads
        keys, values = [], []
        for layer in _decoder_layers(self.model):
            keys.append(_split_heads(layer.cross_attn.k_proj(memory), heads))
            values.append(_split_heads(layer.cross_attn.v_proj(memory), heads))
        return memory, torch.stack(maps), torch.stack([torch.stack(keys), torch.stack(values)])


class DecoderStepGraph(nn.Module):
    """One decoding step with a key/value cache, from the decoder layers' weights (see the module docstring).

    ``forward(token_ids [batch, 1], src_ids [batch, n], cross_kv [2, L, batch, H, n, D], past_kv [2, L, batch,
    H, past, D])`` -> ``(logits [batch, tgt_vocab], log_probs, new_kv [2, L, batch, H, 1, D], attention [L,
    batch, H, 1, past + 1 + n], next_ids [batch], top_log_probs, top_ids [batch, top_k])``. The new
    token sits at position ``past`` (its positional encoding); it attends to every cached position and itself
    (causal by construction), and to the source positions that are not ``<pad>``. ``top_k`` (default
    ``min(TOP_K, tgt_vocab)``) is the width of ``top_log_probs`` and ``top_ids``.

    One position per row, so the step keeps it as ``[batch, d_model]``: every projection is one plain matrix
    product (the self-attention's three as one, with the stacked ``[W^Q; W^K; W^V]``), and splitting or merging
    the heads of a single position is a reshape. Fewer, larger operations than the layers' own ``[batch, seq,
    d_model]`` code with its transposes; a graph runtime pays a fixed price per operation.
    """

    output_bias: torch.Tensor  # [tgt_vocab], a buffer (see _output_bias)

    def __init__(self, model: Transformer, bos_id: int = BOS_ID, top_k: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.top_k = _top_k(model, top_k)
        device = model.generator.weight.device
        self.register_buffer("output_bias", _output_bias(model, bos_id).to(device), persistent=False)

    def _embed(self, token_ids: torch.Tensor, position: int | torch.SymInt) -> torch.Tensor:
        """``token_ids [rows, 1]`` at ``position`` -> ``[rows, d_model]`` (embedding and positional encoding)."""
        model = self.model
        table = model.tgt_pos.table()  # [max_len, d_model] (sinusoidal buffer or learned weight)
        y = model.tgt_embed(token_ids[:, 0]) * math.sqrt(model.config.d_model)
        return y + table[position].to(y.dtype)

    def forward(
        self,
        token_ids: torch.Tensor,
        src_ids: torch.Tensor,
        cross_kv: torch.Tensor,
        past_kv: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        model = self.model
        rows, width = token_ids.shape[0], model.config.d_model
        heads = model.config.num_heads

        def split(x: torch.Tensor) -> torch.Tensor:  # [rows, d_model] -> [rows, heads, 1, d_head] (one position)
            return x.reshape(rows, heads, 1, width // heads)

        blocked = (src_ids == model.config.pad_id)[:, None, None, :]  # the source's <pad> positions
        y = self._embed(token_ids, past_kv.shape[4])  # [rows, d_model]: one position, kept 2-D
        new_k, new_v, maps = [], [], []
        for i, layer in enumerate(_decoder_layers(model)):
            attn = layer.self_attn
            x = layer.norm1(y) if layer.norm_first else y
            qkv = F.linear(x, *_scaled_query(*attn._stack.stacked(), width, heads))  # [W^Q / sqrt(D); W^K; W^V]
            q, k, v = qkv.split(width, dim=-1)
            new_k.append(split(k))
            new_v.append(split(v))
            k = torch.cat([past_kv[0, i], new_k[-1]], dim=2)
            v = torch.cat([past_kv[1, i], new_v[-1]], dim=2)
            out, w_self = _attention(split(q), k, v, None)
            out = attn.out_proj(out.reshape(rows, width))  # [rows, heads, 1, d_head]: merging heads is a reshape
            y = y + out if layer.norm_first else layer.norm1(y + out)
            cross = layer.cross_attn
            x = layer.norm2(y) if layer.norm_first else y
            q = F.linear(x, *_scaled_query(cross.q_proj.weight, cross.q_proj.bias, width, heads))
            out, w_cross = _attention(split(q), cross_kv[0, i], cross_kv[1, i], blocked)
            out = cross.out_proj(out.reshape(rows, width))
            y = y + out if layer.norm_first else layer.norm2(y + out)
            y = y + layer.ffn(layer.norm3(y)) if layer.norm_first else layer.norm3(y + layer.ffn(y))
            maps.append(torch.cat([w_self, w_cross], dim=-1))
        if model.decoder.norm is not None:
            y = model.decoder.norm(y)
        weight = model.generator.weight
        logits = F.linear(y, weight, self.output_bias.to(weight.dtype)).float()
        log_probs, next_ids, top_log_probs, top_ids = _search_outputs(logits, self.top_k)
        return (
            logits,
            log_probs,
            torch.stack(new_k + new_v).reshape(2, len(new_k), *new_k[0].shape),  # [2, L, rows, H, 1, D]
            torch.stack(maps),
            next_ids,
            top_log_probs,
            top_ids,
        )


def export_onnx(
    model: Transformer, directory: str | os.PathLike, *, bos_id: int = BOS_ID, top_k: int | None = None
) -> dict[str, Path]:
    """Write ``encoder.onnx`` and ``decoder.onnx`` for ``model`` into ``directory`` (see the module docstring).
    ``top_k`` is the width of the step graph's ``top_log_probs``/``top_ids`` (``min(TOP_K, vocabulary)`` when not
    given; at most the target vocabulary): beam search of fewer than ``top_k / 2`` beams can rank its candidates
    from them (the in-page translator does; one entry more than the ``2k`` candidates tells whether a tie reaches
    the cut).

    The graphs take any batch size (beam rows), source lengths up to the model's ``max_len`` and cache lengths
    from 0 to ``max_len - 1``. Each file is written to a temporary name and renamed when complete, so an
    interrupted export leaves no half-written graph.

    Returns:
        the paths written, ``{"encoder": ..., "decoder": ...}``.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    check_integer("bos_id (a target token id)", bos_id, minimum=0, maximum=model.config.tgt_vocab_size - 1)
    top_k = _top_k(model, top_k)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device
    src = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]], device=device)  # any in-vocabulary ids, one padded row
    tokens = torch.tensor([[5], [7]], device=device)
    batch, src_len = torch.export.Dim("batch"), torch.export.Dim("src_len", max=model.config.max_len)
    past_len = torch.export.Dim("past_len", max=model.config.max_len - 1)
    with eval_mode(model), torch.no_grad():
        _, _, cross_kv = EncoderGraph(model)(src)
        _, layers, _, heads, _, d_head = cross_kv.shape
        past = torch.randn(2, layers, 2, heads, 3, d_head, device=device)  # any cache of 3 earlier positions
        static = torch.export.Dim.STATIC
        kv = {0: static, 1: static, 2: batch, 3: static, 4: src_len, 5: static}
        cache = {0: static, 1: static, 2: batch, 3: static, 4: past_len, 5: static}
        paths = {
            "encoder": _export(
                EncoderGraph(model),
                (src,),
                out / "encoder.onnx",
                ["src_ids"],
                ENCODER_OUTPUTS,
                {"src_ids": {0: batch, 1: src_len}},
            ),
            "decoder": _export(
                DecoderStepGraph(model, bos_id, top_k),
                (tokens, src, cross_kv, past),
                out / "decoder.onnx",
                DECODER_INPUTS,
                DECODER_OUTPUTS,
                {
                    "token_ids": {0: batch, 1: static},
                    "src_ids": {0: batch, 1: src_len},
                    "cross_kv": kv,
                    "past_kv": cache,
                },
            ),
        }
    return paths


# What PyTorch's exporter says at every export of these graphs, about its own internals, with nothing for a user to
# act on: an axis name given to several inputs (the same torch.export.Dim, as intended here) "will not be used", and
# its pytree code's use of a deprecated check (torch 2.13); and, logged, that it skips torchvision's operators when
# torchvision is not installed (these graphs use none).
_EXPORTER_NOISE = (
    r"# The axis name: \w+ will not be used, since it shares the same shape constraints with another axis",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
)
_EXPORTER_REGISTRY_LOGGER = "torch.onnx._internal.exporter._registration"


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Export without the exporter's noise above; every other warning and log message still shows."""
    logger = logging.getLogger(_EXPORTER_REGISTRY_LOGGER)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for message in _EXPORTER_NOISE:
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        logger.setLevel(level)


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
    graph.eval()  # a fresh wrapper starts in training mode (the model inside is already in eval mode)
    with _quiet_exporter():
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
    """A step function (:class:`companion.decode.DecoderStep`) over the exported graphs with their key/value
    cache: each call feeds only the last token of every prefix ``[rows, t]`` and the cache of the ``t - 1``
    tokens before it, then appends the graph's ``new_kv`` to the cache; ``select`` reorders the cache rows (and,
    unless ``same_sources``, each row's source and cross-attention keys and values) as the search keeps, drops or
    repeats rows.

    ``cross_kv`` is the encoder graph's ``[2, L, rows, H, n, D]`` for ``src [rows, n]``. After each call,
    ``self_attention [L, rows, H, 1, t]`` and ``cross_attention [L, rows, H, 1, n]`` hold that step's attention
    rows.
    """

    def __init__(self, decoder: Any, src: np.ndarray, cross_kv: np.ndarray) -> None:
        self.decoder, self.src, self.cross_kv = decoder, src, cross_kv
        two, layers, rows, heads, _, d_head = cross_kv.shape
        self.past_kv = np.zeros((two, layers, rows, heads, 0, d_head), dtype=np.float32)
        self.self_attention: np.ndarray | None = None
        self.cross_attention: np.ndarray | None = None

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        past = self.past_kv.shape[4]
        if prefixes.shape[1] != past + 1:
            raise ValueError(
                f"prefixes must be one token longer than the cache ({past} positions), got length {prefixes.shape[1]}"
            )
        feeds = {
            "token_ids": prefixes[:, -1:].numpy(),
            "src_ids": self.src,
            "cross_kv": self.cross_kv,
            "past_kv": self.past_kv,
        }
        logits, new_kv, attention = self.decoder.run(["logits", "new_kv", "attention"], feeds)
        self.past_kv = np.concatenate([self.past_kv, new_kv], axis=4)
        self.self_attention, self.cross_attention = attention[..., : past + 1], attention[..., past + 1 :]
        return torch.from_numpy(logits)  # <pad>, <bos> at -inf in the graph

    def select(self, rows: torch.Tensor, *, same_sources: bool = False) -> None:
        """See :class:`~companion.decode.DecoderStep`: keep rows ``rows [new_rows]`` of the cached keys/values (and
        of the sources, unless ``same_sources``)."""
        index = rows.numpy()
        self.past_kv = self.past_kv[:, :, index]
        if not same_sources:
            self.src, self.cross_kv = self.src[index], self.cross_kv[:, :, index]


def _encoded_step(sessions: dict[str, Any], sources: Sequence[Sequence[int]], repeat: int = 1):
    """Pad ``sources``, run the encoder graph, and return ``(src, OnnxStep)`` with each row repeated ``repeat``
    times (beam search's rows ``sentence * k + beam``)."""
    src = pad_sequences([list(ids) for ids in sources], PAD_ID)
    (cross_kv,) = sessions["encoder"].run(["cross_kv"], {"src_ids": src.numpy()})
    rows = np.repeat(np.arange(len(sources)), repeat)
    return src, OnnxStep(sessions["decoder"], src.numpy()[rows], cross_kv[:, :, rows])


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
    src, step = _encoded_step(sessions, sources)
    limits = max_output_lengths(src, PAD_ID, max_extra_len, max_len)
    return search_greedy(step, limits, bos_id=bos_id, eos_id=eos_id)


def onnx_beam_search(
    sessions: dict[str, Any],
    sources: Sequence[Sequence[int]],
    beam_size: int,
    *,
    max_len: int,
    max_extra_len: int = 50,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> list[list[Finished]]:
    """Beam search over the exported graphs: :func:`companion.decode.search_beam` over an :class:`OnnxStep`
    (rows ``sentence * beam_size + beam``); returns each sentence's finished hypotheses, as ``search_beam``
    does (pick the winner with :func:`companion.decode.best_hypothesis`)."""
    if not sources:
        return []
    src, step = _encoded_step(sessions, sources, repeat=beam_size)
    limits = max_output_lengths(src, PAD_ID, max_extra_len, max_len)
    return search_beam(step, limits, beam_size, bos_id=bos_id, eos_id=eos_id)
