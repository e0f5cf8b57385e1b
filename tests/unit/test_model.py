"""The encoder-decoder Transformer: layer parity with torch.nn, paper structure (post-LN, dropout placement,
embedding scale, tying, parameter counts), causality, padding invariance, the KV cache and devices."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from companion import (
    DecoderLayer,
    EncoderLayer,
    KVCache,
    MultiHeadAttention,
    Transformer,
    TransformerConfig,
    causal_mask,
    sinusoidal_encoding,
)

# -- helpers -----------------------------------------------------------------------------------------------


def copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)


def copy_linear_and_norms(ours: nn.Module, theirs: nn.Module, norms: list[str]) -> None:
    with torch.no_grad():
        theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
        theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())
        for name in norms:
            getattr(theirs, name).load_state_dict(getattr(ours, name).state_dict())


def randomize_norms(module: nn.Module) -> None:
    """Give every LayerNorm non-trivial affine parameters so that parity tests also check where they sit."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.LayerNorm):
                sub.weight.normal_(1.0, 0.3)
                sub.bias.normal_(0.0, 0.3)


class Zero(nn.Module):
    """Stands in for dropout with p -> 1: whatever passes through it is dropped entirely."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def analytic_parameter_count(config: TransformerConfig) -> int:
    """Parameters of the paper's architecture with shared, tied embeddings, counted by hand."""
    d, d_ff = config.d_model, config.d_ff
    attention = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    embeddings = config.src_vocab_size * d  # one matrix: source, target and output projection
    return embeddings + config.num_encoder_layers * encoder_layer + config.num_decoder_layers * decoder_layer


def with_padding(src: torch.Tensor, extra: int, pad_id: int = 0) -> torch.Tensor:
    return torch.cat([src, torch.full((src.shape[0], extra), pad_id, dtype=src.dtype)], dim=1)


# -- configuration and parameter counts --------------------------------------------------------------------
def test_presets_match_table_3():
    base, big = TransformerConfig.base(37000, 37000), TransformerConfig.big(37000, 37000)
    assert (base.num_encoder_layers, base.num_decoder_layers, base.d_model, base.d_ff, base.num_heads) == (
        6,
        6,
        512,
        2048,
        8,
    )
    assert (base.d_head, base.dropout) == (64, 0.1)
    assert (big.num_encoder_layers, big.num_decoder_layers, big.d_model, big.d_ff, big.num_heads) == (
        6,
        6,
        1024,
        4096,
        16,
    )
    assert (big.d_head, big.dropout) == (64, 0.3)
    for config in (base, big):
        assert config.share_embeddings and config.tie_output and not config.norm_first
        assert TransformerConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("preset, paper_millions", [("base", 65), ("big", 213)])
def test_parameter_counts_match_the_paper(preset, paper_millions):
    config = getattr(TransformerConfig, preset)(37000, 37000)
    with torch.device("meta"):  # counting needs shapes only: no memory, no initialisation cost
        model = Transformer(config)
    count = model.num_parameters()
    assert abs(count - paper_millions * 1e6) <= 0.05 * paper_millions * 1e6, count
    assert count == analytic_parameter_count(config)  # tied matrices counted once, nothing extra
    assert model.src_embed.weight is model.tgt_embed.weight is model.generator.weight
    assert model.generator.bias is None


def test_untied_model_has_separate_matrices(tiny_model):
    model = tiny_model(share_embeddings=False, tie_output=False)
    assert model.src_embed.weight is not model.tgt_embed.weight
    assert model.generator.weight is not model.tgt_embed.weight and model.generator.bias is not None
    tied = tiny_model(src_vocab_size=19, share_embeddings=True, tie_output=True)
    d = tied.config.d_model
    saved = (19 * d) * 2 + 19  # one source matrix, the output matrix and its bias
    untied = tiny_model(src_vocab_size=19, share_embeddings=False, tie_output=False)
    assert untied.num_parameters() - tied.num_parameters() == saved


# -- layers against torch.nn -------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(tiny_config, norm_first):
    config = tiny_config(norm_first=norm_first, dropout=0.0)
    ours = EncoderLayer(config).eval()
    randomize_norms(ours)
    theirs = nn.TransformerEncoderLayer(
        config.d_model, config.num_heads, config.d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_linear_and_norms(ours, theirs, ["norm1", "norm2"])
    x = torch.randn(3, 6, config.d_model)
    keep = torch.ones(3, 6, dtype=torch.bool)
    keep[1, 4:] = False
    out, _ = ours(x, keep[:, None, None, :])
    expected = theirs(x, src_key_padding_mask=~keep)  # grad-enabled call: no fused path, no zeroed rows
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(tiny_config, norm_first):
    config = tiny_config(norm_first=norm_first, dropout=0.0)
    ours = DecoderLayer(config).eval()
    randomize_norms(ours)
    theirs = nn.TransformerDecoderLayer(
        config.d_model, config.num_heads, config.d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_attention(ours.cross_attn, theirs.multihead_attn)
    copy_linear_and_norms(ours, theirs, ["norm1", "norm2", "norm3"])
    y, memory = torch.randn(3, 5, config.d_model), torch.randn(3, 7, config.d_model)
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[2, 3:] = False
    out, _ = ours(y, memory, keep[:, None, None, :])
    expected = theirs(y, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=~keep)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


# -- paper structure ---------------------------------------------------------------------------------------
def test_post_ln_and_pre_ln_differ_structurally(tiny_model):
    post, pre = tiny_model(), tiny_model(norm_first=True)
    assert post.encoder.norm is None and post.decoder.norm is None
    assert isinstance(pre.encoder.norm, nn.LayerNorm) and isinstance(pre.decoder.norm, nn.LayerNorm)
    assert pre.num_parameters() - post.num_parameters() == 2 * 2 * post.config.d_model
    # Post-LN ends each layer with LayerNorm (unit-affine at init): every position is standardised.
    x = 5 * torch.randn(2, 6, 16) + 3
    out_post, _ = post.encoder.layers[0](x)
    out_pre, _ = pre.encoder.layers[0](x)
    torch.testing.assert_close(out_post.mean(-1), torch.zeros(2, 6), atol=1e-5, rtol=0)
    torch.testing.assert_close(out_post.var(-1, unbiased=False), torch.ones(2, 6), atol=1e-3, rtol=0)
    assert out_pre.mean(-1).abs().max() > 0.5  # pre-LN keeps the raw residual stream


@pytest.mark.parametrize("norm_first", [False, True])
def test_dropout_sits_on_each_sublayer_output_before_the_residual_add(tiny_config, norm_first):
    """With the sub-layer dropout replaced by 'drop everything', only the residual path remains."""
    config = tiny_config(norm_first=norm_first)
    encoder, decoder = EncoderLayer(config).eval(), DecoderLayer(config).eval()
    randomize_norms(encoder)
    randomize_norms(decoder)
    encoder.dropout, decoder.dropout = Zero(), Zero()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    out_enc, _ = encoder(x)
    out_dec, _ = decoder(x, memory)
    if norm_first:
        torch.testing.assert_close(out_enc, x)
        torch.testing.assert_close(out_dec, x)
    else:
        torch.testing.assert_close(out_enc, encoder.norm2(encoder.norm1(x)))
        torch.testing.assert_close(out_dec, decoder.norm3(decoder.norm2(decoder.norm1(x))))


@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_dropouts_and_layer_norm_eps_reach_every_layer(tiny_config, norm_first):
    """attention_dropout, ffn_dropout and layer_norm_eps are not just stored in the config: every attention
    (self and cross), every feed-forward network and every LayerNorm of both stacks is built with them."""
    config = tiny_config(norm_first=norm_first, attention_dropout=0.15, ffn_dropout=0.25, layer_norm_eps=1e-3)
    model = Transformer(config)
    encoder_layers, decoder_layers = list(model.encoder.layers), list(model.decoder.layers)
    assert len(encoder_layers) == config.num_encoder_layers and len(decoder_layers) == config.num_decoder_layers
    attentions = [layer.self_attn for layer in encoder_layers + decoder_layers]
    attentions += [layer.cross_attn for layer in decoder_layers]
    assert [attention.dropout for attention in attentions] == [0.15] * len(attentions)
    ffns = [layer.ffn for layer in encoder_layers + decoder_layers]
    assert [ffn.dropout.p for ffn in ffns] == [0.25] * len(ffns)
    norms = [module for module in model.modules() if isinstance(module, nn.LayerNorm)]
    # two per encoder layer, three per decoder layer, and pre-LN's final norm of each stack
    assert len(norms) == 2 * len(encoder_layers) + 3 * len(decoder_layers) + (2 if norm_first else 0)
    assert [norm.eps for norm in norms] == [1e-3] * len(norms)
    # The sub-layer (residual) dropout stays config.dropout, separate from the two above.
    assert [layer.dropout.p for layer in encoder_layers + decoder_layers] == [config.dropout] * len(ffns)


def test_embeddings_are_scaled_by_sqrt_d_model_then_positions_added(tiny_model, tokens):
    model = tiny_model(num_encoder_layers=0)  # post-LN, no layers: the encoder output is its input
    src = tokens(2, 7, 23)
    memory, src_mask = model.encode(src)
    expected = model.src_embed(src) * math.sqrt(16) + sinusoidal_encoding(7, 16)
    torch.testing.assert_close(memory, expected)
    assert src_mask.shape == (2, 1, 1, 7)


@pytest.mark.parametrize("norm_first", [False, True])
def test_both_variants_train_one_step(tiny_model, tokens, norm_first):
    model = tiny_model(
        norm_first=norm_first, dropout=0.0, src_vocab_size=19, share_embeddings=True, tie_output=True
    ).train()
    src, tgt_in, tgt_out = tokens(4, 7, 19), tokens(4, 6, 19), tokens(4, 6, 19)
    tgt_out[0, 4:] = 0  # padding in the labels is ignored by the loss

    def loss_fn() -> torch.Tensor:
        logits = model(src, tgt_in)
        return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0)

    loss = loss_fn()
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.src_embed.weight.grad.abs().sum() > 0
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with torch.no_grad():  # one plain SGD step (torch.optim would add seconds of import time)
        for p in model.parameters():
            p -= 0.05 * p.grad
    for name, p in model.named_parameters():
        if name.endswith("k_proj.bias"):
            # q . (k + b) adds the same q . b to every score of a row, which softmax ignores:
            # the key bias gets no gradient (up to rounding) and stays put.
            assert p.grad.abs().max() < 1e-6, name
        else:
            assert not torch.equal(before[name], p), name
    with torch.no_grad():
        assert loss_fn() < loss


# -- whole-model properties --------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_is_causal(tiny_model, tokens, norm_first):
    model = tiny_model(norm_first=norm_first)
    src, tgt = tokens(2, 6, 23), tokens(2, 8, 19)
    logits = model(src, tgt)
    for j in (0, 3, 7):
        changed = tgt.clone()
        changed[:, j] = (changed[:, j] % 18) + 1  # a different non-pad token
        new = model(src, changed)
        torch.testing.assert_close(new[:, :j], logits[:, :j], atol=1e-5, rtol=0)
        assert (new[:, j] - logits[:, j]).abs().max() > 1e-4


@pytest.mark.parametrize("norm_first", [False, True])
def test_appending_source_padding_leaves_logits_unchanged(tiny_model, tokens, norm_first):
    model = tiny_model(norm_first=norm_first)
    src, tgt = tokens(2, 6, 23), tokens(2, 5, 19)
    logits = model(src, tgt)
    torch.testing.assert_close(model(with_padding(src, 4), tgt), logits, atol=1e-5, rtol=0)
    # Sentences of different lengths batched together give the same logits as alone.
    short = src[1:, :3]
    batch = torch.cat([src[:1], with_padding(short, 3)])
    torch.testing.assert_close(model(batch, tgt)[1:], model(short, tgt[1:]), atol=1e-5, rtol=0)


def test_fully_padded_source_gives_finite_logits_and_gradients(tiny_model, tokens):
    model = tiny_model().train()
    src = tokens(2, 5, 23)
    src[1] = 0  # nothing to attend to in the source
    logits = model(src, tokens(2, 4, 19))
    assert torch.isfinite(logits).all()
    logits.square().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("norm_first", [False, True])
def test_kv_cache_decoding_matches_the_full_forward(tiny_model, tokens, norm_first):
    model = tiny_model(norm_first=norm_first)
    src, tgt = with_padding(tokens(2, 5, 23), 2), tokens(2, 7, 19)
    full = model(src, tgt)
    memory, src_mask = model.encode(src)
    cache = model.new_cache()
    assert isinstance(cache, KVCache) and cache.length == 0
    steps = []
    for t in range(tgt.shape[1]):
        steps.append(model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache))
        assert cache.length == t + 1
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    # Several new tokens at once (a prompt), then one at a time.
    cache = model.new_cache()
    first = model.decode(tgt[:, :4], memory, src_mask, cache=cache)
    rest = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache) for t in range(4, 7)]
    torch.testing.assert_close(torch.cat([first, *rest], dim=1), full, atol=1e-5, rtol=0)
    # The reference path (with weights) through the cache agrees as well.
    cache = model.new_cache()
    with_weights = [
        model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache, need_weights=True)[0] for t in range(7)
    ]
    torch.testing.assert_close(torch.cat(with_weights, dim=1), full, atol=1e-5, rtol=0)


def test_kv_cache_reorder_follows_the_batch(tiny_model, tokens):
    model = tiny_model()
    src, tgt = tokens(2, 5, 23), tokens(2, 4, 19)
    memory, src_mask = model.encode(src)
    cache = model.new_cache()
    model.decode(tgt[:, :3], memory, src_mask, cache=cache)
    swap = torch.tensor([1, 0])
    cache.reorder(swap)
    last = model.decode(tgt[swap, 3:], memory[swap], src_mask[swap], cache=cache)
    torch.testing.assert_close(last[:, 0], model(src[swap], tgt[swap])[:, 3], atol=1e-5, rtol=0)


def test_kv_cache_self_kv_and_cross_kv_expose_each_layers_keys_and_values(tiny_model, tokens):
    model = tiny_model()
    src, tgt = with_padding(tokens(2, 5, 23), 1), tokens(2, 3, 19)
    memory, src_mask = model.encode(src)
    cache = model.new_cache()
    assert cache.self_kv == [None, None] and cache.cross_kv == [None, None]  # nothing before the first step
    for t in range(3):
        model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache)
    heads, d_head = model.config.num_heads, model.config.d_head
    for layer, self_kv, cross_kv, self_cache, cross_cache in zip(
        model.decoder.layers, cache.self_kv, cache.cross_kv, cache.self_attn, cache.cross_attn
    ):
        assert torch.equal(self_kv[0], self_cache.key) and torch.equal(self_kv[1], self_cache.value)
        assert torch.equal(cross_kv[0], cross_cache.key) and torch.equal(cross_kv[1], cross_cache.value)
        assert self_kv[0].shape == self_kv[1].shape == (2, heads, 3, d_head)  # one position per step so far
        # the cross-attention pair is the projected encoder memory, all 6 source positions
        expected_keys, expected_values = layer.cross_attn.project_kv(memory, memory)
        torch.testing.assert_close(cross_kv[0], expected_keys, atol=1e-6, rtol=0)
        torch.testing.assert_close(cross_kv[1], expected_values, atol=1e-6, rtol=0)
    # Layer 0's self-attention input is the embedded, position-encoded prefix (post-LN): its keys and values
    # are that prefix projected, whichever step added each position.
    prefix = model.tgt_pos(model.tgt_embed(tgt) * math.sqrt(model.config.d_model))
    keys, values = model.decoder.layers[0].self_attn.project_kv(prefix, prefix)
    torch.testing.assert_close(cache.self_kv[0][0], keys, atol=1e-6, rtol=0)
    torch.testing.assert_close(cache.self_kv[0][1], values, atol=1e-6, rtol=0)
    # Reordering the batch reorders both pairs.
    before = [pair[0].clone() for pair in cache.self_kv + cache.cross_kv]
    cache.reorder(torch.tensor([1, 0]))
    for old, (now, _) in zip(before, cache.self_kv + cache.cross_kv):
        assert torch.equal(now, old[[1, 0]])


def test_reference_path_and_attention_maps(tiny_model, tokens):
    model = tiny_model()
    src, tgt = with_padding(tokens(2, 5, 23), 2), tokens(2, 4, 19)
    memory, src_mask = model.encode(src)
    logits, maps = model.decode(tgt, memory, src_mask, need_weights=True)
    torch.testing.assert_close(logits, model(src, tgt), atol=1e-5, rtol=0)
    assert len(maps) == 2
    attention = model.attention_maps(src, tgt)
    assert [w.shape for w in attention["encoder"]] == [(2, 4, 7, 7)] * 2
    assert [w.shape for w in attention["decoder_self"]] == [(2, 4, 4, 4)] * 2
    assert [w.shape for w in attention["cross"]] == [(2, 4, 4, 7)] * 2
    for w in attention["encoder"] + attention["decoder_self"] + attention["cross"]:
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5, rtol=0)
    for w in attention["encoder"] + attention["cross"]:
        assert (w[..., 5:] == 0).all()  # padded source positions get no attention
    for w in attention["decoder_self"]:
        assert (w.triu(diagonal=1) == 0).all()


# -- gradcheck on tiny layers ------------------------------------------------------------------------------
# fast_mode compares the analytical and numerical Jacobians along random directions (u^T J v) instead of
# column by column: the same check of the backward pass, at a fraction of the cost for a whole layer.
@pytest.mark.parametrize("norm_first", [False, True])
def test_gradcheck_encoder_layer(norm_first):
    config = TransformerConfig(7, 7, d_model=8, num_heads=2, d_ff=12, dropout=0.0, norm_first=norm_first)
    layer = EncoderLayer(config).double().eval()
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, True, False]])[:, None, None, :]
    assert torch.autograd.gradcheck(lambda x: layer(x, mask)[0], (x,), fast_mode=True)


@pytest.mark.parametrize("norm_first", [False, True])
def test_gradcheck_decoder_layer(norm_first):
    config = TransformerConfig(7, 7, d_model=8, num_heads=2, d_ff=12, dropout=0.0, norm_first=norm_first)
    layer = DecoderLayer(config).double().eval()
    y = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, True, True], [True, True, False, False]])[:, None, None, :]
    assert torch.autograd.gradcheck(lambda y, memory: layer(y, memory, mask)[0], (y, memory), fast_mode=True)


# -- devices -----------------------------------------------------------------------------------------------
def _device_params():
    cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")
    mps = pytest.mark.skipif(
        not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()),
        reason="Apple MPS is not available on this machine",
    )
    return [
        pytest.param("cpu", None, id="cpu"),
        pytest.param("cuda", torch.bfloat16, id="cuda-bf16-autocast", marks=cuda),
        pytest.param("mps", None, id="mps", marks=mps),
    ]


@pytest.mark.parametrize("device, autocast_dtype", _device_params())
def test_runs_on_device(tiny_model, tokens, device, autocast_dtype):
    model = tiny_model()
    src, tgt = with_padding(tokens(2, 5, 23), 2), tokens(2, 6, 19)
    expected = model(src, tgt)
    model = model.to(device)
    src, tgt = src.to(device), tgt.to(device)
    if autocast_dtype is None:
        logits = model(src, tgt)
        atol = 1e-4
    else:
        with torch.autocast(device_type=device, dtype=autocast_dtype):
            logits = model(src, tgt)
        assert logits.dtype == autocast_dtype
        atol = 0.15  # bf16 keeps ~3 significant digits
    assert logits.device.type == device and logits.shape == (2, 6, 19)
    torch.testing.assert_close(logits.float().cpu(), expected, atol=atol, rtol=0.05)
    # Incremental decoding runs on the device too.
    memory, src_mask = model.encode(src)
    cache = model.new_cache()
    step = model.decode(tgt[:, :1], memory, src_mask, cache=cache)
    assert step.device.type == device and torch.isfinite(step.float()).all()


@pytest.mark.parametrize("eps", [math.nan, math.inf, -1e-5, 0.0, "small", True])
def test_layer_norm_eps_must_be_a_positive_finite_number(eps):
    with pytest.raises((ValueError, TypeError), match="layer_norm_eps"):
        TransformerConfig(10, 10, d_model=8, num_heads=2, layer_norm_eps=eps)


# -- moved from test_bad_input.py: bad input fails early, naming the argument, the expected and the actual ------
def _literal(text: str) -> str:
    """A literal message fragment for ``pytest.raises(match=...)``."""
    import re

    return re.escape(text)


_D_MODEL = 16
_SRC = torch.randint(1, 23, (2, 6))
_TGT = torch.randint(1, 19, (2, 5))


@pytest.fixture(scope="module")
def bad_input_model() -> Transformer:
    config = TransformerConfig(
        23, 19, d_model=_D_MODEL, num_heads=4, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, max_len=64
    )
    return Transformer(config).eval()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(d_model=10, num_heads=4),
            _literal("d_model must be divisible by num_heads, got d_model=10 and num_heads=4"),
        ),
        (dict(d_model=0), _literal("d_model must be a positive integer, got 0")),
        (dict(num_encoder_layers=-1), _literal("num_encoder_layers must be an integer >= 0, got -1")),
        (dict(dropout=1.0), _literal("dropout must be a number in [0, 1), got 1.0")),
        (dict(pad_id=19), _literal("pad_id (a token id of both vocabularies) must be an integer in [0, 18], got 19")),
        (
            dict(share_embeddings=True),
            _literal("share_embeddings=True needs src_vocab_size == tgt_vocab_size, got 23 and 19"),
        ),
        (dict(positional="rotary"), _literal("positional must be one of ['sinusoidal', 'learned'], got 'rotary'")),
        (dict(d_model=9, num_heads=3), _literal("d_model must be even for sinusoidal positions, got 9")),
    ],
    ids=["not divisible", "zero width", "negative layers", "dropout", "pad id", "share vocab", "positional", "odd"],
)
def test_config_rejects(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(23, 19, **kwargs)


def test_an_odd_width_is_fine_with_learned_positions_and_an_unknown_preset_is_named():
    assert TransformerConfig(23, 19, d_model=9, num_heads=3, positional="learned").d_model == 9  # only sin/cos pair up
    with pytest.raises(ValueError, match=_literal("name must be one of ['tiny', 'small', 'base', 'big'], got 'huge'")):
        TransformerConfig.from_preset("huge", 23, 19)


def test_config_from_dict_and_model_reject_wrong_types():
    with pytest.raises(ValueError, match=_literal("unknown TransformerConfig fields: ['dmodel']")):
        TransformerConfig.from_dict({"src_vocab_size": 3, "tgt_vocab_size": 3, "dmodel": 4})
    with pytest.raises(TypeError, match=_literal("config must be a TransformerConfig, got dict")):
        Transformer({"src_vocab_size": 3})


MODEL_CASES = {
    "src id = vocab size": (
        lambda m: m(torch.tensor([[1, 23]]), _TGT[:1]),
        ValueError,
        _literal("src holds token id 23, outside the vocabulary [0, 23) (vocab_size=23)"),
    ),
    "tgt id > vocab size": (
        lambda m: m(_SRC, torch.tensor([[1, 2, 40], [1, 2, 3]])),
        ValueError,
        _literal("tgt holds token id 40, outside the vocabulary [0, 19) (vocab_size=19)"),
    ),
    "negative src id": (
        lambda m: m(torch.tensor([[4, -1]]), _TGT[:1]),
        ValueError,
        _literal("src holds token id -1, outside the vocabulary [0, 23)"),
    ),
    "empty src": (
        lambda m: m(_SRC[:, :0], _TGT),
        ValueError,
        _literal("src must be a non-empty [batch, seq] tensor, got shape (2, 0)"),
    ),
    "empty tgt": (
        lambda m: m(_SRC, _TGT[:, :0]),
        ValueError,
        _literal("tgt must be a non-empty [batch, seq] tensor, got shape (2, 0)"),
    ),
    "empty batch": (
        lambda m: m(_SRC[:0], _TGT[:0]),
        ValueError,
        _literal("src must be a non-empty [batch, seq] tensor, got shape (0, 6)"),
    ),
    "float src": (
        lambda m: m(_SRC.float(), _TGT),
        TypeError,
        _literal("src must hold integer token ids (torch.long), got dtype torch.float32"),
    ),
    "bool tgt": (
        lambda m: m(_SRC, _TGT > 3),
        TypeError,
        _literal("tgt must hold integer token ids (torch.long), got dtype torch.bool"),
    ),
    "1-D src": (lambda m: m(_SRC[0], _TGT), ValueError, _literal("src must have 2 dimensions, got shape (6,)")),
    "list src": (lambda m: m(_SRC.tolist(), _TGT), TypeError, _literal("src must be a torch.Tensor, got list")),
    "batch mismatch": (
        lambda m: m(_SRC, torch.randint(1, 19, (3, 5))),
        ValueError,
        _literal("src and tgt must have the same batch size, got 2 and 3"),
    ),
    "longer than max_len": (
        lambda m: m(torch.randint(1, 23, (2, 65)), _TGT),
        ValueError,
        _literal("positions 0..64 exceed max_len=64"),
    ),
    "memory feature size": (
        lambda m: m.decode(_TGT, torch.randn(2, 6, 8)),
        ValueError,
        _literal("memory must have last dimension d_model=16, got shape (2, 6, 8)"),
    ),
    "memory batch": (
        lambda m: m.decode(_TGT, torch.randn(3, 6, _D_MODEL)),
        ValueError,
        _literal("memory and tgt must have the same batch size, got 3 and 2"),
    ),
    "src mask does not broadcast": (
        lambda m: m.decode(_TGT, torch.randn(2, 6, _D_MODEL), torch.ones(2, 1, 1, 5, dtype=torch.bool)),
        ValueError,
        _literal(
            "src_mask must be the boolean key-padding mask [batch, 1, 1, n] = [2, 1, 1, 6] that encode() returns, "
            "got torch.bool of shape [2, 1, 1, 5]"
        ),
    ),
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_transformer_rejects(bad_input_model, case):
    call, error, message = MODEL_CASES[case]
    with pytest.raises(error, match=message):
        call(bad_input_model)


def test_encode_rejects_out_of_vocabulary_ids(bad_input_model):
    with pytest.raises(ValueError, match=_literal("src holds token id 99, outside the vocabulary [0, 23)")):
        bad_input_model.encode(torch.tensor([[1, 99]]))
