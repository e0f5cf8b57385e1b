"""Bad input fails early and clearly: a ValueError/TypeError that names the argument and gives the expected
and the actual shape or value, never a silent broadcast or an error from deep inside PyTorch."""

from __future__ import annotations

import re

import pytest
import torch

from companion import (
    MultiHeadAttention,
    PositionalEncoding,
    Transformer,
    TransformerConfig,
    causal_mask,
    fast_attention,
    padding_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
)

D_MODEL, HEADS = 16, 4


def e(text: str) -> str:
    """Escape a literal message fragment for ``pytest.raises(match=...)``."""
    return re.escape(text)


@pytest.fixture(scope="module")
def mha() -> MultiHeadAttention:
    return MultiHeadAttention(D_MODEL, HEADS).eval()


@pytest.fixture(scope="module")
def model() -> Transformer:
    config = TransformerConfig(
        23, 19, d_model=D_MODEL, num_heads=HEADS, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, max_len=64
    )
    return Transformer(config).eval()


X = torch.randn(2, 5, D_MODEL)  # queries
Y = torch.randn(2, 7, D_MODEL)  # keys / values
SRC = torch.randint(1, 23, (2, 6))
TGT = torch.randint(1, 19, (2, 5))

# -- scaled_dot_product_attention and fast_attention -------------------------------------------------------
Q, K, V = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
ATTENTION_CASES = {
    "d_k mismatch": (
        lambda f: f(Q, torch.randn(2, 5, 3), V),
        ValueError,
        e("q and k must share d_k, got q (2, 3, 4) and k (2, 5, 3)"),
    ),
    "k/v length mismatch": (
        lambda f: f(Q, K, torch.randn(2, 4, 6)),
        ValueError,
        e("k and v must have the same number of positions n, got k (2, 5, 4) and v (2, 4, 6)"),
    ),
    "rank mismatch": (
        lambda f: f(Q[0], K, V),
        ValueError,
        e("q, k and v must have the same number (>= 2) of dimensions") + ".*" + e("(3, 4), (2, 5, 4), (2, 5, 6)"),
    ),
    "batch mismatch": (
        lambda f: f(Q, torch.randn(3, 5, 4), torch.randn(3, 5, 6)),
        ValueError,
        e("leading (batch, head) dimensions of q, k and v must broadcast, got shapes (2, 3, 4), (3, 5, 4)"),
    ),
    "empty queries": (
        lambda f: f(Q[:, :0], K, V),
        ValueError,
        e("q and k must have at least one position, got q (2, 0, 4), k (2, 5, 4)"),
    ),
    "mask does not broadcast": (
        lambda f: f(Q, K, V, mask=torch.ones(3, 4, dtype=torch.bool)),
        ValueError,
        e("mask of shape (3, 4) does not broadcast to the attention scores' shape (2, 3, 5)"),
    ),
    "mask would broadcast upward": (  # an extra leading dim would silently enlarge the output
        lambda f: f(Q, K, V, mask=torch.ones(4, 2, 3, 5, dtype=torch.bool)),
        ValueError,
        e("mask of shape (4, 2, 3, 5) does not broadcast to the attention scores' shape (2, 3, 5)"),
    ),
    "float mask": (
        lambda f: f(Q, K, V, mask=torch.zeros(3, 5)),
        TypeError,
        e("mask must be a boolean tensor (True = may attend), got dtype torch.float32"),
    ),
    "not a tensor": (lambda f: f(Q.tolist(), K, V), TypeError, e("q must be a torch.Tensor, got list")),
    "dropout_p out of range": (
        lambda f: f(Q, K, V, dropout_p=1.0),
        ValueError,
        e("dropout_p must be a number in [0, 1), got 1.0"),
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
    with pytest.raises(ValueError, match=e("pass either mask or is_causal=True, not both")):
        fast_attention(q, q, q, mask=causal_mask(3), is_causal=True)
    with pytest.raises(ValueError, match=e("is_causal=True needs as many keys as queries, got 3 queries and 5 keys")):
        fast_attention(q, K, K, is_causal=True)


# -- masks and positions -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: causal_mask(0), ValueError, e("size must be a positive integer, got 0")),
        (lambda: causal_mask(2.5), ValueError, e("size must be a positive integer, got 2.5")),
        (
            lambda: padding_mask(torch.randn(2, 3), 0),
            TypeError,
            e("tokens must hold integer token ids, got dtype torch.float32"),
        ),
        (
            lambda: padding_mask(torch.ones(3, dtype=torch.long), 0),
            ValueError,
            e("tokens must have 2 dimensions, got shape (3,)"),
        ),
        (lambda: sinusoidal_encoding(0, 8), ValueError, e("num_positions must be a positive integer, got 0")),
        (
            lambda: sinusoidal_encoding(4, 7),
            ValueError,
            e("d_model must be even for sinusoidal encodings (sin/cos pairs), got 7"),
        ),
        (
            lambda: PositionalEncoding(8, max_len=4)(torch.randn(1, 5, 8)),
            ValueError,
            e("positions 0..4 exceed max_len=4"),
        ),
        (
            lambda: PositionalEncoding(8)(torch.randn(1, 5, 6)),
            ValueError,
            e("x must have last dimension d_model=8, got shape (1, 5, 6)"),
        ),
    ],
    ids=[
        "causal size 0",
        "causal size float",
        "float tokens",
        "1-D tokens",
        "zero positions",
        "odd d_model",
        "beyond max_len",
        "wrong feature size",
    ],
)
def test_mask_and_position_helpers_reject(call, error, message):
    with pytest.raises(error, match=message):
        call()


# -- MultiHeadAttention ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(d_model=10, num_heads=4), e("d_model must be divisible by num_heads, got d_model=10 and num_heads=4")),
        (dict(d_model=16, num_heads=0), e("num_heads must be a positive integer, got 0")),
        (dict(d_model=16, num_heads=4, dropout=1.5), e("dropout must be a number in [0, 1), got 1.5")),
    ],
    ids=["not divisible", "zero heads", "dropout"],
)
def test_multihead_constructor_rejects(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**kwargs)


MHA_CASES = {
    "query feature size": (
        lambda m: m(torch.randn(2, 5, 12), Y, Y),
        ValueError,
        e("query must have last dimension d_model=16, got shape (2, 5, 12)"),
    ),
    "key feature size": (
        lambda m: m(X, torch.randn(2, 7, 12), Y),
        ValueError,
        e("key must have last dimension d_model=16, got shape (2, 7, 12)"),
    ),
    "value feature size": (
        lambda m: m(X, Y, torch.randn(2, 7, 20)),
        ValueError,
        e("value must have last dimension d_model=16, got shape (2, 7, 20)"),
    ),
    "unbatched query": (lambda m: m(X[0], Y, Y), ValueError, e("query must have 3 dimensions, got shape (5, 16)")),
    "batch mismatch": (
        lambda m: m(X, Y[:1], Y[:1]),
        ValueError,
        e("query, key and value must have the same batch size, got shapes (2, 5, 16), (1, 7, 16), (1, 7, 16)"),
    ),
    "key/value length": (
        lambda m: m(X, Y, Y[:, :6]),
        ValueError,
        e("key and value must have the same length, got (2, 7, 16) and (2, 6, 16)"),
    ),
    "empty query": (
        lambda m: m(X[:, :0], Y, Y),
        ValueError,
        e("query and key must hold at least one position, got (2, 0, 16), (2, 7, 16)"),
    ),
    "padding mask of wrong length": (
        lambda m: m(X, Y, Y, mask=torch.ones(2, 1, 1, 8, dtype=torch.bool)),
        ValueError,
        e("mask of shape (2, 1, 1, 8) does not broadcast to the attention scores' shape (2, 4, 5, 7)"),
    ),
    "mask of wrong batch": (
        lambda m: m(X, Y, Y, mask=torch.ones(3, 1, 1, 7, dtype=torch.bool)),
        ValueError,
        e("mask of shape (3, 1, 1, 7) does not broadcast to the attention scores' shape (2, 4, 5, 7)"),
    ),
    "ambiguous 3-D mask": (  # [batch, m, n] would silently be read as [heads, m, n] when batch == heads
        lambda m: m(X, Y, Y, mask=torch.ones(2, 5, 7, dtype=torch.bool)),
        ValueError,
        e("mask must have 2 or 4 dimensions, got shape (2, 5, 7)"),
    ),
    "float mask": (
        lambda m: m(X, Y, Y, mask=torch.zeros(5, 7)),
        TypeError,
        e("mask must be a boolean tensor (True = may attend), got dtype torch.float32"),
    ),
    "is_causal with a mask": (
        lambda m: m(X, X, X, mask=causal_mask(5), is_causal=True),
        ValueError,
        e("pass either mask or is_causal=True, not both"),
    ),
    "is_causal cross-attention": (
        lambda m: m(X, Y, Y, is_causal=True),
        ValueError,
        e("is_causal=True needs as many keys as queries, got 5 queries and 7 keys"),
    ),
}


@pytest.mark.parametrize("case", list(MHA_CASES))
@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_forward_rejects(mha, case, need_weights):
    call, error, message = MHA_CASES[case]
    with pytest.raises(error, match=message):
        if need_weights:
            call(lambda *args, **kwargs: mha(*args, need_weights=True, **kwargs))
        else:
            call(mha)


# -- TransformerConfig -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(d_model=10, num_heads=4), e("d_model must be divisible by num_heads, got d_model=10 and num_heads=4")),
        (dict(d_model=0), e("d_model must be a positive integer, got 0")),
        (dict(num_encoder_layers=-1), e("num_encoder_layers must be an integer >= 0, got -1")),
        (dict(dropout=1.0), e("dropout must be a number in [0, 1), got 1.0")),
        (dict(pad_id=19), e("pad_id (a token id of both vocabularies) must be an integer in [0, 18], got 19")),
        (dict(share_embeddings=True), e("share_embeddings=True needs src_vocab_size == tgt_vocab_size, got 23 and 19")),
        (dict(positional="rotary"), e("positional must be one of ['sinusoidal', 'learned'], got 'rotary'")),
    ],
    ids=["not divisible", "zero width", "negative layers", "dropout", "pad id", "share vocab", "positional"],
)
def test_config_rejects(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(23, 19, **kwargs)


def test_config_from_dict_and_model_reject_wrong_types():
    with pytest.raises(ValueError, match=e("unknown TransformerConfig fields: ['dmodel']")):
        TransformerConfig.from_dict({"src_vocab_size": 3, "tgt_vocab_size": 3, "dmodel": 4})
    with pytest.raises(TypeError, match=e("config must be a TransformerConfig, got dict")):
        Transformer({"src_vocab_size": 3})


# -- Transformer -------------------------------------------------------------------------------------------
MODEL_CASES = {
    "src id = vocab size": (
        lambda m: m(torch.tensor([[1, 23]]), TGT[:1]),
        ValueError,
        e("src holds token id 23, outside the vocabulary [0, 23) (vocab_size=23)"),
    ),
    "tgt id > vocab size": (
        lambda m: m(SRC, torch.tensor([[1, 2, 40], [1, 2, 3]])),
        ValueError,
        e("tgt holds token id 40, outside the vocabulary [0, 19) (vocab_size=19)"),
    ),
    "negative src id": (
        lambda m: m(torch.tensor([[4, -1]]), TGT[:1]),
        ValueError,
        e("src holds token id -1, outside the vocabulary [0, 23)"),
    ),
    "empty src": (
        lambda m: m(SRC[:, :0], TGT),
        ValueError,
        e("src must be a non-empty [batch, seq] tensor, got shape (2, 0)"),
    ),
    "empty tgt": (
        lambda m: m(SRC, TGT[:, :0]),
        ValueError,
        e("tgt must be a non-empty [batch, seq] tensor, got shape (2, 0)"),
    ),
    "empty batch": (
        lambda m: m(SRC[:0], TGT[:0]),
        ValueError,
        e("src must be a non-empty [batch, seq] tensor, got shape (0, 6)"),
    ),
    "float src": (
        lambda m: m(SRC.float(), TGT),
        TypeError,
        e("src must hold integer token ids (torch.long), got dtype torch.float32"),
    ),
    "bool tgt": (
        lambda m: m(SRC, TGT > 3),
        TypeError,
        e("tgt must hold integer token ids (torch.long), got dtype torch.bool"),
    ),
    "1-D src": (lambda m: m(SRC[0], TGT), ValueError, e("src must have 2 dimensions, got shape (6,)")),
    "list src": (lambda m: m(SRC.tolist(), TGT), TypeError, e("src must be a torch.Tensor, got list")),
    "batch mismatch": (
        lambda m: m(SRC, torch.randint(1, 19, (3, 5))),
        ValueError,
        e("src and tgt must have the same batch size, got 2 and 3"),
    ),
    "longer than max_len": (
        lambda m: m(torch.randint(1, 23, (2, 65)), TGT),
        ValueError,
        e("positions 0..64 exceed max_len=64"),
    ),
    "memory feature size": (
        lambda m: m.decode(TGT, torch.randn(2, 6, 8)),
        ValueError,
        e("memory must have last dimension d_model=16, got shape (2, 6, 8)"),
    ),
    "memory batch": (
        lambda m: m.decode(TGT, torch.randn(3, 6, D_MODEL)),
        ValueError,
        e("memory and tgt must have the same batch size, got 3 and 2"),
    ),
    "src mask does not broadcast": (
        lambda m: m.decode(TGT, torch.randn(2, 6, D_MODEL), torch.ones(2, 1, 1, 5, dtype=torch.bool)),
        ValueError,
        e(
            "src_mask must be the boolean key-padding mask [batch, 1, 1, n] = [2, 1, 1, 6] that encode() returns, "
            "got torch.bool of shape [2, 1, 1, 5]"
        ),
    ),
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_transformer_rejects(model, case):
    call, error, message = MODEL_CASES[case]
    with pytest.raises(error, match=message):
        call(model)


def test_encode_rejects_out_of_vocabulary_ids(model):
    with pytest.raises(ValueError, match=e("src holds token id 99, outside the vocabulary [0, 23)")):
        model.encode(torch.tensor([[1, 99]]))
