"""The in-page translator (book/translator.md, web/translator/) in headless Chromium against the Python package.

The page runs the book's shipped models (de->en and en->de, listed in manifest.json) with ONNX Runtime Web and
the decoder graph's key/value cache; these tests check it against `companion` itself:

* the page loads with no request off 127.0.0.1 and no JavaScript error, and its model card shows each direction's
  model.json facts;
* in each direction, on twelve test_2016_flickr sentences (the shortest, the longest and ten lengths in between)
  the page's source ids equal the Python tokenizer's, and its output ids and text equal `greedy_decode` /
  `beam_search` on the same source ids, for greedy search, beam 4 with alpha 0.6 and beam 8 with alpha 1.0;
* the direction switch gives the other direction's examples, labels and translations;
* the heatmaps render with one row and column per token, and the colour of every cell is matplotlib's viridis
  colour of the weight PyTorch computes for that cell (teacher-forced on the page's output);
* an empty box (empty as the tokenizer sees it), unknown words, a source past max_len and non-Latin letters each
  give their message and the Python result; a model file that fails to load gives a message, not a silent hang;
* overlapping actions: the latest translation wins (a result of the direction left, or of a translation overtaken
  by a picked test sentence, is never shown); heatmap controls keep the keyboard focus when their figure redraws;
* the time to the first translation and the per-sentence latencies are measured and reported
  (artifacts/translator_latency.json and the terminal), never asserted against a bound; the page's own
  first-translation figure leaves out the time the loaded model waited for the reader.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import platform
import time

import pytest
from _pages import guard_page

from companion.data.tokenizers import SubwordTokenizer
from companion.errors import DataUnavailableError
from companion.pretrained import SHIPPED_ALPHA, SHIPPED_BEAM_SIZE

ROOT = pathlib.Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
PAGE = "book/translator.html"
ASSETS = HTML / "_static" / "translator"
LATENCY_REPORT = ROOT / "artifacts" / "translator_latency.json"
DIRECTIONS = ("de-en", "en-de")  # the first is the page's default
N_SENTENCES = 12
# (beam size, alpha): greedy search, the paper's setting, and the widest beam the page offers with another alpha
SEARCHES = [(1, 0.0), (4, 0.6), (8, 1.0)]
# Words that are not in a German word vocabulary, and characters that are in no subword vocabulary of Multi30k
# (both checked against the Python tokenizer below: a subword vocabulary spells every Latin word with its pieces)
UNKNOWN_SENTENCE = "Ein Quastenflosser schwimmt neben dem Zwergplaneten Ceres."
UNKNOWN_CHARACTERS_SENTENCE = "Ein Hund spielt mit \u2603 und \u265e."
NON_LATIN_SENTENCE = "Ein Mann fährt mit dem Fahrrad nach 東京 und Москва."
TIMEOUT_MS = 120_000

pytestmark = pytest.mark.skipif(
    not (ASSETS / "manifest.json").is_file(), reason="the site was built without the translator (run `make site`)"
)


# -- the Python reference -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def references() -> dict:
    """Per direction, the model the page runs and its tokenizers, loaded by the package from the checkpoint the
    site was built from (model.json's card names it: the shipped model, or build_translator's --checkpoint)."""
    import torch

    import companion

    torch.set_num_threads(1)
    loaded = {}
    for direction in DIRECTIONS:
        card = json.loads((ASSETS / direction / "model.json").read_text(encoding="utf-8"))["card"]
        path = pathlib.Path(card["checkpoint_file"])
        path = path if path.is_absolute() else ROOT / path
        loaded[direction] = companion.load_pretrained(
            direction=direction, path=path if path.is_file() else None, download=False
        )
    return loaded


@pytest.fixture(scope="module")
def reference(references):
    """The default direction's (de->en) reference."""
    return references[DIRECTIONS[0]]


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((ASSETS / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def model_jsons() -> dict:
    return {d: json.loads((ASSETS / d / "model.json").read_text(encoding="utf-8")) for d in DIRECTIONS}


@pytest.fixture(scope="module")
def model_json(model_jsons) -> dict:
    return model_jsons[DIRECTIONS[0]]


def spread_sentences(reference, sources: list[str]) -> list[str]:
    """N_SENTENCES of ``sources`` spread over their range of token lengths, shortest and longest included."""
    lengths = [len(ids) for ids in reference.src_tokenizer.encode_batch(sources)]
    order = sorted(range(len(sources)), key=lambda i: (lengths[i], i))
    picks = [order[round(q * (len(order) - 1) / (N_SENTENCES - 1))] for q in range(N_SENTENCES)]
    return [sources[i] for i in picks]


@pytest.fixture(scope="module")
def direction_sentences(references) -> dict[str, list[str]]:
    """Per direction, twelve source sentences of test_2016_flickr spread over its range of lengths."""
    from companion.data import load_multi30k

    sentences = {}
    for direction in DIRECTIONS:
        source, target = direction.split("-")
        try:
            pairs = load_multi30k(source, target)["test"]
        except DataUnavailableError as error:  # offline without COMPANION_DATA_DIR
            pytest.skip(f"Multi30k is not available: {error}")
        sentences[direction] = spread_sentences(references[direction], [src for src, _ in pairs])
    return sentences


@pytest.fixture(scope="module")
def test_sentences(direction_sentences) -> list[str]:
    """The default direction's (German) test sentences."""
    return direction_sentences[DIRECTIONS[0]]


def python_source_ids(reference, text: str) -> tuple[list[int], bool]:
    """Token ids + <eos>, truncated to max_len as companion.decode.translate does."""
    tokenizer, max_len = reference.src_tokenizer, reference.model.config.max_len
    ids = tokenizer.encode(text) + [tokenizer.eos_id]
    if len(ids) > max_len:
        return ids[: max_len - 1] + [tokenizer.eos_id], True
    return ids, False


def python_decode(reference, ids: list[int], beam_size: int, alpha: float) -> list[int]:
    return python_search(reference, ids, beam_size, alpha)[0]


def python_search(reference, ids: list[int], beam_size: int, alpha: float) -> tuple[list[int], float | None]:
    """companion's output ids for one source, and for beam search the winner's score log P / lp(length)."""
    import torch

    from companion.decode import beam_search, greedy_decode

    src = torch.tensor([ids])
    if beam_size == 1:
        return greedy_decode(reference.model, src)[0], None
    hypotheses, scores = beam_search(reference.model, src, beam_size=beam_size, alpha=alpha, return_scores=True)
    return hypotheses[0], scores[0]


def python_attention(reference, src_ids: list[int], row_ids: list[int]) -> dict:
    """PyTorch's attention maps, teacher-forced on [<bos>] + row_ids: cross [layers, heads, t, n], encoder
    [layers, heads, n, n] (numpy)."""
    import torch

    from companion.data import BOS_ID
    from companion.model import eval_mode

    model = reference.model
    with torch.no_grad(), eval_mode(model):
        maps = model.attention_maps(torch.tensor([src_ids]), torch.tensor([[BOS_ID] + row_ids]))
    return {
        "cross": torch.stack([m[0] for m in maps["cross"]]).numpy(),
        "encoder": torch.stack([m[0] for m in maps["encoder"]]).numpy(),
    }


# -- the browser ----------------------------------------------------------------------------------------------


class TranslatorPage:
    """A Playwright page on the translator, recording JavaScript errors and requests that leave 127.0.0.1."""

    def __init__(self, context, url: str):
        self.page = context.new_page()
        self.errors, self.outside = guard_page(self.page)
        self.url = url

    def open(self) -> TranslatorPage:
        self.page.goto(self.url, wait_until="domcontentloaded")
        self.page.wait_for_selector(".translator-app.tr-ready", timeout=TIMEOUT_MS)
        return self

    def wait_until_ready(self) -> None:
        self.page.wait_for_function(
            "document.querySelector('.translator-app .tr-status').dataset.kind === 'ready'"
            " || document.querySelector('.translator-app').dataset.state === 'load-error'",
            timeout=TIMEOUT_MS,
        )
        status = self.page.inner_text(".translator-app .tr-status")
        assert self.page.get_attribute(".translator-app", "data-state") != "load-error", status

    def translate(self, items: list[dict]) -> list[dict]:
        """CompanionTranslator.translate for each {text, beamSize, alpha, direction?}; the plain fields of each
        result."""
        return self.page.evaluate(
            """async (items) => {
                const out = [];
                for (const item of items) {
                    const options = {beamSize: item.beamSize, alpha: item.alpha, direction: item.direction};
                    const r = await CompanionTranslator.translate(item.text, options);
                    out.push({ids: r.ids, text: r.text, sourceIds: r.sourceIds, sourceTokens: r.sourceTokens,
                              truncated: r.truncated, endedWithEos: r.endedWithEos, score: r.score,
                              unknown: r.unknownSourceTokens.map((u) => u.index),
                              nonLatin: r.nonLatinTokens.map((u) => u.index), timings: r.timings});
                }
                return out;
            }""",
            items,
        )

    def ui_translate(self, text: str, *, greedy: bool, selector: str = ".translator-app") -> None:
        """Type text into the app, choose the search, press Translate and wait until the page is done."""
        app = self.page.locator(selector)
        app.locator(".tr-input").fill(text)
        app.locator(".tr-greedy" if greedy else ".tr-beam").check()
        app.locator(".tr-translate").click()
        self.page.wait_for_function(
            f"['done', 'error', 'empty', 'load-error'].includes(document.querySelector('{selector}').dataset.state)",
            timeout=TIMEOUT_MS,
        )

    def app_result(self, index: int = 0) -> dict:
        return self.page.evaluate(
            """(i) => { const r = CompanionTranslator.apps[i].result;
                return {ids: r.ids, text: r.text, sourceIds: r.sourceIds, rows: r.attentionRowTokens,
                        sourceTokens: r.sourceTokens, truncated: r.truncated}; }""",
            index,
        )

    def assert_clean(self) -> None:
        assert not self.outside, f"the translator requested outside localhost: {self.outside}"
        assert not self.errors, f"the translator logged JavaScript errors: {self.errors}"


@pytest.fixture(scope="module")
def translator(browser, site_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = TranslatorPage(context, f"{site_url}/{PAGE}").open()
    page.wait_until_ready()
    yield page
    context.close()


@pytest.fixture(scope="module")
def latency_report(request):
    """Latencies collected by the tests of this module, written to artifacts/ and the terminal at the end."""
    report: dict = {
        "browser": "headless Chromium (Playwright), ONNX Runtime Web WASM, 1 thread",
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
    }
    yield report
    if len(report) <= 2:
        return
    LATENCY_REPORT.parent.mkdir(parents=True, exist_ok=True)
    LATENCY_REPORT.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = [f"translator latency (written to {os.path.relpath(LATENCY_REPORT, ROOT)}):"]
    if "first_translation" in report:
        first = report["first_translation"]
        lines.append(
            f"  time to first translation: {first['page_open_to_first_translation_ms']:.0f} ms from opening the page "
            f"(model + runtime load {first['model_load_ms']:.0f} ms)"
        )
    for name, entry in report.get("per_sentence", {}).items():
        lines.append(
            f"  {name}: median {entry['median_ms']:.0f} ms, max {entry['max_ms']:.0f} ms per sentence "
            f"({entry['sentences']} sentences, {entry['median_decoder_calls']:.0f} decoder calls median)"
        )
    capture = request.config.pluginmanager.getplugin("capturemanager")  # print past pytest's output capture
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print("\n" + "\n".join(lines))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


# -- the tests ------------------------------------------------------------------------------------------------


def test_page_loads_offline_and_shows_the_model_card(translator, manifest, model_jsons, model_json, screenshot_dir):
    assert [d["id"] for d in manifest["directions"]] == list(DIRECTIONS) and manifest["default"] == DIRECTIONS[0]
    translator.page.wait_for_function(
        f"document.querySelectorAll('.translator-model-card table').length === {len(DIRECTIONS)}", timeout=TIMEOUT_MS
    )
    text = translator.page.inner_text(".translator-model-card")
    for direction in DIRECTIONS:
        card = model_jsons[direction]["card"]
        assert f"{card['parameters']:,}" in text
        for search in ("greedy", "beam4"):
            assert f"{card['test'][search]['bleu']:.2f}" in text
            assert card["test"][search]["bleu_signature"] in text
        assert card["training_command"] in text
        assert card["terms"] in text
        assert card["limitations"] in text  # and what the model makes of sentences unlike its captions
        for example in card["outside_the_data"]["examples"]:
            assert f"{example['source']}\u201d \u2192 \u201c{example['translation']}" in text, example
        shared = model_jsons[direction]["src_tokenizer"] == model_jsons[direction]["tgt_tokenizer"]
        assert ("shared by both languages" in text) == shared
        assert f"{card['onnx_bytes']['encoder']:,} bytes" in text
        assert f"{card['onnx_bytes']['decoder']:,} bytes" in text
    options = translator.page.eval_on_selector_all(".translator-app .tr-examples option", "os => os.map(o => o.value)")
    assert options[1:] == model_json["examples"]
    switch = translator.page.eval_on_selector_all(".translator-app .tr-direction option", "os => os.map(o => o.value)")
    assert switch == list(DIRECTIONS)
    translator.page.screenshot(path=str(screenshot_dir / "book_translator_loaded.png"), full_page=True)
    translator.assert_clean()


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize(("beam_size", "alpha"), SEARCHES, ids=["greedy", "beam4-alpha0.6", "beam8-alpha1.0"])
def test_translations_equal_python(
    translator, references, direction_sentences, latency_report, direction, beam_size, alpha
):
    reference, sentences = references[direction], direction_sentences[direction]
    items = [{"text": s, "beamSize": beam_size, "alpha": alpha, "direction": direction} for s in sentences]
    results = translator.translate(items)
    mismatches = []
    for sentence, result in zip(sentences, results):
        ids, truncated = python_source_ids(reference, sentence)
        assert result["sourceIds"] == ids, f"the page's tokenizer differs from Python's on {sentence!r}"
        assert result["truncated"] is truncated
        expected, score = python_search(reference, ids, beam_size, alpha)
        if result["ids"] != expected or result["text"] != reference.tgt_tokenizer.decode(expected):
            mismatches.append((sentence, result["text"], reference.tgt_tokenizer.decode(expected)))
        elif score is not None:  # the same winner with the same length-normalised score (float32 sums)
            assert result["score"] == pytest.approx(score, abs=1e-4), f"beam score of {sentence!r}"
    assert not mismatches, f"{len(mismatches)} of {len(results)} {direction} outputs differ from Python: {mismatches}"
    name = "greedy" if beam_size == 1 else f"beam{beam_size}_alpha{alpha}"
    times = [r["timings"]["totalMs"] for r in results]
    latency_report.setdefault("per_sentence", {})[f"{direction}/{name}"] = {
        "sentences": len(times),
        "median_ms": _median(times),
        "max_ms": max(times),
        "total_ms_each": [round(t, 1) for t in times],
        "source_tokens_each": [len(r["sourceIds"]) for r in results],
        "median_decoder_calls": _median([r["timings"]["decoderCalls"] for r in results]),
        # where a sentence's time goes (the page's own timers): the encoder call, the search's decoder calls and
        # bookkeeping, gathering the winner's attention maps; the rest is tokenizing and describing the result
        "median_ms_by_part": {
            part: _median([r["timings"][f"{part}Ms"] for r in results]) for part in ("encoder", "search", "attention")
        },
    }
    translator.assert_clean()


def test_direction_switch_changes_examples_labels_and_model(translator, references, model_jsons, direction_sentences):
    """The app's direction switch: the other direction's test sentences and language labels, and its translations
    equal Python's; switching back restores the default direction."""
    page = translator.page
    app = page.locator(".translator-app")
    other = DIRECTIONS[1]
    info = model_jsons[other]
    app.locator(".tr-direction").select_option(other)
    page.wait_for_function(
        "document.querySelector('.translator-app .tr-status').dataset.kind === 'ready'", timeout=TIMEOUT_MS
    )
    options = page.eval_on_selector_all(".translator-app .tr-examples option", "os => os.map(o => o.value)")
    assert options[1:] == info["examples"]
    assert app.locator(".tr-label").inner_text() == f"{info['direction']['source_name']} sentence"
    # the form starts from the shipped models' decoding setting (model.json's, companion.pretrained's)
    assert (info["decoding"]["beam_size"], info["decoding"]["alpha"]) == (SHIPPED_BEAM_SIZE, SHIPPED_ALPHA)
    assert float(app.locator(".tr-alpha").input_value()) == SHIPPED_ALPHA
    assert int(app.locator(".tr-beam-size").input_value()) == SHIPPED_BEAM_SIZE
    sentence = direction_sentences[other][5]
    translator.ui_translate(sentence, greedy=False)
    result = page.evaluate("CompanionTranslator.apps[0].result.direction")
    assert result == other
    reference = references[other]
    ids, _ = python_source_ids(reference, sentence)
    expected = reference.tgt_tokenizer.decode(python_decode(reference, ids, SHIPPED_BEAM_SIZE, SHIPPED_ALPHA))
    assert app.locator(".tr-output-text").inner_text() == expected
    assert app.locator(".tr-output-text").get_attribute("lang") == info["direction"]["target"]
    app.locator(".tr-direction").select_option(DIRECTIONS[0])
    page.wait_for_function(
        "document.querySelector('.translator-app .tr-status').dataset.kind === 'ready'", timeout=TIMEOUT_MS
    )
    options = page.eval_on_selector_all(".translator-app .tr-examples option", "os => os.map(o => o.value)")
    assert options[1:] == model_jsons[DIRECTIONS[0]]["examples"]
    translator.assert_clean()


def _cell_colours(page, selector: str) -> list[dict]:
    """Every heatmap canvas under selector: its size in cells and the RGB colour at the centre of each cell."""
    return page.eval_on_selector_all(
        selector,
        """canvases => canvases.map(canvas => {
            const d = canvas.dataset, dpr = Number(d.dpr), rows = Number(d.rows), cols = Number(d.cols);
            const x0 = Number(d.cellX0), y0 = Number(d.cellY0), size = Number(d.cellSize);
            const ctx = canvas.getContext('2d');
            const colours = [];
            for (let r = 0; r < rows; r++) {
                const row = [];
                for (let c = 0; c < cols; c++) {
                    const x = Math.floor((x0 + (c + 0.5) * size) * dpr), y = Math.floor((y0 + (r + 0.5) * size) * dpr);
                    row.push(Array.from(ctx.getImageData(x, y, 1, 1).data.slice(0, 3)));
                }
                colours.push(row);
            }
            return {name: d.name, rows, cols, colours};
        })""",
    )


def _assert_viridis(colours: list, weights, where: str) -> None:
    """Each cell's colour is matplotlib's viridis colour (vmin 0, vmax 1) of its weight, to one colour step
    (the weights of ONNX Runtime Web and PyTorch differ by rounding)."""
    import matplotlib
    import numpy as np

    lut = matplotlib.colormaps["viridis"](np.arange(256), bytes=True)[:, :3].astype(int)
    weights = np.asarray(weights, dtype=float)
    assert np.asarray(colours).shape[:2] == weights.shape, where
    for (r, c), weight in np.ndenumerate(weights):
        low, high = (min(255, max(0, int(np.floor((weight + d) * 256)))) for d in (-1e-4, 1e-4))
        allowed = {tuple(lut[i]) for i in range(low, high + 1)}
        assert tuple(colours[r][c]) in allowed, f"{where}: cell ({r}, {c}) weight {weight:.5f} has {colours[r][c]}"


def test_heatmaps_render_the_attention_weights(translator, reference, model_json, screenshot_dir):
    page = translator.page
    config = model_json["config"]
    layers, heads = config["num_decoder_layers"], config["num_heads"]
    app = page.locator(".translator-app")
    app.locator(".tr-beam").check()
    app.locator(".tr-examples").select_option(index=2)  # picking an example translates it
    page.wait_for_function("document.querySelector('.translator-app').dataset.state === 'done'", timeout=TIMEOUT_MS)
    result = translator.app_result()
    n, t = len(result["sourceIds"]), len(result["rows"])
    row_ids = result["ids"] if result["rows"][-1] == "<eos>" else result["ids"][:-1]
    expected = python_attention(reference, result["sourceIds"], row_ids)

    (token_map,) = _cell_colours(page, ".translator-app .tr-cross-token canvas.tr-heatmap")
    assert (token_map["rows"], token_map["cols"]) == (layers * heads, n)
    _assert_viridis(token_map["colours"], expected["cross"][:, :, 0, :].reshape(layers * heads, n), "output token 0")

    chosen = min(2, t - 1)
    app.locator(f".tr-output-tokens button[data-index='{chosen}']").click()
    assert app.locator(f".tr-output-tokens button[data-index='{chosen}']").get_attribute("aria-pressed") == "true"
    (token_map,) = _cell_colours(page, ".translator-app .tr-cross-token canvas.tr-heatmap")
    _assert_viridis(
        token_map["colours"], expected["cross"][:, :, chosen, :].reshape(layers * heads, n), f"output token {chosen}"
    )

    head_maps = _cell_colours(page, ".translator-app .tr-cross-heads canvas.tr-heatmap")
    assert [(m["rows"], m["cols"]) for m in head_maps] == [(t, n)] * heads
    for head, head_map in enumerate(head_maps):  # the last decoder layer is shown first
        _assert_viridis(
            head_map["colours"], expected["cross"][layers - 1, head], f"cross layer {layers - 1} head {head}"
        )

    encoder_maps = _cell_colours(page, ".translator-app .tr-encoder canvas.tr-heatmap")
    assert [(m["rows"], m["cols"]) for m in encoder_maps] == [(n, n)] * heads
    for head, encoder_map in enumerate(encoder_maps):
        _assert_viridis(encoder_map["colours"], expected["encoder"][0, head], f"encoder layer 0 head {head}")
    app.locator(".tr-enc-layer").select_option(str(config["num_encoder_layers"] - 1))
    app.locator(".tr-enc-head").select_option("1")
    (encoder_map,) = _cell_colours(page, ".translator-app .tr-encoder canvas.tr-heatmap")
    _assert_viridis(encoder_map["colours"], expected["encoder"][-1, 1], "encoder last layer head 1")
    page.screenshot(path=str(screenshot_dir / "book_translator_heatmaps.png"), full_page=True)
    translator.assert_clean()


def test_empty_box_gives_a_message_and_no_translation(translator):
    page = translator.page
    before = page.inner_text(".translator-app .tr-timings")
    translator.ui_translate("  \n\t ", greedy=True)
    assert page.get_attribute(".translator-app", "data-state") == "empty"
    assert "empty" in page.inner_text(".translator-app .tr-status")
    assert page.inner_text(".translator-app .tr-timings") == before  # no model call reported a time
    error = page.evaluate("CompanionTranslator.translate('   ').then(() => null, (e) => e.message)")
    assert error is not None and "empty" in error
    translator.assert_clean()


def unknown_source_tokens(reference, text: str) -> list[str]:
    """The source tokens the page marks as <unk>: whole words for a word tokenizer, single characters (as the page
    shows them) for a subword tokenizer, checked to be <unk>'s in Python's ids."""
    tokenizer = reference.src_tokenizer
    ids, _ = python_source_ids(reference, text)
    if isinstance(tokenizer, SubwordTokenizer):
        vocabulary = set(tokenizer.itos)
        unknown = [ch for ch in text if not ch.isspace() and ch not in vocabulary]
    else:
        tokens = tokenizer.tokenize(text)
        unknown = [tokens[i] for i, token_id in enumerate(ids[:-1]) if token_id == tokenizer.unk_id]
    assert ids.count(tokenizer.unk_id) == len(unknown)
    return unknown


def test_unknown_words_are_translated_and_marked(translator, reference):
    subword = isinstance(reference.src_tokenizer, SubwordTokenizer)
    sentence = UNKNOWN_CHARACTERS_SENTENCE if subword else UNKNOWN_SENTENCE
    ids, _ = python_source_ids(reference, sentence)
    unknown = unknown_source_tokens(reference, sentence)
    assert unknown, "the test sentence needs tokens outside the vocabulary"
    translator.ui_translate(sentence, greedy=True)
    page = translator.page
    result = translator.app_result()
    assert result["sourceIds"] == ids
    assert result["ids"] == python_decode(reference, ids, 1, 0.0)
    assert (
        page.eval_on_selector_all(".translator-app .tr-src.tr-unk", "spans => spans.map(s => s.textContent)") == unknown
    )
    message = page.inner_text(".translator-app .tr-unknown")
    assert all(word in message for word in unknown) and "<unk>" in message
    translator.assert_clean()


def test_non_latin_letters_become_unk_with_a_message(translator, reference):
    ids, _ = python_source_ids(reference, NON_LATIN_SENTENCE)
    foreign = [t for t in unknown_source_tokens(reference, NON_LATIN_SENTENCE) if any(ord(ch) > 0x24F for ch in t)]
    assert foreign
    (result,) = translator.translate([{"text": NON_LATIN_SENTENCE, "beamSize": 4, "alpha": 0.6}])
    assert result["sourceIds"] == ids
    assert result["ids"] == python_decode(reference, ids, 4, 0.6)
    assert [result["sourceTokens"][i] for i in result["nonLatin"]] == foreign
    translator.ui_translate(NON_LATIN_SENTENCE, greedy=False)
    message = translator.page.inner_text(".translator-app .tr-nonlatin")
    assert all(t in message for t in foreign) and "Latin" in message
    translator.assert_clean()


def test_input_past_max_len_is_truncated_as_in_python(translator, reference, test_sentences):
    max_len = reference.model.config.max_len
    text = " ".join(test_sentences * 40)
    full = reference.src_tokenizer.encode(text)
    assert len(full) + 1 > max_len + 20
    ids, truncated = python_source_ids(reference, text)
    assert truncated and len(ids) == max_len
    translator.ui_translate(text, greedy=True)
    result = translator.app_result()
    assert result["truncated"] and result["sourceIds"] == ids
    assert result["ids"] == python_decode(reference, ids, 1, 0.0)
    message = translator.page.inner_text(".translator-app .tr-truncated")
    assert f"{len(full) + 1:,}" in message and str(max_len) in message
    translator.assert_clean()


def test_compact_panel_translates_like_python(translator, reference, test_sentences):
    page = translator.page
    page.evaluate(
        """() => { const panel = document.createElement('div'); panel.className = 'translator-panel';
                   panel.id = 'test-panel'; document.querySelector('main').append(panel);
                   CompanionTranslator.mount(panel); }"""
    )
    page.wait_for_function("document.querySelector('#test-panel .tr-examples').options.length > 1", timeout=TIMEOUT_MS)
    sentence = test_sentences[5]
    translator.ui_translate(sentence, greedy=False, selector="#test-panel")
    ids, _ = python_source_ids(reference, sentence)
    expected = reference.tgt_tokenizer.decode(python_decode(reference, ids, SHIPPED_BEAM_SIZE, SHIPPED_ALPHA))
    assert page.inner_text("#test-panel .tr-output-text") == expected
    assert page.locator("#test-panel .tr-cross-token canvas.tr-heatmap").count() == 1
    assert page.locator("#test-panel .tr-cross-heads").count() == 0  # the compact layout leaves out the per-head maps
    translator.assert_clean()


def test_model_file_that_fails_to_load_gives_a_message(browser, site_url):
    context = browser.new_context()
    page = TranslatorPage(context, f"{site_url}/{PAGE}")
    page.page.route("**/de-en/decoder.onnx", lambda route: route.fulfill(status=404, body="not here"))
    page.open()
    page.page.wait_for_function(
        "document.querySelector('.translator-app').dataset.state === 'load-error'", timeout=TIMEOUT_MS
    )
    status = page.page.inner_text(".translator-app .tr-status")
    assert "could not load" in status and "decoder.onnx" in status and "404" in status
    page.ui_translate("Ein Hund rennt.", greedy=True)  # pressing Translate tries again and says so again
    assert page.page.get_attribute(".translator-app", "data-state") == "load-error"
    assert not page.outside
    context.close()


def test_time_to_first_translation_is_reported(browser, site_url, test_sentences, latency_report):
    """Measured from opening the page in a fresh browser context (nothing cached) to the first translation."""
    context = browser.new_context()
    page = TranslatorPage(context, f"{site_url}/{PAGE}")
    start = time.perf_counter()
    page.page.goto(page.url, wait_until="domcontentloaded")
    page.page.wait_for_function("window.CompanionTranslator !== undefined", timeout=TIMEOUT_MS)
    (first,) = page.translate([{"text": test_sentences[6], "beamSize": 4, "alpha": 0.6}])
    wall_ms = (time.perf_counter() - start) * 1000
    shown = page.page.locator(".translator-app .tr-status")
    assert first["timings"]["modelLoadMs"] > 0 and first["timings"]["firstTranslationMs"] > 0
    latency_report["first_translation"] = {
        "page_open_to_first_translation_ms": wall_ms,
        "model_load_ms": first["timings"]["modelLoadMs"],
        "load_start_to_first_translation_ms": first["timings"]["firstTranslationMs"],
        "first_sentence_ms": first["timings"]["totalMs"],
        "search": "beam 4, alpha 0.6",
    }
    assert shown.count() == 1
    page.assert_clean()
    context.close()


def _wait_for_pending_translations(page, direction: str) -> None:
    """Resolve once every translation queued before this call has finished (the page runs one at a time, in
    order: a translation queued now starts after them)."""
    page.evaluate("(d) => CompanionTranslator.translate('Ein Hund.', {direction: d, beamSize: 1})", direction)


def test_a_result_of_the_direction_left_is_dropped(browser, site_url, model_jsons):
    """Switching direction while a translation runs: its result, progress and state are not shown under the new
    direction's labels, and the Translate button is usable again."""
    context = browser.new_context()
    translator = TranslatorPage(context, f"{site_url}/{PAGE}").open()
    translator.wait_until_ready()
    page, other = translator.page, DIRECTIONS[1]
    page.evaluate(
        """(other) => {
            const app = document.querySelector('.translator-app');
            app.querySelector('.tr-input').value = 'Ein Hund rennt über eine Wiese.';
            app.querySelector('.tr-beam').checked = true;
            app.querySelector('.tr-translate').click();
            const select = app.querySelector('.tr-direction');
            select.value = other;
            select.dispatchEvent(new Event('change'));
        }""",
        other,
    )
    _wait_for_pending_translations(page, DIRECTIONS[0])
    page.wait_for_function("!document.querySelector('.translator-app').dataset.state", timeout=TIMEOUT_MS)
    app = page.locator(".translator-app")
    assert page.evaluate("CompanionTranslator.apps[0].result") is None
    assert app.locator(".tr-result").is_hidden()
    assert app.locator(".tr-input").input_value() == ""
    assert app.locator(".tr-label").inner_text() == f"{model_jsons[other]['direction']['source_name']} sentence"
    assert app.locator(".tr-translate").is_enabled()
    assert app.locator(".tr-status").get_attribute("aria-busy") is None
    assert "translated" not in app.locator(".tr-status").inner_text()
    translator.assert_clean()
    context.close()


def test_the_latest_of_two_overlapping_translations_is_shown(browser, site_url, references):
    """Picking a test sentence while a translation runs starts a new one; the page ends in "done" once, with the
    new one's result, and the button stays disabled until then (an observer records every "done" the page
    reaches, with the result shown and the button's state at that moment)."""
    context = browser.new_context()
    translator = TranslatorPage(context, f"{site_url}/{PAGE}").open()
    translator.wait_until_ready()
    page = translator.page
    page.wait_for_function("!document.querySelector('.translator-app .tr-examples').disabled", timeout=TIMEOUT_MS)
    example = page.eval_on_selector_all(".translator-app .tr-examples option", "os => os.map(o => o.value)")[3]
    page.evaluate(
        """(example) => {
            const app = document.querySelector('.translator-app');
            window.doneEvents = [];
            new MutationObserver(() => {
                if (app.dataset.state !== 'done') return;
                window.doneEvents.push({sourceIds: CompanionTranslator.apps[0].result.sourceIds,
                                        buttonDisabled: app.querySelector('.tr-translate').disabled});
            }).observe(app, {attributes: true, attributeFilter: ['data-state']});
            app.querySelector('.tr-input').value = 'Zwei Männer stehen neben einem roten Auto auf der Straße.';
            app.querySelector('.tr-translate').click();
            const examples = app.querySelector('.tr-examples');
            examples.value = example;
            examples.dispatchEvent(new Event('change'));
        }""",
        example,
    )
    _wait_for_pending_translations(page, DIRECTIONS[0])
    page.wait_for_function("document.querySelector('.translator-app').dataset.state === 'done'", timeout=TIMEOUT_MS)
    reference = references[DIRECTIONS[0]]
    ids, _ = python_source_ids(reference, example)
    assert page.evaluate("window.doneEvents") == [{"sourceIds": ids, "buttonDisabled": False}]
    expected = reference.tgt_tokenizer.decode(python_decode(reference, ids, SHIPPED_BEAM_SIZE, SHIPPED_ALPHA))
    assert page.locator(".translator-app .tr-output-text").inner_text() == expected
    assert page.locator(".translator-app .tr-status").inner_text().startswith("translated with")
    translator.assert_clean()
    context.close()


def test_heatmap_controls_keep_keyboard_focus(translator, test_sentences):
    """Changing a heatmap's layer or head with the keyboard redraws the figure and leaves the focus on the control,
    so the next key goes on changing it."""
    translator.ui_translate(test_sentences[4], greedy=True)
    page = translator.page
    for selector in (".tr-enc-layer", ".tr-enc-head", ".tr-cross-layer"):
        control = page.locator(f".translator-app {selector}")
        control.focus()
        before = control.input_value()
        page.keyboard.press("ArrowDown" if selector != ".tr-cross-layer" else "ArrowUp")
        assert control.input_value() != before, selector
        assert page.evaluate(f"document.activeElement.matches('{selector}')"), selector
    first_map = page.locator(".translator-app .tr-encoder canvas.tr-heatmap").first
    assert first_map.get_attribute("data-name").startswith("encoder-l1-")  # the figure was redrawn for layer 1
    translator.assert_clean()


def test_text_without_source_tokens_is_empty(translator, reference):
    """Empty is decided by the tokenizer: a character that String.trim keeps but the tokenizer drops as white
    space (U+0085) gives the empty-box error, not a translation of <eos> alone."""
    assert reference.src_tokenizer.encode("\u0085 \u0085") == []  # Python's tokenizer agrees: no token
    error = translator.page.evaluate(
        "CompanionTranslator.translate('\\u0085 \\u0085').then(() => null, (e) => e.message)"
    )
    assert error is not None and "empty" in error
    translator.ui_translate("\u0085", greedy=True)
    assert translator.page.get_attribute(".translator-app", "data-state") == "empty"
    translator.assert_clean()


def test_source_labels_name_eos_only_where_it_is(translator, reference):
    """translateIds labels a position <eos> only where the id is <eos> (its source need not end with one)."""
    ids = reference.src_tokenizer.encode("Ein Hund rennt.")
    labels = translator.page.evaluate(
        "(ids) => CompanionTranslator.translateIds(ids, {beamSize: 1}).then((r) => r.sourceTokens)", ids
    )
    assert "<eos>" not in labels and len(labels) == len(ids)
    eos_labels = translator.page.evaluate(
        "(ids) => CompanionTranslator.translateIds(ids, {beamSize: 1}).then((r) => r.sourceTokens)",
        ids + [reference.src_tokenizer.eos_id],
    )
    assert eos_labels[-1] == "<eos>" and eos_labels[:-1] == labels
    translator.assert_clean()


def test_time_to_first_translation_leaves_out_the_readers_idle_time(browser, site_url):
    """The first translation's reported time counts loading and translating, not the time the loaded model
    waited for the reader to press Translate."""
    context = browser.new_context()
    translator = TranslatorPage(context, f"{site_url}/{PAGE}").open()
    translator.wait_until_ready()
    translator.page.wait_for_timeout(1500)  # the reader reads before asking
    (first,) = translator.translate([{"text": "Ein Hund rennt.", "beamSize": 1, "alpha": 0.0}])
    timings = first["timings"]
    since_load = translator.page.evaluate("performance.now()") - translator.page.evaluate(
        "performance.getEntriesByType('navigation')[0].domContentLoadedEventStart"
    )
    assert timings["firstTranslationMs"] <= timings["modelLoadMs"] + timings["totalMs"] + 1.0
    assert since_load > timings["firstTranslationMs"] + 1000  # the idle wait is not in it
    translator.assert_clean()
    context.close()


def test_heatmap_weights_can_be_read_with_the_keyboard(translator, reference, model_json):
    """A heatmap takes the focus; the arrow keys move over its cells and the readout line gives each cell's
    labels and weight (PyTorch's weight to the readout's three decimals), as the mouse does."""
    translator.ui_translate("Ein Hund rennt über eine Wiese.", greedy=True)
    page = translator.page
    result = translator.app_result()
    row_ids = result["ids"] if result["rows"][-1] == "<eos>" else result["ids"][:-1]
    expected = python_attention(reference, result["sourceIds"], row_ids)["cross"]  # [layers, heads, t, n]
    heads = model_json["config"]["num_heads"]
    token_map = page.locator(".translator-app .tr-cross-token canvas.tr-heatmap")
    readout = page.locator(".translator-app .tr-cross-token .tr-readout")
    token_map.focus()
    for keys, (row, column) in [((), (0, 0)), (("ArrowRight", "ArrowDown"), (1, 1)), (("End",), (1, None))]:
        for key in keys:
            page.keyboard.press(key)
        column = len(result["sourceIds"]) - 1 if column is None else column
        assert token_map.get_attribute("data-cursor") == f"{row},{column}"
        layer, head = divmod(row, heads)
        label, weight = readout.inner_text().rsplit(": ", 1)
        assert label == f"layer {layer}, head {head} \u2192 {result['sourceTokens'][column]}"
        assert abs(float(weight) - float(expected[layer, head, 0, column])) <= 0.0006
    assert readout.get_attribute("aria-live") == "polite"
    page.keyboard.press("Tab")  # leaving the map clears the line
    assert readout.inner_text().strip() == ""
    translator.assert_clean()
