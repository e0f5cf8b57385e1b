"""The package on every device this machine has: the CPU always, a CUDA GPU when there is one.

Each test computes on ``device`` and compares with the CPU's float32 reference (or with a second method on the same
device), so the same assertions check the CPU code paths in CI and the GPU ones on a machine with a GPU:
``bench/gpu_session.py`` runs this file there first. What differs by device inside the package, and is checked here:
the attention kernel (PyTorch's fused ones) and its guards (NaN queries, fully masked rows), the linear layers (a kept
transposed copy on CPU, the stacked weights elsewhere), the searches' block-wise argmax and top-k (CPU only), the
key/value cache, bfloat16 autocast in training (on by default on CUDA), checkpoints written on one device and read
on another, a command-line run resumed on its device, and the shipped models translating there as on the CPU.
"""

from __future__ import annotations

import copy
import json
import pathlib

import pytest
import torch
import torch.nn.functional as F
from _copy_model import COPY_MAX_LEN, COPY_VOCAB, copy_model

from companion import Transformer, TransformerConfig, load_pretrained
from companion._linear import Linear
from companion.attention import fast_attention, scaled_dot_product_attention
from companion.checkpoint import list_checkpoints, load_checkpoint, model_from_checkpoint
from companion.cli import main
from companion.data import make_batches, synthetic_pairs
from companion.decode import beam_search, greedy_decode
from companion.decode._blocks import first_argmax, top_k
from companion.train import TrainConfig, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine"),
    ),
]

# float32 results against the CPU reference: other kernels sum in other orders (and a GPU's fused attention
# kernels round a little more)
ATOL = {"cpu": 1e-5, "cuda": 1e-4}


def _qkv(batch: int = 3, heads: int = 4, m: int = 5, n: int = 7, d: int = 16) -> tuple[torch.Tensor, ...]:
    return torch.randn(batch, heads, m, d), torch.randn(batch, heads, n, d), torch.randn(batch, heads, n, d)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_attention_matches_the_reference_with_padding_and_causal_masks(device):
    q, k, v = _qkv()
    keep = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    keep[1, ..., 4:] = False  # padded keys
    keep[2] = False  # a row with no key at all: zeros, never NaN
    expected, _ = scaled_dot_product_attention(q, k, v, mask=keep)
    out = fast_attention(q.to(device), k.to(device), v.to(device), mask=keep.to(device))
    assert out.device.type == device
    torch.testing.assert_close(out.cpu(), expected, atol=ATOL[device], rtol=1e-4)
    assert torch.equal(out[2].cpu(), torch.zeros_like(out[2].cpu()))
    q, k, v = _qkv(m=6, n=6)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    expected, _ = scaled_dot_product_attention(q, k, v, mask=causal)
    out = fast_attention(q.to(device), k.to(device), v.to(device), is_causal=True)
    torch.testing.assert_close(out.cpu(), expected, atol=ATOL[device], rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_a_nan_query_gives_nan_on_both_attention_paths(device):
    q, k, v = _qkv()
    q[0, 1, 2, 3] = float("nan")
    fused = fast_attention(q.to(device), k.to(device), v.to(device)).cpu()
    reference, _ = scaled_dot_product_attention(q.to(device), k.to(device), v.to(device))
    assert torch.isnan(fused[0, 1, 2]).all() and torch.isnan(reference.cpu()[0, 1, 2]).all()
    assert torch.isfinite(fused[1:]).all() and torch.isfinite(fused[0, 0]).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")
def test_bfloat16_attention_on_cuda_stays_close_to_float32():
    q, k, v = (x.cuda() for x in _qkv(n=9))
    expected = fast_attention(q, k, v)
    out = fast_attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(16, 1, 128), (4, 9, 128)], ids=["decoding-step", "sequence"])
def test_linear_layers_match_nn_linear_and_follow_weight_edits(device, shape):
    layer = Linear(128, 384).to(device).eval()
    x = torch.randn(*shape, device=device)
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=ATOL[device], rtol=1e-5)
    with torch.no_grad():
        layer.weight.mul_(2.0)  # an in-place edit: any kept copy of the weights must be rebuilt
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=ATOL[device], rtol=1e-5)
    out = layer(x.requires_grad_())  # with gradients: the plain product, differentiable
    out.sum().backward()
    assert layer.weight.grad is not None and x.grad is not None and x.grad.shape == x.shape


@pytest.mark.parametrize("device", DEVICES)
def test_block_argmax_and_top_k_match_torch(device):
    scores = torch.randn(16, 6190).round(decimals=1).to(device)  # rounded: many exact ties
    scores[3, 7] = scores[3, 6000] = scores[3].max() + 1  # a tie at the maximum in different blocks
    assert torch.equal(first_argmax(scores), scores.argmax(dim=-1))
    assert int(first_argmax(scores)[3]) == 7  # the first of equal maxima, as argmax
    values, columns = top_k(scores, 9)
    expected, _ = scores.topk(9, dim=-1)
    assert torch.equal(values, expected)
    assert torch.equal(scores.gather(1, columns), values)  # the positions hold those values (tie order may differ)


def _copy_sources(n: int = 24) -> torch.Tensor:
    pairs = synthetic_pairs("copy", n, max_len=COPY_MAX_LEN, vocab_size=COPY_VOCAB, seed=7)
    return make_batches(pairs, 10**9, shuffle=False)[0].src


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_and_beam_search_on_device_give_the_cpu_outputs(device):
    model_cpu = copy_model()
    model = copy.deepcopy(model_cpu).to(device)  # the shared model stays on the CPU
    src = _copy_sources()
    expected = greedy_decode(model_cpu, src)
    assert greedy_decode(model, src.to(device)) == expected
    assert greedy_decode(model, src.to(device), use_cache=False) == expected  # the cache changes nothing
    beams, scores = beam_search(model, src.to(device), beam_size=3, return_scores=True)
    beams_cpu, scores_cpu = beam_search(model_cpu, src, beam_size=3, return_scores=True)
    assert beams == beams_cpu
    assert scores == pytest.approx(scores_cpu, abs=1e-4)
    targets = [row.tolist() for row in src]  # the copy task: the output is the input without <eos>/<pad>
    assert sum(out == [t for t in row if t > 3] for out, row in zip(expected, targets)) >= 0.9 * len(targets)


@pytest.mark.parametrize("device", DEVICES)
def test_training_on_device_lowers_the_loss_and_its_checkpoint_loads_on_the_cpu(device, tmp_path):
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(
            20,
            20,
            d_model=32,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            d_ff=64,
            dropout=0.1,
            max_len=32,
        )
    )
    batches = make_batches(synthetic_pairs("copy", 400, max_len=8, vocab_size=20, seed=0), 200, seed=0)
    config = TrainConfig(max_steps=60, warmup=20, lr_factor=0.5, progress=False, device=device, log_every=1)
    trainer = Trainer(model, config, batches, batches[:2], out_dir=tmp_path)
    summary = trainer.train()
    assert next(model.parameters()).device.type == device
    losses = _train_losses(tmp_path)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:10]) / 10
    loaded = model_from_checkpoint(load_checkpoint(summary["checkpoint"]), device="cpu")
    for (name, trained), (_, read) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(trained.cpu(), read), name
    # the checkpoint read on the CPU, in float32, scores the validation batches as training measured them on the
    # device (on CUDA in bfloat16 autocast, whose rounded products leave a small gap: 3% allowed; wrong weights
    # or a wrong mask would be far off)
    assert _nll(loaded, batches[:2]) == pytest.approx(
        summary["valid"]["valid_nll"], rel=1e-4 if device == "cpu" else 3e-2
    )


def _nll(model: Transformer, batches) -> float:
    """Per-token negative log-likelihood of ``batches`` (teacher forcing, padding left out)."""
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            logits = model(batch.src, batch.tgt_in)
            total += float(
                F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0, reduction="sum")
            )
            tokens += int((batch.tgt_out != 0).sum())
    return total / tokens


def _train_losses(out_dir: pathlib.Path) -> list[float]:
    """The training loss of every step, from the run's metrics.jsonl (``log_every=1``)."""
    lines = (out_dir / "metrics.jsonl").read_text().splitlines()
    return [record["loss"] for record in map(json.loads, lines) if record["kind"] == "train"]


@pytest.mark.parametrize("device", DEVICES)
def test_the_command_line_trains_and_resumes_on_device(device, tmp_path, capsys):
    """A run started on ``device`` and resumed there: the optimizer's state, read back from the checkpoint, must
    land on the device with the weights (else the first resumed step fails), and training goes on from step 4."""
    out = tmp_path / "run"
    flags = ["--task", "copy", "--preset", "tiny", "--num-examples", "300", "--max-tokens", "200", "--no-progress"]
    assert main(["train", *flags, "--device", device, "--max-steps", "4", "--out", str(out)]) == 0
    assert main(["train", "--resume", "--out", str(out), "--max-steps", "8", "--no-progress"]) == 0
    assert "resumed at step 4" in capsys.readouterr().out
    assert json.loads((out / "run.json").read_text())["device"].startswith(device)
    assert [p.name for p in list_checkpoints(out / "checkpoints")][-1] == "step_00000008.pt"
    losses = _train_losses(out)
    assert len(losses) >= 2 and all(torch.isfinite(torch.tensor(losses)))


SENTENCES = {
    "de-en": ["Ein Hund läuft im Schnee.", "Zwei Männer spielen Fußball auf einer Wiese.", "Eine Frau liest ein Buch."],
    "en-de": ["A dog runs in the snow.", "Two men are playing soccer on a field.", "A woman is reading a book."],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("direction", sorted(SENTENCES))
def test_the_shipped_models_translate_on_device_as_on_the_cpu(device, direction):
    on_device = load_pretrained(direction, device=device)
    assert next(on_device.model.parameters()).device.type == device
    assert on_device.translate(SENTENCES[direction]) == load_pretrained(direction).translate(SENTENCES[direction])
