"""Train on your own data (issue 22), through the command line: corpora generated here in language pairs that are
not en/de and scripts beyond Latin (fr->en and ru->el with the word tokenizer, zh->en with a shared BPE), given as
explicit files, a folder of {split}.{lang} files, a TSV, local JSON and a dataset saved with save_to_disk; and
the errors of bad input (exit code 2, nothing half-written in --out)."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from companion.checkpoint import load_checkpoint
from companion.cli import main
from companion.runs import resolve_checkpoint

# A tiny lexicon: word i of every language translates word i of the others, so a model can learn the pairs.
LEXICON = {
    "en": "man woman dog cat house tree car river red big small runs sees eats the a and near old new".split(),
    "fr": "homme femme chien chat maison arbre voiture rivière rouge grand petit court voit mange le un et près "
    "vieux nouveau".split(),
    "ru": "мужчина женщина собака кошка дом дерево машина река красный большой маленький бежит видит ест этот "
    "один и около старый новый".split(),
    "el": "άντρας γυναίκα σκύλος γάτα σπίτι δέντρο αυτοκίνητο ποτάμι κόκκινο μεγάλο μικρό τρέχει βλέπει τρώει ο "
    "ένας και κοντά παλιό νέο".split(),
    "zh": "男人 女人 狗 猫 房子 树 汽车 河 红 大 小 跑 看见 吃 这 一 和 附近 老 新".split(),
}
# The tiny preset, a few steps, one thread: each run takes seconds.
FAST = ["--preset", "tiny", "--max-tokens", "300", "--device", "cpu", "--no-progress", "--threads", "1"]


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def sentence(language: str, words: list[int]) -> str:
    tokens = [LEXICON[language][i] for i in words]
    return "".join(tokens) + "。" if language == "zh" else " ".join(tokens) + " ."


def make_pairs(src: str, tgt: str, count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        words = [rng.randrange(len(LEXICON["en"])) for _ in range(rng.randint(3, 7))]
        pairs.append((sentence(src, words), sentence(tgt, words)))
    return pairs


def write_side_files(folder: Path, stem: str, src: str, tgt: str, pairs) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / f"{stem}.{src}", folder / f"{stem}.{tgt}"
    for path, side in zip(paths, (0, 1)):
        path.write_text("".join(pair[side] + "\n" for pair in pairs), encoding="utf-8")
    return paths


def run_files(out: Path) -> list[str]:
    return sorted(p.name for p in out.rglob("*")) if out.exists() else []


def train(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["train", *FAST, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def evaluate(capsys, *args: str) -> dict:
    assert main(["evaluate", "--beam-size", "1", "--device", "cpu", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.parametrize("tokenizer", ["bpe", "word"])  # the default (one shared BPE), and spaCy's French rules
def test_fr_en_files_train_translate_evaluate_resume(tokenizer, tmp_path, capsys, monkeypatch):
    data, out, cache = tmp_path / "data", tmp_path / "run", tmp_path / "cache"
    train_files = write_side_files(data, "train", "fr", "en", make_pairs("fr", "en", 300, 0))
    valid_files = write_side_files(data, "valid", "fr", "en", make_pairs("fr", "en", 30, 1))
    test_files = write_side_files(data, "test", "fr", "en", make_pairs("fr", "en", 20, 2))
    chosen = [] if tokenizer == "bpe" else ["--tokenizer", tokenizer]  # bpe: the default, no flag
    code, stdout, _ = train(
        capsys, "--src", "fr", "--tgt", "en", "--train", *map(str, train_files), "--valid", *map(str, valid_files),
        "--test", *map(str, test_files), "--max-steps", "4", "--save-every", "2", "--cache-dir", str(cache),
        "--workers", "1", "--out", str(out), *chosen,
    )  # fmt: skip
    assert code == 0
    assert "fr -> en" in stdout  # the start line names the real direction
    record = json.loads((out / "run.json").read_text())
    assert record["args"]["train_files"] == [str(p.resolve()) for p in train_files]
    assert set(record["data"]) == {"train", "valid"} and record["data"]["train"]["pairs"] == 300
    checkpoint = load_checkpoint(out / "checkpoints" / "step_00000004.pt")
    assert (checkpoint["run_info"]["src"], checkpoint["run_info"]["tgt"]) == ("fr", "en")
    if tokenizer == "word":
        assert checkpoint["tokenizers"]["src"]["language"] == "fr"
    else:  # one subword vocabulary for both languages
        assert checkpoint["tokenizers"]["src"] == checkpoint["tokenizers"]["tgt"]
        assert checkpoint["tokenizers"]["src"]["type"] == "subword"
    assert len(list(cache.glob("train-*"))) == 1 and len(list(cache.glob("valid-*"))) == 1

    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("homme voit chien .\n\nle chat .\n"))
    assert main(["translate", "--checkpoint", str(out), "--beam-size", "1", "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.split("\n")) == 4  # three lines and the final newline

    split = evaluate(capsys, "--checkpoint", str(out), "--split", "test")
    assert split["direction"] == "fr->en" and split["split"] == "test" and split["sentences"] == 20
    assert "tok:13a" in split["bleu_signature"] and "pretok:spacy-en" in split["tokenized_bleu_signature"]
    lowercased = split["tokenized_lowercased_bleu_signature"]
    assert "case:lc" in lowercased and "case:mixed" in split["tokenized_bleu_signature"] and "spacy-en" in lowercased
    assert split["tokenized_lowercased_bleu"] >= split["tokenized_bleu"]  # case-insensitive matches are a superset
    files = evaluate(capsys, "--checkpoint", str(out), "--src-file", str(valid_files[0]), "--ref-file",
                     str(valid_files[1]))  # fmt: skip
    assert files["sentences"] == 30 and files["direction"] == "fr->en"

    code, stdout, _ = train(capsys, "--resume", "--out", str(out), "--max-steps", "6")
    assert code == 0 and "resumed at step 4" in stdout
    assert load_checkpoint(out / "checkpoints" / "step_00000006.pt")["run_info"]["src"] == "fr"
    assert len(list(cache.glob("train-*"))) == 1  # the resumed run read the same store

    train_files[0].write_text(train_files[0].read_text(encoding="utf-8") + "chat .\n", encoding="utf-8")
    train_files[1].write_text(train_files[1].read_text(encoding="utf-8") + "cat .\n", encoding="utf-8")
    code, _, stderr = train(capsys, "--resume", "--out", str(out), "--max-steps", "8")
    assert code == 2 and "not the data this run was trained on" in stderr


@pytest.mark.slow
def test_ru_el_folder_without_test_split(tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "run"
    write_side_files(data, "train", "ru", "el", make_pairs("ru", "el", 300, 0))
    dev = write_side_files(data, "dev", "ru", "el", make_pairs("ru", "el", 20, 1))
    code, stdout, _ = train(
        capsys, "--src", "ru", "--tgt", "el", "--data-dir", str(data), "--valid-split", "dev", "--max-steps", "3",
        "--cache-dir", str(tmp_path / "cache"), "--out", str(out),
    )  # fmt: skip
    assert code == 0 and "ru -> el" in stdout
    assert set(json.loads((out / "run.json").read_text())["data"]) == {"train", "valid"}
    assert main(["evaluate", "--checkpoint", str(out), "--split", "test", "--device", "cpu"]) == 2
    assert "test_2016_flickr.ru" in capsys.readouterr().err  # the folder has no test split: named, not guessed
    result = evaluate(capsys, "--checkpoint", str(out), "--src-file", str(dev[0]), "--ref-file", str(dev[1]))
    assert result["direction"] == "ru->el" and result["sentences"] == 20


@pytest.mark.slow
def test_zh_en_bpe_from_a_tsv(tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    for name, count, seed in (("train", 300, 0), ("test", 20, 2)):
        pairs = make_pairs("zh", "en", count, seed)
        (data / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    code, stdout, _ = train(
        capsys, "--src", "zh", "--tgt", "en", "--tokenizer", "bpe", "--vocab-size", "120", "--train",
        str(data / "train.tsv"), "--test", str(data / "test.tsv"), "--max-steps", "3",
        "--cache-dir", str(tmp_path / "cache"), "--out", str(out),
    )  # fmt: skip
    assert code == 0 and "zh -> en" in stdout
    checkpoint = load_checkpoint(out / "checkpoints" / "step_00000003.pt")
    assert (checkpoint["run_info"]["src"], checkpoint["run_info"]["tgt"]) == ("zh", "en")
    result = evaluate(capsys, "--checkpoint", str(out), "--split", "test")
    assert result["direction"] == "zh->en" and result["sentences"] == 20


@pytest.mark.slow
def test_en_zh_run_scores_and_chooses_with_sacrebleus_chinese_tokenizer(tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "run"
    write_side_files(data, "train", "en", "zh", make_pairs("en", "zh", 300, 0))
    dev = write_side_files(data, "dev", "en", "zh", make_pairs("en", "zh", 20, 1))
    code, stdout, _ = train(
        capsys, "--src", "en", "--tgt", "zh", "--train", *map(str, (data / "train.en", data / "train.zh")),
        "--valid", *map(str, dev), "--max-steps", "3", "--cache-dir", str(tmp_path / "cache"), "--out", str(out),
    )  # fmt: skip
    assert code == 0 and "chosen on the validation split (20 sentences" in stdout
    assert "tok:zh" in load_checkpoint(resolve_checkpoint(out))["decoding"]["bleu_signature"]
    result = evaluate(capsys, "--checkpoint", str(out), "--src-file", str(dev[0]), "--ref-file", str(dev[1]))
    assert result["direction"] == "en->zh" and "tok:zh" in result["bleu_signature"]


@pytest.mark.slow
def test_hold_out_makes_a_validation_split_from_the_training_files(tmp_path, capsys):
    data, out, cache = tmp_path / "data", tmp_path / "run", tmp_path / "cache"
    files = [str(path) for path in write_side_files(data, "train", "fr", "en", make_pairs("fr", "en", 300, 0))]
    given = ["--src", "fr", "--tgt", "en", "--train", *files, "--cache-dir", str(cache), "--out", str(out)]
    code, stdout, _ = train(capsys, *given, "--hold-out", "30", "--max-steps", "4")
    assert code == 0 and "chosen on the validation split (30 sentences" in stdout
    recorded = json.loads((out / "run.json").read_text())["data"]
    assert (recorded["train"]["pairs"], recorded["valid"]["pairs"]) == (270, 30)
    result = evaluate(capsys, "--checkpoint", str(out), "--split", "valid")
    assert result["sentences"] == 30 and result["split"] == "valid"
    code, stdout, _ = train(capsys, "--resume", "--out", str(out), "--max-steps", "6")
    assert code == 0 and "resumed at step 4" in stdout  # the same two parts: the data check passes
    assert len(list(cache.glob("train-*"))) == 1 and len(list(cache.glob("valid-*"))) == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--hold-out", "300"], "cannot hold out 300 pairs .* has 300 training pairs"),
        (["--hold-out", "10", "--valid", "VALID"], "--valid files name one already"),
        (["--hold-out", "0"], r"hold_out \(--hold-out\)"),
    ],
)
def test_hold_out_errors_stop_before_anything_is_written(flags, message, tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "run"
    files = [str(path) for path in write_side_files(data, "train", "fr", "en", make_pairs("fr", "en", 300, 0))]
    flags = [word for flag in flags for word in (files if flag == "VALID" else [flag])]
    given = ["--src", "fr", "--tgt", "en", "--train", *files, "--cache-dir", str(tmp_path / "cache")]
    code, _, stderr = train(capsys, *given, *flags, "--max-steps", "2", "--out", str(out))
    assert code == 2 and re.search(message, stderr) and not out.exists()


@pytest.mark.slow
def test_an_en_de_folder_of_ones_own_is_not_multi30k(tmp_path, capsys):
    """A --data-dir folder in en and de without Multi30k's val files is the reader's own corpus: only its training
    split is needed, and --hold-out makes the validation split (before, it was read as Multi30k and refused for
    lacking val.{en,de}.gz, with Multi30k's download instructions)."""
    data, out = tmp_path / "data", tmp_path / "run"
    write_side_files(data, "train", "en", "de", make_pairs("en", "fr", 300, 0))  # French words stand in for German
    given = ["--src", "en", "--tgt", "de", "--data-dir", str(data), "--cache-dir", str(tmp_path / "cache")]
    code, stdout, stderr = train(capsys, *given, "--hold-out", "30", "--max-steps", "2", "--out", str(out))
    assert code == 0, stderr
    recorded = json.loads((out / "run.json").read_text())["data"]
    assert (recorded["train"]["pairs"], recorded["valid"]["pairs"]) == (270, 30)


def test_hold_out_is_refused_for_multi30k(tmp_path, capsys):
    assert main(["train", "--hold-out", "100", "--max-steps", "1", "--out", str(tmp_path / "run")]) == 2
    assert "Multi30k" in capsys.readouterr().err and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_datasets_path_offline_json_lines(tmp_path, capsys):
    pytest.importorskip("datasets")
    lines = tmp_path / "train.jsonl"
    pairs = make_pairs("fr", "en", 200, 0)
    lines.write_text("".join(json.dumps({"translation": {"fr": s, "en": t}}) + "\n" for s, t in pairs), "utf-8")
    code, stdout, _ = train(
        capsys, "--src", "fr", "--tgt", "en", "--train", str(lines), "--max-steps", "2",
        "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert code == 0 and "fr -> en" in stdout


# -- bad input: clear errors, exit code 2, nothing half-written --------------------------------------------


def test_mismatched_line_counts_name_the_files_and_the_line(tmp_path, capsys):
    src, tgt = write_side_files(tmp_path / "data", "train", "fr", "en", make_pairs("fr", "en", 10, 0))
    tgt.write_text("".join(tgt.read_text(encoding="utf-8").splitlines(keepends=True)[:7]), encoding="utf-8")
    out = tmp_path / "run"
    code, _, stderr = train(capsys, "--src", "fr", "--tgt", "en", "--train", str(src), str(tgt), "--max-steps", "1",
                            "--cache-dir", str(tmp_path / "cache"), "--out", str(out))  # fmt: skip
    assert code == 2
    assert str(src) in stderr and str(tgt) in stderr and "line 8" in stderr
    assert not out.exists()  # the run made the folder, and leaves none behind


def test_a_folder_that_held_other_files_stays(tmp_path, capsys):
    """A failed start removes only what the run made: a folder the reader made, or one holding other files, stays."""
    src, tgt = write_side_files(tmp_path / "data", "train", "fr", "en", [])
    given = ["--src", "fr", "--tgt", "en", "--train", str(src), str(tgt), "--max-steps", "1"]
    (tmp_path / "mine").mkdir()
    code, _, _ = train(capsys, *given, "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "mine"))
    assert code == 2 and (tmp_path / "mine").is_dir() and run_files(tmp_path / "mine") == []


def test_a_missing_file_or_a_folder_given_as_a_file_is_named_by_its_flag(tmp_path, capsys):
    src, _ = write_side_files(tmp_path / "data", "train", "fr", "en", make_pairs("fr", "en", 10, 0))
    given = ["--src", "fr", "--tgt", "en", "--max-steps", "1", "--out", str(tmp_path / "run"), "--train"]
    code, _, stderr = train(capsys, *given, str(src), str(tmp_path / "nowhere.en"))
    missing = str(tmp_path / "nowhere.en")
    assert code == 2 and f"--train (its second file): data file {missing!r} does not exist" in stderr
    code, _, stderr = train(capsys, *given, str(tmp_path / "data"), str(src))
    assert code == 2 and f"--train (its first file): {str(tmp_path / 'data')!r} is a folder, not a data file" in stderr
    code, _, stderr = train(capsys, *given, str(tmp_path / "nowhere.tsv"))
    assert code == 2 and f"--train: data file {str(tmp_path / 'nowhere.tsv')!r} does not exist" in stderr


def test_empty_corpus_is_an_error(tmp_path, capsys):
    src, tgt = write_side_files(tmp_path / "data", "train", "fr", "en", [])
    code, _, stderr = train(capsys, "--src", "fr", "--tgt", "en", "--train", str(src), str(tgt), "--max-steps", "1",
                            "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run"))  # fmt: skip
    assert code == 2 and "no sentence pair" in stderr
    assert not (tmp_path / "run").exists()


def test_language_spacy_does_not_know(tmp_path, capsys):
    src, tgt = write_side_files(tmp_path / "data", "train", "qq", "en", make_pairs("fr", "en", 5, 0))
    files = ["--src", "qq", "--tgt", "en", "--train", str(src), str(tgt), "--max-steps", "1"]
    code, _, stderr = train(capsys, *files, "--tokenizer", "word", "--out", str(tmp_path / "word"))
    assert code == 2 and "--src" in stderr and "'qq'" in stderr and "--tokenizer bpe" in stderr
    assert not (tmp_path / "word").exists()
    code, stdout, _ = train(capsys, *files, "--workers", "1", "--out", str(tmp_path / "bpe"))  # the default: any code
    assert code == 0 and "qq -> en" in stdout and (tmp_path / "bpe" / "checkpoints").is_dir()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--src", "fr", "--tgt", "en"], "Multi30k (the default data) has only en and de"),
        (["--src", "fr!", "--tgt", "en"], "must be a language code"),
        (["--src", "fr", "--tgt", "en", "--train", "a.txt"], "SRC_FILE TGT_FILE"),
        (["--src", "fr", "--tgt", "en", "--valid", "a", "b"], "need --train files"),
        (["--test-split", "x"], "--data-dir or --hf-dataset"),
        (["--src", "fr", "--tgt", "en", "--train", "a.tsv", "b.tsv"], "or one file that holds both sides"),
    ],
)
def test_bad_source_flags(tmp_path, capsys, args, message):
    code, _, stderr = train(capsys, *args, "--max-steps", "1", "--out", str(tmp_path / "run"))
    assert code == 2 and message in stderr


def test_dataset_without_the_requested_languages(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    rows = [{"translation": {"de": s, "en": t}} for s, t in make_pairs("fr", "en", 20, 0)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(folder))
    code, _, stderr = train(capsys, "--src", "fr", "--tgt", "en", "--hf-dataset", str(folder), "--max-steps", "1",
                            "--out", str(tmp_path / "run"))  # fmt: skip
    assert code == 2 and "'fr'" in stderr and "['de', 'en']" in stderr
    assert not (tmp_path / "run").exists()


def test_evaluate_refuses_a_checkpoint_without_languages(tmp_path, capsys):
    from companion import Transformer, TransformerConfig
    from companion.checkpoint import save_checkpoint
    from companion.data import SubwordTokenizer

    tok = SubwordTokenizer.train(["un chat .", "a cat ."] * 5, vocab_size=40)
    config = TransformerConfig(tok.vocab_size, tok.vocab_size, d_model=16, num_heads=2, num_encoder_layers=1,
                               num_decoder_layers=1, d_ff=32, max_len=16)  # fmt: skip
    path = save_checkpoint(tmp_path / "bpe.pt", model=Transformer(config), step=1, tokenizers={"src": tok, "tgt": tok})
    src, ref = write_side_files(tmp_path / "data", "test", "fr", "en", [("un chat .", "a cat .")])
    code = main(["evaluate", "--checkpoint", str(path), "--src-file", str(src), "--ref-file", str(ref)])
    assert code == 2 and "does not record its source and target language" in capsys.readouterr().err


@pytest.mark.slow
def test_a_cache_of_other_data_or_another_tokenizer_is_never_reused(tmp_path, capsys):
    cache = tmp_path / "cache"
    src, tgt = write_side_files(tmp_path / "data", "train", "fr", "en", make_pairs("fr", "en", 100, 0))
    common = [
        "--src",
        "fr",
        "--tgt",
        "en",
        "--train",
        str(src),
        str(tgt),
        "--max-steps",
        "1",
        "--cache-dir",
        str(cache),
    ]

    def stores() -> dict[str, dict]:
        return {p.name: json.loads((p / "meta.json").read_text()) for p in cache.glob("train-*")}

    assert train(capsys, *common, "--out", str(tmp_path / "a"))[0] == 0
    first = stores()
    assert train(capsys, *common, "--vocab-size", "60", "--out", str(tmp_path / "b"))[0] == 0  # another vocabulary
    second = stores()
    assert len(second) == 2 and set(first) < set(second)
    assert train(capsys, *common, "--tokenizer", "word", "--out", str(tmp_path / "w"))[0] == 0  # another tokenizer
    with_word = stores()
    assert len(with_word) == 3 and set(second) < set(with_word)
    second = with_word
    src.write_text(src.read_text(encoding="utf-8").replace("chat", "chatte"), encoding="utf-8")  # other data
    assert train(capsys, *common, "--out", str(tmp_path / "c"))[0] == 0
    third = stores()
    assert len(third) == 4
    new = next(meta for name, meta in third.items() if name not in second)
    assert new["data"]["src_file"]["sha256"] != first[next(iter(first))]["data"]["src_file"]["sha256"]


@pytest.mark.slow
def test_the_wmt14_recipe_on_a_tiny_dataset_saved_to_disk(tmp_path):
    """bench/recipes/wmt14_base.sh, the same command with tiny overrides, on a dataset in the wmt14 layout (a
    'translation' column, train/validation/test) saved with save_to_disk: the --hf-dataset path, offline."""
    import os
    import subprocess
    import sys

    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "wmt14-tiny"
    splits = {name: [{"translation": {"de": t, "en": s}} for s, t in make_pairs("en", "fr", n, seed)]
              for name, n, seed in (("train", 200, 0), ("validation", 20, 1), ("test", 10, 2))}  # fmt: skip
    datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(folder))
    recipe = Path(__file__).resolve().parents[2] / "bench" / "recipes" / "wmt14_base.sh"
    env = {**os.environ, "OUT": str(tmp_path / "run"), "NPROC": "1", "DATASET": str(folder), "CONFIG": "",
           "PYTHON": sys.executable, "EVAL_FLAGS": "--beam-size 1 --device cpu", "OMP_NUM_THREADS": "1",
           "COMPANION_CACHE_DIR": str(tmp_path / "cache"), "PYTHONWARNINGS": "ignore"}  # fmt: skip
    tiny = ["--preset", "tiny", "--vocab-size", "100", "--max-tokens", "300", "--max-steps", "4", "--warmup", "2",
            "--save-every", "1", "--device", "cpu", "--no-progress"]  # fmt: skip
    result = subprocess.run(["bash", str(recipe), *tiny], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads((tmp_path / "run" / "newstest2014.json").read_text())
    assert scores["direction"] == "en->de" and scores["sentences"] == 10 and scores["beam_size"] == 1
    assert "tok:13a" in scores["bleu_signature"] and scores["tokenized_bleu_signature"].endswith("spacy-de")
    averaged = load_checkpoint(tmp_path / "run" / "averaged.pt")
    assert len(averaged["averaged_from"]) == 4  # the last 5 (here the 4 written) checkpoints averaged
    args = averaged["run_info"]["args"]
    assert (args["tokenizer"], args["warmup"], args["keep_last"]) == ("bpe", 2, 5)


@pytest.mark.slow
def test_relative_paths_are_recorded_absolute_and_changed_data_are_named(tmp_path, capsys, monkeypatch):
    """--data-dir and --cache-dir given relative to the folder of the first command: --resume from another folder
    finds the same data and the same token store; data changed since are named as what they are (a folder
    here, --train files below), not "the Hugging Face hub"."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    write_side_files(work / "data", "train", "fr", "en", make_pairs("fr", "en", 200, 0))
    elsewhere.mkdir()
    monkeypatch.chdir(work)
    given = ["--src", "fr", "--tgt", "en", "--data-dir", "data", "--cache-dir", "cache", "--hold-out", "20"]
    code, _, stderr = train(capsys, *given, "--max-steps", "2", "--out", "run")
    assert code == 0, stderr
    recorded = json.loads((work / "run" / "run.json").read_text())["args"]
    assert (recorded["data_dir"], recorded["cache_dir"]) == (str(work / "data"), str(work / "cache"))
    monkeypatch.chdir(elsewhere)
    code, stdout, stderr = train(capsys, "--resume", "--out", str(work / "run"), "--max-steps", "3")
    assert code == 0 and "resumed at step 2" in stdout, stderr
    assert list(elsewhere.iterdir()) == [] and len(list((work / "cache").glob("train-*"))) == 1
    (work / "data" / "train.fr").write_text("autre chose .\n" * 200, encoding="utf-8")
    code, _, stderr = train(capsys, "--resume", "--out", str(work / "run"), "--max-steps", "4")
    assert code == 2 and f"the data in {work / 'data'} are not the data this run was trained on" in stderr


@pytest.mark.slow
def test_a_second_run_on_the_same_data_says_it_reuses_the_cache(tmp_path, capsys):
    """Preparing a corpus of one's own says what it does (learning, tokenizing: minutes on a large corpus); a
    second run on the same data reads the vocabularies and the token ids from the cache, and says so."""
    files = [str(p) for p in write_side_files(tmp_path / "data", "train", "fr", "en", make_pairs("fr", "en", 200, 0))]
    given = ["--src", "fr", "--tgt", "en", "--train", *files, "--cache-dir", str(tmp_path / "cache")]
    given += ["--max-steps", "1"]
    code, first, stderr = train(capsys, *given, "--out", str(tmp_path / "first"))
    assert code == 0, stderr
    assert "companion train: learning the vocabularies (one byte-pair vocabulary" in first
    assert "companion train: tokenizing the train split into the cache" in first
    code, second, stderr = train(capsys, *given, "--out", str(tmp_path / "second"))
    assert code == 0, stderr
    assert "companion train: vocabularies from the cache" in second and "learning" not in second
    assert "companion train: the train split's token ids are in the cache" in second
    first_tokenizers, second_tokenizers = (
        load_checkpoint(resolve_checkpoint(tmp_path / run))["tokenizers"] for run in ("first", "second")
    )
    assert first_tokenizers == second_tokenizers


@pytest.mark.slow
def test_an_own_en_de_run_is_read_as_its_own_data_later_too(tmp_path, capsys, monkeypatch):
    """What a run of one's own en/de files is does not change when its folder moves: a --hold-out run is evaluated
    on the held-out pairs from the new --data-dir, and a run without one is never scored on Multi30k in its place
    (its folder gone, evaluate says so, even with $COMPANION_DATA_DIR naming Multi30k)."""
    pairs = make_pairs("en", "fr", 200, 0)  # French words stand in for German
    for name, extra in (("held", ["--hold-out", "20"]), ("plain", [])):
        folder = tmp_path / name
        write_side_files(folder, "train", "en", "de", pairs)
        write_side_files(folder, "test_2016_flickr", "en", "de", pairs[:5])
        out = tmp_path / f"run-{name}"
        given = ["--src", "en", "--tgt", "de", "--data-dir", str(folder), "--cache-dir", str(tmp_path / "cache")]
        code, _, stderr = train(capsys, *given, *extra, "--max-steps", "1", "--no-choose-alpha", "--out", str(out))
        assert code == 0, stderr
        folder.rename(tmp_path / f"{name}-moved")
    result = evaluate(capsys, "--checkpoint", str(tmp_path / "run-held"), "--split", "valid",
                      "--data-dir", str(tmp_path / "held-moved"))  # fmt: skip
    assert result["sentences"] == 20
    monkeypatch.setenv("COMPANION_DATA_DIR", str(tmp_path / "nowhere"))
    code = main(["evaluate", "--checkpoint", str(tmp_path / "run-plain"), "--split", "test", "--device", "cpu"])
    assert code == 2 and f"the run's data folder {tmp_path / 'plain'} is gone" in capsys.readouterr().err
    result = evaluate(capsys, "--checkpoint", str(tmp_path / "run-plain"), "--split", "test",
                      "--data-dir", str(tmp_path / "plain-moved"))  # fmt: skip
    assert result["sentences"] == 5


@pytest.mark.slow
def test_an_own_en_de_folder_named_by_the_environment_and_a_dataset_folder_resume(tmp_path, capsys, monkeypatch):
    """$COMPANION_DATA_DIR naming a folder of one's own en/de files is read like --data-dir (--hold-out works);
    a run on a save_to_disk folder given by a relative path resumes with the same command plus --resume."""
    own = tmp_path / "own"
    write_side_files(own, "train", "en", "de", make_pairs("en", "fr", 200, 0))
    monkeypatch.setenv("COMPANION_DATA_DIR", str(own))
    given = ["--src", "en", "--tgt", "de", "--cache-dir", str(tmp_path / "cache"), "--no-choose-alpha"]
    code, _, stderr = train(capsys, *given, "--hold-out", "20", "--max-steps", "1", "--out", str(tmp_path / "env"))
    assert code == 0, stderr
    datasets = pytest.importorskip("datasets")
    rows = [{"translation": {"fr": s, "en": t}} for s, t in make_pairs("fr", "en", 100, 0)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "saved"))
    monkeypatch.chdir(tmp_path)
    command = ["--src", "fr", "--tgt", "en", "--hf-dataset", "saved", "--hold-out", "10", "--out", "hf", *given[4:]]
    code, _, stderr = train(capsys, *command, "--cache-dir", "cache", "--max-steps", "1")
    assert code == 0, stderr
    code, stdout, stderr = train(capsys, *command, "--cache-dir", "cache", "--max-steps", "2", "--resume")
    assert code == 0 and "resumed at step 1" in stdout, stderr


@pytest.mark.slow
def test_pairs_with_an_empty_side_are_reported_once_per_run(tmp_path):
    """A run reads its corpus more than once (vocabularies, then token ids); the dropped pairs are said once."""
    lines = [f"{s}\t{t}" for s, t in make_pairs("fr", "en", 60, 0)] + ["\tnothing", "rien\t"]
    (tmp_path / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    given = ["--src", "fr", "--tgt", "en", "--train", str(tmp_path / "train.tsv"), "--max-steps", "1"]
    given += ["--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run")]
    # a process of its own: Python's warning filters as a reader's shell has them (pytest shows every repeat)
    done = subprocess.run([sys.executable, "-m", "companion", "train", *FAST, *given], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr.count("dropped 2 pair(s) with an empty side") == 1, done.stderr
