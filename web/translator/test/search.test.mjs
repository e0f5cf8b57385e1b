/*
 * Unit tests of web/translator/search.js under Node: `node --test web/translator/test/`.
 * (Parity with companion.decode on many step tables: tests/integration/test_web_search.py.)
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const S = require("../search.js");

const CONFIG = { bos_id: 2, eos_id: 3, max_len: 64 };
const VOCAB = 6;
const A = 4;
const B = 5;

/**
 * The scripted model of tests/unit/test_decode.py: after <bos>: A 0.5, B 0.4, <eos> 0.1; after A...: A 0.4,
 * B 0.3, <eos> 0.3; after B...: <eos> 0.9, A and B 0.05 each. Greedy search keeps picking A; beam search finds
 * "B <eos>". The next token depends only on the first output token.
 */
function scriptedStep(prefixes, output) {
  const data = new Float32Array(prefixes.length * VOCAB).fill(Math.log(1e-9));
  prefixes.forEach((prefix, row) => {
    const first = prefix.length > 1 ? prefix[1] : null;
    const probs = first === null ? [0.5, 0.4, 0.1] : first === A ? [0.4, 0.3, 0.3] : [0.05, 0.05, 0.9];
    [A, B, CONFIG.eos_id].forEach((token, i) => (data[row * VOCAB + token] = Math.log(probs[i])));
    data[row * VOCAB + 0] = -Infinity; // <pad> and <bos> are never generated
    data[row * VOCAB + CONFIG.bos_id] = -Infinity;
  });
  return Promise.resolve(S.stepOutput(data, prefixes.length, VOCAB, output, 4)); // normalised up to the 1e-9 entries
}

test("greedy search runs to the length limit when <eos> never wins", async () => {
  const result = await S.greedySearch(scriptedStep, 6, CONFIG, VOCAB);
  assert.deepEqual(result.ids, [A, A, A, A, A, A]);
  assert.equal(result.endedWithEos, false);
  assert.equal(result.decoderCalls, 6);
});

test("beam search finds what greedy search misses", async () => {
  const result = await S.beamSearch(scriptedStep, 6, 2, 0.6, CONFIG, VOCAB);
  assert.deepEqual(result.ids, [B]);
  assert.equal(result.endedWithEos, true);
  const expected = Math.log(0.4 * 0.9) / S.lengthPenalty(2, 0.6);
  assert.ok(Math.abs(result.score - expected) < 1e-6, `${result.score} vs ${expected}`);
});

test("beam size 1 is greedy search", async () => {
  const beam = await S.beamSearch(scriptedStep, 6, 1, 0.6, CONFIG, VOCAB);
  const greedy = await S.greedySearch(scriptedStep, 6, CONFIG, VOCAB);
  assert.deepEqual(beam.ids, greedy.ids);
});

test("the candidates are the 2k best, best first, ties in flat-index order", () => {
  const logProbs = Float32Array.from([-1, -2, -1, -3, -1, -5, -2, -1]);
  const beams = [{ ids: [], score: 0 }, { ids: [], score: -1 }];
  const candidates = S.topCandidates(beams, logProbs, [0, 1], 2, 4);
  assert.deepEqual(
    candidates.map((c) => [c.score, c.beam, c.token]),
    [[-1, 0, 0], [-1, 0, 2], [-2, 0, 1], [-2, 1, 0]]
  );
});

test("the candidates from each row's best entries are topCandidates' when no tie reaches the cut", () => {
  const logProbs = Float32Array.from([-1, -2, -1.5, -3, -4, -5, -2.5, -1.25]);
  const beams = [{ ids: [], score: 0 }, { ids: [], score: -1 }];
  const whole = S.topCandidates(beams, logProbs, [0, 1], 1, 4); // k = 1: the 2 best
  const top = S.stepOutput(logProbs, 2, 4, "top_log_probs", 3);
  assert.deepEqual(top.ids, Int32Array.from([0, 2, 1, 3, 2, 0]));
  assert.deepEqual(S.topCandidatesFromBest(beams, top, [0, 1], 1, 4), whole);
  assert.equal(S.topCandidatesFromBest(beams, top, [0, 1], 2, 4), null); // 4 candidates from 3 entries a row: no
});

test("a tie at the cut sends the search to the whole rows", () => {
  // row 0: tokens 1 and 3 tie at -1; with 2 entries a row the last entry ties with the 2nd candidate, and a
  // token left out might tie too (it does not here, but the entries cannot tell): the whole rows decide
  const logProbs = Float32Array.from([-5, -1, -2, -1, -9, -9, -9, -9]);
  const beams = [{ ids: [], score: 0 }, { ids: [], score: -Infinity }];
  const whole = S.topCandidates(beams, logProbs, [0, 1], 1, 4);
  assert.deepEqual(whole.map((c) => c.token), [1, 3]);
  assert.equal(S.topCandidatesFromBest(beams, S.stepOutput(logProbs, 2, 4, "top_log_probs", 2), [0, 1], 1, 4), null);
  // one entry more, below the cut: the entries decide, as the whole rows do
  const three = S.stepOutput(logProbs, 2, 4, "top_log_probs", 3);
  assert.deepEqual(S.topCandidatesFromBest(beams, three, [0, 1], 1, 4), whole);
  // four equal scores and three entries a row: the token left out (3) ties with the candidates
  const ties = Float32Array.from([-1, -1, -1, -1, -9, -9, -9, -9]);
  assert.equal(S.topCandidatesFromBest(beams, S.stepOutput(ties, 2, 4, "top_log_probs", 3), [0, 1], 1, 4), null);
});

test("the options' limits come from model.json's decoding settings", () => {
  const decoding = { beam_size: 4, alpha: 0.6, max_alpha: 10, max_beam_size: 8 };
  assert.deepEqual(S.checkSearchOptions({}, decoding), { beamSize: 4, alpha: 0.6 });
  assert.deepEqual(S.checkSearchOptions({ beamSize: 8, alpha: 10 }, decoding), { beamSize: 8, alpha: 10 });
  assert.throws(() => S.checkSearchOptions({ alpha: 10.5 }, decoding), /alpha must be a number from 0 to 10/);
  assert.throws(() => S.checkSearchOptions({ beamSize: 9 }, decoding), /beam size must be a whole number from 1 to 8/);
  assert.throws(() => S.checkSearchOptions({ beamSize: 2.5 }, decoding), RangeError);
});

test("source ids and length limits are Python's", () => {
  assert.deepEqual(S.sourceIds([5, 6], { eos_id: 3, max_len: 4 }), { ids: [5, 6, 3], truncated: false, fullLength: 3 });
  assert.deepEqual(S.sourceIds([5, 6, 7, 8], { eos_id: 3, max_len: 4 }).ids, [5, 6, 7, 3]);
  assert.equal(S.maxOutputLength(3, 50, 40), 40);
  assert.equal(S.maxOutputLength(3, 50, 512), 53);
});
