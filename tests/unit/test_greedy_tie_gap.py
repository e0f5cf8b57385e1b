"""companion.decode.greedy_tie_gap: the score gap where two greedy outputs of one sentence part."""

import pytest
import torch

from companion.data import BOS_ID, EOS_ID
from companion.decode import greedy_tie_gap
from companion.model import Transformer, TransformerConfig


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(
        TransformerConfig(
            src_vocab_size=20,
            tgt_vocab_size=20,
            d_model=16,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            d_ff=32,
        )
    ).eval()


def _logits(model, src, prefix):
    with torch.no_grad():
        memory, mask = model.encode(torch.tensor([src]))
        return model.decode(torch.tensor([[BOS_ID, *prefix]]), memory, mask)[0, -1]


def test_the_gap_is_read_where_the_outputs_first_part(model):
    src = [5, 6, 7, EOS_ID]
    logits = _logits(model, src, [8, 9])
    assert greedy_tie_gap(model, src, [8, 9, 10, 4], [8, 9, 11]) == pytest.approx(float(abs(logits[10] - logits[11])))


def test_an_output_that_ends_first_parts_at_eos(model):
    src = [5, 6, EOS_ID]
    logits = _logits(model, src, [8])
    assert greedy_tie_gap(model, src, [8], [8, 12]) == pytest.approx(float(abs(logits[EOS_ID] - logits[12])))


def test_equal_outputs_are_refused(model):
    with pytest.raises(ValueError, match="same token list"):
        greedy_tie_gap(model, [5, EOS_ID], [3, 4], [3, 4])
