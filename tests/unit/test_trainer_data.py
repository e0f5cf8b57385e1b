"""The Trainer and its data (issue 22): languages recorded in every checkpoint, token-store batches kept lazy,
raw strings pointed to encode_pairs."""

from __future__ import annotations

import pytest

from companion import Transformer, TransformerConfig
from companion.checkpoint import load_checkpoint
from companion.data import (
    StoredBatches,
    SubwordTokenizer,
    WordTokenizer,
    encode_pairs,
    files_corpus,
    make_batches,
    prepare_store,
)
from companion.train import TrainConfig, Trainer

PAIRS = [("le chat voit le chien .", "the cat sees the dog ."), ("un grand arbre .", "a big tree .")] * 6


def tiny_model(src_vocab: int, tgt_vocab: int) -> Transformer:
    config = TransformerConfig(src_vocab, tgt_vocab, d_model=16, num_heads=2, num_encoder_layers=1,
                               num_decoder_layers=1, d_ff=32, dropout=0.0, max_len=32)  # fmt: skip
    return Transformer(config)


def config() -> TrainConfig:
    return TrainConfig(max_steps=1, warmup=10, device="cpu", progress=False)


def word_tokenizers():
    return WordTokenizer.build([s for s, _ in PAIRS], "fr"), WordTokenizer.build([t for _, t in PAIRS], "en")


def test_checkpoints_record_the_languages_of_word_tokenizers(tmp_path):
    src, tgt = word_tokenizers()
    batches = make_batches(encode_pairs(PAIRS, src, tgt), 100)
    trainer = Trainer(
        tiny_model(src.vocab_size, tgt.vocab_size), config(), batches, tokenizers={"src": src, "tgt": tgt}
    )
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    info = load_checkpoint(path)["run_info"]
    assert (info["src"], info["tgt"]) == ("fr", "en")


def test_a_shared_bpe_needs_explicit_languages(tmp_path):
    bpe = SubwordTokenizer.train([t for pair in PAIRS for t in pair], vocab_size=60)
    batches = make_batches(encode_pairs(PAIRS, bpe, bpe), 100)
    with pytest.warns(UserWarning, match="languages=\\(src, tgt\\)"):
        unknown = Trainer(
            tiny_model(bpe.vocab_size, bpe.vocab_size), config(), batches, tokenizers={"src": bpe, "tgt": bpe}
        )
    assert load_checkpoint(unknown.save_checkpoint(tmp_path / "u.pt"))["run_info"]["src"] is None
    given = Trainer(tiny_model(bpe.vocab_size, bpe.vocab_size), config(), batches, tokenizers={"src": bpe, "tgt": bpe},
                    languages=("fr", "en"))  # fmt: skip
    info = load_checkpoint(given.save_checkpoint(tmp_path / "g.pt"))["run_info"]
    assert (info["src"], info["tgt"]) == ("fr", "en")
    with pytest.raises(TypeError, match="languages must be a \\(src, tgt\\) pair"):
        Trainer(tiny_model(bpe.vocab_size, bpe.vocab_size), config(), batches, languages="fr")


def test_raw_strings_point_to_encode_pairs():
    with pytest.raises(TypeError, match="encode_pairs"):
        Trainer(tiny_model(8, 8), config(), ["le chat .", "the cat ."])


def test_stored_batches_stay_lazy_and_train(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "t.fr").write_text("".join(s + "\n" for s, _ in PAIRS), "utf-8")
    (data / "t.en").write_text("".join(t + "\n" for _, t in PAIRS), "utf-8")
    corpus = files_corpus("fr", "en", train=(data / "t.fr", data / "t.en"))
    src, tgt = word_tokenizers()
    batches = StoredBatches(prepare_store(corpus, "train", src, tgt, cache_dir=tmp_path / "cache", workers=1), 40)
    trainer = Trainer(tiny_model(src.vocab_size, tgt.vocab_size), config(), batches)
    assert trainer.train_batches is batches  # not copied into a list of collated tensors
    assert trainer.train()["steps"] == 1


def test_make_batches_given_text_points_to_encode_pairs():
    with pytest.raises(TypeError, match="encode_pairs\\(pairs, src_tokenizer, tgt_tokenizer\\)"):
        make_batches(PAIRS, 100)


def test_plot_learning_curves_takes_what_read_metrics_returns(tmp_path):
    pytest.importorskip("matplotlib")
    import json

    from companion.plots import plot_learning_curves, read_metrics

    path = tmp_path / "metrics.jsonl"
    records = [{"kind": "train", "step": 1, "nll": 3.0}, {"kind": "valid", "step": 1, "valid_nll": 3.5}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    for given in (read_metrics(path), path):
        ax = plot_learning_curves(given)
        assert [line.get_label() for line in ax.get_lines()][0] == "run: train"


def test_version_flag(capsys):
    from companion import __version__
    from companion.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0 and capsys.readouterr().out.strip() == f"companion {__version__}"


@pytest.mark.parametrize(("module", "extra"), [("sacrebleu.metrics", "data"), ("matplotlib.pyplot", "plots"),
                                               ("onnxruntime", "export")])  # fmt: skip
def test_a_missing_optional_dependency_names_its_extra(monkeypatch, module, extra):
    import sys

    from companion._extras import import_optional

    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(ImportError, match=f"attention-executed\\[{extra}\\]"):
        import_optional(module, "this")


def test_scoring_without_sacrebleu_names_the_data_extra(monkeypatch):
    import sys

    from companion.evaluate import corpus_bleu

    monkeypatch.setitem(sys.modules, "sacrebleu.metrics", None)
    with pytest.raises(ImportError, match="attention-executed\\[data\\]"):
        corpus_bleu(["a"], ["a"])
