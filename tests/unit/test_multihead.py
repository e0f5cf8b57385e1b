"""MultiHeadAttention: parity with torch.nn.MultiheadAttention, the paper's per-head formula, both paths,
equivariance, causality, fully masked rows and gradcheck."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from companion import (
    AttentionCache,
    EncoderLayer,
    MultiHeadAttention,
    TransformerConfig,
    causal_mask,
    scaled_dot_product_attention,
)

D_MODEL, HEADS, BATCH = 16, 4, 3


def torch_copy(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention`` with the same weights (in_proj_weight = cat of the q/k/v weights)."""
    ref = nn.MultiheadAttention(mha.d_model, mha.num_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
        ref.out_proj.weight.copy_(mha.out_proj.weight)
        ref.out_proj.bias.copy_(mha.out_proj.bias)
    return ref.eval()


def key_padding(batch: int, n: int) -> torch.Tensor:
    """Ours: ``[batch, 1, 1, n]``, True = real key. Row b hides its last b keys."""
    mask = torch.ones(batch, 1, 1, n, dtype=torch.bool)
    for b in range(batch):
        if b:
            mask[b, ..., n - b :] = False
    return mask


@pytest.fixture
def mha() -> MultiHeadAttention:
    return MultiHeadAttention(D_MODEL, HEADS).eval()


# -- oracle parity -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("self_attention", [False, True])
def test_matches_torch_multihead_attention(mha, need_weights, padded, self_attention):
    m, n = (6, 6) if self_attention else (5, 7)
    query = torch.randn(BATCH, m, D_MODEL)
    key = query if self_attention else torch.randn(BATCH, n, D_MODEL)
    value = query if self_attention else torch.randn(BATCH, n, D_MODEL)
    ours_mask = key_padding(BATCH, n) if padded else None
    torch_mask = ~ours_mask[:, 0, 0] if padded else None  # nn.MultiheadAttention: True = ignore this key
    result = mha(query, key, value, mask=ours_mask, need_weights=need_weights)
    # need_weights=True keeps nn.MultiheadAttention off its fused inference path (no zeroed padded rows).
    expected, expected_weights = torch_copy(mha)(
        query, key, value, key_padding_mask=torch_mask, need_weights=True, average_attn_weights=False
    )
    out = result[0] if need_weights else result
    assert out.shape == (BATCH, m, D_MODEL)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    if need_weights:
        assert result[1].shape == (BATCH, HEADS, m, n)
        torch.testing.assert_close(result[1], expected_weights, atol=1e-5, rtol=0)


@pytest.mark.parametrize("bias", [True, False])
def test_fused_qkv_projection_equals_three_projections(bias):
    """One product with the stacked [W^Q; W^K; W^V] gives the same heads, outputs and gradients as three."""
    fused = MultiHeadAttention(D_MODEL, HEADS, bias=bias).double()
    separate = MultiHeadAttention(D_MODEL, HEADS, bias=bias, fuse_qkv=False).double()
    separate.load_state_dict(fused.state_dict())
    assert fused.fuse_qkv and not separate.fuse_qkv
    x = torch.randn(BATCH, 6, D_MODEL, dtype=torch.float64)
    for a, b in zip(fused.project_qkv(x), separate.project_qkv(x)):
        assert a.shape == (BATCH, HEADS, 6, D_MODEL // HEADS)
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    mask = key_padding(BATCH, 6)
    fused(x, x, x, mask=mask).square().sum().backward()
    separate(x, x, x, mask=mask).square().sum().backward()
    for (name, p_fused), p_separate in zip(fused.named_parameters(), separate.parameters()):
        torch.testing.assert_close(p_fused.grad, p_separate.grad, atol=1e-10, rtol=0, msg=name)


def test_stacked_qkv_weights_kept_for_decoding_follow_parameter_updates():
    """Without gradients the stacked [W^Q; W^K; W^V] is reused; an in-place update must not leave it stale."""
    fused = MultiHeadAttention(D_MODEL, HEADS).eval()
    separate = MultiHeadAttention(D_MODEL, HEADS, fuse_qkv=False).eval()
    x = torch.randn(BATCH, 5, D_MODEL)
    optimizer = torch.optim.SGD(fused.parameters(), lr=0.5)
    for _ in range(2):
        with torch.no_grad():
            out = fused(x, x, x)
            separate.load_state_dict(fused.state_dict())
            torch.testing.assert_close(out, separate(x, x, x), atol=1e-6, rtol=0)
        fused(x, x, x).sum().backward()  # with gradients: rebuilt every call, gradients reach q/k/v_proj
        assert fused.k_proj.weight.grad is not None and fused.k_proj.weight.grad.abs().sum() > 0
        optimizer.step()  # changes the weights in place
        optimizer.zero_grad()
    with torch.no_grad():
        fused.v_proj.weight.mul_(2.0)
        separate.load_state_dict(fused.state_dict())
        torch.testing.assert_close(fused(x, x, x), separate(x, x, x), atol=1e-6, rtol=0)


def test_matches_the_papers_per_head_formula(mha):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),
    where W_i^Q are the rows i*d_k:(i+1)*d_k of q_proj.weight (and likewise for K and V)."""
    query, memory = torch.randn(BATCH, 5, D_MODEL), torch.randn(BATCH, 7, D_MODEL)
    d_k = D_MODEL // HEADS
    heads = []
    for i in range(HEADS):
        rows = slice(i * d_k, (i + 1) * d_k)

        def project(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
            return x @ linear.weight[rows].T + linear.bias[rows]

        head, _ = scaled_dot_product_attention(
            project(mha.q_proj, query), project(mha.k_proj, memory), project(mha.v_proj, memory)
        )
        heads.append(head)
    expected = mha.out_proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(mha(query, memory, memory), expected, atol=1e-5, rtol=0)


# -- the two paths -----------------------------------------------------------------------------------------
def path_masks(m: int, n: int) -> dict[str, tuple[torch.Tensor | None, bool]]:
    dense = torch.rand(BATCH, HEADS, m, n) < 0.6
    dense[..., 0] = True
    return {
        "none": (None, False),
        "key_padding": (key_padding(BATCH, n), False),
        "causal_mask": (causal_mask(n), False),
        "is_causal": (None, True),
        "causal_and_padding": (causal_mask(n) & key_padding(BATCH, n), False),
        "dense": (dense, False),
    }


@pytest.mark.parametrize("mask_name", list(path_masks(2, 2)))
def test_fast_path_matches_reference_path(mha, mask_name):
    n = 6
    x = torch.randn(BATCH, n, D_MODEL)
    mask, is_causal = path_masks(n, n)[mask_name]
    fast = mha(x, x, x, mask=mask, is_causal=is_causal)
    reference, weights = mha(x, x, x, mask=mask, is_causal=is_causal, need_weights=True)
    torch.testing.assert_close(fast, reference, atol=1e-5, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(BATCH, HEADS, n), atol=1e-6, rtol=0)
    if is_causal:
        assert (weights.triu(diagonal=1) == 0).all()


def test_is_causal_equals_explicit_causal_mask(mha):
    x = torch.randn(BATCH, 5, D_MODEL)
    torch.testing.assert_close(mha(x, x, x, is_causal=True), mha(x, x, x, mask=causal_mask(5)), atol=1e-6, rtol=0)


# -- equivariance ------------------------------------------------------------------------------------------
def test_query_equivariance_and_key_value_invariance(mha):
    """MHA(AX, BY, BY) = A MHA(X, Y, Y) for permutations A (queries) and B (key/value pairs)."""
    x, y = torch.randn(BATCH, 5, D_MODEL), torch.randn(BATCH, 7, D_MODEL)
    rows, cols = torch.randperm(5), torch.randperm(7)
    out, weights = mha(x, y, y, need_weights=True)
    out_p, weights_p = mha(x[:, rows], y[:, cols], y[:, cols], need_weights=True)
    torch.testing.assert_close(out_p, out[:, rows], atol=1e-5, rtol=0)
    torch.testing.assert_close(weights_p, weights[:, :, rows][..., cols], atol=1e-6, rtol=0)


def test_self_attention_is_permutation_equivariant(mha):
    x = torch.randn(BATCH, 6, D_MODEL)
    perm = torch.randperm(6)
    torch.testing.assert_close(mha(x[:, perm], x[:, perm], x[:, perm]), mha(x, x, x)[:, perm], atol=1e-5, rtol=0)


def test_encoder_layer_without_mask_is_permutation_equivariant():
    """A whole encoder layer (attention, FFN, residuals, LayerNorm) only mixes positions through attention."""
    for norm_first in (False, True):
        config = TransformerConfig(11, 11, d_model=D_MODEL, num_heads=HEADS, d_ff=32, norm_first=norm_first)
        layer = EncoderLayer(config).eval()
        x = torch.randn(BATCH, 6, D_MODEL)
        perm = torch.randperm(6)
        torch.testing.assert_close(layer(x[:, perm])[0], layer(x)[0][:, perm], atol=1e-5, rtol=0)


# -- causality ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("need_weights", [False, True])
def test_causal_self_attention_jacobian_is_block_lower_triangular(mha, need_weights):
    n = 5
    x = torch.randn(1, n, D_MODEL)

    def attend(inputs):
        result = mha(inputs, inputs, inputs, is_causal=True, need_weights=need_weights)
        return result[0] if need_weights else result

    jac = torch.autograd.functional.jacobian(attend, x)[0, :, :, 0]  # [n, d, n, d]
    blocks = jac.abs().sum(dim=(1, 3))
    assert (blocks.triu(diagonal=1) == 0).all()
    assert (blocks[causal_mask(n)] > 1e-6).all()  # and row i does depend on every j <= i


def test_causal_mask_breaks_self_attention_equivariance(mha):
    x = torch.randn(1, 6, D_MODEL)
    perm = torch.arange(5, -1, -1)
    out = mha(x, x, x, is_causal=True)
    out_p = mha(x[:, perm], x[:, perm], x[:, perm], is_causal=True)
    assert (out_p - out[:, perm]).abs().max() > 1e-2


# -- fully masked rows -------------------------------------------------------------------------------------
@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_row_gives_no_nan(mha, need_weights):
    x = torch.randn(BATCH, 4, D_MODEL, requires_grad=True)
    mask = torch.ones(BATCH, 1, 1, 4, dtype=torch.bool)
    mask[1] = False  # the second sequence has no real key at all
    result = mha(x, x, x, mask=mask, need_weights=need_weights)
    out = result[0] if need_weights else result
    assert torch.isfinite(out).all()
    # A query that sees nothing gets a zero attention result, so the layer outputs out_proj's bias.
    torch.testing.assert_close(out[1], mha.out_proj.bias.expand(4, D_MODEL))
    if need_weights:
        assert (result[1][1] == 0).all()
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


# -- gradcheck ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("need_weights", [False, True])
def test_gradcheck_multihead_attention(need_weights):
    mha = MultiHeadAttention(4, 2).double().eval()
    query = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    mask = key_padding(2, 4)

    def attend(query, memory):
        result = mha(query, memory, memory, mask=mask, need_weights=need_weights)
        return result[0] if need_weights else result

    assert torch.autograd.gradcheck(attend, (query, memory))


def test_dropout_only_in_training_mode():
    mha = MultiHeadAttention(D_MODEL, HEADS, dropout=0.5)
    x = torch.randn(BATCH, 6, D_MODEL)
    mha.train()
    assert not torch.allclose(mha(x, x, x), mha(x, x, x))
    mha.eval()
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x), atol=0, rtol=0)
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x, need_weights=True)[0], atol=1e-5, rtol=0)


def test_forward_with_a_self_attention_cache_equals_causal_attention_over_the_whole_prefix():
    """Feeding positions one (or several) at a time through an AttentionCache gives the causal result."""
    mha = MultiHeadAttention(D_MODEL, HEADS).eval()
    x = torch.randn(BATCH, 6, D_MODEL)
    full, full_weights = mha(x, x, x, is_causal=True, need_weights=True)
    cache = AttentionCache()
    steps = [x[:, :2], x[:, 2:3], x[:, 3:6]]  # a two-position prompt, one step, then three at once
    outs = [mha(s, s, s, is_causal=True, cache=cache) for s in steps]
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=1e-5, rtol=0)
    assert cache.length == 6 and cache.key.shape == (BATCH, HEADS, 6, D_MODEL // HEADS)
    cache = AttentionCache()
    mha(x[:, :5], x[:, :5], x[:, :5], is_causal=True, cache=cache)
    last, weights = mha(x[:, 5:], x[:, 5:], x[:, 5:], is_causal=True, cache=cache, need_weights=True)
    torch.testing.assert_close(weights[:, :, 0], full_weights[:, :, 5], atol=1e-6, rtol=0)


def test_static_cache_projects_the_memory_once_and_reuses_it():
    mha = MultiHeadAttention(D_MODEL, HEADS).eval()
    y, memory = torch.randn(BATCH, 3, D_MODEL), torch.randn(BATCH, 7, D_MODEL)
    cache = AttentionCache(static=True)
    first = mha(y[:, :1], memory, memory, cache=cache)
    stored = cache.key
    second = mha(y[:, 1:], memory * 0.0, memory * 0.0, cache=cache)  # memory ignored once the cache is filled
    assert cache.key is stored
    torch.testing.assert_close(torch.cat([first, second], dim=1), mha(y, memory, memory), atol=1e-5, rtol=0)


def test_cache_reused_with_another_batch_size_is_a_clear_error():
    mha = MultiHeadAttention(D_MODEL, HEADS).eval()
    cache = AttentionCache()
    x = torch.randn(BATCH, 2, D_MODEL)
    mha(x, x, x, is_causal=True, cache=cache)
    y = torch.randn(BATCH + 1, 1, D_MODEL)
    with pytest.raises(ValueError, match=f"cache holds {BATCH} rows but query has batch size {BATCH + 1}"):
        mha(y, y, y, is_causal=True, cache=cache)
    with pytest.raises(TypeError, match="cache must be an AttentionCache"):
        mha(x, x, x, cache={"key": None})


def test_inputs_of_another_dtype_are_a_clear_type_error():
    mha = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, 2, D_MODEL)
    with pytest.raises(TypeError, match="module's dtype torch.float32, got torch.float64"):
        mha(x.double(), x.double(), x.double())
    with pytest.raises(TypeError, match="must be floating point"):
        mha(x.long(), x.long(), x.long())
