"""Scaled dot-product attention and masks: oracle parity with PyTorch and the properties the book claims."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from companion import causal_mask, fast_attention, padding_mask, scaled_dot_product_attention

B, H, M, N, D = 2, 3, 5, 7, 4


def qkv(m: int = M, n: int = N, d_k: int = D, d_v: int = D, dtype=torch.float32, lead=(B, H)):
    q = torch.randn(*lead, m, d_k, dtype=dtype)
    k = torch.randn(*lead, n, d_k, dtype=dtype)
    v = torch.randn(*lead, n, d_v, dtype=dtype)
    return q, k, v


def random_mask(*shape: int) -> torch.Tensor:
    """A random boolean mask where every query row keeps at least one key."""
    mask = torch.rand(*shape) < 0.6
    mask[..., 0] = True
    return mask


def masks(m: int = M, n: int = N) -> dict[str, torch.Tensor | None]:
    """Mask shapes the package uses: none, causal [m, n], key padding [batch, 1, 1, n], full [b, h, m, n]."""
    key_padding = torch.ones(B, 1, 1, n, dtype=torch.bool)
    key_padding[0, ..., n - 3 :] = False
    return {
        "none": None,
        "causal": torch.ones(m, n, dtype=torch.bool).tril(),
        "key_padding": key_padding,
        "full": random_mask(B, H, m, n),
    }


MASK_NAMES = list(masks())


# -- masks -------------------------------------------------------------------------------------------------
def test_causal_mask_is_lower_triangle():
    mask = causal_mask(4)
    assert mask.dtype == torch.bool and mask.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            assert bool(mask[i, j]) == (j <= i)
    assert causal_mask(1).tolist() == [[True]]
    assert causal_mask(3, device="cpu").device.type == "cpu"


def test_padding_mask_marks_real_tokens():
    tokens = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 9]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 1, 4) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, False, False], [True, False, True, True]]


# -- oracle parity -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mask_name", MASK_NAMES)
def test_reference_matches_torch_sdpa(mask_name):
    q, k, v = qkv(d_v=6)
    mask = masks()[mask_name]
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.shape == (B, H, M, 6) and weights.shape == (B, H, M, N)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("mask_name", MASK_NAMES)
def test_fast_path_matches_reference(mask_name):
    q, k, v = qkv()
    mask = masks()[mask_name]
    out, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(fast_attention(q, k, v, mask=mask), out, atol=1e-5, rtol=0)


def test_fast_path_is_causal_matches_explicit_causal_mask():
    q, k, v = qkv(m=N, n=N)
    out, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(N))
    torch.testing.assert_close(fast_attention(q, k, v, is_causal=True), out, atol=1e-5, rtol=0)


def test_reference_matches_the_formula_written_out():
    """softmax(Q K^T / sqrt(d_k)) V, one query at a time, in float64 with plain Python sums."""
    q, k, v = qkv(m=3, n=4, d_k=5, d_v=2, dtype=torch.float64, lead=())
    out, weights = scaled_dot_product_attention(q, k, v)
    for i in range(3):
        scores = [sum(q[i, c] * k[j, c] for c in range(5)) / math.sqrt(5) for j in range(4)]
        exps = [math.exp(float(s)) for s in scores]
        w = [e / sum(exps) for e in exps]
        for j in range(4):
            assert abs(float(weights[i, j]) - w[j]) < 1e-12
        for c in range(2):
            assert abs(float(out[i, c]) - sum(w[j] * float(v[j, c]) for j in range(4))) < 1e-12


# -- properties --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mask_name", MASK_NAMES)
def test_weight_rows_sum_to_one_and_masked_keys_get_zero(mask_name):
    q, k, v = qkv()
    mask = masks()[mask_name]
    _, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, M), atol=1e-6, rtol=0)
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_outputs_lie_in_the_convex_hull_of_value_rows():
    q, k, v = qkv(m=6, n=5, d_v=8, dtype=torch.float64, lead=())
    q = q * 3  # sharper softmax: rows far from uniform
    out, weights = scaled_dot_product_attention(q, k, v)
    # Each output coordinate lies between the smallest and largest entry of that column of V ...
    assert (out >= v.min(dim=0).values - 1e-12).all() and (out <= v.max(dim=0).values + 1e-12).all()
    # ... and each output row is a convex combination of V's rows, with exactly the returned weights:
    # V has full row rank (5 rows in 8 dimensions), so out_i = c^T V has the unique solution c.
    coefficients = torch.linalg.lstsq(v.T, out.T).solution.T  # [m, n]
    torch.testing.assert_close(v.T @ coefficients.T, out.T, atol=1e-10, rtol=0)
    assert (coefficients >= -1e-10).all()
    torch.testing.assert_close(coefficients.sum(-1), torch.ones(6, dtype=torch.float64), atol=1e-10, rtol=0)
    torch.testing.assert_close(coefficients, weights, atol=1e-10, rtol=0)


def test_query_permutation_equivariance_and_key_value_permutation_invariance():
    """Attention(AQ, BK, BV) = A Attention(Q, K, V) for permutation matrices A and B."""
    q, k, v = qkv(lead=(B,))
    rows, cols = torch.randperm(M), torch.randperm(N)
    assert not torch.equal(rows, torch.arange(M)) and not torch.equal(cols, torch.arange(N))
    out, weights = scaled_dot_product_attention(q, k, v)
    out_p, weights_p = scaled_dot_product_attention(q[:, rows], k[:, cols], v[:, cols])
    torch.testing.assert_close(out_p, out[:, rows], atol=1e-6, rtol=0)
    # The weights follow both permutations: W' = A W B^T.
    torch.testing.assert_close(weights_p, weights[:, rows][:, :, cols], atol=1e-6, rtol=0)
    # The same in matrix form with explicit permutation matrices.
    a, b = torch.eye(M)[rows], torch.eye(N)[cols]
    out_m, _ = scaled_dot_product_attention(a @ q, b @ k, b @ v)
    torch.testing.assert_close(out_m, a @ out, atol=1e-6, rtol=0)


def test_causal_output_row_depends_only_on_earlier_inputs():
    """Self-attention with the causal mask: d out_i / d x_j = 0 for j > i (block lower-triangular Jacobian)."""
    n, d = 6, 3
    x = torch.randn(n, d, dtype=torch.float64)
    mask = causal_mask(n)

    def self_attention(inputs):
        return scaled_dot_product_attention(inputs, inputs * 0.7, inputs.flip(-1), mask=mask)[0]

    jac = torch.autograd.functional.jacobian(self_attention, x)  # [n, d, n, d]
    blocks = jac.abs().sum(dim=(1, 3))  # [n (output row), n (input row)]
    for i in range(n):
        for j in range(n):
            if j > i:
                assert blocks[i, j] == 0, f"output {i} depends on future input {j}"
            else:
                assert blocks[i, j] > 1e-6, f"output {i} should depend on input {j}"
    # Perturbation check on the fast path too: changing input j leaves rows < j untouched.
    y = x.clone()
    y[4] += 1.0
    before = fast_attention(x, x * 0.7, x.flip(-1), is_causal=True)
    after = fast_attention(y, y * 0.7, y.flip(-1), is_causal=True)
    torch.testing.assert_close(after[:4], before[:4], atol=0, rtol=0)
    assert (after[4:] - before[4:]).abs().max() > 1e-3


def test_causal_mask_breaks_permutation_equivariance():
    """A counterexample: reversing the sequence does not reverse the causally masked output."""
    n = 5
    x = torch.randn(n, D)
    rows = torch.arange(n - 1, -1, -1)
    plain, _ = scaled_dot_product_attention(x[rows], x[rows], x[rows])
    reference, _ = scaled_dot_product_attention(x, x, x)
    torch.testing.assert_close(plain, reference[rows], atol=1e-6, rtol=0)  # equivariant without the mask
    masked_perm, _ = scaled_dot_product_attention(x[rows], x[rows], x[rows], mask=causal_mask(n))
    masked, _ = scaled_dot_product_attention(x, x, x, mask=causal_mask(n))
    assert (masked_perm - masked[rows]).abs().max() > 1e-2


def test_fully_masked_row_gives_zeros_not_nan_with_finite_gradients():
    q, k, v = (t.requires_grad_() for t in qkv())
    mask = random_mask(B, H, M, N)
    mask[0, 1, 2] = False  # query 2 of head 1 in batch 0 sees no key at all
    for path in ("reference", "fast"):
        if path == "reference":
            out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
            assert (weights[0, 1, 2] == 0).all()
            assert torch.isfinite(weights).all()
        else:
            out = fast_attention(q, k, v, mask=mask)
        assert torch.isfinite(out).all(), path
        assert (out[0, 1, 2] == 0).all(), path
        grads = torch.autograd.grad(out.square().sum(), (q, k, v))
        assert all(torch.isfinite(g).all() for g in grads), path
        assert (grads[0][0, 1, 2] == 0).all(), path  # the dead query gets no gradient


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_attention_dropout_zeroes_and_rescales_weights(path):
    """With V = I the output *is* the weight matrix after dropout: entries are 0 or w / (1 - p)."""
    p = 0.5
    q, k, _ = qkv(m=8, n=N, lead=(B,))
    v = torch.eye(N).expand(B, N, N)
    _, weights = scaled_dot_product_attention(q, k, v)
    if path == "reference":
        with torch.no_grad():  # dropout must not depend on the grad mode
            dropped, returned = scaled_dot_product_attention(q, k, v, dropout_p=p)
        torch.testing.assert_close(returned, weights)  # the returned weights are taken before dropout
    else:
        dropped = fast_attention(q, k, v, dropout_p=p)
    kept = dropped != 0
    assert 0 < kept.float().mean() < 1
    torch.testing.assert_close(dropped[kept], (weights / (1 - p))[kept], atol=1e-6, rtol=0)


def test_gradcheck_reference_attention_with_mask():
    q, k, v = (t.requires_grad_() for t in qkv(m=3, n=4, d_k=2, d_v=3, dtype=torch.float64, lead=(2,)))
    mask = torch.tensor([[True, True, False, False], [True, False, True, False], [False, True, True, True]])

    def attention(q, k, v):
        out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return out, weights

    assert torch.autograd.gradcheck(attention, (q, k, v))


def test_gradcheck_fast_attention_with_mask():
    q, k, v = (t.requires_grad_() for t in qkv(m=3, n=4, d_k=2, d_v=3, dtype=torch.float64, lead=(2,)))
    mask = torch.tensor([[True, True, False, False], [True, False, True, False], [False, True, True, True]])
    assert torch.autograd.gradcheck(lambda q, k, v: fast_attention(q, k, v, mask=mask), (q, k, v))


def test_leading_dimensions_broadcast_like_matmul():
    """One set of keys shared by every head (leading dim 1) gives the same result as copying it."""
    q = torch.randn(B, H, M, D)
    k, v = torch.randn(B, 1, N, D), torch.randn(B, 1, N, D)
    out, weights = scaled_dot_product_attention(q, k, v)
    out_full, _ = scaled_dot_product_attention(q, k.expand(B, H, N, D), v.expand(B, H, N, D))
    torch.testing.assert_close(out, out_full)
    assert weights.shape == (B, H, M, N)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("masked", [False, True])
def test_fused_and_reference_paths_agree_on_nonfinite_queries(bad, masked):
    """The fused CPU kernel used to turn a NaN query into a zero output row; both paths now give NaN there (and
    fully masked rows stay zero in both)."""
    q, k, v = qkv()
    q[0, 1, 2, 3] = bad
    mask = random_mask(B, 1, M, N) if masked else None
    if masked:
        mask[1, :, 4, :] = False  # a fully masked row
    reference, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    fused = fast_attention(q, k, v, mask=mask)
    assert torch.equal(fused.isnan(), reference.isnan())
    assert reference[0, 1, 2].isnan().all()
    finite = ~reference.isnan()
    torch.testing.assert_close(fused[finite], reference[finite])


# -- moved from test_bad_input.py: bad input fails early, naming the argument, the expected and the actual ------
def _literal(text: str) -> str:
    """A literal message fragment for ``pytest.raises(match=...)``."""
    import re

    return re.escape(text)


_Q, _K, _V = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
ATTENTION_CASES = {
    "d_k mismatch": (
        lambda f: f(_Q, torch.randn(2, 5, 3), _V),
        ValueError,
        _literal("q and k must share d_k, got q (2, 3, 4) and k (2, 5, 3)"),
    ),
    "k/v length mismatch": (
        lambda f: f(_Q, _K, torch.randn(2, 4, 6)),
        ValueError,
        _literal("k and v must have the same number of positions n, got k (2, 5, 4) and v (2, 4, 6)"),
    ),
    "rank mismatch": (
        lambda f: f(_Q[0], _K, _V),
        ValueError,
        _literal("q, k and v must have the same number (>= 2) of dimensions")
        + ".*"
        + _literal("(3, 4), (2, 5, 4), (2, 5, 6)"),
    ),
    "batch mismatch": (
        lambda f: f(_Q, torch.randn(3, 5, 4), torch.randn(3, 5, 6)),
        ValueError,
        _literal("leading (batch, head) dimensions of q, k and v must broadcast, got shapes (2, 3, 4), (3, 5, 4)"),
    ),
    "empty queries": (
        lambda f: f(_Q[:, :0], _K, _V),
        ValueError,
        _literal("q and k must have at least one position, got q (2, 0, 4), k (2, 5, 4)"),
    ),
    "mask does not broadcast": (
        lambda f: f(_Q, _K, _V, mask=torch.ones(3, 4, dtype=torch.bool)),
        ValueError,
        _literal("mask of shape (3, 4) does not broadcast to the attention scores' shape (2, 3, 5)"),
    ),
    "mask would broadcast upward": (  # an extra leading dim would silently enlarge the output
        lambda f: f(_Q, _K, _V, mask=torch.ones(4, 2, 3, 5, dtype=torch.bool)),
        ValueError,
        _literal("mask of shape (4, 2, 3, 5) does not broadcast to the attention scores' shape (2, 3, 5)"),
    ),
    "float mask": (
        lambda f: f(_Q, _K, _V, mask=torch.zeros(3, 5)),
        TypeError,
        _literal("mask must be a boolean tensor (True = may attend), got dtype torch.float32"),
    ),
    "not a tensor": (lambda f: f(_Q.tolist(), _K, _V), TypeError, _literal("q must be a torch.Tensor, got list")),
    "dropout_p out of range": (
        lambda f: f(_Q, _K, _V, dropout_p=1.0),
        ValueError,
        _literal("dropout_p must be a number in [0, 1), got 1.0"),
    ),
}


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
@pytest.mark.parametrize("function", [scaled_dot_product_attention, fast_attention], ids=["reference", "fast"])
def test_attention_functions_reject(function, case):
    call, error, message = ATTENTION_CASES[case]
    with pytest.raises(error, match=message):
        call(function)


def test_fast_attention_causal_flag_conflicts():
    q = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match=_literal("pass either mask or is_causal=True, not both")):
        fast_attention(q, q, q, mask=causal_mask(3), is_causal=True)
    with pytest.raises(
        ValueError, match=_literal("is_causal=True needs as many keys as queries, got 3 queries and 5 keys")
    ):
        fast_attention(q, _K, _K, is_causal=True)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: causal_mask(0), ValueError, _literal("size must be a positive integer, got 0")),
        (lambda: causal_mask(2.5), ValueError, _literal("size must be a positive integer, got 2.5")),
        (
            lambda: padding_mask(torch.randn(2, 3), 0),
            TypeError,
            _literal("tokens must hold integer token ids, got dtype torch.float32"),
        ),
        (
            lambda: padding_mask(torch.ones(3, dtype=torch.long), 0),
            ValueError,
            _literal("tokens must have 2 dimensions, got shape (3,)"),
        ),
    ],
    ids=["causal size 0", "causal size float", "float tokens", "1-D tokens"],
)
def test_mask_helpers_reject(call, error, message):
    with pytest.raises(error, match=message):
        call()


_D_MODEL = 16
_X = torch.randn(2, 5, _D_MODEL)  # queries
_Y = torch.randn(2, 7, _D_MODEL)  # keys / values


@pytest.fixture(scope="module")
def bad_input_mha():
    from companion import MultiHeadAttention

    return MultiHeadAttention(_D_MODEL, 4).eval()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(d_model=10, num_heads=4),
            _literal("d_model must be divisible by num_heads, got d_model=10 and num_heads=4"),
        ),
        (dict(d_model=16, num_heads=0), _literal("num_heads must be a positive integer, got 0")),
        (dict(d_model=16, num_heads=4, dropout=1.5), _literal("dropout must be a number in [0, 1), got 1.5")),
    ],
    ids=["not divisible", "zero heads", "dropout"],
)
def test_multihead_constructor_rejects(kwargs, message):
    from companion import MultiHeadAttention

    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**kwargs)


MHA_CASES = {
    "query feature size": (
        lambda m: m(torch.randn(2, 5, 12), _Y, _Y),
        ValueError,
        _literal("query must have last dimension d_model=16, got shape (2, 5, 12)"),
    ),
    "key feature size": (
        lambda m: m(_X, torch.randn(2, 7, 12), _Y),
        ValueError,
        _literal("key must have last dimension d_model=16, got shape (2, 7, 12)"),
    ),
    "value feature size": (
        lambda m: m(_X, _Y, torch.randn(2, 7, 20)),
        ValueError,
        _literal("value must have last dimension d_model=16, got shape (2, 7, 20)"),
    ),
    "unbatched query": (
        lambda m: m(_X[0], _Y, _Y),
        ValueError,
        _literal("query must have 3 dimensions, got shape (5, 16)"),
    ),
    "batch mismatch": (
        lambda m: m(_X, _Y[:1], _Y[:1]),
        ValueError,
        _literal("query, key and value must have the same batch size, got shapes (2, 5, 16), (1, 7, 16), (1, 7, 16)"),
    ),
    "key/value length": (
        lambda m: m(_X, _Y, _Y[:, :6]),
        ValueError,
        _literal("key and value must have the same length, got (2, 7, 16) and (2, 6, 16)"),
    ),
    "empty query": (
        lambda m: m(_X[:, :0], _Y, _Y),
        ValueError,
        _literal("query and key must hold at least one position, got (2, 0, 16), (2, 7, 16)"),
    ),
    "padding mask of wrong length": (
        lambda m: m(_X, _Y, _Y, mask=torch.ones(2, 1, 1, 8, dtype=torch.bool)),
        ValueError,
        _literal("mask of shape (2, 1, 1, 8) does not broadcast to the attention scores' shape (2, 4, 5, 7)"),
    ),
    "mask of wrong batch": (
        lambda m: m(_X, _Y, _Y, mask=torch.ones(3, 1, 1, 7, dtype=torch.bool)),
        ValueError,
        _literal("mask of shape (3, 1, 1, 7) does not broadcast to the attention scores' shape (2, 4, 5, 7)"),
    ),
    "ambiguous 3-D mask": (  # [batch, m, n] would silently be read as [heads, m, n] when batch == heads
        lambda m: m(_X, _Y, _Y, mask=torch.ones(2, 5, 7, dtype=torch.bool)),
        ValueError,
        _literal("mask must have 2 or 4 dimensions, got shape (2, 5, 7)"),
    ),
    "float mask": (
        lambda m: m(_X, _Y, _Y, mask=torch.zeros(5, 7)),
        TypeError,
        _literal("mask must be a boolean tensor (True = may attend), got dtype torch.float32"),
    ),
    "is_causal with a mask": (
        lambda m: m(_X, _X, _X, mask=causal_mask(5), is_causal=True),
        ValueError,
        _literal("pass either mask or is_causal=True, not both"),
    ),
    "is_causal cross-attention": (
        lambda m: m(_X, _Y, _Y, is_causal=True),
        ValueError,
        _literal("is_causal=True needs as many keys as queries, got 5 queries and 7 keys"),
    ),
}


@pytest.mark.parametrize("case", list(MHA_CASES))
@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_forward_rejects(bad_input_mha, case, need_weights):
    call, error, message = MHA_CASES[case]
    with pytest.raises(error, match=message):
        if need_weights:
            call(lambda *args, **kwargs: bad_input_mha(*args, need_weights=True, **kwargs))
        else:
            call(bad_input_mha)


def test_multihead_attention_names_a_wrong_dtype():
    from companion import MultiHeadAttention

    x = torch.zeros(1, 2, 16, dtype=torch.float64)
    with pytest.raises(TypeError, match="dtype torch.float32"):
        MultiHeadAttention(16, 2)(x, x, x)


def test_fast_attention_runs_in_float32_under_cpu_autocast():
    """Under CPU bfloat16 autocast (training with TrainConfig.cpu_bf16) the fused kernel gets float32 copies of
    bfloat16 queries, keys and values (its bfloat16 backward is many times slower on CPU): the output is float32
    and equals float32 attention on the same values; outside autocast bfloat16 stays bfloat16."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8).to(torch.bfloat16) for _ in range(3))
    mask = padding_mask(torch.tensor([[3, 4, 5, 0, 0], [3, 4, 5, 6, 7]]), 0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fast_attention(q, k, v, mask=mask)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, fast_attention(q.float(), k.float(), v.float(), mask=mask), rtol=0, atol=0)
    assert fast_attention(q, k, v, mask=mask).dtype == torch.bfloat16
