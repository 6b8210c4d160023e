"""annotated.support.explorer: the site's attention explorer, its stored weights checked against
the shipped model, its page driven in headless Chromium with the network off, and the link that
replaces notebook 12's widget on the site."""

import json

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook, new_output

from annotated.support.browser import PageLog, browser_missing, offline_browser, open_page
from annotated.support.course import ROOT
from annotated.support.explorer import (DATA_FILE, N_SENTENCES, SPLIT, WIDGET_MIME, WidgetToExplorer, build,
                                        compute_shipped, from_bytes, pick_sentences, read_data, to_bytes,
                                        weights_of)
from tests.test_data import needs_real_data

ROUNDING = 1 / 255  # two weights rounded to bytes differ by at most this (each is within half of it)
KINDS = ("encoder", "decoder", "cross")

NO_BROWSER = browser_missing()
needs_browser = pytest.mark.skipif(bool(NO_BROWSER), reason=NO_BROWSER)


@pytest.fixture(scope="module")
def stored():
    return read_data()


@pytest.fixture(scope="module")
def shipped():
    from annotated import load_pretrained

    return load_pretrained()


# ------------------------------------------------------------ the stored weights


def test_a_weight_stored_as_a_byte_comes_back_within_half_a_step():
    w = torch.rand(2, 3, 5, 7).softmax(-1)
    back = from_bytes(to_bytes(w), w.shape)
    assert (back - w).abs().max() <= 0.5 / 255 + 1e-7


@needs_real_data  # load_pairs: with no local copy it would download Multi30k
def test_the_sentences_are_the_first_of_six_to_sixteen_german_words_of_the_test_set(stored):
    from annotated.data import load_pairs

    pairs = load_pairs(SPLIT)
    indices = pick_sentences(pairs)
    assert len(indices) == N_SENTENCES and all(6 <= len(pairs[i][0].split()) <= 16 for i in indices)
    assert [s["index"] for s in stored["sentences"]] == indices
    assert [(s["german"], s["reference"]) for s in stored["sentences"]] == [pairs[i] for i in indices]


@needs_real_data  # load_pairs: with no local copy it would download Multi30k
def test_the_stored_weights_are_what_the_builder_computes_now(stored):
    computed = compute_shipped()  # every sentence, as python -m annotated.support.explorer --compute writes them
    assert {k: v for k, v in computed.items() if k != "sentences"} == {k: v for k, v in stored.items() if k != "sentences"}
    for old, new in zip(stored["sentences"], computed["sentences"], strict=True):
        tokens = ("german", "translation", "source", "read", "produced")
        assert [old[t] for t in tokens] == [new[t] for t in tokens], (
            f"sentence {old['index']}: the model now translates it otherwise; "
            f"write the data again: python -m annotated.support.explorer --compute")
        for kind in KINDS:
            gap = (weights_of(stored, old, kind) - weights_of(computed, new, kind)).abs().max().item()
            assert gap <= ROUNDING + 1e-6, f"sentence {old['index']}, {kind}: stored weights {gap:.4f} away"


@pytest.mark.parametrize("which", [0, -1])
def test_the_stored_weights_are_the_models_attention_on_its_own_translation(stored, shipped, which):
    from annotated.heads import sentence_attention

    model, tokenizer = shipped
    s = stored["sentences"][which]
    found = sentence_attention(model, tokenizer, s["german"])  # the notebook's own function, one sentence alone
    assert (found.source, found.read, found.produced) == (s["source"], s["read"], s["produced"])
    for kind in KINDS:
        torch.testing.assert_close(weights_of(stored, s, kind), found.weights[kind], atol=ROUNDING, rtol=0)


def test_every_row_of_every_map_sums_to_one_within_the_rounding(stored):
    for s in stored["sentences"]:
        for kind in KINDS:
            w = weights_of(stored, s, kind)  # (layers, h, L_q, L_k)
            slack = w.shape[-1] * 0.5 / 255 + 1e-6  # each of the L_k weights rounded by at most half a step
            assert ((w.sum(-1) - 1).abs() <= slack).all(), (s["index"], kind)
    w = weights_of(stored, stored["sentences"][0], "decoder")
    assert (w.triu(1) == 0).all(), "a decoder position sees no later position"


def test_the_data_file_is_small_enough_to_ship():
    assert DATA_FILE.stat().st_size < 1.5e6


# ------------------------------------------------------------ the page, in a browser


@pytest.fixture(scope="module")
def explorer_page(tmp_path_factory):
    return build(tmp_path_factory.mktemp("site") / "explorer", links={"course": "../index.html"})


@pytest.fixture(scope="module")
def browser():
    with offline_browser(1280, 720) as context:
        yield context


@pytest.fixture
def opened(browser, explorer_page):
    """Open the explorer (at a view given as ``#sentence=..&kind=..``); returns the page and its log."""
    pages = []

    def open_at(hash_: str = ""):
        log = PageLog()
        page = open_page(browser, explorer_page.as_uri() + hash_, log)
        pages.append(page)
        return page, log

    yield open_at
    for page in pages:
        page.close()


def drawn(page) -> dict:
    return page.evaluate("""() => ({
        cells: Array.from(document.querySelectorAll('#map rect.cell')).map(r => r.getAttribute('fill')),
        labels: Array.from(document.querySelectorAll('#map text')).map(t => t.textContent),
        title: document.getElementById('map-title').textContent,
        german: document.getElementById('german').textContent})""")


def choose(page, control: str, value: str) -> None:
    """Pick the option of ``value`` as a reader would; by its index, as Playwright matches a value
    against the options' labels too (layer "2" would be the option labelled 2, of value 1)."""
    index = page.eval_on_selector(f"#{control}", "(select, value) => [...select.options].findIndex(o => o.value === value)",
                                  value)
    assert index >= 0, f"#{control} has no option {value}"
    page.select_option(f"#{control}", index=index)


def expected(stored, sentence: int, kind: str, layer: int, head: str) -> torch.Tensor:
    w = weights_of(stored, stored["sentences"][sentence], kind)[layer]  # (h, L_q, L_k)
    return w.mean(0) if head == "mean" else w[int(head)]


def axes(stored, sentence: int, kind: str) -> tuple[list[str], list[str]]:
    s, names = stored["sentences"][sentence], stored["kinds"][kind]
    return s[names["rows"]], s[names["cols"]]


@needs_browser
def test_the_page_loads_offline_with_no_failed_request_and_no_console_error(opened, explorer_page):
    page, log = opened()
    assert sorted(p.name for p in explorer_page.parent.iterdir()) == ["attention.js", "explorer.css", "explorer.js",
                                                                      "index.html"]
    assert (log.failed_requests, log.console_errors) == ([], [])
    assert page.locator("#sentence option").count() == N_SENTENCES
    assert page.locator("nav a").get_attribute("href") == "../index.html"


@needs_browser
@pytest.mark.parametrize("sentence, kind", [(0, "cross"), (3, "encoder"), (28, "decoder"), (35, "cross")])
def test_one_cell_is_drawn_per_query_and_key(stored, opened, sentence, kind):
    page, log = opened(f"#sentence={sentence + 1}&kind={kind}")
    rows, cols = axes(stored, sentence, kind)
    assert page.locator("#map rect.cell").count() == len(rows) * len(cols)
    labels = drawn(page)["labels"]
    assert all(token in labels for token in rows + cols)
    assert not log.console_errors


@needs_browser
@pytest.mark.parametrize("control, value", [("sentence", "5"), ("kind", "encoder"), ("layer", "0"), ("head", "3")])
def test_changing_each_selector_changes_what_is_drawn(opened, control, value):
    page, log = opened()
    before = drawn(page)
    choose(page, control, value)
    after = drawn(page)
    assert after["cells"] != before["cells"]
    assert (after["title"], after["german"]) != (before["title"], before["german"])  # the caption says what changed
    assert page.eval_on_selector(f"#{control}", "select => select.value") == value
    assert not log.console_errors


@needs_browser
@pytest.mark.parametrize("sentence, kind, layer, head", [(0, "cross", 2, "mean"), (7, "encoder", 0, "5"),
                                                         (12, "decoder", 1, "mean"), (30, "cross", 1, "0")])
def test_the_hovered_cell_shows_the_stored_weight(stored, opened, sentence, kind, layer, head):
    page, _ = opened()
    for control, value in (("sentence", sentence), ("kind", kind), ("layer", layer), ("head", head)):
        choose(page, control, str(value))
    w = expected(stored, sentence, kind, layer, head)
    rows, cols = axes(stored, sentence, kind)
    for i, j in [(0, 0), (len(rows) - 1, len(cols) - 1), (len(rows) // 2, len(cols) // 3)]:
        page.hover(f"#map rect.cell[data-row='{i}'][data-col='{j}']")
        shown = float(page.text_content("#value"))
        assert abs(shown - w[i, j].item()) <= 0.0005 + 1e-6, (i, j, shown, w[i, j].item())
        assert f"“{rows[i]}”" in page.text_content("#readout") and f"“{cols[j]}”" in page.text_content("#readout")


@needs_browser
def test_the_arrow_keys_move_between_cells_and_show_their_weight(stored, opened):
    page, _ = opened("#sentence=2&kind=encoder&layer=1&head=2")
    w = expected(stored, 1, "encoder", 0, "1")
    page.focus("#map")
    for key in ("ArrowDown", "ArrowDown", "ArrowRight"):
        page.keyboard.press(key)
    assert abs(float(page.text_content("#value")) - w[2, 1].item()) <= 0.0005 + 1e-6
    page.keyboard.press("End")
    assert abs(float(page.text_content("#value")) - w[2, -1].item()) <= 0.0005 + 1e-6


@needs_browser
@pytest.mark.parametrize("kind", KINDS)
def test_the_largest_map_fits_a_1280_by_720_screen_with_labels_of_at_least_14_px(stored, opened, kind):
    longest = max(range(N_SENTENCES), key=lambda s: max(map(len, axes(stored, s, kind))))
    page, _ = opened(f"#sentence={longest + 1}&kind={kind}")
    size = page.evaluate("""() => {
        const box = document.getElementById('map').getBoundingClientRect();
        const fonts = Array.from(document.querySelectorAll('#map text, select, #readout, #texts'))
            .map(e => parseFloat(getComputedStyle(e).fontSize));
        const cell = document.querySelector('#map rect.cell').getBoundingClientRect();
        return {right: box.right, bottom: box.bottom, scrollW: document.documentElement.scrollWidth,
                scrollH: document.documentElement.scrollHeight, smallest: Math.min(...fonts), cell: cell.width};
    }""")
    assert size["right"] <= 1280 and size["bottom"] <= 720, size
    assert size["scrollW"] <= 1280 and size["scrollH"] <= 720, size
    assert size["smallest"] >= 14 and size["cell"] >= 16, size


# ------------------------------------------------------------ the link on notebook 12's page


def widget_notebook():
    widget = new_output("execute_result", data={WIDGET_MIME: {"model_id": "abc", "version_major": 2, "version_minor": 0},
                                                "text/plain": ["VBox(...)"]}, execution_count=3)
    printed = new_output("stream", name="stdout", text="translation: a man\n")
    figure = new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": ["<Figure>"]})
    return new_notebook(cells=[new_code_cell("view", outputs=[printed, widget]), new_code_cell("plot", outputs=[figure])])


def test_the_widget_output_becomes_a_link_to_the_explorer_and_other_outputs_stay():
    nb = widget_notebook()
    before = json.loads(json.dumps(nb))
    out, _ = WidgetToExplorer("../explorer/index.html").preprocess(nb, {})
    printed, link = out.cells[0].outputs
    assert printed == before["cells"][0]["outputs"][0] and out.cells[1] == before["cells"][1]
    assert WIDGET_MIME not in link.get("data", {})
    assert 'href="../explorer/index.html"' in link.data["text/html"]


def test_notebook_10_shows_the_link_where_its_widget_was():
    from nbconvert import HTMLExporter

    nb = nbformat.read(ROOT / "notebooks" / "12_what_the_heads_learned.ipynb", as_version=4)
    outputs = lambda notebook: [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    before = json.loads(json.dumps(outputs(nb)))
    after, _ = WidgetToExplorer("../explorer/index.html").preprocess(nbformat.from_dict(json.loads(json.dumps(nb))), {})
    changed = [a for a, b in zip(outputs(after), before, strict=True) if a != b]
    assert len(changed) == 1 and WIDGET_MIME in str(before) and WIDGET_MIME not in str(outputs(after))
    exporter = HTMLExporter(template_name="basic")
    exporter.register_preprocessor(WidgetToExplorer("../explorer/index.html"), enabled=True)
    body, _ = exporter.from_notebook_node(nb)
    assert body.count('href="../explorer/index.html"') == 1
