/*
 * The book's two tokenizers in the browser (companion/data/tokenizers.py), giving exactly the ids that Python gives:
 * the word tokenizer (spaCy's rule-based tokenizer plus the WordTokenizer vocabulary) and the subword tokenizer
 * (SubwordTokenizer: byte-pair encoding, see the section "the subword tokenizer" below).
 *
 *   tokenize(text, rules)                  -> spaCy's token strings (whitespace tokens dropped, like
 *                                             WordTokenizer.tokenize)
 *   tokenizeSubwords(text, tokenizerDict)  -> subword strings (SubwordTokenizer.tokenize)
 *   tokenizeWith(text, tokenizerDict, rules) -> whichever of the two the tokenizer uses
 *   encode(text, tokenizerDict, rules)     -> ids, unknown tokens -> <unk>=1, no <bos>/<eos> (either tokenizer)
 *   decode(ids, tokenizerDict)             -> text (stops at <eos>=3, skips <pad>=0/<bos>=2; either tokenizer)
 *   tokenStrings(tokenizerDict)            -> the token string of every id
 *   detokenize(tokens, tokenizerDict)      -> text of word tokens (learned glue and the straight-quote rule)
 *
 * `rules` is companion.data.spacy_export.spacy_tokenizer_rules(language) (JSON), `tokenizerDict` is
 * WordTokenizer.to_dict() or SubwordTokenizer.to_dict(). The word tokenizer's algorithm follows spaCy's Cython tokenizer (spacy/tokenizer.pyx, v3.8):
 *   1. split the text into runs of whitespace and non-whitespace (Python's str.isspace); a single " " after a
 *      token is that token's trailing space, any other whitespace becomes a token of its own;
 *   2. each run: a special case as a whole, else strip prefixes and suffixes (stopping early at a
 *      special case or a token_match), then the rest is a special case, a token_match/url_match, or is
 *      split at its infixes;
 *   3. special cases whose text the first pass split across several tokens are found again with a phrase
 *      matcher over the tokens and merged back (spaCy's _apply_special_cases).
 * Like spaCy, it remembers the tokens of up to 10,000 runs (step 2 is a pure function of the run, so this only
 * saves time). spaCy's cache has one quirk left out here: loading the rules leaves in it the runs of the last
 * special case, sorted by text, tokenized without special cases. For spaCy's German and English rules that
 * is "’’", itself a special case, which step 2 looks up before the cache, so it never shows.
 *
 * A classic script with no dependencies: in a page it sets globalThis.CompanionTokenizer, under Node it is
 * module.exports.
 */
(function (root, factory) {
  "use strict";
  const api = factory();
  if (typeof module === "object" && module && module.exports) {
    module.exports = api;
  } else {
    root.CompanionTokenizer = api;
  }
})(typeof globalThis !== "undefined" ? globalThis : this, function () {
  "use strict";

  const PAD_ID = 0;
  const UNK_ID = 1;
  const BOS_ID = 2;
  const EOS_ID = 3;
  const SPECIAL_TOKENS = ["<pad>", "<unk>", "<bos>", "<eos>"];
  const RULES_FORMAT = "spacy-tokenizer-rules/1";
  const STRAIGHT_QUOTE = '"';
  const LONE_SURROGATE = /\p{Cs}/u; // with the u flag, only unpaired surrogates are code points of their own
  const MAX_CACHED_RUNS = 10000; // spaCy's Tokenizer.max_cache_size

  // -- compiled rules (once per rules object) --------------------------------------------------------------

  const compiledRules = new WeakMap();

  function compile(rules) {
    if (rules === null || typeof rules !== "object" || rules.format !== RULES_FORMAT) {
      throw new TypeError(
        `rules must be the object from spacy_tokenizer_rules() (format "${RULES_FORMAT}"), got ` +
          (rules && typeof rules === "object" ? `format ${JSON.stringify(rules.format)}` : typeof rules)
      );
    }
    let compiled = compiledRules.get(rules);
    if (compiled) return compiled;
    const regex = (key, extraFlags) => {
      const spec = rules[key];
      return spec ? new RegExp(spec.source, spec.flags + extraFlags) : null;
    };
    // search -> exec as is; finditer -> "g"; match (anchored at the start) -> sticky "y" from lastIndex 0
    const prefix = regex("prefix", "");
    const suffix = regex("suffix", "");
    const infix = regex("infix", "g");
    const tokenMatch = regex("token_match", "y");
    const urlMatch = regex("url_match", "y");
    const space = rules.whitespace.source; // one character class, "[...]"
    compiled = {
      runs: new RegExp(`${space}+|[^${space.slice(1)}+`, "gu"), // whitespace runs | runs of anything else
      allSpace: new RegExp(`^${space}+$`, "u"), // Token.is_space
      specials: new Map(Object.entries(rules.special_cases)),
      findPrefix: (text) => matchLength(prefix, text),
      findSuffix: (text) => matchLength(suffix, text),
      findInfixes: (text) => (infix ? Array.from(text.matchAll(infix)) : []),
      isTokenMatch: (text) => anchoredMatch(tokenMatch, text),
      isUrlMatch: (text) => anchoredMatch(urlMatch, text),
      matcher: null,
      cache: new Map(), // run -> its token texts (with special cases)
    };
    compiled.matcher = buildSpecialMatcher(compiled, rules.faster_heuristics);
    compiledRules.set(rules, compiled);
    return compiled;
  }

  function matchLength(regex, text) {
    if (!regex) return 0;
    const match = regex.exec(text);
    return match ? match[0].length : 0;
  }

  function anchoredMatch(regex, text) {
    if (!regex) return false;
    regex.lastIndex = 0;
    return regex.exec(text) !== null; // an empty match counts, as a Python match object is truthy
  }

  // -- step 1: whitespace ------------------------------------------------------------------------------------

  /** Tokens {text, spacy} (spacy: followed by one " ") of `text`, with or without the special cases. */
  function tokenizeAffixes(text, rules, withSpecials) {
    const tokens = [];
    const runs = text.match(rules.runs) || [];
    runs.forEach((run, i) => {
      // spaCy gives a single " " that follows a token to that token; a leading whitespace run (i == 0) and
      // any other whitespace character stay in the text as whitespace tokens
      if (i > 0 && run[0] === " ") {
        tokens[tokens.length - 1].spacy = true;
        run = run.slice(1);
      }
      if (run) tokenizeRun(run, rules, withSpecials, tokens);
    });
    return tokens;
  }

  // -- step 2: one run without whitespace (Tokenizer._tokenize) ---------------------------------------------

  function tokenizeRun(run, rules, withSpecials, out) {
    const cached = withSpecials && rules.cache.get(run);
    if (cached) {
      for (const text of cached) out.push({ text, spacy: false });
      return;
    }
    const first = out.length;
    tokenizeRunUncached(run, rules, withSpecials, out);
    if (withSpecials && rules.cache.size < MAX_CACHED_RUNS) {
      rules.cache.set(run, out.slice(first).map((token) => token.text));
    }
  }

  function tokenizeRunUncached(run, rules, withSpecials, out) {
    if (withSpecials && rules.specials.has(run)) {
      pushSpecial(rules.specials.get(run), out);
      return;
    }
    const { prefixes, core, suffixes } = splitAffixes(run, rules, withSpecials);
    for (const prefix of prefixes) out.push({ text: prefix, spacy: false });
    if (core) attachCore(core, rules, withSpecials, out);
    for (let i = suffixes.length - 1; i >= 0; i--) out.push({ text: suffixes[i], spacy: false });
  }

  function pushSpecial(orths, out) {
    for (const orth of orths) out.push({ text: orth, spacy: false });
  }

  /** Tokenizer._split_affixes: strip prefixes and suffixes, one of each per round, until none is left. Lengths
   * are UTF-16 code units here and code points in Python; both measure the same whole characters. */
  function splitAffixes(text, rules, withSpecials) {
    const prefixes = [];
    const suffixes = [];
    const isSpecial = (s) => withSpecials && rules.specials.has(s);
    let lastSize = 0;
    while (text && text.length !== lastSize) {
      if (rules.isTokenMatch(text) || isSpecial(text)) break;
      lastSize = text.length;
      const preLen = rules.findPrefix(text);
      let prefix = "";
      let minusPre = "";
      if (preLen) {
        prefix = text.slice(0, preLen);
        minusPre = text.slice(preLen);
        if (minusPre && isSpecial(minusPre)) {
          prefixes.push(prefix);
          text = minusPre;
          break;
        }
      }
      // the suffix is searched for after the prefix, but cut from the full text (spaCy does the same)
      const sufLen = rules.findSuffix(text.slice(preLen));
      let suffix = "";
      let minusSuf = "";
      if (sufLen) {
        suffix = text.slice(text.length - sufLen);
        minusSuf = text.slice(0, text.length - sufLen);
        if (minusSuf && isSpecial(minusSuf)) {
          suffixes.push(suffix);
          text = minusSuf;
          break;
        }
      }
      if (preLen && sufLen && preLen + sufLen <= text.length) {
        prefixes.push(prefix);
        suffixes.push(suffix);
        text = text.slice(preLen, text.length - sufLen);
      } else if (preLen) {
        prefixes.push(prefix);
        text = minusPre;
      } else if (sufLen) {
        suffixes.push(suffix);
        text = minusSuf;
      }
    }
    return { prefixes, core: text, suffixes };
  }

  /** Tokenizer._attach_tokens for what is left between the prefixes and suffixes. */
  function attachCore(core, rules, withSpecials, out) {
    if (withSpecials && rules.specials.has(core)) {
      pushSpecial(rules.specials.get(core), out);
      return;
    }
    if (rules.isTokenMatch(core) || rules.isUrlMatch(core)) {
      out.push({ text: core, spacy: false });
      return;
    }
    const infixes = rules.findInfixes(core);
    if (infixes.length === 0) {
      out.push({ text: core, spacy: false });
      return;
    }
    let start = 0;
    for (const match of infixes) {
      const infixStart = match.index;
      const infixEnd = infixStart + match[0].length;
      if (infixStart === 0) continue; // spaCy skips an infix at the very start (start_before_infixes)
      if (infixStart !== start) out.push({ text: core.slice(start, infixStart), spacy: false });
      if (infixStart !== infixEnd) out.push({ text: core.slice(infixStart, infixEnd), spacy: false });
      start = infixEnd;
    }
    if (start < core.length) out.push({ text: core.slice(start), spacy: false });
  }

  // -- step 3: special cases across tokens (Tokenizer._apply_special_cases) ---------------------------------

  /** spaCy's PhraseMatcher for special cases: a trie over token texts. A special case is in it when it has a
   * prefix, suffix, infix or space (with faster_heuristics; all of them otherwise), keyed by its tokens as the
   * tokenizer splits it without special cases. */
  function buildSpecialMatcher(rules, fasterHeuristics) {
    const root = new Map();
    for (const chunk of rules.specials.keys()) {
      const splittable =
        !fasterHeuristics ||
        rules.findPrefix(chunk) ||
        rules.findInfixes(chunk).length ||
        rules.findSuffix(chunk) ||
        chunk.includes(" ");
      if (!splittable) continue;
      let node = root;
      for (const token of tokenizeAffixes(chunk, rules, false)) {
        if (!node.has(token.text)) node.set(token.text, new Map());
        node = node.get(token.text);
      }
      node.isEnd = true;
    }
    return root;
  }

  function applySpecialCases(tokens, rules) {
    // every [start, end) whose token texts form a pattern (PhraseMatcher.find_matches)
    const matches = [];
    for (let start = 0; start < tokens.length; start++) {
      let node = rules.matcher;
      for (let end = start; end < tokens.length; end++) {
        node = node.get(tokens[end].text);
        if (!node) break;
        if (node.isEnd) matches.push({ start, end: end + 1 });
      }
    }
    if (matches.length === 0) return tokens;
    // _filter_special_spans: longest first, then leftmost; a span is kept unless its first or last token
    // was covered by an earlier span, and every span (kept or not) covers its tokens
    matches.sort((a, b) => b.end - b.start - (a.end - a.start) || a.start - b.start);
    const covered = new Set();
    const kept = new Map();
    for (const span of matches) {
      if (!covered.has(span.start) && !covered.has(span.end - 1)) kept.set(span.start, span);
      for (let i = span.start; i < span.end; i++) covered.add(i);
    }
    // _retokenize_special_spans: a kept span whose text (with its inner spaces) is a special case becomes
    // that special case's tokens
    const result = [];
    for (let i = 0; i < tokens.length; ) {
      const span = kept.get(i);
      const orths = span && rules.specials.get(spanText(tokens, span.start, span.end));
      if (orths) {
        pushSpecial(orths, result);
        result[result.length - 1].spacy = tokens[span.end - 1].spacy;
        i = span.end;
      } else {
        result.push(tokens[i]);
        i += 1;
      }
    }
    return result;
  }

  function spanText(tokens, start, end) {
    let text = "";
    for (let i = start; i < end; i++) text += tokens[i].text + (tokens[i].spacy && i < end - 1 ? " " : "");
    return text;
  }

  // -- the interface -----------------------------------------------------------------------------------------

  function checkText(text) {
    if (typeof text !== "string") throw new TypeError(`text must be a string, got ${typeName(text)}`);
    const lone = LONE_SURROGATE.exec(text);
    if (lone) {
      throw new RangeError(`text is not valid Unicode text: a lone surrogate at position ${lone.index}`);
    }
    return text;
  }

  /** spaCy's tokens of `text` under `rules`, whitespace tokens dropped (WordTokenizer.tokenize). */
  function tokenize(text, rules) {
    checkText(text);
    const compiled = compile(rules);
    const tokens = applySpecialCases(tokenizeAffixes(text, compiled, true), compiled);
    return tokens.map((token) => token.text).filter((token) => !compiled.allSpace.test(token));
  }

  const compiledVocabularies = new WeakMap();

  function vocabulary(tokenizerDict) {
    let vocab = compiledVocabularies.get(tokenizerDict);
    if (vocab) return vocab;
    if (tokenizerDict === null || typeof tokenizerDict !== "object" || tokenizerDict.type !== "word") {
      throw new TypeError("tokenizerDict must be WordTokenizer.to_dict() (type 'word')");
    }
    const itos = tokenizerDict.itos;
    if (!Array.isArray(itos) || SPECIAL_TOKENS.some((token, i) => itos[i] !== token)) {
      throw new TypeError(`tokenizerDict.itos must be a list of tokens starting with ${SPECIAL_TOKENS.join(" ")}`);
    }
    vocab = {
      itos,
      stoi: new Map(itos.map((token, i) => [token, i])),
      glueLeft: new Set(tokenizerDict.glue_left || []),
      glueRight: new Set(tokenizerDict.glue_right || []),
    };
    compiledVocabularies.set(tokenizerDict, vocab);
    return vocab;
  }

  /** Token ids of `text` (WordTokenizer.encode): no <bos>/<eos>, unknown tokens are <unk>. */
  function encodeWords(text, tokenizerDict, rules) {
    const { stoi } = vocabulary(tokenizerDict);
    if (rules && tokenizerDict.language !== rules.language) {
      throw new Error(`rules are for "${rules.language}" but the tokenizer is for "${tokenizerDict.language}"`);
    }
    return tokenize(text, rules).map((token) => (stoi.has(token) ? stoi.get(token) : UNK_ID));
  }

  /** The token strings of `ids` up to the first <eos>, without <pad> and <bos> (Tokenizer._content_ids). */
  function contentTokens(ids, itos) {
    if (!Array.isArray(ids) && !ArrayBuffer.isView(ids)) {
      throw new TypeError(`ids must be an array of integers, got ${typeName(ids)}`);
    }
    const tokens = [];
    for (let id of ids) {
      if (typeof id === "bigint") id = Number(id); // e.g. from an int64 tensor
      if (!Number.isInteger(id)) throw new TypeError(`ids must be integers, got ${String(id)} (${typeName(id)})`);
      if (id < 0 || id >= itos.length) {
        throw new RangeError(`ids holds ${id}, outside the vocabulary [0, ${itos.length})`);
      }
      if (id === EOS_ID) break;
      if (id !== PAD_ID && id !== BOS_ID) tokens.push(itos[id]);
    }
    return tokens;
  }

  /** Text of `ids` (WordTokenizer.decode): up to the first <eos>, without <pad> and <bos>. */
  function decodeWords(ids, tokenizerDict) {
    return detokenize(contentTokens(ids, vocabulary(tokenizerDict).itos), tokenizerDict);
  }

  /** Join tokens with spaces except where the learned glue says they touch (WordTokenizer.detokenize). A
   * straight double quote alternates: the first of a pair sticks to the token after it, the second to the
   * token before it. */
  function detokenize(tokens, tokenizerDict) {
    const { glueLeft, glueRight } = vocabulary(tokenizerDict);
    if (!Array.isArray(tokens)) throw new TypeError(`tokens must be an array of strings, got ${typeName(tokens)}`);
    let text = "";
    let quoteOpen = false;
    let previousGluesRight = false;
    tokens.forEach((token, i) => {
      if (typeof token !== "string") throw new TypeError(`tokens[${i}] must be a string, got ${typeName(token)}`);
      let gluesLeft;
      let gluesRight;
      if (token === STRAIGHT_QUOTE) {
        quoteOpen = !quoteOpen;
        gluesLeft = !quoteOpen;
        gluesRight = quoteOpen;
      } else {
        gluesLeft = glueLeft.has(token);
        gluesRight = glueRight.has(token);
      }
      if (i > 0 && !(gluesLeft || previousGluesRight)) text += " ";
      text += token;
      previousGluesRight = gluesRight;
    });
    return text;
  }

  // -- the subword tokenizer (SubwordTokenizer: byte-pair encoding from Hugging Face `tokenizers`) ----------
  //
  // SubwordTokenizer.to_dict() holds the library's JSON (`tokenizer`), whose pipeline for the book's BPE is:
  //   0. the special tokens' texts (<pad> <unk> <bos> <eos>) found in the raw text are their ids as they are
  //      (the library's added vocabulary, not normalized); the text between them goes through steps 1-4 alone;
  //   1. normalizer: Unicode NFC, each run of White_Space -> one space, no leading or trailing White_Space;
  //   2. pre-tokenizer Metaspace (replacement "▁", prepend_scheme "always", split): spaces become "▁", a "▁" is
  //      put in front unless the text starts with one, and the text is cut before every "▁";
  //   3. pre-tokenizer Punctuation (isolated): every punctuation character (ASCII punctuation or a Unicode P*
  //      category) becomes a piece of its own;
  //   4. BPE on each piece: its characters (code points; one not in the vocabulary is <unk>, not fused), then the
  //      learned merges, the lowest-ranked adjacent pair first (a merge made from a merged token always ranks
  //      after the merge that made it, so merging every occurrence of the best pair left to right is the
  //      library's order).
  // Decoding (Metaspace decoder): the tokens' "▁" become spaces, and the first token's leading space is dropped.
  // Only this configuration is accepted: anything else is an error that names the setting, never a silent
  // difference from Python.

  const METASPACE = "\u2581";
  const WHITE_SPACE_RUN = /\p{White_Space}+/gu;
  const OUTER_WHITE_SPACE = /^\p{White_Space}+|\p{White_Space}+$/gu;
  const PUNCTUATION = /[\p{P}!-\/:-@\[-`{-~]/u; // Unicode P* and ASCII punctuation (Rust's is_ascii_punctuation)
  const SUBWORD_PIPELINE = {
    normalizer: '{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Replace","pattern":{"Regex":"\\\\s+"},"content":" "},{"type":"Strip","strip_left":true,"strip_right":true}]}',
    pre_tokenizer: '{"type":"Sequence","pretokenizers":[{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true},{"type":"Punctuation","behavior":"Isolated"}]}',
    decoder: '{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}',
  };
  const MAX_CACHED_PIECES = 10000;
  const SPECIAL_TEXT = new RegExp(SPECIAL_TOKENS.join("|"), "g"); // their texts hold no regex syntax
  const compiledSubwords = new WeakMap();

  function subwordModel(tokenizerDict) {
    let compiled = compiledSubwords.get(tokenizerDict);
    if (compiled) return compiled;
    if (tokenizerDict === null || typeof tokenizerDict !== "object" || tokenizerDict.type !== "subword") {
      throw new TypeError("tokenizerDict must be SubwordTokenizer.to_dict() (type 'subword')");
    }
    let spec;
    try {
      spec = JSON.parse(tokenizerDict.tokenizer);
    } catch (error) {
      throw new TypeError(`tokenizerDict.tokenizer must be the tokenizers library's JSON text (${error.message})`);
    }
    for (const [key, expected] of Object.entries(SUBWORD_PIPELINE)) {
      if (JSON.stringify(spec[key]) !== expected) {
        throw new TypeError(`tokenizerDict.tokenizer has a ${key} this page does not implement: ${JSON.stringify(spec[key])}`);
      }
    }
    const model = spec.model || {};
    const unsupported = [
      ["type", "BPE"], ["dropout", null], ["unk_token", "<unk>"], ["continuing_subword_prefix", null],
      ["end_of_word_suffix", null], ["fuse_unk", false], ["byte_fallback", false], ["ignore_merges", false],
    ].filter(([key, value]) => model[key] !== value);
    if (unsupported.length) {
      const [key, value] = unsupported[0];
      throw new TypeError(`tokenizerDict.tokenizer's model must have ${key} ${JSON.stringify(value)}, got ${JSON.stringify(model[key])}`);
    }
    const vocab = new Map(Object.entries(model.vocab));
    const itos = [];
    for (const [token, id] of vocab) itos[id] = token;
    if (SPECIAL_TOKENS.some((token, i) => itos[i] !== token) || itos.length !== vocab.size) {
      throw new TypeError(`tokenizerDict.tokenizer's vocabulary must hold ids 0..n-1, starting with ${SPECIAL_TOKENS.join(" ")}`);
    }
    const ranks = new Map();
    model.merges.forEach((pair, rank) => {
      const [left, right] = Array.isArray(pair) ? pair : pair.split(" ");
      ranks.set(left + " " + right, rank);
    });
    compiled = { vocab, itos, ranks, cache: new Map() };
    compiledSubwords.set(tokenizerDict, compiled);
    return compiled;
  }

  /** The pieces of one normalized text that BPE works on (steps 2 and 3). */
  function preTokenize(normalized) {
    let text = normalized.replaceAll(" ", METASPACE);
    if (!text.startsWith(METASPACE)) text = METASPACE + text;
    const pieces = [];
    for (const word of text.split(METASPACE).slice(1).map((rest) => METASPACE + rest)) {
      let current = "";
      for (const char of word) {
        if (PUNCTUATION.test(char)) {
          if (current) pieces.push(current);
          pieces.push(char);
          current = "";
        } else {
          current += char;
        }
      }
      if (current) pieces.push(current);
    }
    return pieces;
  }

  /** BPE of one piece (step 4): its symbols, a token string each, or {unknown: character} for a character
   * outside the vocabulary (<unk>, never merged). */
  function bytePairs(piece, compiled) {
    const cached = compiled.cache.get(piece);
    if (cached) return cached;
    let symbols = Array.from(piece, (char) => (compiled.vocab.has(char) ? char : { unknown: char }));
    const rankAt = (i) =>
      typeof symbols[i] === "string" && typeof symbols[i + 1] === "string"
        ? compiled.ranks.get(symbols[i] + " " + symbols[i + 1])
        : undefined;
    for (;;) {
      let best = Infinity;
      for (let i = 0; i + 1 < symbols.length; i++) {
        const rank = rankAt(i);
        if (rank !== undefined && rank < best) best = rank;
      }
      if (best === Infinity) break;
      const merged = [];
      for (let i = 0; i < symbols.length; i++) {
        if (i + 1 < symbols.length && rankAt(i) === best) {
          merged.push(symbols[i] + symbols[i + 1]);
          i++;
        } else {
          merged.push(symbols[i]);
        }
      }
      symbols = merged;
    }
    if (compiled.cache.size >= MAX_CACHED_PIECES) compiled.cache.clear();
    compiled.cache.set(piece, symbols);
    return symbols;
  }

  /** The subword strings of `text` (SubwordTokenizer.tokenize): "▁" marks a preceding space, a character outside
   * the vocabulary is "<unk>" (with `{keepUnknown: true}`: the character itself, for showing it; its id is still
   * <unk>'s, since the character is not in the vocabulary). */
  function tokenizeSubwords(text, tokenizerDict, { keepUnknown = false } = {}) {
    checkText(text);
    const compiled = subwordModel(tokenizerDict);
    const tokens = [];
    let start = 0;
    const addText = (segment) => {
      const normalized = segment.normalize("NFC").replace(WHITE_SPACE_RUN, " ").replace(OUTER_WHITE_SPACE, "");
      if (!normalized) return;
      for (const piece of preTokenize(normalized)) {
        for (const symbol of bytePairs(piece, compiled)) {
          tokens.push(typeof symbol === "string" ? symbol : keepUnknown ? symbol.unknown : SPECIAL_TOKENS[UNK_ID]);
        }
      }
    };
    for (const match of text.matchAll(SPECIAL_TEXT)) {
      addText(text.slice(start, match.index));
      tokens.push(match[0]);
      start = match.index + match[0].length;
    }
    addText(text.slice(start));
    return tokens;
  }

  function encodeSubwords(text, tokenizerDict) {
    const { vocab } = subwordModel(tokenizerDict);
    return tokenizeSubwords(text, tokenizerDict).map((token) => vocab.get(token));
  }

  function decodeSubwords(ids, tokenizerDict) {
    const tokens = contentTokens(ids, subwordModel(tokenizerDict).itos);
    return tokens.map((token, i) => {
      const text = token.replaceAll(METASPACE, " ");
      return i === 0 && text.startsWith(" ") ? text.slice(1) : text;
    }).join("");
  }

  // -- either tokenizer ------------------------------------------------------------------------------------

  function isSubword(tokenizerDict) {
    return tokenizerDict !== null && typeof tokenizerDict === "object" && tokenizerDict.type === "subword";
  }

  /** Token ids of `text` (Tokenizer.encode of the tokenizer `tokenizerDict` describes): no <bos>/<eos>, unknown
   * tokens are <unk>. `rules` (spaCy's) are for a word tokenizer; a subword tokenizer does not use them. */
  function encode(text, tokenizerDict, rules) {
    return isSubword(tokenizerDict) ? encodeSubwords(text, tokenizerDict) : encodeWords(text, tokenizerDict, rules);
  }

  /** Text of `ids` (Tokenizer.decode): up to the first <eos>, without <pad> and <bos>. */
  function decode(ids, tokenizerDict) {
    return isSubword(tokenizerDict) ? decodeSubwords(ids, tokenizerDict) : decodeWords(ids, tokenizerDict);
  }

  /** The token string of every id (``itos``), for either tokenizer. */
  function tokenStrings(tokenizerDict) {
    return isSubword(tokenizerDict) ? subwordModel(tokenizerDict).itos : vocabulary(tokenizerDict).itos;
  }

  /** The token strings of `text`: subwords for a subword tokenizer (`options` as tokenizeSubwords takes them),
   * else spaCy's tokens under `rules`. */
  function tokenizeWith(text, tokenizerDict, rules, options) {
    return isSubword(tokenizerDict) ? tokenizeSubwords(text, tokenizerDict, options) : tokenize(text, rules);
  }

  function typeName(value) {
    return value === null ? "null" : Array.isArray(value) ? "array" : typeof value;
  }

  return {
    tokenize,
    tokenizeSubwords,
    tokenizeWith,
    tokenStrings,
    encode,
    decode,
    detokenize,
    PAD_ID,
    UNK_ID,
    BOS_ID,
    EOS_ID,
    SPECIAL_TOKENS,
  };
});
