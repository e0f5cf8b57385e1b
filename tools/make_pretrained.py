"""Make the book's shipped models: train (or take) a run per direction, keep its averaged weights, score it, write
a model card.

Usage (from the repository root, virtual environment active)::

    python tools/make_pretrained.py --train                     # trains both directions side by side (one CPU
                                                                # thread each) with TRAIN_COMMANDS, then packages
    python tools/make_pretrained.py                             # packages the existing runs runs/pretrained-de-en
                                                                # and runs/pretrained-en-de
    python tools/make_pretrained.py --direction en-de           # one direction only
    python tools/make_pretrained.py --rescore                   # the shipped files as they are: new scores only
    python tools/make_pretrained.py --limitations               # the shipped files: only limitations and examples

For each direction ``X-Y`` it writes ``pretrained/X-Y-small.pt`` (a companion checkpoint without optimizer state:
the average of the run's last 5 checkpoints) and ``pretrained/X-Y-small.json`` (the model card: data, size,
command, when it trained and the machine's load meanwhile (``--train`` records them in the run folder, see
``TRAINING_LOG``), hardware, its limitations with the model's translations of a few sentences unlike the
captions (``OUTSIDE_THE_DATA``), and scores on test_2016_flickr and on the validation split: sacreBLEU BLEU and chrF
with their signatures, and BLEU as the Multi30k literature computes it, lowercased and tokenized, see
``companion.evaluate.tokenized_bleu(..., lowercase=True)``), and records the file's SHA-256 in
``companion/pretrained.py`` so that every copy and download can be checked. The beam searches score with the
shipped models' decoding setting (``companion.pretrained.SHIPPED_BEAM_SIZE`` and ``SHIPPED_ALPHA``, which the card
records as ``decoding``); ``--rescore`` scores the shipped files again after that setting changed, and rewrites
only the cards' scores and ``decoding``, with the scoring command, date and hardware.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import pathlib
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from _common import hardware  # noqa: E402

DIRECTIONS = ("de-en", "en-de")
LANGUAGE_NAMES = {"de": "German", "en": "English"}
OUT = ROOT / "pretrained"
sys.path.insert(0, str(ROOT))
from companion.pretrained import SHIPPED_ALPHA as ALPHA  # noqa: E402  (chosen on validation: bench/decoding_select.py)
from companion.pretrained import SHIPPED_BEAM_SIZE as BEAM  # noqa: E402


def run_dir(direction: str) -> str:
    return f"runs/pretrained-{direction}"


# Each direction's setting, chosen on its validation split. de-en: one shared BPE vocabulary (the embeddings shared
# with it) of 8,000 tokens with 1,200-token batches, the setting bench/multi30k_select.py chose (20 CPU-minutes per
# candidate, the README's selection table: 41.47 validation BLEU against 39.38 for the word vocabularies); trained
# this way the shipped model scored 41.20 on validation against 39.51 for the word-vocabulary model it replaced.
# en-de: the same setting since 2026-12-06. The word vocabularies (the model shipped from 2026-12-03) and BPE 8,000
# tie on validation BLEU (38.50 against 38.47, paired bootstrap p = 0.40), but BPE scores higher on validation chrF
# (61.53 against 59.51, p = 0.0005) and spells every word, where 324 of the word model's 1,014 validation outputs
# held <unk> (bench/results/pretrained_compare_en-de_2026-12-06.json). An earlier en-de candidate (BPE 4,000, 2,400-
# token batches, the selection's tie-break) scored 37.46 on validation and was not shipped
# (bench/results/pretrained_candidate_en-de_bpe4000_2026-12-05.json). The same 52-minute run of de-en on 2026-12-06
# (16,805 steps, steps being faster) did not beat the shipped de-en model on validation (40.86 against 41.20, p = 0.16:
# bench/results/pretrained_candidate_de-en_52min_2026-12-06.json): its files were put back, only en-de changed.
SETTINGS = {
    "de-en": "--tokenizer bpe --vocab-size 8000 --max-tokens 1200",
    "en-de": "--tokenizer bpe --vocab-size 8000 --max-tokens 1200",
}


def train_command(direction: str) -> str:
    """The command each shipped model is trained with: 52 minutes of training on one CPU thread, the two
    directions side by side on a 2-core machine, with the small preset and the direction's SETTINGS (each
    checkpoint's ``args`` record them). A minute budget, not a step budget: this machine's speed varies
    from day to day (the small preset ran at 4.7 steps/s on 2 threads on 2026-12-02 against 10.6 on another day),
    so a fixed step count could not be planned; the card gives the steps reached and the load while training."""
    src, tgt = direction.split("-")
    return (
        f"python -m companion train --src {src} --tgt {tgt} --preset small {SETTINGS[direction]} --seed 0 "
        f"--max-minutes 52 --save-every-minutes 2 --keep-last 5 --average-last 5 --threads 1 --no-progress "
        f"--log-every 200 --eval-every 100000 --out {run_dir(direction)} --overwrite"
    )


TRAIN_COMMANDS = {direction: train_command(direction) for direction in DIRECTIONS}
TRAINING_LOG = "make_pretrained_training.json"  # written by train() beside each run's checkpoints
UNRECORDED_HISTORY = (
    "Trained outside `tools/make_pretrained.py --train` (the run has no training record beside it): when, on what "
    "machine and under what load is not known to this card; 'training' has what the run's metrics recorded."
)
MULTI30K_TERMS = (
    "Multi30k (Elliott et al., 2016) extends Flickr30k; its captions come from Flickr30k (Young et al., 2014), "
    "whose images and texts are for research use under the Flickr terms of use. These weights were trained "
    "on Multi30k only and are shared for research and teaching, under the same terms as the data."
)
# What a reader should know before trusting an output: the card's "limitations", and its "outside_the_data", the
# shipped model's translations (with the shipped setting) of sentences unlike Multi30k's captions. These sentences
# are not a test set: nothing is chosen or scored on them; they only show the reader what a caption model does with
# a greeting, a question, a state of mind, a request and news (tests/unit/test_pretrained.py checks that the card's
# translations are what the shipped file gives).
OUTSIDE_THE_DATA = {
    "de-en": (
        "Hallo.",
        "Wie geht es dir?",
        "Der Mann ist müde.",
        "Ich hätte gern eine Tasse Kaffee.",
        "Die Sitzung wurde auf nächste Woche verschoben.",
    ),
    "en-de": (
        "Hello.",
        "How are you?",
        "The man is tired.",
        "I would like a cup of coffee, please.",
        "The meeting was postponed until next week.",
    ),
}
LIMITATIONS = (
    "Trained on Multi30k's 29,000 image captions only: short descriptions of photographs (people, animals, places, "
    "what they do). How it translates other kinds of text (conversation, questions, opinions, news, technical "
    "writing) was not measured; five such sentences, as this model translates them, follow. A word the "
    "captions never contained is spelled from subword pieces, and its translation may be wrong or not a word at "
    "all; a character never seen in training becomes <unk>."
)
TOKENIZED_BLEU_METHOD = (
    "BLEU as the Multi30k literature reports it: every hypothesis and reference is split into words by spaCy's "
    "rule-based tokenizer for the target language (companion.data.tokenizers.spacy_tokenizer, the word "
    "tokenizer's rules, as in companion.evaluate.tokenized_bleu), the words are joined with single spaces, and "
    "sacreBLEU scores these strings with tokenize='none' and lowercase=True (case-insensitive), exponential "
    "smoothing, one reference: multi-bleu.perl -lc on tokenized text. Not comparable to the sacreBLEU score "
    "(detokenized, case-sensitive, 13a), and only roughly to a paper that tokenized with Moses or scored BPE "
    "output differently."
)


def sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    digest.update(path.read_bytes())
    return digest.hexdigest()


def _utc(seconds_since_epoch: float) -> str:
    return _dt.datetime.fromtimestamp(seconds_since_epoch, _dt.timezone.utc).isoformat(timespec="seconds")


def train(
    directions: Sequence[str], data_dir: str | None, *, root: pathlib.Path = ROOT, sample_every: float = 60.0
) -> dict[str, dict]:
    """Run TRAIN_COMMANDS for ``directions`` side by side (one CPU thread each), sampling the machine's 1-minute load
    average every ``sample_every`` seconds meanwhile; write each run's record (``TRAINING_LOG``: command, start, end,
    wall-clock seconds, load samples) into its run folder under ``root`` and return the records by direction. A
    failed run stops the others and exits with its status."""
    started, start = time.time(), time.monotonic()
    running = {}
    for direction in directions:
        command = shlex.split(TRAIN_COMMANDS[direction])
        command[0] = sys.executable
        if data_dir:
            command += ["--data-dir", data_dir]
        running[direction] = subprocess.Popen(command, cwd=root)
    seconds: dict[str, float] = {}
    load: list[tuple[float, float]] = []  # (seconds since the start, 1-minute load average)
    while len(seconds) < len(running):
        load.append((round(time.monotonic() - start, 1), round(os.getloadavg()[0], 2)))
        deadline = time.monotonic() + sample_every
        for direction, process in running.items():
            if direction in seconds:
                continue
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                continue
            if process.returncode != 0:
                for other in running.values():
                    other.terminate()
                    other.wait()
                raise SystemExit(f"training {direction} failed with exit status {process.returncode}")
            seconds[direction] = time.monotonic() - start
    records = {}
    for direction in directions:
        records[direction] = {
            "command": TRAIN_COMMANDS[direction],
            "side_by_side": list(directions),
            "cpu_cores": os.cpu_count(),
            "started": _utc(started),
            "ended": _utc(started + seconds[direction]),
            "wall_seconds": round(seconds[direction]),
            "load_average_1min_every_seconds": sample_every,
            "load_average_1min_samples": [value for at, value in load if at <= seconds[direction]],
        }
        (root / run_dir(direction) / TRAINING_LOG).write_text(json.dumps(records[direction], indent=2) + "\n")
    return records


def training_history(record: dict | None) -> str:
    """The card's ``history``: how the run was trained, from its ``TRAINING_LOG`` record (None: not recorded)."""
    if record is None:
        return UNRECORDED_HISTORY
    samples = record["load_average_1min_samples"]
    load = (
        f"median {statistics.median(samples):.2f}, max {max(samples):.2f} ({len(samples)} samples, every "
        f"{record['load_average_1min_every_seconds']:.0f} s)"
        if samples
        else "not sampled (the run ended within the first sample)"
    )
    together = len(record["side_by_side"])
    return (
        f"Trained with training_command by `python tools/make_pretrained.py --train`, without interruption or resume, "
        f"from {record['started']} to {record['ended']} UTC ({record['wall_seconds'] / 60:.1f} min): "
        f"{' and '.join(record['side_by_side'])} side by side, one CPU thread each, on a {record['cpu_cores']}-core "
        f"machine. Its 1-minute load average while this run trained: {load}; the {together} training "
        f"run{'s' if together > 1 else ''} alone make about {together}, more means other work shared the cores. "
        "Final weights: the average of the last 5 checkpoints (averaged_from)."
    )


def score_split(pretrained, pairs: list[tuple[str, str]], tgt: str, beam: int) -> dict:
    from companion.evaluate import evaluate_translation, tokenized_bleu

    start = time.monotonic()
    scored = evaluate_translation(
        pretrained.model, pairs, pretrained.src_tokenizer, pretrained.tgt_tokenizer, beam_size=beam, alpha=ALPHA
    )
    seconds = time.monotonic() - start
    references = [target for _, target in pairs]
    lc_bleu, lc_signature = tokenized_bleu(scored["hypotheses"], references, tgt, lowercase=True)
    cased_bleu, cased_signature = tokenized_bleu(scored["hypotheses"], references, tgt)
    return {
        "beam_size": beam,
        "alpha": ALPHA,
        "bleu": round(scored["bleu"], 2),
        "bleu_signature": scored["bleu_signature"],
        "chrf": round(scored["chrf"], 2),
        "chrf_signature": scored["chrf_signature"],
        "tokenized_lowercased_bleu": round(lc_bleu, 2),
        "tokenized_lowercased_bleu_signature": lc_signature,
        "tokenized_cased_bleu": round(cased_bleu, 2),
        "tokenized_cased_bleu_signature": cased_signature,
        "decode_seconds": round(seconds, 1),
        "sentences": len(pairs),
    }


def score(checkpoint_path: pathlib.Path, direction: str, data_dir: str | None) -> dict:
    """Scores on test_2016_flickr (beam 4 and greedy) and on the validation split (beam 4)."""
    import torch

    import companion

    torch.set_num_threads(2)
    src, tgt = direction.split("-")
    pretrained = companion.load_pretrained(direction, path=checkpoint_path)
    splits = companion.load_multi30k(src, tgt, data_dir=data_dir, splits=("valid", "test"))
    test = list(splits["test"])
    return {
        "test_2016_flickr": {
            "beam4": score_split(pretrained, test, tgt, BEAM),
            "greedy": score_split(pretrained, test, tgt, 1),
        },
        "validation": {"beam4": score_split(pretrained, list(splits["valid"]), tgt, BEAM)},
    }


REGISTRY = ROOT / "companion" / "pretrained.py"


def record_digest(file_name: str, digest: str, module: pathlib.Path = REGISTRY) -> None:
    """Write ``digest`` into the ``PRETRAINED_MODELS`` entry of ``file_name`` in ``module`` (under a lock: the two
    directions can be packaged by two processes at once)."""
    import fcntl

    with open(module, "r+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        text = handle.read()
        pattern = rf'("file": "{re.escape(file_name)}",\n\s+"sha256": )"[0-9a-f]*"'
        text, count = re.subn(pattern, rf'\1"{digest}"', text)
        assert count == 1, f"could not find the sha256 entry of {file_name} in {module}"
        handle.seek(0)
        handle.write(text)
        handle.truncate()


def training_record(run: pathlib.Path) -> dict:
    """What the run itself recorded: its metrics' last training line (steps, seconds, tokens/s)."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    train_lines = [r for r in map(json.loads, filter(str.strip, lines)) if r.get("kind") == "train"]
    last = train_lines[-1]
    rates = [r["tokens_per_s"] for r in train_lines if r.get("tokens_per_s")]
    return {
        "train_seconds": round(last["train_seconds"]),
        "last_logged_step": last["step"],
        "epochs": round(last["epoch"], 2),
        "last_logged_train_nll": round(last["nll"], 4),
        "mean_tokens_per_s_while_training": round(sum(rates) / len(rates)) if rates else None,
    }


def vocabulary_description(args: dict) -> str:
    """The card's words for the run's vocabulary, from the training arguments its checkpoint records."""
    if args.get("tokenizer") == "bpe":
        return (
            f"one byte-pair-encoding vocabulary of {args['vocab_size']:,} tokens shared by both languages, learned "
            f"from the training split (--tokenizer bpe --vocab-size {args['vocab_size']}); the embeddings are shared"
        )
    return (
        f"word vocabularies from the training split, words seen at least {args.get('min_freq', 1)} times "
        f"(--min-freq {args.get('min_freq', 1)})"
    )


def package(
    direction: str,
    data_dir: str | None,
    *,
    run: pathlib.Path | None = None,
    out: pathlib.Path = OUT,
    registry: pathlib.Path = REGISTRY,
) -> dict:
    """Ship ``run``'s ``averaged.pt`` (default ``runs/pretrained-<direction>``) as ``out/<direction>-small.pt``,
    record its SHA-256 in ``registry``, score it and write its card ``out/<direction>-small.json``; returns the
    card."""
    import companion
    from companion.checkpoint import load_checkpoint, write_checkpoint

    src, tgt = direction.split("-")
    name = f"{direction}-small"
    run = ROOT / run_dir(direction) if run is None else run
    averaged = load_checkpoint(run / "averaged.pt")
    record = json.loads((run / TRAINING_LOG).read_text()) if (run / TRAINING_LOG).exists() else None
    shipped = {k: v for k, v in averaged.items() if k not in ("trainer_state", "content_sha256")}
    shipped["trainer_state"] = None
    out.mkdir(exist_ok=True)
    target = out / f"{name}.pt"
    write_checkpoint(shipped, target)
    digest = sha256(target)
    record_digest(target.name, digest, registry)

    model = companion.model_from_checkpoint(shipped)
    command = TRAIN_COMMANDS[direction]
    card = {
        "name": f"multi30k-{name}",
        "direction": direction,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "task": f"{LANGUAGE_NAMES[src]} -> {LANGUAGE_NAMES[tgt]} translation of image captions",
        "data": (
            "Multi30k task 1 (train 29,000 pairs; validation 1,014 pairs; scored on test_2016_flickr, 1,000 pairs); "
            + vocabulary_description((shipped.get("run_info") or {}).get("args", {}))
        ),
        "model": {"preset": "small", "parameters": model.num_parameters(), **shipped["model_config"]},
        "training_command": command,
        "training_environment": "COMPANION_DATA_DIR=<a local copy of Multi30k>" if data_dir else None,
        "training_seconds": None if record is None else record["wall_seconds"],
        "training": training_record(run),
        "history": training_history(record),
        "training_record": record,
        "steps": shipped["step"],
        "averaged_from": shipped.get("averaged_from"),
        "file": f"{out.name}/{target.name}",
        "file_bytes": target.stat().st_size,
        "sha256": digest,
        "packaging_command": " ".join(["python", "tools/make_pretrained.py", *sys.argv[1:]]),
        "hardware": hardware(),
        "decoding": decoding(),
        "scores": score(target, direction, data_dir),
        "tokenized_lowercased_bleu_method": TOKENIZED_BLEU_METHOD,
        "limitations": LIMITATIONS,
        "outside_the_data": outside_the_data(target, direction),
        "terms": MULTI30K_TERMS,
    }
    card["test"] = card["scores"]["test_2016_flickr"]  # the key earlier cards and pages read
    (out / f"{name}.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def decoding() -> dict:
    """The card's ``decoding``: the setting its beam-search scores use, and where it was chosen."""
    return {
        "beam_size": BEAM,
        "alpha": ALPHA,
        "chosen_by": "bench/decoding_select.py on the validation split (bench/results/decoding_select_2026-12-06.json)",
    }


def outside_the_data(target: pathlib.Path, direction: str) -> dict:
    """The card's ``outside_the_data``: the shipped file ``target`` translating ``OUTSIDE_THE_DATA[direction]`` with
    the shipped decoding setting."""
    import companion

    loaded = companion.load_pretrained(direction, path=target)
    sources = list(OUTSIDE_THE_DATA[direction])
    translations = loaded.translate(sources, beam_size=BEAM, alpha=ALPHA)
    return {
        "beam_size": BEAM,
        "alpha": ALPHA,
        "examples": [{"source": s, "translation": t} for s, t in zip(sources, translations)],
    }


def shipped_card(direction: str, out: pathlib.Path) -> tuple[pathlib.Path, dict, pathlib.Path]:
    """The card file, its contents and the shipped ``out/<direction>-small.pt`` it describes (its SHA-256 must
    still be the card's)."""
    card_path = out / f"{direction}-small.json"
    card = json.loads(card_path.read_text())
    target = out / f"{direction}-small.pt"
    if sha256(target) != card["sha256"]:
        raise SystemExit(f"make_pretrained: {target} is not the file its card describes (SHA-256 differs)")
    return card_path, card, target


def refresh_limitations(direction: str, *, out: pathlib.Path = OUT) -> dict:
    """Rewrite only the card's ``limitations`` and ``outside_the_data`` for the shipped ``out/<direction>-small.pt``
    (its SHA-256 must still be the card's); returns the card."""
    card_path, card, target = shipped_card(direction, out)
    card["limitations"] = LIMITATIONS
    card["outside_the_data"] = outside_the_data(target, direction)
    card_path.write_text(json.dumps(card, indent=2) + "\n")
    return card


def rescore(direction: str, data_dir: str | None, *, out: pathlib.Path = OUT) -> dict:
    """Score the shipped ``out/<direction>-small.pt`` again (its SHA-256 must still be the card's) and rewrite its
    card's ``decoding``, ``scores`` and ``test``, with ``scoring_command``, ``scoring_date`` and ``scoring_hardware``
    (``hardware`` stays the packaging machine's); returns the card."""
    card_path, card, target = shipped_card(direction, out)
    card["decoding"] = decoding()
    card["scores"] = score(target, direction, data_dir)
    card["test"] = card["scores"]["test_2016_flickr"]
    card["limitations"] = LIMITATIONS
    card["outside_the_data"] = outside_the_data(target, direction)
    card["scoring_hardware"] = hardware()
    card["scoring_command"] = " ".join(["python", "tools/make_pretrained.py", *sys.argv[1:]])
    card["scoring_date"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    card_path.write_text(json.dumps(card, indent=2) + "\n")
    return card


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--direction", choices=(*DIRECTIONS, "both"), default="both", help="which model to make (default: both)"
    )
    parser.add_argument(
        "--train",
        action="store_true",
        help="train first, with TRAIN_COMMANDS (the directions side by side, one thread each)",
    )
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="score the shipped files again (after the decoding setting changed): new card scores, same weights",
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("COMPANION_DATA_DIR"),
        help="Multi30k folder (default: $COMPANION_DATA_DIR, else the Hugging Face hub)",
    )
    parser.add_argument(
        "--limitations",
        action="store_true",
        help="rewrite only the cards' limitations and outside_the_data (the shipped files translating "
        "OUTSIDE_THE_DATA): no training, no scoring",
    )
    args = parser.parse_args(argv)
    if args.train and args.rescore:
        parser.error("--rescore scores the shipped files as they are: it cannot be combined with --train")
    if args.limitations and (args.train or args.rescore):
        parser.error(
            "--limitations rewrites two fields of the shipped cards: it cannot be combined with --train or --rescore"
        )
    return args


def main() -> None:
    args = parse_args()
    directions = DIRECTIONS if args.direction == "both" else (args.direction,)
    if args.limitations:
        for direction in directions:
            card = refresh_limitations(direction)
            print(json.dumps({k: card[k] for k in ("file", "outside_the_data")}, indent=2, ensure_ascii=False))
        return
    if args.rescore:
        for direction in directions:
            card = rescore(direction, args.data_dir)
            print(json.dumps({k: card[k] for k in ("file", "decoding", "scores")}, indent=2), flush=True)
        return
    if args.train:
        train(directions, args.data_dir)
    for direction in directions:
        card = package(direction, args.data_dir)
        print(json.dumps({k: card[k] for k in ("file", "file_bytes", "steps", "scores")}, indent=2), flush=True)


if __name__ == "__main__":
    main()
