"""companion.plots: attention maps show every head with the right data and tokens, metrics logs are read and
drawn faithfully, token labels line up with ids, and bad input is refused with a clear message."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")  # tests draw off-screen

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from companion.data import BOS_ID, EOS_ID, UNK_ID, WordTokenizer  # noqa: E402
from companion.plots import plot_attention_heads, plot_learning_curves, read_metrics, token_labels  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def heads_weights(heads: int, q_len: int, k_len: int) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.softmax(torch.randn(heads, q_len, k_len), dim=-1)


def image_axes(fig) -> list:
    return [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]


def test_one_panel_per_head_with_its_own_weights_and_tokens():
    weights = heads_weights(3, 2, 4)
    queries, keys = ["a", "b"], ["w", "x", "y", "z"]
    fig = plot_attention_heads(weights, queries, keys, title="t", ncols=2)
    panels = image_axes(fig)
    assert len(panels) == 3
    for head, ax in enumerate(panels):
        np.testing.assert_allclose(ax.images[0].get_array(), weights[head].numpy(), rtol=0, atol=1e-7)
        assert [t.get_text() for t in ax.get_xticklabels()] == keys
        assert ax.get_title() == f"head {head}"
    assert [t.get_text() for t in panels[0].get_yticklabels()] == queries
    assert fig._suptitle.get_text() == "t"
    # 3 heads in 2 columns: a 2x2 grid with one empty slot switched off
    assert sum(not ax.axison for ax in fig.axes) == 1


def test_shared_colour_scale_from_zero_to_vmax():
    fig = plot_attention_heads(heads_weights(2, 3, 3), list("abc"), list("abc"))
    for ax in image_axes(fig):
        assert ax.images[0].get_clim() == (0.0, 1.0)
    fig = plot_attention_heads(heads_weights(2, 3, 3) * 0.5, list("abc"), list("abc"), vmax=None)
    top = max(ax.images[0].get_clim()[1] for ax in image_axes(fig))
    assert top == pytest.approx(float((heads_weights(2, 3, 3) * 0.5).max()))


def test_numpy_input_is_accepted():
    weights = heads_weights(2, 2, 3).numpy()
    fig = plot_attention_heads(weights, ["a", "b"], ["c", "d", "e"])
    panels = image_axes(fig)
    assert len(panels) == 2
    for head, ax in enumerate(panels):
        np.testing.assert_allclose(ax.images[0].get_array(), weights[head], rtol=0, atol=1e-7)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["c", "d", "e"]


@pytest.mark.parametrize(
    "weights, queries, keys, match",
    [
        (torch.rand(1, 2, 2, 2), ["a", "b"], ["c", "d"], "index the batch first"),
        (torch.rand(2, 2), ["a", "b"], ["c", "d"], "3 dimensions"),
        (torch.rand(1, 2, 3), ["a"], ["c", "d", "e"], "query_tokens must hold q_len=2"),
        (torch.rand(1, 2, 3), ["a", "b"], ["c"], "key_tokens must hold k_len=3"),
    ],
)
def test_bad_shapes_name_the_argument(weights, queries, keys, match):
    with pytest.raises(ValueError, match=match):
        plot_attention_heads(weights, queries, keys)


def test_bad_types_and_options_are_refused():
    with pytest.raises(TypeError, match="weights must be a torch.Tensor or numpy array"):
        plot_attention_heads([[[1.0]]], ["a"], ["b"])
    with pytest.raises(ValueError, match="ncols must be a positive integer"):
        plot_attention_heads(torch.rand(1, 1, 1), ["a"], ["b"], ncols=0)


def write_log(path, records, torn_tail: str | None = None):
    text = "".join(json.dumps(r) + "\n" for r in records)
    if torn_tail is not None:
        text += torn_tail
    path.write_text(text, encoding="utf-8")


def test_read_metrics_groups_by_kind_and_skips_a_torn_last_line(tmp_path):
    records = [
        {"kind": "train", "step": 10, "nll": 3.0, "loss": 3.5, "ppl": 20.0},
        {"kind": "valid", "step": 10, "valid_nll": 2.9, "valid_loss": 3.4, "valid_ppl": 18.2},
        {"kind": "train", "step": 20, "nll": 2.5, "loss": 3.0, "ppl": 12.2},
    ]
    write_log(tmp_path / "metrics.jsonl", records, torn_tail='{"kind": "train", "st')
    groups = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in groups["train"]] == [10, 20]
    assert groups["valid"] == [records[1]]


def test_read_metrics_refuses_a_broken_line_in_the_middle_and_a_missing_file(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"kind": "train", "step": 1}\nnot json\n{"kind": "train", "step": 2}\n')
    with pytest.raises(ValueError, match=r"m.jsonl:2 is not valid JSON"):
        read_metrics(tmp_path / "m.jsonl")
    with pytest.raises(FileNotFoundError, match="metrics.jsonl of a run"):
        read_metrics(tmp_path / "absent.jsonl")


def test_learning_curves_draw_the_logged_values(tmp_path):
    train = [{"kind": "train", "step": s, "nll": 5.0 / s, "loss": 6.0 / s, "ppl": 2.0} for s in (1, 2, 4)]
    valid = [{"kind": "valid", "step": 4, "valid_nll": 1.1, "valid_loss": 1.3, "valid_ppl": 3.0}]
    write_log(tmp_path / "a.jsonl", train + valid)
    ax = plot_learning_curves({"run a": tmp_path / "a.jsonl", "run b": {"train": train[:2]}})
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"run a: train", "run a: validation", "run b: train"}
    np.testing.assert_allclose(lines["run a: train"].get_ydata(), [5.0, 2.5, 1.25])
    np.testing.assert_allclose(lines["run a: validation"].get_xdata(), [4])
    assert lines["run a: validation"].get_color() == lines["run a: train"].get_color()
    assert "nats" in ax.get_ylabel()
    ax = plot_learning_curves({"a": tmp_path / "a.jsonl"}, metric="ppl")
    assert ax.get_yscale() == "log"


def test_learning_curves_refuse_bad_input(tmp_path):
    with pytest.raises(ValueError, match="metric must be"):
        plot_learning_curves({"a": {"train": []}}, metric="bleu")
    with pytest.raises(ValueError, match="runs must be a non-empty mapping"):
        plot_learning_curves({})
    with pytest.raises(ValueError, match=r"runs\['a'\] holds no 'nll' records"):
        plot_learning_curves({"a": {"train": [{"step": 1}]}})


def test_token_labels_keep_specials_and_unknowns_in_place():
    tokenizer = WordTokenizer.build(["a dog runs .", "a cat sits ."], "en")
    ids = [BOS_ID] + tokenizer.encode("a dog flies .") + [EOS_ID]
    assert token_labels(tokenizer, ids) == ["<bos>", "a", "dog", "<unk>", ".", "<eos>"]
    assert ids[3] == UNK_ID
    assert token_labels(tokenizer, torch.tensor(ids)) == token_labels(tokenizer, ids)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        token_labels(tokenizer, [tokenizer.vocab_size])
    with pytest.raises(TypeError, match="tokenizer must be a companion Tokenizer"):
        token_labels("not a tokenizer", [1])
