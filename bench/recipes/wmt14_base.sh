#!/usr/bin/env bash
# The paper's base model on WMT14 en->de (Vaswani et al. 2017, section 5 and Table 2), as one command:
# shared BPE of 37,000, ~25,000 source + 25,000 target tokens per step across all GPUs (--max-tokens is the
# global batch under torchrun), 100,000 steps, warmup 4,000, a checkpoint every 1,000 steps of which the last 5
# are averaged (averaged.pt), then newstest2014 (the wmt14 de-en test split) decoded with beam 4 / alpha 0.6 and
# scored both ways: sacreBLEU (detokenized, with signature) and tokenized BLEU (companion.evaluate.tokenized_bleu).
#
#   bash bench/recipes/wmt14_base.sh                      # 8 GPUs, the Hugging Face dataset wmt14 / de-en
#   NPROC=1 DATASET=/path/saved_with_save_to_disk CONFIG= bash bench/recipes/wmt14_base.sh --preset tiny ...
#
# Extra arguments are appended to 'companion train' (the last value of a flag wins); EVAL_FLAGS to evaluate.
# Expected wall time: an ESTIMATE, not a measurement: python bench/recipes/wmt14_estimate.py (README).
set -euo pipefail
OUT=${OUT:-runs/wmt14-base}
NPROC=${NPROC:-8}
DATASET=${DATASET:-wmt14}
CONFIG=${CONFIG-de-en}
PYTHON=${PYTHON:-python}
"$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" -m companion train \
  --preset base --src en --tgt de --hf-dataset "$DATASET" ${CONFIG:+--hf-config "$CONFIG"} \
  --tokenizer bpe --vocab-size 37000 --max-tokens 25000 --max-steps 100000 --warmup 4000 \
  --save-every 1000 --keep-last 5 --average-last 5 --out "$OUT" "$@"
# shellcheck disable=SC2086
"$PYTHON" -m companion evaluate --checkpoint "$OUT" --split test --beam-size 4 --alpha 0.6 ${EVAL_FLAGS:-} \
  --json > "$OUT/newstest2014.json"
cat "$OUT/newstest2014.json"
