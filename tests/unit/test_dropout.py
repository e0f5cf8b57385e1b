"""companion._dropout.Dropout: nn.Dropout's semantics with a faster CPU training mask."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from companion._dropout import Dropout
from companion.model import Transformer, TransformerConfig


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_training_drops_about_p_and_scales_the_rest(p):
    torch.manual_seed(0)
    layer = Dropout(p).train()
    x = torch.rand(200, 500) + 0.5  # no zeros of its own
    y = layer(x)
    dropped = y == 0
    assert abs(dropped.float().mean().item() - p) < 0.005  # 100,000 draws: the standard error is ~0.0015
    torch.testing.assert_close(y[~dropped], x[~dropped] / (1.0 - p))


def test_masks_follow_the_seed_and_differ_between_calls():
    layer = Dropout(0.1).train()
    x = torch.ones(64, 128)
    torch.manual_seed(3)
    first, second = layer(x), layer(x)
    torch.manual_seed(3)
    assert torch.equal(layer(x), first)
    assert not torch.equal(first, second)


def test_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(1)
    x = torch.randn(32, 16, requires_grad=True)
    y = Dropout(0.25).train()(x)
    (grad,) = torch.autograd.grad(y.sum(), x)
    expected = (y != 0).float() / 0.75
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_edge_rates_behave_like_nn_dropout(p):
    x = torch.randn(8, 8)
    assert torch.equal(Dropout(p).train()(x), nn.Dropout(p).train()(x))


def test_eval_mode_is_the_identity_and_the_class_is_an_nn_dropout():
    x = torch.randn(4, 5)
    layer = Dropout(0.5).eval()
    assert torch.equal(layer(x), x)
    assert isinstance(layer, nn.Dropout)
    assert repr(layer) == repr(nn.Dropout(0.5))


def test_the_model_uses_it_everywhere_it_drops():
    model = Transformer(TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, num_heads=2, d_ff=32))
    kinds = {type(m) for m in model.modules() if isinstance(m, nn.Dropout)}
    assert kinds == {Dropout}
