"""The exported ONNX graphs (companion.export) against the PyTorch model they come from: the shipped de->en
model, run by ONNX Runtime on Multi30k's test_2016_flickr.

The decoder graph is one step with a key/value cache. Tolerances: every logit, log-probability, memory value and
attention weight within 1e-4 (absolute) of PyTorch's (float32 kernels differ in summation order only), stepping
the cache through a teacher-forced prefix; greedy search over the graphs gives exactly the token ids of
companion.decode.greedy_decode on all 1,000 test sentences, and beam search (beam 4 and 8) the ids of
companion.decode.beam_search on 200 of them."""

from __future__ import annotations

import pathlib
import warnings

import numpy as np
import pytest
import torch

from companion import load_pretrained
from companion.data import BOS_ID, EOS_ID, load_multi30k, pad_sequences
from companion.decode import best_hypothesis, greedy_tie_gap, translate_ids
from companion.errors import DataUnavailableError, PretrainedUnavailableError
from companion.export import (
    DECODER_INPUTS,
    DECODER_OUTPUTS,
    ENCODER_OUTPUTS,
    TOP_K,
    export_onnx,
    load_onnx,
    onnx_beam_search,
    onnx_greedy_decode,
)

ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.slow

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def pretrained():
    try:
        return load_pretrained(download=False)
    except PretrainedUnavailableError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def test_sources(pretrained) -> list[list[int]]:
    """The German side of test_2016_flickr as the model's source ids (``<eos>`` appended)."""
    try:
        pairs = load_multi30k("de", "en")["test"]
    except DataUnavailableError as error:
        pytest.skip(str(error))
    assert len(pairs) == 1000
    return [ids + [EOS_ID] for ids in pretrained.src_tokenizer.encode_batch([de for de, _ in pairs])]


@pytest.fixture(scope="module")
def exported(pretrained, tmp_path_factory) -> dict[str, pathlib.Path]:
    return export_onnx(pretrained.model, tmp_path_factory.mktemp("onnx"))


@pytest.fixture(scope="module")
def sessions(exported):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return {
        name: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for name, path in exported.items()
    }


def run_encoder(sessions, src: np.ndarray):
    return sessions["encoder"].run(ENCODER_OUTPUTS, {"src_ids": src})


def test_graphs_are_self_contained(exported, sessions, pretrained):
    folder = exported["encoder"].parent
    assert sorted(p.name for p in folder.iterdir()) == ["decoder.onnx", "encoder.onnx"]  # no .data, no .partial
    parameters_bytes = 4 * pretrained.model.num_parameters()
    assert sum(p.stat().st_size for p in exported.values()) > parameters_bytes  # the weights are inside the files
    assert [i.name for i in sessions["decoder"].get_inputs()] == DECODER_INPUTS
    assert [o.name for o in sessions["decoder"].get_outputs()] == DECODER_OUTPUTS
    assert [o.name for o in sessions["encoder"].get_outputs()] == ENCODER_OUTPUTS


def check_search_outputs(outputs: dict[str, np.ndarray], top_k: int = TOP_K) -> None:
    """The step graph's outputs for the searches are taken from its own scores exactly: ``next_ids`` is each row's
    first maximum of ``logits``; ``top_ids`` the ``top_k`` largest ``logits``, best first and the lower id first
    among equal values (a stable sort), with ``top_log_probs`` their ``log_probs``."""
    logits, log_probs = outputs["logits"], outputs["log_probs"]
    assert np.array_equal(outputs["next_ids"], logits.argmax(axis=-1))
    width = min(top_k, log_probs.shape[-1])
    expected_ids = np.argsort(-logits, axis=-1, kind="stable")[:, :width]
    assert np.array_equal(outputs["top_ids"], expected_ids)
    assert np.array_equal(outputs["top_log_probs"], np.take_along_axis(log_probs, expected_ids, axis=-1))


def test_outputs_match_pytorch_within_tolerance(sessions, pretrained, test_sources):
    """Encoder memory, all attention maps, next-token logits and log-probabilities on padded batches of real
    sentences, teacher-forced step by step (the cache growing from 0 positions) on the model's own greedy output."""
    model = pretrained.model
    greedy = translate_ids(model, test_sources[:96], beam_size=1)
    worst = 0.0
    for start in range(0, 96, 32):
        sources = test_sources[start : start + 32]
        outputs = greedy[start : start + 32]
        width = min(len(ids) for ids in outputs) + 1  # [<bos>, output...] cut to one length per batch
        tgt = torch.tensor([[BOS_ID, *ids][:width] for ids in outputs])
        src = pad_sequences(sources, 0)
        memory, encoder_attention, cross_kv = run_encoder(sessions, src.numpy())
        _, layers, rows, heads, _, d_head = cross_kv.shape
        past_kv = np.zeros((2, layers, rows, heads, 0, d_head), dtype=np.float32)
        with torch.no_grad():
            expected_memory, src_mask = model.encode(src)
            maps = model.attention_maps(src, tgt)
            expected_logits = model.decode(tgt, expected_memory, src_mask).float()
        expected_logits[:, :, [model.config.pad_id, BOS_ID]] = float("-inf")
        expected_log_probs = torch.log_softmax(expected_logits, dim=-1)
        expected_self, expected_cross = torch.stack(maps["decoder_self"]), torch.stack(maps["cross"])
        pairs = [(memory, expected_memory), (encoder_attention, torch.stack(maps["encoder"]))]
        for t in range(width):
            feeds = {"token_ids": tgt[:, t : t + 1].numpy(), "src_ids": src.numpy(), "cross_kv": cross_kv,
                     "past_kv": past_kv}  # fmt: skip
            outputs = dict(zip(DECODER_OUTPUTS, sessions["decoder"].run(DECODER_OUTPUTS, feeds)))
            logits, log_probs = outputs["logits"], outputs["log_probs"]
            assert outputs["new_kv"].shape == (2, layers, rows, heads, 1, d_head)
            past_kv = np.concatenate([past_kv, outputs["new_kv"]], axis=4)  # the cache grows by this position
            check_search_outputs(outputs)
            attention = outputs["attention"]  # [L, rows, H, 1, (t + 1) + n]: self-attention, then cross-attention
            assert attention.shape[-1] == t + 1 + src.shape[1]
            pairs.append((attention[..., : t + 1], expected_self[:, :, :, t : t + 1, : t + 1]))
            pairs.append((attention[..., t + 1 :], expected_cross[:, :, :, t : t + 1]))
            finite = torch.isfinite(expected_logits[:, t]).numpy()
            assert np.array_equal(np.isfinite(logits), finite) and np.array_equal(np.isfinite(log_probs), finite)
            worst = max(worst, float(np.abs(logits[finite] - expected_logits[:, t].numpy()[finite]).max()))
            worst = max(worst, float(np.abs(log_probs[finite] - expected_log_probs[:, t].numpy()[finite]).max()))
        for got, want in pairs:
            assert got.shape == tuple(want.shape)
            worst = max(worst, float(np.abs(got - want.numpy()).max()))
    print(f"largest absolute difference ONNX Runtime vs PyTorch: {worst:.2e}")
    assert worst < TOLERANCE


@pytest.mark.parametrize("beam_size", [4, 8])
def test_beam_ids_identical(sessions, pretrained, test_sources, beam_size):
    """Beam search over the graphs (the cache reordered by parent hypothesis each step) is companion's."""
    model = pretrained.model
    sources = test_sources[:200]
    expected = translate_ids(model, sources, beam_size=beam_size, alpha=0.6, batch_size=50)
    got = []
    for start in range(0, len(sources), 50):
        chunk = sources[start : start + 50]
        finished = onnx_beam_search(sessions, chunk, beam_size, max_len=model.config.max_len)
        got += [list(best_hypothesis(hypotheses, 0.6).tokens) for hypotheses in finished]
    differing = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert not differing, f"{len(differing)} of {len(sources)} beam-{beam_size} outputs differ, first {differing[:1]}"


def test_greedy_ids_identical_on_the_whole_test_set_but_for_ties(sessions, pretrained, test_sources):
    model = pretrained.model
    expected = translate_ids(model, test_sources, beam_size=1, batch_size=100)
    got: list[list[int]] = []
    order = sorted(range(len(test_sources)), key=lambda i: len(test_sources[i]))
    by_index: dict[int, list[int]] = {}
    for start in range(0, len(order), 100):
        chunk = order[start : start + 100]
        for i, ids in zip(
            chunk, onnx_greedy_decode(sessions, [test_sources[i] for i in chunk], max_len=model.config.max_len)
        ):
            by_index[i] = ids
    got = [by_index[i] for i in range(len(test_sources))]
    differing = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    # Two float implementations may pick different tokens only where the model itself cannot tell them apart: at
    # the first token where the outputs part, PyTorch's scores of the two tokens must be within float rounding.
    gaps = {i: greedy_tie_gap(model, test_sources[i], got[i], expected[i]) for i in differing}
    print(f"greedy outputs identical for {1000 - len(differing)} of 1000 sentences; score gaps where not: {gaps}")
    assert len(differing) <= 5, f"{len(differing)} of 1000 greedy outputs differ, first at sentence {differing[0]}"
    assert all(gap < 10 * TOLERANCE for gap in gaps.values()), f"outputs part where the scores are not tied: {gaps}"


def test_export_rejects_what_is_not_a_transformer(tmp_path):
    with pytest.raises(TypeError, match="model must be a companion Transformer"):
        export_onnx(torch.nn.Linear(2, 2), tmp_path)  # type: ignore[arg-type]


def test_export_rejects_a_bos_id_outside_the_vocabulary(pretrained, tmp_path: pathlib.Path):
    with pytest.raises(ValueError, match=r"bos_id \(a target token id\) must be an integer in \[0, "):
        export_onnx(pretrained.model, tmp_path, bos_id=10**6)
    assert not any(tmp_path.iterdir())  # nothing written


def test_load_onnx_names_the_missing_graph(tmp_path):
    with pytest.raises(FileNotFoundError, match="directory must hold encoder.onnx"):
        load_onnx(tmp_path)


def test_untied_output_layer_and_a_small_vocabulary(tiny_model, tmp_path, capfd):
    """An output layer with its own bias keeps it in the step graph (beside the -inf of the never-generated
    tokens), and top_k as large as the vocabulary gives whole rows in top_log_probs/top_ids."""
    torch.manual_seed(0)
    model = tiny_model(tie_output=False)
    with torch.no_grad():
        model.generator.bias.normal_()  # a bias far from zero
    vocab = model.config.tgt_vocab_size
    model.train()  # exported as the user may hold it: in training mode
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sessions = load_onnx(export_onnx(model, tmp_path, top_k=vocab)["decoder"].parent)
    assert not [str(w.message) for w in caught if "training mode" in str(w.message)]  # graphs exported in eval mode
    noise = ("will not be used, since it shares the same shape constraints", "LeafSpec")  # PyTorch's, nothing to do
    assert not [str(w.message) for w in caught if any(text in str(w.message) for text in noise)]
    assert "torchvision is not installed" not in capfd.readouterr().err  # nor its log lines about torchvision
    assert model.training  # and the model given back in the mode it came in
    model.eval()  # the reference below: no dropout
    src = torch.tensor([[5, 6, 7, EOS_ID], [8, EOS_ID, 0, 0]])
    tokens = torch.tensor([[BOS_ID], [BOS_ID]])
    _, _, cross_kv = run_encoder(sessions, src.numpy())
    _, layers, rows, heads, _, d_head = cross_kv.shape
    empty = np.zeros((2, layers, rows, heads, 0, d_head), dtype=np.float32)
    feeds = {"token_ids": tokens.numpy(), "src_ids": src.numpy(), "cross_kv": cross_kv, "past_kv": empty}
    outputs = dict(zip(DECODER_OUTPUTS, sessions["decoder"].run(DECODER_OUTPUTS, feeds)))
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        want = model.decode(tokens, memory, src_mask)[:, -1]
    want[:, [model.config.pad_id, BOS_ID]] = float("-inf")
    finite = np.isfinite(want.numpy())
    assert np.array_equal(np.isfinite(outputs["logits"]), finite)
    assert np.abs(outputs["logits"][finite] - want.numpy()[finite]).max() < TOLERANCE
    assert outputs["top_ids"].shape == (2, vocab)
    check_search_outputs(outputs, top_k=vocab)


@pytest.mark.parametrize("top_k", [0, 20, 2.5])
def test_top_k_outside_the_vocabulary_is_refused(tiny_model, tmp_path, top_k):
    with pytest.raises((ValueError, TypeError), match="top_k"):
        export_onnx(tiny_model(), tmp_path, top_k=top_k)
    assert list(tmp_path.iterdir()) == []  # nothing written
