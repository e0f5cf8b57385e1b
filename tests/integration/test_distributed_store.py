"""A Trainer built from Python under torchrun (issue 22): it joins the process group itself, one rank writes, and
with token-store batches each rank reads only its share of each batch (2 CPU processes, gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")

# Run by each torchrun process: no setup_distributed() call; records what each rank read and saw.
SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    from companion import Transformer, TransformerConfig
    from companion.data import StoredBatches, WordTokenizer, files_corpus, prepare_store
    from companion.train import TrainConfig, Trainer

    data, out = sys.argv[1], sys.argv[2]
    corpus = files_corpus("fr", "en", train=(f"{data}/train.fr", f"{data}/train.en"))
    src = WordTokenizer.build(corpus.texts("train", "src"), "fr")
    tgt = WordTokenizer.build(corpus.texts("train", "tgt"), "en")
    store = prepare_store(corpus, "train", src, tgt, cache_dir=f"{data}/cache", workers=1)
    batches = StoredBatches(store, 60, seed=0)
    read, shares = [], []
    local = batches.local

    def spy(index, rank, world):  # what this rank reads: the batch index and the rows it collated
        share, weight = local(index, rank, world)
        read.append(int(index))
        shares.append([[t for t in row if t != 0] for row in share.src.tolist()] if weight else [])
        return share, weight

    batches.local = spy
    config = TrainConfig(max_steps=2, warmup=10, device="cpu", progress=False, save_every=2)
    model = Transformer(TransformerConfig(src.vocab_size, tgt.vocab_size, d_model=16, num_heads=2,
                        num_encoder_layers=1, num_decoder_layers=1, d_ff=32, max_len=32))
    trainer = Trainer(model, config, batches, out_dir=out, tokenizers={"src": src, "tgt": tgt})
    trainer.train()
    whole = [[[t for t in row if t != 0] for row in batches[i].src.tolist()] for i in read]
    with open(f"{out}/rank{trainer.rank}.json", "w") as f:
        json.dump({"rank": trainer.rank, "world_size": trainer.world_size, "read": read, "rows": shares,
                   "whole": whole}, f)
    """
)


@pytest.mark.slow
def test_a_python_trainer_under_torchrun_joins_the_group_and_reads_its_share(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    words = ["chat", "chien", "maison", "arbre", "rouge", "grand", "petit", "voit"]
    english = ["cat", "dog", "house", "tree", "red", "big", "small", "sees"]
    lines = [[(i * 7 + j * 3) % 8 for j in range(2 + i % 5)] for i in range(80)]
    (data / "train.fr").write_text("".join(" ".join(words[w] for w in ws) + "\n" for ws in lines), "utf-8")
    (data / "train.en").write_text("".join(" ".join(english[w] for w in ws) + "\n" for ws in lines), "utf-8")
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(script), str(data), str(out)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["world_size"] == 2 for r in ranks)
    assert ranks[0]["read"] == ranks[1]["read"] and ranks[0]["read"]  # the same batches, read share by share
    for zero, one, whole in zip(ranks[0]["rows"], ranks[1]["rows"], ranks[0]["whole"]):
        assert zero + one == whole  # each rank its own rows (disjoint); together, the batch, in order
    assert all(ranks[0]["rows"]) and any(ranks[1]["rows"])
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000002.pt"]  # one writer
