"""bench/onnx_decode_speed.py: its recompute graphs (the baseline it times the exported cached step graph against)
compute what the model computes, its searches over them give the cached graph's outputs, and bad options are
refused before anything is exported."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest
import torch

from companion.data import EOS_ID, PAD_ID, pad_sequences
from companion.export import export_onnx, load_onnx, onnx_beam_search, onnx_greedy_decode

ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import onnx_decode_speed as bench  # noqa: E402

TOLERANCE = 1e-4


@pytest.fixture
def graphs(tiny_model, tmp_path):
    """A tiny random model, its exported graphs and both recompute graphs, as ONNX Runtime sessions."""
    torch.manual_seed(0)
    model = tiny_model(src_vocab_size=40, tgt_vocab_size=50)
    folder = tmp_path
    export_onnx(model, folder)
    bench.export_recompute(model, folder / "recompute.onnx", with_maps=False)
    bench.export_recompute(model, folder / "recompute_maps.onnx", with_maps=True)
    sessions = load_onnx(folder)
    for name in ("recompute", "recompute_maps"):
        sessions[name] = ort.InferenceSession(str(folder / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    return model, sessions


def sources(seed: int, count: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 9, (count,), generator=generator).tolist()
    return [torch.randint(4, 40, (n,), generator=generator).tolist() + [EOS_ID] for n in lengths]


def test_recompute_graphs_compute_the_models_last_position(graphs):
    model, sessions = graphs
    src = pad_sequences(sources(1, 3), PAD_ID)
    prefixes = torch.tensor([[2, 7, 9, 11], [2, 5, 5, 6], [2, 30, 31, 8]])
    with torch.no_grad():
        memory, src_mask = model.encode_unchecked(src)
        want, maps = model.decode_unchecked(prefixes, memory, src_mask, need_weights=True, last_only=True)
    want = want[:, -1]
    want[:, [PAD_ID, 2]] = float("-inf")  # <pad> and <bos> are never generated
    feeds = {"prefixes": prefixes.numpy(), "src_ids": src.numpy(), "memory": memory.numpy()}
    logits = sessions["recompute"].run(["logits"], feeds)[0]
    assert np.array_equal(np.isfinite(logits), np.isfinite(want.numpy()))
    finite = np.isfinite(logits)
    assert np.abs(logits[finite] - want.numpy()[finite]).max() < TOLERANCE
    with_maps = sessions["recompute_maps"].run(None, feeds)
    assert np.abs(with_maps[0][finite] - want.numpy()[finite]).max() < TOLERANCE
    assert np.abs(with_maps[2] - torch.stack([w for w, _ in maps]).numpy()).max() < TOLERANCE  # self-attention
    assert np.abs(with_maps[3] - torch.stack([w for _, w in maps]).numpy()).max() < TOLERANCE  # cross-attention


def test_searches_over_the_recompute_graphs_give_the_cached_graphs_outputs(graphs):
    model, sessions = graphs
    batch = sources(2, 6)
    max_len = model.config.max_len
    assert bench.recompute_search(sessions, "recompute", batch, max_len) == onnx_greedy_decode(
        sessions, batch, max_len=max_len
    )
    cached = [bench.best_tokens(found) for found in onnx_beam_search(sessions, batch, 4, max_len=max_len)]
    assert bench.recompute_search(sessions, "recompute_maps", batch, max_len, beam=4) == cached


def test_batches_are_length_sorted_and_cover_every_sentence():
    ids = sources(3, 10)
    groups = bench.batches(ids, 4)
    assert [len(g) for g in groups] == [4, 4, 2]
    flat = [sentence for group in groups for sentence in group]
    assert sorted(flat) == sorted(ids)
    assert [len(s) for s in flat] == sorted((len(s) for s in ids), reverse=True)


@pytest.mark.parametrize("flag", ["--rounds", "--threads", "--beam-every", "--batch-sizes"])
def test_options_below_one_are_refused(flag, capsys):
    with pytest.raises(SystemExit):
        bench.main([flag, "0"])
    assert flag in capsys.readouterr().err
