#!/usr/bin/env node
/*
 * Runs search.js on a step table, for tests/integration/test_web_search.py (one process for every case).
 *
 *   node web/translator/search_cli.mjs < request.json > results.json
 *
 * stdin: a list of requests {"config": {bos_id, eos_id}, "vocab": V, "logits": T, "log_probs": L, "cases":
 * [{beamSize, alpha, limit}, ...]}. T[token][position] is the row of next-token logits after a prefix that ends
 * with `token` at `position` (0 for <bos>), L the same as log-probabilities; null stands for -inf (JSON has no
 * infinities). stdout: per request, one {ids, endedWithEos, score, decoderCalls} per case (beamSize 1: greedy).
 */
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const require = createRequire(import.meta.url);
const { greedySearch, beamSearch } = require("./search.js");

function table(rows) {
  return rows.map((byPosition) => byPosition.map((row) => Float32Array.from(row, (v) => (v === null ? -Infinity : v))));
}

/** The step callback of search.js over a request's tables: one row per prefix, by its last token and position. */
function tableStep(request) {
  const outputs = { logits: table(request.logits), log_probs: table(request.log_probs) };
  const vocab = request.vocab;
  return async function step(prefixes, output) {
    const data = new Float32Array(prefixes.length * vocab);
    prefixes.forEach((prefix, row) => data.set(outputs[output][prefix[prefix.length - 1]][prefix.length - 1], row * vocab));
    return data;
  };
}

const results = [];
for (const request of JSON.parse(readFileSync(0, "utf8"))) {
  const step = tableStep(request);
  const perCase = [];
  for (const c of request.cases) {
    perCase.push(
      c.beamSize === 1
        ? await greedySearch(step, c.limit, request.config, request.vocab)
        : await beamSearch(step, c.limit, c.beamSize, c.alpha, request.config, request.vocab)
    );
  }
  results.push(perCase);
}
process.stdout.write(JSON.stringify(results));
