"""The exported ONNX graphs (companion.export) against the PyTorch model they come from: the shipped de->en
model, run by ONNX Runtime on Multi30k's test_2016_flickr.

Tolerances: every logit, log-probability, memory value and attention weight within 1e-4 (absolute) of PyTorch's
(float32 kernels differ in summation order only), and greedy search over the graphs gives exactly the token ids
of companion.decode.greedy_decode on all 1,000 test sentences."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from companion import load_pretrained
from companion.data import BOS_ID, EOS_ID, load_multi30k, pad_sequences
from companion.decode import translate_ids
from companion.errors import DataUnavailableError, PretrainedUnavailableError
from companion.export import export_onnx, load_onnx, onnx_greedy_decode

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
    return sessions["encoder"].run(None, {"src_ids": src})


def run_decoder(sessions, tgt: np.ndarray, memory: np.ndarray, src: np.ndarray):
    return sessions["decoder"].run(None, {"tgt_ids": tgt, "memory": memory, "src_ids": src})


def test_graphs_are_self_contained(exported, sessions, pretrained):
    folder = exported["encoder"].parent
    assert sorted(p.name for p in folder.iterdir()) == ["decoder.onnx", "encoder.onnx"]  # no .data, no .partial
    parameters_bytes = 4 * pretrained.model.num_parameters()
    assert sum(p.stat().st_size for p in exported.values()) > parameters_bytes  # the weights are inside the files
    assert [i.name for i in sessions["decoder"].get_inputs()] == ["tgt_ids", "memory", "src_ids"]
    assert [o.name for o in sessions["decoder"].get_outputs()] == [
        "logits",
        "log_probs",
        "self_attention",
        "cross_attention",
    ]


def test_outputs_match_pytorch_within_tolerance(sessions, pretrained, test_sources):
    """Encoder memory, all attention maps, next-token logits and log-probabilities on padded batches of real
    sentences, teacher-forced with a prefix of the model's own greedy output."""
    model = pretrained.model
    greedy = translate_ids(model, test_sources[:96], beam_size=1)
    worst = 0.0
    for start in range(0, 96, 32):
        sources = test_sources[start : start + 32]
        prefixes = [[BOS_ID, *ids[: 3 + (i % 7)]] for i, ids in enumerate(greedy[start : start + 32])]
        width = min(len(p) for p in prefixes)  # one prefix length per batch (the decoder graph predicts the last)
        src = pad_sequences(sources, 0)
        tgt = torch.tensor([p[:width] for p in prefixes])
        memory, encoder_attention = run_encoder(sessions, src.numpy())
        logits, log_probs, self_attention, cross_attention = run_decoder(sessions, tgt.numpy(), memory, src.numpy())
        with torch.no_grad():
            expected_memory, src_mask = model.encode(src)
            maps = model.attention_maps(src, tgt)
            expected_logits = model.decode(tgt, expected_memory, src_mask)[:, -1].float()
        expected_logits[:, [model.config.pad_id, BOS_ID]] = float("-inf")
        expected_log_probs = torch.log_softmax(expected_logits, dim=-1)
        pairs = [
            (memory, expected_memory),
            (encoder_attention, torch.stack(maps["encoder"])),
            (self_attention, torch.stack(maps["decoder_self"])),
            (cross_attention, torch.stack(maps["cross"])),
        ]
        for got, want in pairs:
            assert got.shape == tuple(want.shape)
            worst = max(worst, float(np.abs(got - want.numpy()).max()))
        finite = torch.isfinite(expected_logits).numpy()
        assert np.array_equal(np.isfinite(logits), finite) and np.array_equal(np.isfinite(log_probs), finite)
        worst = max(worst, float(np.abs(logits[finite] - expected_logits.numpy()[finite]).max()))
        worst = max(worst, float(np.abs(log_probs[finite] - expected_log_probs.numpy()[finite]).max()))
    print(f"largest absolute difference ONNX Runtime vs PyTorch: {worst:.2e}")
    assert worst < TOLERANCE


def test_greedy_ids_identical_on_the_whole_test_set(sessions, pretrained, test_sources):
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
    assert not differing, f"{len(differing)} of 1000 greedy outputs differ, first at sentence {differing[0]}"


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
