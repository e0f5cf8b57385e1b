/*
 * The book's Transformers, German -> English and English -> German, running in the page (ONNX Runtime Web, WASM
 * backend, one thread).
 *
 * Loaded on every page of the book (html_js_files). It does nothing unless the page holds a translator element:
 *   <div class="translator-app"></div>     the full app (the "Translate in your browser" page)
 *   <div class="translator-panel"></div>   the same app in a compact layout, for chapters
 *   <div class="translator-model-card"></div>   the model card alone
 * Everything it loads comes from the folder this script was served from (_static/translator/): manifest.json (the
 * directions offered, the first the default), per direction a folder with model.json, encoder.onnx and
 * decoder.onnx, tokenizer.js and ort/ (ONNX Runtime Web). Nothing leaves the page. Each direction's model and
 * sessions load the first time that direction is used.
 *
 * The page's scripts, loaded in this order: tokenizer.js (spaCy's tokenizer and the vocabulary), search.js (greedy
 * and beam search over a step callback: companion.decode's searches, no DOM, tested under Node), heatmap.js (the
 * attention heatmaps), and this file: loading the model, the decoder step over ONNX Runtime, and the app.
 * Decoding reproduces companion.decode exactly (greedy_decode, beam_search): same source ids (tokens + <eos>,
 * truncated to max_len), same length limit, same candidate ranking, <eos> handling, GNMT length penalty and
 * tie order. The decoder graph is one step with a key/value cache: each call feeds the last token of every
 * hypothesis and the cached keys and values of the positions before it (reordered by parent hypothesis when
 * beam search keeps, drops or repeats beams); the encoder graph computes the cross-attention keys and values
 * once per sentence. The attention maps of the final output are the per-step attention rows of the calls that
 * computed its positions (the search's trail), gathered into whole maps: no extra decoder call.
 *
 * For tests and readers' own experiments: window.CompanionTranslator (see the API object at the end).
 */
(function () {
  "use strict";

  // ---------------------------------------------------------------------------------------------------------
  // Where the assets are: the folder this script came from.
  // ---------------------------------------------------------------------------------------------------------
  const SCRIPT = document.currentScript || findOwnScript();
  const BASE = SCRIPT ? new URL(".", SCRIPT.src).href : null;
  const APP_SELECTOR = ".translator-app, .translator-panel";
  const CARD_SELECTOR = ".translator-model-card";
  const SPECIAL_TOKENS = ["<pad>", "<unk>", "<bos>", "<eos>"];
  // The graphs' interface (companion.export: ENCODER_OUTPUTS, DECODER_INPUTS, DECODER_OUTPUTS)
  const ENCODER_OUTPUTS = ["memory", "encoder_attention", "cross_kv"];
  const DECODER_INPUTS = ["token_ids", "src_ids", "cross_kv", "past_kv"];
  const DECODER_OUTPUTS = ["logits", "log_probs", "new_kv", "attention", "next_ids", "top_log_probs", "top_ids"];
  // The alpha slider's range (the paper tuned alpha from 0.6 to 1.0; the book's models use 2.0, model.json's
  // decoding.alpha, chosen on validation); translate() accepts alpha up to model.json's decoding.max_alpha
  // (companion.decode.MAX_ALPHA) and beam sizes up to its decoding.max_beam_size.
  const ALPHA_SLIDER_MAX = 3;
  const { sourceIds, maxOutputLength, lengthPenalty, greedySearch, beamSearch, topCandidates, checkSearchOptions } =
    globalThis.CompanionSearch; // search.js, loaded before this script
  const { VIRIDIS, viridisIndex, drawHeatmap, drawColorbar, attachReadout } = globalThis.CompanionHeatmap; // heatmap.js

  function findOwnScript() {
    const scripts = document.querySelectorAll("script[src]");
    for (const script of scripts) {
      if (/translator\/translator\.js(\?|#|$)/.test(script.src)) return script;
    }
    return null;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Loading (lazily: only when a translator element exists, each file once per page).
  // ---------------------------------------------------------------------------------------------------------
  class LoadError extends Error {}

  function assetUrl(name) {
    if (!BASE) throw new LoadError("the translator cannot tell where its files are (no script URL)");
    return new URL(name, BASE).href;
  }

  async function fetchOk(name) {
    const url = assetUrl(name);
    let response;
    try {
      response = await fetch(url);
    } catch (error) {
      throw new LoadError(`${name} could not be fetched (${error.message})`);
    }
    if (!response.ok) throw new LoadError(`${name} could not be fetched (HTTP ${response.status})`);
    return response;
  }

  async function fetchBytes(name) {
    const response = await fetchOk(name);
    return new Uint8Array(await response.arrayBuffer());
  }

  function loadScript(name, isLoaded) {
    if (isLoaded()) return Promise.resolve();
    const url = assetUrl(name);
    return new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = url;
      script.async = true;
      script.onload = () =>
        isLoaded() ? resolve() : reject(new LoadError(`${name} loaded but did not define what the page needs`));
      script.onerror = () => reject(new LoadError(`${name} could not be loaded`));
      document.head.appendChild(script);
    });
  }

  let manifestPromise = null;
  /** manifest.json: {directions: [{id, source, target, source_name, target_name, folder}], default}. */
  function loadManifest() {
    if (!manifestPromise) {
      manifestPromise = fetchOk("manifest.json")
        .then((response) => response.json())
        .then((manifest) => {
          if (!Array.isArray(manifest.directions) || !manifest.directions.length) {
            throw new LoadError("manifest.json lists no translation directions");
          }
          return manifest;
        });
      manifestPromise.catch(() => (manifestPromise = null)); // a failed load may be retried
    }
    return manifestPromise;
  }

  /** The manifest entry of `direction` (undefined: the default one); a direction the page lacks is an error. */
  async function directionEntry(direction) {
    const manifest = await loadManifest();
    const id = direction === undefined || direction === null ? manifest.default : direction;
    const entry = manifest.directions.find((d) => d.id === id);
    if (!entry) {
      const known = manifest.directions.map((d) => d.id).join(", ");
      throw new RangeError(`direction must be one of ${known}, got ${JSON.stringify(direction)}`);
    }
    return entry;
  }

  const modelInfoPromises = new Map();
  /** A direction's model.json: the card, config, decoding settings, vocabularies, tokenizer rules and examples. */
  async function loadModelInfo(direction) {
    const entry = await directionEntry(direction);
    if (!modelInfoPromises.has(entry.id)) {
      const promise = fetchOk(entry.folder + "model.json")
        .then((response) => response.json())
        .then((info) => checkModelInfo(info, entry));
      promise.catch(() => modelInfoPromises.delete(entry.id));
      modelInfoPromises.set(entry.id, promise);
    }
    return modelInfoPromises.get(entry.id);
  }

  function checkModelInfo(info, entry) {
    for (const key of ["direction", "card", "config", "decoding", "src_tokenizer", "tgt_tokenizer", "examples"]) {
      if (!(key in info)) throw new LoadError(`${entry.folder}model.json has no "${key}" entry`);
    }
    info.folder = entry.folder;
    return info;
  }

  const runtimePromises = new Map();
  let loadStartedAt = null;
  /** Everything translation in one direction needs: model.json, the tokenizer, ONNX Runtime Web, both sessions. */
  async function loadRuntime(direction) {
    if (loadStartedAt === null) loadStartedAt = performance.now();
    const started = performance.now();
    const entry = await directionEntry(direction);
    if (!runtimePromises.has(entry.id)) {
      const promise = createRuntime(entry, started);
      promise.catch(() => runtimePromises.delete(entry.id));
      runtimePromises.set(entry.id, promise);
    }
    return runtimePromises.get(entry.id);
  }

  async function createRuntime(entry, started) {
    const [info] = await Promise.all([
      loadModelInfo(entry.id),
      loadScript("tokenizer.js", () => Boolean(globalThis.CompanionTokenizer)),
      loadScript("ort/ort.wasm.min.js", () => Boolean(globalThis.ort && globalThis.ort.InferenceSession)),
    ]);
    const ort = globalThis.ort;
    ort.env.wasm.wasmPaths = assetUrl("ort/");
    ort.env.wasm.numThreads = 1;
    ort.env.wasm.proxy = false;
    ort.env.logLevel = "error";
    const [encoderBytes, decoderBytes] = await Promise.all([
      fetchBytes(entry.folder + "encoder.onnx"),
      fetchBytes(entry.folder + "decoder.onnx"),
    ]);
    const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
    let encoder, decoder;
    try {
      encoder = await ort.InferenceSession.create(encoderBytes, options);
      decoder = await ort.InferenceSession.create(decoderBytes, options);
    } catch (error) {
      throw new LoadError(`ONNX Runtime could not start the model (${error.message || error})`);
    }
    checkSession(entry.folder + "encoder.onnx", encoder, ["src_ids"], ENCODER_OUTPUTS);
    checkSession(entry.folder + "decoder.onnx", decoder, DECODER_INPUTS, DECODER_OUTPUTS);
    const tokenizers = makeTokenizers(info);
    const loadMs = performance.now() - started;
    return { ort, info, direction: entry.id, config: info.config, encoder, decoder, tokenizers, loadMs, started };
  }

  function checkSession(name, session, inputs, outputs) {
    const missing = inputs
      .filter((n) => !session.inputNames.includes(n))
      .concat(outputs.filter((n) => !session.outputNames.includes(n)));
    if (missing.length) throw new LoadError(`${name} lacks the inputs/outputs ${missing.join(", ")}`);
  }

  // ---------------------------------------------------------------------------------------------------------
  // Tokenizers: web/translator/tokenizer.js (the word tokenizer: spaCy's rules plus a vocabulary; the subword
  // tokenizer: byte-pair encoding; either gives the ids Python gives).
  // ---------------------------------------------------------------------------------------------------------
  function makeTokenizers(info) {
    const T = globalThis.CompanionTokenizer;
    const srcItos = T.tokenStrings(info.src_tokenizer);
    const tgtItos = T.tokenStrings(info.tgt_tokenizer);
    const srcStoi = new Map(srcItos.map((token, i) => [token, i]));
    return {
      /** Source text -> token strings (subwords, or spaCy's tokens under the source language's rules); a
       * character outside a subword vocabulary stays itself here (shown and marked), its id is <unk>'s. */
      tokenize: (text) => T.tokenizeWith(text, info.src_tokenizer, info.src_rules, { keepUnknown: true }),
      /** Token strings -> source ids (<unk> for unknown tokens); no <eos>. Equal to T.encode(text, ...). */
      tokensToIds: (tokens) => tokens.map((token) => (srcStoi.has(token) ? srcStoi.get(token) : info.config.unk_id)),
      /** Target ids -> target text (stops at <eos>, skips <pad>/<bos>). */
      decodeTarget: (ids) => T.decode(ids, info.tgt_tokenizer),
      srcToken: (id) => srcItos[id],
      tgtToken: (id) => tgtItos[id],
    };
  }

  // ---------------------------------------------------------------------------------------------------------
  // The model calls.
  // ---------------------------------------------------------------------------------------------------------
  function int64Tensor(ort, rows, width) {
    const data = new BigInt64Array(rows.length * width);
    rows.forEach((row, r) => row.forEach((id, c) => (data[r * width + c] = BigInt(id))));
    return new ort.Tensor("int64", data, [rows.length, width]);
  }

  async function runEncoder(rt, src) {
    // memory is not fetched: the decoder step reads the source through cross_kv
    const out = await rt.encoder.run({ src_ids: int64Tensor(rt.ort, [src], src.length) }, ["encoder_attention", "cross_kv"]);
    return {
      encoderAttention: out.encoder_attention,
      crossKV: out.cross_kv,
    };
  }

  /** Rows of a [2, layers, batch, ...rest] tensor (keys and values) picked along the batch axis: row i of the
   * result is row index[i]. */
  function gatherRows(ort, tensor, index) {
    const dims = tensor.dims.map(Number);
    const outer = dims[0] * dims[1];
    const batch = dims[2];
    const block = dims.slice(3).reduce((a, b) => a * b, 1);
    const data = new Float32Array(outer * index.length * block);
    for (let o = 0; o < outer; o++) {
      index.forEach((row, i) => {
        const from = (o * batch + row) * block;
        data.set(tensor.data.subarray(from, from + block), (o * index.length + i) * block);
      });
    }
    return new ort.Tensor("float32", data, [dims[0], dims[1], index.length].concat(dims.slice(3)));
  }

  /**
   * The self-attention cache of the next call, [2, layers, rows, heads, t + 1, d_head]: row i holds the positions
   * of the previous call's row parents[i], its past [.., t, ..] and the position that call added (new_kv
   * [.., 1, ..]). One copy, whatever the reordering.
   */
  function nextPast(ort, past, added, parents) {
    const [two, layers, before, heads, t, dHead] = past.dims.map(Number);
    const rows = parents.length;
    const data = new Float32Array(two * layers * rows * heads * (t + 1) * dHead);
    let at = 0;
    for (let o = 0; o < two * layers; o++) {
      for (const parent of parents) {
        for (let h = 0; h < heads; h++) {
          const block = (o * before + parent) * heads + h;
          data.set(past.data.subarray(block * t * dHead, (block + 1) * t * dHead), at);
          data.set(added.data.subarray(block * dHead, (block + 1) * dHead), at + t * dHead);
          at += (t + 1) * dHead;
        }
      }
    }
    return new ort.Tensor("float32", data, [two, layers, rows, heads, t + 1, dHead]);
  }

  /**
   * A decoder step function over one source (search.js's step(prefixes, output, parents)): the cache grows by
   * the position each call adds, its rows following `parents`, and only the last token of each prefix is fed.
   * `output` is "next_ids" (greedy search) or "top_log_probs" (beam search: each row's best log-probabilities and
   * their ids, with full() running the same feeds again for the whole rows, log_probs, when the best entries
   * cannot decide: the graph has no state, so a second run gives the same numbers; tests/integration/
   * test_web_search.py checks that the page's widest beam ranks its candidates from the best entries). Copying out
   * a few entries per row instead of the whole vocabulary, and not scanning it in JavaScript, is most of what a
   * step costs besides the graph. Each call's attention rows are kept in step.calls, for the maps of the winner (attentionMaps).
   */
  function decoderStep(rt, src, encoded) {
    const n = src.length;
    const tiles = new Map(); // rows -> the source ids and cross-attention keys/values repeated for that many rows
    function tiled(rows) {
      if (!tiles.has(rows)) {
        const same = Array.from({ length: rows }, () => 0);
        tiles.set(rows, { src: int64Tensor(rt.ort, same.map(() => src), n), kv: gatherRows(rt.ort, encoded.crossKV, same) });
      }
      return tiles.get(rows);
    }
    let past = null; // the previous call's past_kv and new_kv, its rows in that call's order
    let added = null;
    const calls = [];
    const kept = ["new_kv", "attention"];
    async function step(prefixes, output, parents) {
      const rows = prefixes.length;
      const t = tiled(rows);
      let pastKV;
      if (parents === null || parents === undefined) {
        const [two, layers, , heads, , dHead] = encoded.crossKV.dims.map(Number);
        pastKV = new rt.ort.Tensor("float32", new Float32Array(0), [two, layers, rows, heads, 0, dHead]);
      } else {
        pastKV = nextPast(rt.ort, past, added, parents);
      }
      const feeds = {
        token_ids: int64Tensor(rt.ort, prefixes.map((prefix) => [prefix[prefix.length - 1]]), 1),
        src_ids: t.src,
        cross_kv: t.kv,
        past_kv: pastKV,
      };
      const fetched = output === "next_ids" ? ["next_ids"] : ["top_log_probs", "top_ids"];
      const result = await rt.decoder.run(feeds, fetched.concat(kept));
      past = pastKV;
      added = result.new_kv;
      calls.push({ attention: result.attention, positions: Number(pastKV.dims[4]) + 1 });
      if (output === "next_ids") return result.next_ids.data;
      const top = result.top_log_probs;
      return {
        values: top.data,
        ids: result.top_ids.data,
        width: Number(top.dims[1]),
        full: async () => (await rt.decoder.run(feeds, ["log_probs"])).log_probs.data,
      };
    }
    step.calls = calls;
    return step;
  }

  /**
   * The winner's attention maps from the per-call rows its trail names: cross [layers, 1, heads, T, n] and
   * decoder self-attention [layers, 1, heads, T, T] (zeros above the diagonal), T = the trail's length; row j is
   * the query that predicts output token j (the last row predicts <eos> when the output ended with it).
   */
  function attentionMaps(calls, trail, n) {
    const T = trail.length;
    const first = calls[0].attention.dims.map(Number); // [layers, batch, heads, 1, positions + n]
    const layers = first[0];
    const heads = first[2];
    const cross = new Float32Array(layers * heads * T * n);
    const self = new Float32Array(layers * heads * T * T);
    trail.forEach(([call, row], j) => {
      const c = calls[call];
      const batch = Number(c.attention.dims[1]);
      const keys = c.positions; // j + 1: the positions before and this one
      const width = keys + n; // a row: self-attention over those positions, then cross-attention over the source
      for (let l = 0; l < layers; l++) {
        for (let hd = 0; hd < heads; hd++) {
          const at = ((l * batch + row) * heads + hd) * width;
          self.set(c.attention.data.subarray(at, at + keys), ((l * heads + hd) * T + j) * T);
          cross.set(c.attention.data.subarray(at + keys, at + width), ((l * heads + hd) * T + j) * n);
        }
      }
    });
    return {
      cross: { data: cross, dims: [layers, 1, heads, T, n] },
      decoder: { data: self, dims: [layers, 1, heads, T, T] },
    };
  }

  // ONNX Runtime sessions run one call at a time: every use of the model goes through this queue.
  let queue = Promise.resolve();
  function exclusive(task) {
    const result = queue.then(task, task);
    queue = result.catch(() => undefined);
    return result;
  }

  /** Tokens outside the Latin script (and not digits, punctuation or symbols). */
  const NON_LATIN = /[^\p{Script=Latin}\p{Script=Common}\p{Script=Inherited}]/u;

  /**
   * Decode already tokenized source ids (ending in <eos>, at most max_len), as companion.decode.translate_ids:
   * beamSize 1 is greedy search. Returns ids, attention maps and timings.
   */
  async function decodeIds(rt, src, beamSize, alpha, onProgress) {
    const config = rt.config;
    const vocab = config.tgt_vocab_size;
    const t0 = performance.now();
    const encoded = await runEncoder(rt, src);
    const t1 = performance.now();
    const step = decoderStep(rt, src, encoded);
    const limit = maxOutputLength(src.length, rt.info.decoding.max_extra_len, config.max_len);
    const search =
      beamSize === 1
        ? await greedySearch(step, limit, config, vocab, onProgress)
        : await beamSearch(step, limit, beamSize, alpha, config, vocab, onProgress);
    const t2 = performance.now();
    const maps = attentionMaps(step.calls, search.trail, src.length);
    const t3 = performance.now();
    const encoderAttention = encoded.encoderAttention;
    return {
      search,
      attention: {
        encoder: { data: encoderAttention.data, dims: encoderAttention.dims.map(Number) },
        cross: maps.cross,
        decoder: maps.decoder,
      },
      timings: { encoderMs: t1 - t0, searchMs: t2 - t1, attentionMs: t3 - t2, decoderCalls: search.decoderCalls },
    };
  }

  let firstTranslationMs = null;

  /** The result object of translate/translateIds. */
  function describe(rt, src, sourceTokens, truncated, fullLength, decoded, options, started) {
    const config = rt.config;
    const { search } = decoded;
    const outputTokens = search.ids.map(rt.tokenizers.tgtToken);
    const rowTokens = search.endedWithEos ? outputTokens.concat(["<eos>"]) : outputTokens.slice();
    const eos = rt.config.eos_id;
    const srcLabels = src.map((id, i) => (i === src.length - 1 && id === eos ? "<eos>" : sourceTokens[i]));
    const unknownSourceTokens = [];
    const nonLatinTokens = [];
    src.forEach((id, i) => {
      if (id !== config.unk_id) return;
      unknownSourceTokens.push({ index: i, token: srcLabels[i] });
      if (NON_LATIN.test(srcLabels[i])) nonLatinTokens.push({ index: i, token: srcLabels[i] });
    });
    const totalMs = performance.now() - started;
    if (firstTranslationMs === null && loadStartedAt !== null) {
      // From the start of loading to this result, less the time the loaded model waited for the reader to ask.
      const idle = Math.max(0, started - (rt.started + rt.loadMs));
      firstTranslationMs = performance.now() - loadStartedAt - idle;
    }
    return {
      direction: rt.direction,
      ids: search.ids,
      text: rt.tokenizers.decodeTarget(search.ids),
      sourceIds: src,
      sourceTokens: srcLabels,
      outputTokens,
      attentionRowTokens: rowTokens,
      endedWithEos: search.endedWithEos,
      score: search.score,
      beamSize: options.beamSize,
      alpha: options.alpha,
      unknownSourceTokens,
      nonLatinTokens,
      truncated,
      sourceLengthBeforeTruncation: fullLength,
      maxLen: config.max_len,
      attention: decoded.attention,
      timings: Object.assign({}, decoded.timings, {
        totalMs,
        modelLoadMs: rt.loadMs,
        firstTranslationMs,
      }),
    };
  }

  /**
   * Translate text. options: {direction ("de-en" or "en-de": manifest.json's ids; default its first),
   * beamSize (1-8; 1 = greedy), alpha (0 to model.json's decoding.max_alpha), onProgress}; beamSize and
   * alpha default to model.json's decoding settings; onProgress(ids) sees the best running hypothesis after
   * each step.
   * Rejects with an Error for empty text. Resolves to {ids, text, sourceIds, sourceTokens, outputTokens,
   * unknownSourceTokens, nonLatinTokens, truncated, attention, timings, ...}.
   */
  async function translate(text, options) {
    if (typeof text !== "string") throw new TypeError(`text must be a string, got ${typeof text}`);
    const rt = await loadRuntime(options && options.direction);
    const opts = checkSearchOptions(options || {}, rt.info.decoding);
    // Empty means no source token, as the tokenizer sees it (it and String.trim disagree on a few characters:
    // U+0085 is white space to the tokenizer only, U+FEFF to trim only).
    const tokens = rt.tokenizers.tokenize(text);
    if (tokens.length === 0) {
      throw new EmptyInputError(`the text is empty: type a ${rt.info.direction.source_name} sentence or pick an example`);
    }
    return exclusive(async () => {
      const started = performance.now();
      const { ids, truncated, fullLength } = sourceIds(rt.tokenizers.tokensToIds(tokens), rt.config);
      const decoded = await decodeIds(rt, ids, opts.beamSize, opts.alpha, options && options.onProgress);
      return describe(rt, ids, tokens, truncated, fullLength, decoded, opts, started);
    });
  }

  /** Translate already tokenized source ids (tokens + <eos>, as companion.decode.translate_ids takes them). */
  async function translateIds(ids, options) {
    const rt = await loadRuntime(options && options.direction);
    const opts = checkSearchOptions(options || {}, rt.info.decoding);
    if (!Array.isArray(ids) || ids.length === 0 || ids.length > rt.config.max_len) {
      throw new RangeError(`ids must be a list of 1 to ${rt.config.max_len} source ids ending in <eos>`);
    }
    if (!ids.every((id) => Number.isInteger(id) && id >= 0 && id < rt.config.src_vocab_size)) {
      throw new RangeError(`ids must be source token ids in [0, ${rt.config.src_vocab_size})`);
    }
    return exclusive(async () => {
      const started = performance.now();
      const tokens = ids.map(rt.tokenizers.srcToken);
      const decoded = await decodeIds(rt, ids, opts.beamSize, opts.alpha, options && options.onProgress);
      return describe(rt, ids, tokens, false, ids.length, decoded, opts, started);
    });
  }

  class EmptyInputError extends Error {}

  // ---------------------------------------------------------------------------------------------------------
  // DOM helpers.
  // ---------------------------------------------------------------------------------------------------------
  function h(tag, attributes, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of [].concat(children || [])) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  // ---------------------------------------------------------------------------------------------------------
  // The app.
  // ---------------------------------------------------------------------------------------------------------
  const numberFormat = new Intl.NumberFormat("en-US");
  let uid = 0;

  function formatMs(ms) {
    return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(0)} ms`;
  }

  function formatBytes(bytes) {
    return `${(bytes / 1e6).toFixed(1)} MB (${numberFormat.format(bytes)} bytes)`;
  }

  class TranslatorApp {
    constructor(root) {
      this.root = root;
      this.compact = root.classList.contains("translator-panel");
      this.id = `translator-${++uid}`;
      this.result = null;
      this.selected = 0;
      this.direction = null; // manifest.json's default until the manifest has loaded
      this.runId = 0; // the latest translation started by the page (or the latest direction switch)
      this.build();
      const autoload = root.dataset.autoload ? root.dataset.autoload === "true" : !this.compact;
      const ready = loadManifest().then(
        (manifest) => {
          this.showDirections(manifest);
          const direction = this.direction;
          return this.loadInfo(direction).catch((error) => {
            this.loadFailed(direction, error);
            throw error;
          });
        },
        (error) => {
          this.showLoadError(error);
          throw error;
        }
      );
      ready.catch(() => undefined); // shown by the handlers above
      if (autoload) ready.then(() => this.preload(), () => undefined);
      else {
        const once = () => {
          this.preload();
          root.removeEventListener("focusin", once);
          root.removeEventListener("pointerdown", once);
        };
        root.addEventListener("focusin", once);
        root.addEventListener("pointerdown", once);
      }
    }

    build() {
      const id = this.id;
      this.input = h("textarea", {
        id: `${id}-input`,
        class: "tr-input",
        rows: this.compact ? 2 : 3,
        spellcheck: "false",
        lang: "de",
        placeholder: "Ein Hund rennt über eine Wiese.",
      });
      this.examples = h("select", { id: `${id}-examples`, class: "tr-examples", disabled: true }, [
        h("option", { value: "", text: "loading examples…" }),
      ]);
      this.greedy = h("input", { type: "radio", name: `${id}-search`, value: "greedy", class: "tr-greedy" });
      this.beam = h("input", { type: "radio", name: `${id}-search`, value: "beam", class: "tr-beam", checked: true });
      this.beamSize = h("input", {
        type: "number",
        class: "tr-beam-size",
        id: `${id}-beam-size`,
        min: 1,
        step: 1,
        value: 4,
      });
      this.alpha = h("input", {
        type: "range",
        class: "tr-alpha",
        id: `${id}-alpha`,
        min: 0,
        max: ALPHA_SLIDER_MAX,
        step: 0.05,
        value: 0.6,
      });
      this.alphaValue = h("output", { class: "tr-alpha-value", for: `${id}-alpha`, text: "0.60" });
      this.button = h("button", { type: "submit", class: "tr-translate", text: "Translate" });
      this.directionSelect = h("select", { id: `${id}-direction`, class: "tr-direction", disabled: true }, [
        h("option", { value: "", text: "loading…" }),
      ]);
      this.directionSelect.addEventListener("change", () => this.switchDirection(this.directionSelect.value));
      this.inputLabel = h("label", { for: `${id}-input`, class: "tr-label", text: "Sentence" });
      const form = h("form", { class: "tr-form", onsubmit: (e) => (e.preventDefault(), this.run()) }, [
        h("div", { class: "tr-row" }, [
          h("label", { for: `${id}-direction`, text: "direction: " }),
          this.directionSelect,
        ]),
        this.inputLabel,
        this.input,
        h("div", { class: "tr-row" }, [
          h("label", { for: `${id}-examples`, text: "or a test sentence: " }),
          this.examples,
        ]),
        h("div", { class: "tr-row tr-controls" }, [
          h("fieldset", { class: "tr-search" }, [
            h("legend", { text: "search" }),
            h("label", {}, [this.greedy, " greedy"]),
            h("label", {}, [this.beam, " beam search"]),
            h("label", { for: `${id}-beam-size`, class: "tr-beam-label" }, ["beam size ", this.beamSize]),
            h("label", { for: `${id}-alpha`, class: "tr-alpha-label" }, [
              "length penalty \u03b1 ",
              this.alpha,
              " ",
              this.alphaValue,
            ]),
          ]),
          this.button,
        ]),
      ]);
      this.alpha.addEventListener("input", () => (this.alphaValue.textContent = Number(this.alpha.value).toFixed(2)));
      for (const control of [this.greedy, this.beam]) control.addEventListener("change", () => this.syncSearch());
      this.examples.addEventListener("change", () => {
        if (this.examples.value === "") return;
        this.input.value = this.examples.value;
        this.run();
      });
      this.status = h("p", { class: "tr-status", role: "status", "aria-live": "polite" });
      this.messages = h("div", { class: "tr-messages" });
      this.resultBox = h("div", { class: "tr-result", hidden: true });
      this.timings = h("p", { class: "tr-timings" });
      this.card = h("details", { class: "tr-card", open: !this.compact }, [
        h("summary", { text: "About the model" }),
        h("div", { class: "tr-card-body", text: "loading…" }),
      ]);
      const parts = [form, this.status, this.messages, this.resultBox, this.timings];
      if (this.root.dataset.card !== "off") parts.push(this.card); // data-card="off": the page shows the card elsewhere
      this.root.replaceChildren(...parts);
      this.root.classList.add("tr-ready");
      this.syncSearch();
    }

    syncSearch() {
      const beam = this.beam.checked;
      this.beamSize.disabled = !beam;
      this.alpha.disabled = !beam;
    }

    setStatus(text, kind) {
      this.status.textContent = text;
      this.status.dataset.kind = kind || "info";
    }

    showDirections(manifest) {
      if (this.direction === null) this.direction = manifest.default;
      this.directionSelect.replaceChildren(
        ...manifest.directions.map((d) =>
          h("option", {
            value: d.id,
            text: `${d.source_name} \u2192 ${d.target_name}`,
            selected: d.id === this.direction,
          })
        )
      );
      this.directionSelect.disabled = manifest.directions.length < 2;
    }

    /** Load model.json of ``direction`` and show it, unless the reader has switched to another direction by then. */
    loadInfo(direction) {
      return loadModelInfo(direction).then((info) => {
        if (this.direction === direction) this.showInfo(info);
      });
    }

    /** Show a load error of ``direction``, unless the reader has left that direction. */
    loadFailed(direction, error) {
      if (direction === this.direction) this.showLoadError(error);
    }

    /** Switch the app to another direction: its examples, labels and model (loaded now), the result cleared. */
    switchDirection(direction) {
      if (!direction || direction === this.direction) return;
      this.direction = direction;
      this.directionSelect.value = direction;
      this.runId += 1; // a translation still running belongs to the other direction: its result is dropped
      this.button.disabled = false;
      this.status.removeAttribute("aria-busy");
      this.result = null;
      this.resultBox.hidden = true;
      this.resultBox.replaceChildren();
      this.messages.replaceChildren();
      this.input.value = "";
      this.examples.disabled = true;
      this.root.dataset.state = "switching";
      this.loadInfo(direction).catch((error) => this.loadFailed(direction, error));
      this.preload();
    }

    showInfo(info) {
      this.info = info;
      const names = info.direction;
      this.inputLabel.textContent = `${names.source_name} sentence`;
      this.input.lang = names.source;
      this.beamSize.max = info.decoding.max_beam_size;
      this.beamSize.value = info.decoding.beam_size;
      this.alpha.max = Math.max(ALPHA_SLIDER_MAX, info.decoding.alpha); // a recorded alpha above 3 stays reachable
      this.alpha.value = info.decoding.alpha;
      this.alphaValue.textContent = Number(info.decoding.alpha).toFixed(2);
      this.examples.replaceChildren(
        h("option", { value: "", text: `— one of ${info.examples.length} Multi30k test sentences —` }),
        ...info.examples.map((sentence) => h("option", { value: sentence, text: sentence }))
      );
      this.examples.disabled = false;
      if (!this.input.value) this.input.placeholder = info.examples[0];
      this.card.querySelector(".tr-card-body").replaceWith(renderCard(info));
    }

    preload() {
      this.setStatus("loading the model and ONNX Runtime…", "busy");
      const direction = this.direction;
      loadRuntime(direction).then(
        (rt) => {
          if (direction !== this.direction) return;
          if (this.root.dataset.state === "switching") delete this.root.dataset.state;
          const translating = this.root.dataset.state === "translating";
          if (!this.result && !translating && this.status.dataset.kind === "busy") {
            this.setStatus(`model ready (loaded in ${formatMs(rt.loadMs)})`, "ready");
          }
        },
        (error) => this.loadFailed(direction, error)
      );
    }

    showLoadError(error) {
      this.setStatus(
        `The translator could not load: ${error.message}. Reload the page to try again; on a copy of the site ` +
          "built without `make site`, the model files may be missing.",
        "error"
      );
      this.root.dataset.state = "load-error";
    }

    options() {
      if (this.greedy.checked) return { beamSize: 1, alpha: 0 };
      const options = { beamSize: Number(this.beamSize.value), alpha: Number(this.alpha.value) };
      return this.info ? checkSearchOptions(options, this.info.decoding) : options; // translate() checks them too
    }

    async run() {
      this.messages.replaceChildren();
      const text = this.input.value;
      if (text === "") {
        this.showEmpty();
        return;
      } // white space alone: translate() says so, by the tokenizer's rule of what white space is
      let options;
      try {
        options = this.options();
      } catch (error) {
        this.setStatus(error.message, "warning");
        this.root.dataset.state = "bad-options";
        return;
      }
      // The latest run wins: a test sentence picked, or the direction switched, while this one runs makes its
      // result (and its progress and errors) stale; only the latest run re-enables the button.
      const runId = ++this.runId;
      const current = () => runId === this.runId;
      this.button.disabled = true;
      this.root.dataset.state = "translating";
      this.status.setAttribute("aria-busy", "true"); // screen readers hear the result, not every decoding step
      const loaded = runtimePromises.has(this.direction);
      this.setStatus(loaded ? "translating…" : "loading the model, then translating…", "busy");
      try {
        const onProgress = (ids) => {
          if (!current() || !this.info || !globalThis.CompanionTokenizer) return;
          const partial = globalThis.CompanionTokenizer.decode(ids, this.info.tgt_tokenizer);
          this.setStatus(`translating\u2026 ${partial}`, "busy");
        };
        const result = await translate(text, Object.assign({ onProgress, direction: this.direction }, options));
        if (!current()) return;
        this.show(result);
        this.root.dataset.state = "done";
      } catch (error) {
        if (!current()) return;
        if (error instanceof LoadError) this.showLoadError(error);
        else if (error instanceof EmptyInputError) this.showEmpty();
        else {
          this.setStatus(`Translation failed: ${error.message}`, "error");
          this.root.dataset.state = "error";
        }
      } finally {
        if (current()) {
          this.button.disabled = false;
          this.status.removeAttribute("aria-busy");
        }
      }
    }

    showEmpty() {
      const language = this.info ? this.info.direction.source_name : "source";
      this.setStatus(`The box is empty: type a ${language} sentence or pick one of the test sentences.`, "warning");
      this.root.dataset.state = "empty";
    }

    message(kind, children) {
      this.messages.append(h("p", { class: `tr-message tr-${kind}` }, children));
    }

    show(result) {
      this.result = result;
      this.selected = 0;
      const search =
        result.beamSize === 1 ? "greedy search" : `beam search (beam ${result.beamSize}, \u03b1 ${result.alpha})`;
      this.setStatus(`translated with ${search}`, "done");
      if (result.truncated) {
        this.message("truncated", [
          `The sentence has ${numberFormat.format(result.sourceLengthBeforeTruncation)} source tokens (with <eos>), ` +
            `more than the model's limit of ${result.maxLen}: it was cut to the first ${result.maxLen - 1} tokens ` +
            "plus <eos>, as the Python package does (it warns).",
        ]);
      }
      const nonLatin = new Set(result.nonLatinTokens.map((u) => u.index));
      const others = result.unknownSourceTokens.filter((u) => !nonLatin.has(u.index));
      if (result.nonLatinTokens.length) {
        this.message("nonlatin", [
          `${result.nonLatinTokens.length} source token(s) use letters outside the Latin alphabet ` +
            `(${listTokens(result.nonLatinTokens)}): the model was trained on ${this.info.direction.source_name} ` +
            "captions only and reads " +
            "them as <unk>, so it cannot translate them.",
        ]);
      }
      if (others.length) {
        this.message("unknown", [
          `${others.length} source token(s) are not in the model's ${this.info.direction.source_name} ` +
            "vocabulary and became <unk> " +
            `(${listTokens(others)}); they are marked below.`,
        ]);
      }
      if (!result.endedWithEos) {
        this.message("limit", [
          `The output stopped at the length limit (source length + ${this.info.decoding.max_extra_len}, ` +
            `at most ${result.maxLen} tokens) without <eos>.`,
        ]);
      }
      const source = h(
        "div",
        { class: "tr-source-tokens", role: "group", "aria-label": "source tokens" },
        result.sourceTokens.map((token, i) => {
          const unknown = result.sourceIds[i] === this.info.config.unk_id;
          return h("span", {
            class: `tr-token tr-src${unknown ? " tr-unk" : ""}`,
            title: unknown ? `${token} is not in the vocabulary: the model reads <unk>` : `id ${result.sourceIds[i]}`,
            "data-id": result.sourceIds[i],
            text: token,
          });
        })
      );
      this.tokenButtons = result.attentionRowTokens.map((token, i) =>
        h("button", {
          type: "button",
          class: "tr-token tr-out",
          "aria-pressed": i === this.selected ? "true" : "false",
          "data-index": i,
          text: token,
          onclick: () => this.select(i),
          onkeydown: (event) => this.keySelect(event, i),
        })
      );
      const output = h(
        "div",
        { class: "tr-output-tokens", role: "group", "aria-label": "output tokens" },
        this.tokenButtons
      );
      this.crossToken = h("div", { class: "tr-figure tr-cross-token" });
      this.crossHeads = this.compact ? null : h("div", { class: "tr-figure tr-cross-heads" });
      this.encoderFigure = h("div", { class: "tr-figure tr-encoder" });
      const children = [
        h("div", { class: "tr-heading", text: "Source tokens (what the model reads)" }),
        source,
        h("div", { class: "tr-heading", text: this.info.direction.target_name }),
        h("p", { class: "tr-output-text", lang: this.info.direction.target, text: result.text || "(empty output)" }),
        h("div", { class: "tr-heading", text: "Output tokens: pick one to see where it attends" }),
        output,
        this.crossToken,
      ];
      if (this.crossHeads) children.push(this.crossHeads);
      children.push(this.encoderFigure);
      this.resultBox.replaceChildren(...children);
      this.resultBox.hidden = false;
      this.buildEncoderControls();
      if (this.crossHeads) this.buildCrossHeadControls();
      this.drawCross();
      this.drawEncoder();
      this.showTimings(result);
    }

    keySelect(event, i) {
      const n = this.tokenButtons.length;
      const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: n - 1 }[event.key];
      if (next === undefined) return;
      event.preventDefault();
      const j = Math.max(0, Math.min(n - 1, next));
      this.select(j);
      this.tokenButtons[j].focus();
    }

    select(i) {
      this.selected = i;
      this.tokenButtons.forEach((b, j) => b.setAttribute("aria-pressed", j === i ? "true" : "false"));
      this.drawCross();
    }

    /** The width the panels of a figure may fill: the app's width less its padding and the colour bar. */
    panelsWidth() {
      return Math.max(240, (this.root.clientWidth || 700) - 40 - 80);
    }

    /** Width for one of several panels: two side by side when their cells stay readable, else one per row. */
    panelWidth(cols) {
      const half = Math.floor(this.panelsWidth() / 2) - 8;
      return half >= 130 + cols * 9 ? half : this.panelsWidth();
    }

    drawCross() {
      const r = this.result;
      const [layers, , heads, t, n] = r.attention.cross.dims;
      const i = this.selected;
      // rows = (layer, head), columns = source tokens: row i of every cross-attention map
      const values = new Float32Array(layers * heads * n);
      const labels = [];
      for (let l = 0; l < layers; l++) {
        for (let hd = 0; hd < heads; hd++) {
          const from = ((l * heads + hd) * t + i) * n;
          values.set(r.attention.cross.data.subarray(from, from + n), (l * heads + hd) * n);
          labels.push(`layer ${l}, head ${hd}`);
        }
      }
      const token = r.attentionRowTokens[i];
      const caption =
        `Cross-attention while predicting \u201c${token}\u201d (output token ${i}): ` +
        "every decoder layer and head over the source";
      figure(this.crossToken, caption, [
        {
          values,
          rows: layers * heads,
          cols: n,
          rowLabels: labels,
          colLabels: r.sourceTokens,
          xlabel: "source token (keys and values, from the encoder)",
          ylabel: "decoder layer, head",
          maxWidth: this.panelsWidth(),
          name: "cross-token",
        },
      ], [], this.compact);
      if (this.crossHeads) this.drawCrossHeads();
    }

    buildCrossHeadControls() {
      const layers = this.result.attention.cross.dims[0];
      this.crossLayer = h(
        "select",
        { class: "tr-cross-layer", "aria-label": "decoder layer" },
        range(layers).map((l) => h("option", { value: l, text: `decoder layer ${l}`, selected: l === layers - 1 }))
      );
      this.crossLayer.addEventListener("change", () => this.drawCrossHeads());
    }

    drawCrossHeads() {
      const r = this.result;
      const [, , heads, t, n] = r.attention.cross.dims;
      const l = Number(this.crossLayer.value);
      const panels = range(heads).map((hd) => ({
        values: r.attention.cross.data,
        offset: (l * heads + hd) * t * n,
        rows: t,
        cols: n,
        rowLabels: r.attentionRowTokens,
        colLabels: r.sourceTokens,
        title: `head ${hd}`,
        xlabel: "source token",
        ylabel: hd === 0 ? "target token being predicted" : null,
        highlightRow: this.selected,
        maxWidth: this.panelWidth(n),
        name: `cross-l${l}-h${hd}`,
      }));
      figure(this.crossHeads, "Cross-attention of every output token, one map per head", panels, [this.crossLayer]);
    }

    buildEncoderControls() {
      const [layers, , heads] = this.result.attention.encoder.dims;
      this.encLayer = h(
        "select",
        { class: "tr-enc-layer", "aria-label": "encoder layer" },
        range(layers).map((l) => h("option", { value: l, text: `encoder layer ${l}` }))
      );
      this.encHead = h("select", { class: "tr-enc-head", "aria-label": "encoder head" }, [
        h("option", { value: "all", text: "all heads", selected: !this.compact }),
        ...range(heads).map((hd) => h("option", { value: hd, text: `head ${hd}`, selected: this.compact && hd === 0 })),
      ]);
      this.encLayer.addEventListener("change", () => this.drawEncoder());
      this.encHead.addEventListener("change", () => this.drawEncoder());
    }

    drawEncoder() {
      const r = this.result;
      const [, , heads, n] = r.attention.encoder.dims;
      const l = Number(this.encLayer.value);
      const which = this.encHead.value === "all" ? range(heads) : [Number(this.encHead.value)];
      const panels = which.map((hd) => ({
        values: r.attention.encoder.data,
        offset: (l * heads + hd) * n * n,
        rows: n,
        cols: n,
        rowLabels: r.sourceTokens,
        colLabels: r.sourceTokens,
        title: `head ${hd}`,
        xlabel: "key token",
        ylabel: hd === which[0] ? "query token" : null,
        maxWidth: which.length > 1 ? this.panelWidth(n) : this.panelsWidth(),
        name: `encoder-l${l}-h${hd}`,
      }));
      const controls = [this.encLayer, this.encHead];
      figure(this.encoderFigure, "Encoder self-attention over the source", panels, controls, this.compact);
    }

    showTimings(result) {
      const t = result.timings;
      const parts = [
        `This sentence: ${formatMs(t.totalMs)} (encoder ${formatMs(t.encoderMs)}, ` +
          `${t.decoderCalls} decoder call${t.decoderCalls === 1 ? "" : "s"} ${formatMs(t.searchMs)}, ` +
          `attention maps ${formatMs(t.attentionMs)}).`,
        `Model and runtime loaded in ${formatMs(t.modelLoadMs)}; first translation ready ` +
          `${formatMs(t.firstTranslationMs)} after loading started.`,
        "Measured in this browser, one WASM thread.",
      ];
      this.timings.replaceChildren(h("small", { text: parts.join(" ") }));
    }
  }

  function range(n) {
    return Array.from({ length: n }, (_, i) => i);
  }

  function listTokens(items) {
    const shown = items.slice(0, 8).map((u) => `\u201c${u.token}\u201d`);
    return shown.join(", ") + (items.length > 8 ? `, and ${items.length - 8} more` : "");
  }

  /** Fill a figure container: caption, controls, one canvas per panel, a shared colour bar and a readout line. */
  function figure(container, caption, panels, controls, compact) {
    const readout = h("p", { class: "tr-readout", "aria-live": "off", text: "\u00a0" });
    const canvases = panels.map((panel) => {
      if (compact) panel.maxCell = 14;
      const canvas = h("canvas", { class: "tr-heatmap", "data-name": panel.name });
      drawHeatmap(canvas, panel);
      attachReadout(canvas, readout);
      return canvas;
    });
    const tallest = Math.max(...canvases.map((c) => c.heatmap.cell * c.heatmap.spec.rows));
    const bar = h("canvas", { class: "tr-colorbar" });
    drawColorbar(bar, Math.min(tallest + 20, 320));
    const focused = (controls || []).find((control) => control === document.activeElement);
    container.replaceChildren(
      h("div", { class: "tr-figure-caption" }, [h("span", { text: caption }), ...(controls || [])]),
      h("div", { class: "tr-figure-body" }, [h("div", { class: "tr-panels" }, canvases), bar]),
      readout
    );
    if (focused) focused.focus(); // moving a control in the page drops its focus: give it back (keyboard use)
  }

  /** The model's vocabularies in words: one shared subword vocabulary, or one per language. */
  function vocabularies(info) {
    const c = info.config;
    const src = info.src_tokenizer || {};
    const tgt = info.tgt_tokenizer || {};
    const unit = src.type === "subword" ? "subword tokens" : "words";
    if (src.type === tgt.type && JSON.stringify(src) === JSON.stringify(tgt)) {
      return `one vocabulary of ${numberFormat.format(c.src_vocab_size)} ${unit} shared by both languages`;
    }
    return (
      `vocabularies of ${numberFormat.format(c.src_vocab_size)} ${info.direction.source_name} and ` +
      `${numberFormat.format(c.tgt_vocab_size)} ${info.direction.target_name} ${unit}`
    );
  }

  /** The model card from model.json: every number here comes from that file. */
  function renderCard(info) {
    const card = info.card;
    const c = info.config;
    const onnx = card.onnx_bytes || {};
    const onnxTotal = (onnx.encoder || 0) + (onnx.decoder || 0);
    const rows = [];
    const row = (name, value) => rows.push(h("tr", {}, [h("th", { scope: "row", text: name }), h("td", {}, value)]));
    row("model", `${card.name} \u2014 ${card.task}`);
    row("data", card.data);
    row(
      "size",
      `${numberFormat.format(card.parameters)} parameters (d_model ${c.d_model}, ${c.num_heads} heads, ` +
        `${c.num_encoder_layers} encoder + ${c.num_decoder_layers} decoder layers, ${vocabularies(info)}, ` +
        `sources up to ${c.max_len} tokens)`
    );
    if (onnxTotal) {
      row(
        "files",
        `ONNX, float32: encoder ${formatBytes(onnx.encoder)}, decoder ${formatBytes(onnx.decoder)}; ` +
          `${(onnxTotal / 1e6).toFixed(1)} MB in all` +
          (card.checkpoint_bytes ? ` (the PyTorch checkpoint: ${formatBytes(card.checkpoint_bytes)})` : "")
      );
    }
    const test = card.test || {};
    const score = (name, label) => {
      const s = test[name];
      if (!s) return;
      row(
        `test BLEU, ${label}`,
        h("span", {}, [
          `${s.bleu.toFixed(2)} on ` +
            (s.sentences !== undefined ? `${numberFormat.format(s.sentences)} sentences of ` : "") +
            "Multi30k test_2016_flickr" +
            (s.chrf !== undefined ? ` (chrF ${s.chrf.toFixed(2)})` : "") +
            "; sacreBLEU signature ",
          h("code", { class: "tr-signature", text: s.bleu_signature }),
        ])
      );
    };
    score("greedy", "greedy search");
    score("beam4", `beam search (beam ${info.decoding.beam_size}, \u03b1 ${info.decoding.alpha})`);
    if (card.training_command) row("trained with", h("code", { class: "tr-command", text: card.training_command }));
    if (card.steps) row("training steps", numberFormat.format(card.steps));
    if (card.packaging_command) row("packaged with", h("code", { class: "tr-command", text: card.packaging_command }));
    if (card.history) row("history", card.history);
    if (card.limitations) row("limitations", card.limitations);
    const outside = card.outside_the_data;
    if (outside && outside.examples && outside.examples.length) {
      row(
        "outside its data",
        h("div", {}, [
          `What this model gives (beam ${outside.beam_size}, \u03b1 ${outside.alpha}) for sentences unlike its captions:`,
          h(
            "ul",
            { class: "tr-outside" },
            outside.examples.map((e) =>
              h("li", { text: `\u201c${e.source}\u201d \u2192 \u201c${e.translation}\u201d` })
            )
          ),
        ])
      );
    }
    if (card.terms) row("terms", card.terms);
    return h("table", { class: "tr-card-body tr-card-table" }, [h("tbody", {}, rows)]);
  }

  function init() {
    const apps = Array.from(document.querySelectorAll(APP_SELECTOR)).map((root) => new TranslatorApp(root));
    const cards = Array.from(document.querySelectorAll(CARD_SELECTOR));
    if (cards.length) {
      loadManifest()
        .then((manifest) => Promise.all(manifest.directions.map((d) => loadModelInfo(d.id))))
        .then((infos) => cards.forEach((card) => card.replaceChildren(...infos.flatMap((info) => [
          h("p", { class: "tr-card-direction", text: `${info.direction.source_name} \u2192 ${info.direction.target_name}` }),
          renderCard(info),
        ]))))
        .catch((error) => cards.forEach((card) => (card.textContent = `The model card could not load: ${error.message}.`)));
    }
    api.apps.push(...apps);
  }

  const api = {
    translate,
    translateIds,
    load: (direction) =>
      loadRuntime(direction).then((rt) => ({
        direction: rt.direction,
        loadMs: rt.loadMs,
        config: rt.config,
        decoding: rt.info.decoding,
      })),
    modelInfo: loadModelInfo,
    manifest: loadManifest,
    /** Turn an element added after the page loaded into an app (class translator-app or translator-panel). */
    mount: (element) => {
      const app = new TranslatorApp(element);
      api.apps.push(app);
      return app;
    },
    // the pure pieces, for tests
    sourceIds,
    maxOutputLength,
    lengthPenalty,
    greedySearch,
    beamSearch,
    topCandidates,
    viridisIndex,
    viridis: VIRIDIS,
    apps: [],
  };
  globalThis.CompanionTranslator = api;

  if (document.querySelector(APP_SELECTOR + ", " + CARD_SELECTOR) || document.readyState === "loading") {
    if (document.readyState === "loading") {
      document.addEventListener("DOMContentLoaded", () => {
        if (document.querySelector(APP_SELECTOR + ", " + CARD_SELECTOR)) init();
      });
    } else init();
  }
})();
