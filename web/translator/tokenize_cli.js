#!/usr/bin/env node
/*
 * Runs tokenizer.js on a batch of requests, for the tests (tests/integration/test_web_tokenizer.py), in one process.
 *
 *   node web/translator/tokenize_cli.js < requests.json > results.json
 *
 * stdin: one request object or a list of them; stdout: one result object per request (a list for a list).
 *   {"rules": R, "texts": [...]}                  -> {"tokens": [[token, ...], ...]}
 *   ... plus "tokenizer": T                        -> also {"ids": [[id, ...], ...]}            (encode)
 *   {"tokenizer": T, "decode": [[id, ...], ...]}   -> {"decoded": [text, ...]}
 *   {"tokenizer": T, "detokenize": [[token, ...]]} -> {"detokenized": [text, ...]}
 *   {"regexes": [{"source", "flags", "method", "text"}, ...]}
 *        -> {"spans": [[[start, end], ...], ...]}: where RegExp(source, flags) matches, used as Python's
 *           re.search / re.match / re.finditer (method), in code points like Python's offsets
 * R is spacy_tokenizer_rules(language), T is WordTokenizer.to_dict() or SubwordTokenizer.to_dict() (a subword T:
 * "tokens" are its subwords, R is not needed, and with "keep_unknown": true a character outside the vocabulary is
 * itself instead of "<unk>", as the page shows it). An item that throws gives
 * {"error": "<ErrorName>: <message>"} in its place. With "classic_script": true, a request runs tokenizer.js
 * loaded as a page loads it (a plain script in a fresh global scope, read from globalThis.CompanionTokenizer).
 */
"use strict";

const fs = require("fs");
const path = require("path");
const vm = require("vm");

const SCRIPT = path.join(__dirname, "tokenizer.js");
const asModule = require(SCRIPT);

function asClassicScript() {
  const page = vm.createContext({}); // no `module`: the script must set globalThis.CompanionTokenizer
  vm.runInContext(fs.readFileSync(SCRIPT, "utf8"), page, { filename: SCRIPT });
  if (!page.CompanionTokenizer) throw new Error("tokenizer.js did not set globalThis.CompanionTokenizer");
  return page.CompanionTokenizer;
}

function each(items, fn) {
  return items.map((item) => {
    try {
      return fn(item);
    } catch (error) {
      return { error: `${error.name}: ${error.message}` };
    }
  });
}

function codePoints(text, end) {
  return Array.from(text.slice(0, end)).length;
}

function regexSpans({ source, flags, method, text }) {
  const span = (match) => [codePoints(text, match.index), codePoints(text, match.index + match[0].length)];
  if (method === "finditer") return Array.from(text.matchAll(new RegExp(source, flags + "g")), span);
  if (method !== "search" && method !== "match") throw new Error(`unknown method ${JSON.stringify(method)}`);
  const match = new RegExp(source, flags + (method === "match" ? "y" : "")).exec(text);
  return match ? [span(match)] : [];
}

function run(request) {
  const { tokenizeWith, encode, decode, detokenize } = request.classic_script ? asClassicScript() : asModule;
  const result = {};
  if (request.texts) {
    const options = { keepUnknown: Boolean(request.keep_unknown) };
    result.tokens = each(request.texts, (text) => tokenizeWith(text, request.tokenizer, request.rules, options));
    if (request.tokenizer) result.ids = each(request.texts, (text) => encode(text, request.tokenizer, request.rules));
  }
  if (request.decode) result.decoded = each(request.decode, (ids) => decode(ids, request.tokenizer));
  if (request.detokenize) result.detokenized = each(request.detokenize, (tokens) => detokenize(tokens, request.tokenizer));
  if (request.regexes) result.spans = each(request.regexes, regexSpans);
  return result;
}

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const requests = JSON.parse(input);
  const results = Array.isArray(requests) ? requests.map(run) : run(requests);
  process.stdout.write(JSON.stringify(results));
});
