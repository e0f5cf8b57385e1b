"""bench/peer_joeynmt.py: its arguments, the JoeyNMT configuration it writes (the ``small`` preset's model and
recipe), companion's side of the comparison; JoeyNMT itself only where its virtual environment exists."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess

import pytest

from companion.presets import PRESETS

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peer_joeynmt.py"


@pytest.fixture(scope="module")
def peer():
    spec = importlib.util.spec_from_file_location("peer_joeynmt", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arguments_and_their_checks(peer):
    args = peer.parse_args([])
    assert (args.minutes, args.threads, args.systems) == (12.0, 2, ["joeynmt", "companion"])
    assert peer.parse_args(["--minutes", "1", "--systems", "companion"]).systems == ["companion"]
    for bad in (["--minutes", "0"], ["--threads", "0"], ["--test-limit", "0"], ["--systems", "fairseq"]):
        with pytest.raises(SystemExit):
            peer.parse_args(bad)


def test_the_joeynmt_config_is_the_small_preset(peer, tmp_path):
    small = PRESETS["small"]
    config = peer.joey_config(tmp_path / "work", tmp_path / "data", threads=2, seed=0)
    json.loads(json.dumps(config))  # written as JSON, which is YAML
    for side in ("encoder", "decoder"):
        layers = config["model"][side]
        assert layers["num_layers"] == small.model[f"num_{side}_layers"]
        assert layers["num_heads"] == small.model["num_heads"]
        assert layers["hidden_size"] == layers["embeddings"]["embedding_dim"] == small.model["d_model"]
        assert layers["ff_size"] == small.model["d_ff"]
        assert layers["dropout"] == layers["embeddings"]["dropout"] == small.model["dropout"]
        assert layers["layer_norm"] == ("pre" if small.model["norm_first"] else "post")
    training = config["training"]
    assert training["scheduling"] == "noam" and training["learning_rate_warmup"] == small.train["warmup"]
    assert training["learning_rate_factor"] == small.train["lr_factor"]
    assert training["batch_type"] == "token" and training["batch_size"] == peer.BATCH_TOKENS  # the comparison's budget
    assert training["label_smoothing"] == 0.1 and training["adam_betas"] == [0.9, 0.98]
    assert training["validation_freq"] >= 10**6, "no validation during the timed training"
    assert training["validation_freq"] % training["logging_freq"] == 0  # JoeyNMT refuses the config otherwise
    assert config["testing"]["beam_size"] == 4 and config["testing"]["beam_alpha"] == 0.6
    for side in ("src", "trg"):
        assert config["data"][side]["level"] == "word" and config["data"][side]["voc_min_freq"] == 2
    assert config["model"]["tied_softmax"] and not config["model"]["tied_embeddings"]


def test_companion_side_uses_the_preset_and_the_budget(peer):
    args = peer.parse_args(["--minutes", "3", "--threads", "1", "--data-dir", "/data"])
    flags = peer.companion_flags(args, pathlib.Path("out"))
    assert flags[0] == "train"
    assert "--preset" in flags and flags[flags.index("--preset") + 1] == "small"
    assert flags[flags.index("--max-minutes") + 1] == "3.0" and flags[flags.index("--threads") + 1] == "1"
    assert flags[flags.index("--min-freq") + 1] == "2" and flags[flags.index("--data-dir") + 1] == "/data"
    # the comparison's batch budget, whatever the preset's is now; JoeyNMT's default budget is the same
    assert flags[flags.index("--max-tokens") + 1] == "600" == str(peer.parse_args([]).joey_batch_tokens)
    assert len(peer.DIFFERENCES) >= 5 and all(isinstance(d, str) and d for d in peer.DIFFERENCES)


def test_rates(peer):
    assert peer.rates(100, 50_000, 20.0) == {
        "steps": 100,
        "train_seconds": 20.0,
        "steps_per_second": 5.0,
        "tokens_seen": 50_000,
        "tokens_per_second": 2500,
        "real_tokens_per_step": 500.0,
    }


def test_joeynmt_accepts_the_config(peer, tmp_path):
    args = peer.parse_args([])
    if peer.joeynmt_available(args.joey_python) is None:
        pytest.skip(f"joeynmt is not installed for {args.joey_python} (see bench/peer_joeynmt.py)")
    config = peer.joey_config(tmp_path / "work", tmp_path / "data", threads=1, seed=0)
    config["training"].pop("threads")
    (tmp_path / "work" / "model").mkdir(parents=True)
    check = (
        "import json, sys; from joeynmt.config import parse_global_args; "
        "a = parse_global_args(json.load(open(sys.argv[1])), mode='train'); "
        "print(a.train.batch_size, a.train.validation_freq, a.test.beam_size, a.test.beam_alpha)"
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [args.joey_python, "-c", check, str(tmp_path / "config.json")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["600", str(10**8), "4", "0.6"]


def test_embedding_initialisation_variants(peer, tmp_path):
    default = peer.joey_config(tmp_path, tmp_path, threads=1, seed=0)["model"]
    assert default["embed_initializer"] == "xavier_uniform" and "embed_init_weight" not in default
    normal = peer.joey_config(tmp_path, tmp_path, threads=1, seed=0, embed_init="normal")["model"]
    # companion's N(0, d_model^-0.5): unit variance per coordinate once the embeddings are scaled by sqrt(d_model)
    assert normal["embed_initializer"] == "normal"
    assert abs(normal["embed_init_weight"] * PRESETS["small"].model["d_model"] ** 0.5 - 1) < 1e-12
    assert peer.parse_args(["--joey-embed-init", "normal"]).joey_embed_init == "normal"
    assert peer.parse_args([]).joey_embed_init == "xavier_uniform" and peer.parse_args([]).tag is None
    with pytest.raises(ValueError, match="embed_init"):
        peer.joey_config(tmp_path, tmp_path, threads=1, seed=0, embed_init="orthogonal")
    with pytest.raises(SystemExit):
        peer.parse_args(["--joey-embed-init", "orthogonal"])


def test_joeynmt_batch_budget(peer, tmp_path):
    assert peer.joey_config(tmp_path, tmp_path, threads=1, seed=0)["training"]["batch_size"] == 600
    wider = peer.joey_config(tmp_path, tmp_path, threads=1, seed=0, batch_tokens=980)["training"]
    assert wider["batch_size"] == 980 and wider["batch_type"] == "token"
    assert peer.parse_args(["--joey-batch-tokens", "980"]).joey_batch_tokens == 980
    with pytest.raises(ValueError, match="batch_tokens"):
        peer.joey_config(tmp_path, tmp_path, threads=1, seed=0, batch_tokens=0)
    with pytest.raises(SystemExit):
        peer.parse_args(["--joey-batch-tokens", "0"])
