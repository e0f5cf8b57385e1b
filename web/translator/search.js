/*
 * Greedy and beam search in JavaScript: companion.decode's searches (search_greedy, search_beam) for one
 * sentence, for the book's in-page translator (translator.js). Pure functions over a step callback, no DOM:
 *
 *   step(prefixes, output, parents) -> Promise of the decoder graph's `output` for each prefix ([<bos>, ...] each):
 *                             "next_ids": [rows] token ids, each row's most probable next token (the first of
 *                             equal maxima), for greedy search; "top_log_probs": {values, ids, width, full} with
 *                             each row's `width` best tokens and their log-probabilities ([rows * width], best
 *                             first, so the values never increase along a row: the graph's top_ids and
 *                             top_log_probs) and full() -> Promise of the whole rows [rows * vocab] (log_probs),
 *                             for beam search. parents[i] is the row of the previous call whose prefix prefixes[i]
 *                             extends by one token (null at the first call), so a step with a key/value cache
 *                             feeds only the last token of each prefix after reordering its cache rows by parent.
 *                             stepOutput(rows, rowCount, vocab, output, width) gives both from whole rows.
 *   greedySearch(step, limit, config, vocab, onProgress)
 *       -> {ids, endedWithEos, score: null, decoderCalls, trail}
 *   beamSearch(step, limit, k, alpha, config, vocab, onProgress)
 *       -> {ids, endedWithEos, score, decoderCalls, trail}
 *
 * `trail` lists, for each position of [<bos>, ...ids] that predicted a token of the result (<eos> included when
 * it ended with one), the [call, row] of the step call that computed it: the caller can gather that call's
 * per-row outputs (the attention rows) into the winner's attention maps without another decoder call.
 *   checkSearchOptions(options, decoding)   -> {beamSize, alpha}: the limits come from model.json's "decoding"
 *                                              (max_beam_size, max_alpha = companion.decode.MAX_ALPHA)
 *
 * `config` holds bos_id, eos_id and max_len (model.json's "config"). The rules, candidate ranking, <eos>
 * handling, GNMT length penalty and tie order are Python's; tests/integration/test_web_search.py runs both on
 * the same step table under Node and compares ids and scores.
 *
 * A classic script with no dependencies: in a page it sets globalThis.CompanionSearch, under Node it is
 * module.exports.
 */
(function (root, factory) {
  "use strict";
  const api = factory();
  if (typeof module === "object" && module && module.exports) {
    module.exports = api;
  } else {
    root.CompanionSearch = api;
  }
})(typeof globalThis !== "undefined" ? globalThis : this, function () {
  "use strict";


  /** Source ids (tokens + <eos>), truncated like companion.decode.translate (its source encoding): at most max_len ids. */
  function sourceIds(tokenIds, config) {
    const ids = tokenIds.concat([config.eos_id]);
    if (ids.length <= config.max_len) return { ids, truncated: false, fullLength: ids.length };
    return { ids: ids.slice(0, config.max_len - 1).concat([config.eos_id]), truncated: true, fullLength: ids.length };
  }

  /** companion.decode.max_output_lengths for one sentence (srcLength counts <eos>). */
  function maxOutputLength(srcLength, maxExtraLen, modelMaxLen) {
    return Math.max(1, Math.min(srcLength + maxExtraLen, modelMaxLen));
  }

  /** GNMT's length penalty ((5 + length) / 6) ** alpha, as companion.decode.length_penalty. */
  function lengthPenalty(length, alpha) {
    return Math.pow((5 + length) / 6, alpha);
  }

  /** Index of the largest of values[offset .. offset + n), the first on ties (like torch.argmax). */
  function argmax(values, offset, n) {
    let best = 0;
    let bestValue = values[offset];
    for (let i = 1; i < n; i++) {
      const v = values[offset + i];
      if (v > bestValue || (bestValue !== bestValue && v === v)) {
        best = i;
        bestValue = v;
      }
    }
    return best;
  }

  /**
   * Greedy search (companion.decode.greedy_decode for one sentence): step(prefixes, "next_ids", parents) gives
   * the most probable next token of the prefix (see the header). Returns {ids, endedWithEos, decoderCalls}.
   */
  async function greedySearch(step, limit, config, vocab, onProgress) {
    const ids = [];
    const trail = [];
    let calls = 0;
    for (;;) {
      const next = await step([[config.bos_id].concat(ids)], "next_ids", calls === 0 ? null : [0]);
      trail.push([calls, 0]);
      calls++;
      const token = Number(next[0]);
      if (token === config.eos_id) return { ids, endedWithEos: true, score: null, decoderCalls: calls, trail };
      ids.push(token);
      if (onProgress) onProgress(ids);
      if (ids.length >= limit) return { ids, endedWithEos: false, score: null, decoderCalls: calls, trail };
    }
  }

  /** The finished hypotheses of one sentence (the Finished lists of companion.decode.BeamState). */
  class FinishedHypotheses {
    constructor(beamSize) {
      this.beamSize = beamSize;
      this.items = [];
    }
    get full() {
      return this.items.length >= this.beamSize;
    }
    add(score, ids, endedWithEos, force, trail) {
      if (force || !this.full) this.items.push({ score, ids, endedWithEos, trail });
    }
    best() {
      // Python's max(): the first of equal maxima
      let best = this.items[0];
      for (const item of this.items) if (item.score > best.score) best = item;
      return best;
    }
  }

  /**
   * The 2k best one-token extensions, best first (companion.decode.BeamState.extend): the summed
   * log-probability is a float32 sum, as in torch. Equal scores keep the order of the flat index
   * beam * vocab + token.
   */
  function topCandidates(beams, logProbs, rowOfBeam, k, vocab) {
    return topCandidatesFromBest(beams, { values: logProbs, ids: null, width: vocab }, rowOfBeam, k, vocab);
  }

  /**
   * topCandidates from each row's best entries (a "top_log_probs" step output: {values, ids, width}) instead of
   * the whole rows: the same 2k candidates in the same order, ranked by the float32 sum and then by the flat
   * index beam * vocab + token. A row's entries stand in for the row when no token left out of them could rank
   * among the 2k: every token left out scores at most the row's last entry, so that holds when the last entry's
   * sum is below the 2k-th candidate's. Returns null otherwise (ties at the cut, or width <= 2k): then rank the
   * whole rows with topCandidates (which is this ranking over whole rows: ids null, entry j is token j).
   */
  function topCandidatesFromBest(beams, top, rowOfBeam, k, vocab) {
    const want = Math.min(2 * k, k * vocab);
    const complete = top.width >= vocab; // the entries are the whole row
    if (!complete && top.width <= want) return null;
    const scores = [];
    const flat = [];
    const lastOfRow = [];
    for (let beam = 0; beam < beams.length; beam++) {
      const base = beams[beam].score;
      if (base === -Infinity) continue; // every extension of a dead beam is -inf
      const offset = rowOfBeam[beam] * top.width;
      for (let j = 0; j < top.width; j++) {
        const total = Math.fround(base + top.values[offset + j]);
        const index = beam * vocab + (top.ids === null ? j : Number(top.ids[offset + j]));
        const n = scores.length;
        if (n === want && (total < scores[n - 1] || (total === scores[n - 1] && index > flat[n - 1]))) continue;
        let at = n;
        while (at > 0 && (scores[at - 1] < total || (scores[at - 1] === total && flat[at - 1] > index))) at--;
        scores.splice(at, 0, total);
        flat.splice(at, 0, index);
        if (scores.length > want) {
          scores.pop();
          flat.pop();
        }
      }
      lastOfRow.push(Math.fround(base + top.values[offset + top.width - 1]));
    }
    if (!complete && scores.length === want && lastOfRow.some((last) => !(last < scores[want - 1]))) return null;
    return scores.map((score, i) => ({ score, beam: Math.floor(flat[i] / vocab), token: flat[i] % vocab }));
  }

  /**
   * What the decoder graph gives a search, from whole rows ([rowCount * vocab] scores): "next_ids", each row's
   * first maximum; "top_log_probs", {values, ids, width, full} with each row's `width` largest values, best first,
   * the lower id first among equal ones (ONNX TopK's order). For step functions that hold whole rows (tests).
   */
  function stepOutput(rows, rowCount, vocab, output, width) {
    if (output === "next_ids") return Int32Array.from({ length: rowCount }, (_, r) => argmax(rows, r * vocab, vocab));
    if (output !== "top_log_probs") throw new Error(`unknown step output ${output}`);
    const w = Math.min(width, vocab);
    const values = new Float32Array(rowCount * w);
    const ids = new Int32Array(rowCount * w);
    for (let r = 0; r < rowCount; r++) {
      const order = Array.from({ length: vocab }, (_, i) => i);
      order.sort((a, b) => {
        const x = rows[r * vocab + a];
        const y = rows[r * vocab + b];
        return x > y ? -1 : x < y ? 1 : a - b;
      });
      order.slice(0, w).forEach((token, j) => {
        values[r * w + j] = rows[r * vocab + token];
        ids[r * w + j] = token;
      });
    }
    return { values, ids, width: w, full: () => Promise.resolve(rows) };
  }

  /**
   * Beam search (companion.decode.beam_search / search_beam for one sentence): k beams, 2k candidates per
   * step; an <eos> among the first k ranks finishes a hypothesis scored log P / lp(step); the k best others
   * go on; stop with k finished hypotheses or at the length limit (the running beams then finish with force);
   * the best finished hypothesis wins. Beams with score -inf (all but one at the first step) are not run: they
   * cannot produce a finite candidate. Returns {ids, endedWithEos, score, decoderCalls}.
   */
  async function beamSearch(step, limit, k, alpha, config, vocab, onProgress) {
    // trail: the [call, row] that computed each position of the beam's prefix (see the header)
    let beams = [{ ids: [], score: 0, trail: [] }];
    for (let i = 1; i < k; i++) beams.push({ ids: [], score: -Infinity, trail: [] });
    const finished = new FinishedHypotheses(k);
    let calls = 0;
    for (let t = 1; ; t++) {
      const alive = [];
      const rowOfBeam = beams.map((beam, i) => (beam.score === -Infinity ? -1 : alive.push(i) - 1));
      const parents = t === 1 ? null : alive.map((i) => beams[i].trail[beams[i].trail.length - 1][1]);
      const top = await step(
        alive.map((i) => [config.bos_id].concat(beams[i].ids)),
        "top_log_probs",
        parents
      );
      const call = calls;
      calls++;
      const trailOf = (beam) => beams[beam].trail.concat([[call, rowOfBeam[beam]]]);
      const candidates =
        topCandidatesFromBest(beams, top, rowOfBeam, k, vocab) ||
        topCandidates(beams, await top.full(), rowOfBeam, k, vocab);
      const penalty = lengthPenalty(t, alpha);
      for (let rank = 0; rank < Math.min(k, candidates.length); rank++) {
        const c = candidates[rank];
        if (c.token === config.eos_id && Number.isFinite(c.score)) {
          finished.add(c.score / penalty, beams[c.beam].ids.slice(), true, false, trailOf(c.beam));
        }
      }
      // the k best candidates that do not end in <eos> (candidates are sorted; a stable filter keeps topk's order)
      const next = candidates.filter((c) => c.token !== config.eos_id).slice(0, k);
      while (next.length < k) next.push({ score: -Infinity, beam: 0, token: config.eos_id }); // never in practice
      beams = next.map((c) => ({
        ids: beams[c.beam].ids.concat([c.token]),
        score: c.score,
        trail: Number.isFinite(c.score) ? trailOf(c.beam) : [],
      }));
      if (onProgress) onProgress(beams[0].ids);
      if (finished.full) break;
      if (t >= limit) {
        for (const beam of beams) {
          if (Number.isFinite(beam.score)) finished.add(beam.score / penalty, beam.ids.slice(), false, true, beam.trail);
        }
        break;
      }
    }
    const best = finished.best();
    return {
      ids: best.ids,
      endedWithEos: best.endedWithEos,
      score: best.score,
      decoderCalls: calls,
      trail: best.trail,
    };
  }

  /**
   * The search options of translate/translateIds: beamSize a whole number in [1, max_beam_size] (1 = greedy),
   * alpha a number in [0, max_alpha]; both default to the decoding settings of model.json.
   */
  function checkSearchOptions(options, decoding) {
    const beamSize = options.beamSize === undefined ? decoding.beam_size : options.beamSize;
    const alpha = options.alpha === undefined ? decoding.alpha : options.alpha;
    const maxBeam = decoding.max_beam_size;
    const maxAlpha = decoding.max_alpha;
    if (!Number.isInteger(beamSize) || beamSize < 1 || beamSize > maxBeam) {
      throw new RangeError(`beam size must be a whole number from 1 to ${maxBeam}, got ${beamSize}`);
    }
    if (typeof alpha !== "number" || !(alpha >= 0 && alpha <= maxAlpha)) {
      throw new RangeError(`alpha must be a number from 0 to ${maxAlpha}, got ${alpha}`);
    }
    return { beamSize, alpha };
  }

  return {
    sourceIds,
    maxOutputLength,
    lengthPenalty,
    argmax,
    greedySearch,
    FinishedHypotheses,
    topCandidates,
    topCandidatesFromBest,
    stepOutput,
    beamSearch,
    checkSearchOptions,
  };
});
