/*
 * Greedy and beam search in JavaScript: companion.decode's searches (search_greedy, search_beam) for one
 * sentence, for the book's in-page translator (translator.js). Pure functions over a step callback, no DOM:
 *
 *   step(prefixes, output, parents) -> Promise of [rows * vocab] numbers: the decoder graph's `output` ("logits"
 *                             for greedy search, "log_probs" for beam search) for each prefix ([<bos>, ...] each);
 *                             parents[i] is the row of the previous call whose prefix prefixes[i] extends by one
 *                             token (null at the first call), so a step with a key/value cache feeds only the last
 *                             token of each prefix after reordering its cache rows by parent
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
   * Greedy search (companion.decode.greedy_decode for one sentence).
   * step(prefixes, output) runs the decoder on the prefixes ([<bos>, ...] each) and returns that output,
   * [rows, vocab]. Returns {ids, endedWithEos, decoderCalls}.
   */
  async function greedySearch(step, limit, config, vocab, onProgress) {
    const ids = [];
    const trail = [];
    let calls = 0;
    for (;;) {
      const logits = await step([[config.bos_id].concat(ids)], "logits", calls === 0 ? null : [0]);
      trail.push([calls, 0]);
      calls++;
      const token = argmax(logits, 0, vocab);
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
    const want = Math.min(2 * k, k * vocab);
    const scores = [];
    const flat = [];
    for (let beam = 0; beam < beams.length; beam++) {
      const base = beams[beam].score;
      if (base === -Infinity) continue; // every extension of a dead beam is -inf
      const offset = rowOfBeam[beam] * vocab;
      for (let token = 0; token < vocab; token++) {
        const total = Math.fround(base + logProbs[offset + token]);
        if (scores.length === want && !(total > scores[want - 1])) continue;
        let at = scores.length;
        while (at > 0 && !(scores[at - 1] >= total)) at--;
        scores.splice(at, 0, total);
        flat.splice(at, 0, beam * vocab + token);
        if (scores.length > want) {
          scores.pop();
          flat.pop();
        }
      }
    }
    return scores.map((score, i) => ({ score, beam: Math.floor(flat[i] / vocab), token: flat[i] % vocab }));
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
      const logProbs = await step(
        alive.map((i) => [config.bos_id].concat(beams[i].ids)),
        "log_probs",
        parents
      );
      const call = calls;
      calls++;
      const trailOf = (beam) => beams[beam].trail.concat([[call, rowOfBeam[beam]]]);
      const candidates = topCandidates(beams, logProbs, rowOfBeam, k, vocab);
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
    beamSearch,
    checkSearchOptions,
  };
});
