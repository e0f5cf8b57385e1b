"""companion._linear: the model's linear layers keep W^T for CPU inference; results and gradients stay nn.Linear's."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from companion._linear import KeptTranspose, Linear
from companion.model import Transformer, TransformerConfig


def _pair(in_features: int = 12, out_features: int = 7, bias: bool = True, dtype=torch.float64):
    torch.manual_seed(0)
    ours = Linear(in_features, out_features, bias=bias).to(dtype)
    reference = nn.Linear(in_features, out_features, bias=bias).to(dtype)
    reference.load_state_dict(ours.state_dict())
    return ours, reference


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(12,), (5, 12), (3, 4, 12), (2, 1, 3, 12)])
def test_inference_equals_nn_linear_for_any_leading_shape(bias, shape):
    ours, reference = _pair(bias=bias)
    x = torch.randn(*shape, dtype=torch.float64)
    with torch.no_grad():
        out = ours(x)
        assert ours._transpose._kept is not None, "no-grad CPU inference should use the kept W^T"
        torch.testing.assert_close(out, reference(x), atol=1e-12, rtol=0)
    assert out.shape == (*shape[:-1], 7)


def test_inference_on_a_non_contiguous_input():
    ours, reference = _pair()
    x = torch.randn(4, 12, 6, dtype=torch.float64).transpose(1, 2)  # [4, 6, 12], not contiguous
    with torch.no_grad():
        torch.testing.assert_close(ours(x), reference(x), atol=1e-12, rtol=0)


def test_with_gradients_it_is_nn_linear_and_gradients_match():
    ours, reference = _pair()
    x = torch.randn(3, 5, 12, dtype=torch.float64)
    ours(x).square().sum().backward()
    reference(x).square().sum().backward()
    assert ours._transpose._kept is None, "a step that records gradients must not build the kept copy"
    torch.testing.assert_close(ours.weight.grad, reference.weight.grad, atol=1e-12, rtol=0)
    torch.testing.assert_close(ours.bias.grad, reference.bias.grad, atol=1e-12, rtol=0)


def test_input_that_requires_grad_gets_its_gradient_through_frozen_weights():
    ours, reference = _pair()
    for p in (*ours.parameters(), *reference.parameters()):
        p.requires_grad_(False)
    x1 = torch.randn(2, 12, dtype=torch.float64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    ours(x1).sum().backward()
    reference(x2).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-12, rtol=0)


def test_kept_copy_follows_in_place_updates_optimizer_steps_and_load_state_dict():
    ours, reference = _pair(dtype=torch.float32)
    x = torch.randn(6, 12)
    optimizer = torch.optim.SGD(ours.parameters(), lr=0.3)

    def same() -> None:  # a stale copy is off by the update (~0.1 and more); the kernels differ by float32 rounding
        reference.load_state_dict(ours.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(ours(x), reference(x), atol=1e-6, rtol=1e-6)

    same()
    ours(x).sum().backward()
    optimizer.step()
    same()
    with torch.no_grad():
        ours.bias.add_(1.0)
    same()
    ours.load_state_dict({k: torch.randn_like(v) for k, v in ours.state_dict().items()})
    same()


def test_stacked_layers_equal_each_layer_in_turn():
    torch.manual_seed(1)
    layers = [nn.Linear(8, n) for n in (3, 5, 2)]
    stack = KeptTranspose(layers)
    x = torch.randn(4, 8)
    with torch.no_grad():
        expected = torch.cat([layer(x) for layer in layers], dim=-1)
        torch.testing.assert_close(stack.apply(x), expected, atol=1e-6, rtol=0)
    layers[1].bias = None  # a layer without bias: the stack has no bias either
    weight, bias = stack.stacked()
    assert weight.shape == (10, 8) and bias is None


def test_tied_output_layer_follows_the_embedding():
    """The generator shares the target embedding's weight: an edit through the embedding reaches the kept copy."""
    config = TransformerConfig(
        src_vocab_size=20,
        tgt_vocab_size=20,
        d_model=16,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=32,
        tie_output=True,
    )
    model = Transformer(config).eval()
    y = torch.randn(3, 16)
    with torch.no_grad():
        before = model.generator(y)
        model.tgt_embed.weight.mul_(2.0)
        after = model.generator(y)
    torch.testing.assert_close(after, 2 * before, atol=1e-5, rtol=1e-5)


def test_a_copied_model_keeps_its_own_weights():
    ours, _ = _pair(dtype=torch.float32)
    x = torch.randn(2, 12)
    with torch.no_grad():
        ours(x)
        twin = copy.deepcopy(ours)
        twin.weight.zero_()
        twin.bias.zero_()
        assert torch.count_nonzero(twin(x)) == 0
        assert torch.count_nonzero(ours(x)) > 0


def test_an_exported_graph_holds_the_parameters_not_the_kept_copy():
    ours, _ = _pair(dtype=torch.float32)
    x = torch.randn(2, 12)
    with torch.no_grad():
        ours(x)  # a kept copy exists before the export
        program = torch.export.export(ours, (x,))
    assert not program.constants, f"the graph captured tensors besides the parameters: {list(program.constants)}"
    assert set(program.state_dict) == {"weight", "bias"}
    torch.testing.assert_close(program.module()(x), ours(x), atol=1e-6, rtol=0)
