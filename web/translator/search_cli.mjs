#!/usr/bin/env node
/*
 * Runs search.js on a step table, for tests/integration/test_web_search.py (one process for every case).
 *
 *   node web/translator/search_cli.mjs < request.json > results.json
 *
 * stdin: a list of requests {"config": {bos_id, eos_id}, "vocab": V, "logits": T, "log_probs": L, "cases":
 * [{beamSize, alpha, limit}, ...], "width": W}. T[token][position] is the row of next-token logits after a prefix
 * that ends with `token` at `position` (0 for <bos>), L the same as log-probabilities; null stands for -inf (JSON
 * has no infinities); W is how many best entries per row a "top_log_probs" step gives (the graph's top_k; default
 * 32). stdout: per request, one {ids, endedWithEos, score, decoderCalls, trailMatches, fullRows} per case
 * (beamSize 1: greedy; fullRows: the calls whose whole rows the search asked for); the step throws when a prefix
 * is not its parent row's prefix plus one token (what a cache relies on).
 */
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const require = createRequire(import.meta.url);
const { greedySearch, beamSearch, stepOutput } = require("./search.js");

function table(rows) {
  return rows.map((byPosition) => byPosition.map((row) => Float32Array.from(row, (v) => (v === null ? -Infinity : v))));
}

/**
 * The step callback of search.js over a request's tables: one row per prefix, by its last token and position.
 * It also checks what a step with a key/value cache relies on: each prefix is its parent row's prefix of the
 * previous call plus one token (the cache holds the parent's positions). `calls` records every call's prefixes,
 * so the result's trail can be checked against them.
 */
function tableStep(request, calls, counts) {
  const outputs = { next_ids: table(request.logits), top_log_probs: table(request.log_probs) };
  const vocab = request.vocab;
  const width = request.width === undefined ? 32 : request.width;
  return async function step(prefixes, output, parents) {
    const previous = calls.length ? calls[calls.length - 1] : null;
    prefixes.forEach((prefix, row) => {
      const cached = parents === null ? [] : previous[parents[row]];
      const expected = cached === undefined ? null : JSON.stringify(cached.concat([prefix[prefix.length - 1]]));
      if (JSON.stringify(prefix) !== expected) {
        throw new Error(`row ${row} of call ${calls.length}: prefix ${JSON.stringify(prefix)} is not its parent's + 1`);
      }
    });
    calls.push(prefixes.map((prefix) => prefix.slice()));
    const data = new Float32Array(prefixes.length * vocab);
    prefixes.forEach((prefix, row) => data.set(outputs[output][prefix[prefix.length - 1]][prefix.length - 1], row * vocab));
    const result = stepOutput(data, prefixes.length, vocab, output, width);
    if (output === "top_log_probs") {
      const full = result.full;
      result.full = () => {
        counts.fullRows++;
        return full();
      };
    }
    return result;
  };
}

/** Whether trail[j] names a call and row whose prefix is [<bos>, ...ids[0..j)] (the position that predicts token j). */
function trailMatches(result, calls, bos) {
  const positions = result.ids.length + (result.endedWithEos ? 1 : 0);
  if (result.trail.length !== positions) return false;
  return result.trail.every(([call, row], j) => {
    const prefix = calls[call] && calls[call][row];
    return prefix !== undefined && JSON.stringify(prefix) === JSON.stringify([bos].concat(result.ids.slice(0, j)));
  });
}

const results = [];
for (const request of JSON.parse(readFileSync(0, "utf8"))) {
  const perCase = [];
  for (const c of request.cases) {
    const calls = [];
    const counts = { fullRows: 0 };
    const step = tableStep(request, calls, counts);
    const result =
      c.beamSize === 1
        ? await greedySearch(step, c.limit, request.config, request.vocab)
        : await beamSearch(step, c.limit, c.beamSize, c.alpha, request.config, request.vocab);
    result.trailMatches = trailMatches(result, calls, request.config.bos_id);
    result.fullRows = counts.fullRows;
    delete result.trail;
    perCase.push(result);
  }
  results.push(perCase);
}
process.stdout.write(JSON.stringify(results));
