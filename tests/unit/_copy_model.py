"""Small Transformers shared by the decoding and evaluation tests (built once per test session).

``random_model()`` is randomly initialised (with a bias towards <eos>); ``copy_model()`` is briefly trained on
the copy task so that its outputs are meaningful (it copies held-out inputs). Both are returned in eval mode;
do not modify them.
"""

from __future__ import annotations

import itertools
from functools import cache

import torch
import torch.nn.functional as F

from companion import Transformer, TransformerConfig
from companion.book.experiments.training import fit
from companion.data import EOS_ID, make_batches, synthetic_pairs
from companion.decode import greedy_decode

COPY_VOCAB = 10  # ids 4..9 are the "words"
COPY_MAX_LEN = 6


@cache
def random_model() -> Transformer:
    torch.manual_seed(1234)
    config = TransformerConfig(
        src_vocab_size=17,
        tgt_vocab_size=19,
        d_model=32,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_ff=64,
        dropout=0.1,
        max_len=40,
    )
    model = Transformer(config).eval()
    with torch.no_grad():  # make <eos> likely enough that some outputs end early and others hit the limit
        model.generator.bias[EOS_ID] = 1.5
    return model


def exact_match(model: Transformer, pairs) -> float:
    """Fraction of pairs whose greedy output equals the target."""
    batch = make_batches(pairs, 10**9, shuffle=False)[0]
    outputs = greedy_decode(model, batch.src)
    targets = [row[: row.index(EOS_ID)] for row in batch.tgt_out.tolist()]
    return sum(o == t for o, t in zip(outputs, targets)) / len(targets)


@cache
def copy_model() -> Transformer:
    """A one-layer pre-LN Transformer trained on the copy task with the chapters' shared loop
    (:func:`companion.book.experiments.training.fit`, 400 Adam steps, a few seconds on one CPU thread); the tests
    check that it copies held-out inputs exactly."""
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=COPY_VOCAB,
        tgt_vocab_size=COPY_VOCAB,
        d_model=32,
        num_heads=4,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=64,
        dropout=0.0,
        max_len=32,
        share_embeddings=True,
        tie_output=True,
        norm_first=True,
    )
    model = Transformer(config)
    train = synthetic_pairs("copy", 3000, max_len=COPY_MAX_LEN, vocab_size=COPY_VOCAB, seed=0)
    max_steps, warmup = 400, 30
    epochs = itertools.chain.from_iterable(make_batches(train, 400, seed=epoch) for epoch in itertools.count())

    def loss(model: Transformer, batch) -> torch.Tensor:
        logits = model(batch.src, batch.tgt_in)
        return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=config.pad_id)

    fit(
        model,
        epochs,
        loss,
        max_steps,
        lr=5e-3,
        betas=(0.9, 0.98),
        eps=1e-9,
        schedule=lambda s: min((s + 1) / warmup, max(0.0, (max_steps - s) / (max_steps - warmup))),
    )
    return model.eval()
