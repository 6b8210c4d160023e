"""The audience check (annotated/support/audience.py) on small decks written here: a good deck
passes, and each rule fails once, on purpose, on a slide of its own, naming that slide.

Runs where Chromium is installed, like tests/test_browser.py; about 20 seconds.
"""

import os
import re

import pytest

from annotated.support.audience import (
    DECK_SOURCE, MAX_WORDS, MIN_CODE_PX, MIN_FIGURE_TEXT_PX, MIN_PROSE_PX, RASTER, audience_report, lecture_report,
)
from annotated.support.browser import BrowserError, PageLog, find_chromium, offline_browser, open_page, wait_for_mathjax
from annotated.support.slides import install_assets

try:
    find_chromium()
    NO_BROWSER = ""
except BrowserError as err:
    NO_BROWSER = str(err)
if NO_BROWSER and os.environ.get("ANNOTATED_REQUIRE_BROWSER") == "1":
    raise RuntimeError(f"ANNOTATED_REQUIRE_BROWSER=1 but {NO_BROWSER}")
pytestmark = pytest.mark.skipif(bool(NO_BROWSER), reason=NO_BROWSER)

# The lecture deck's sizes: body text 26 px, code 21 px, at Reveal's scale 1 (no margin).
STYLE = """
.reveal .slides section { font-size: 26px; text-align: left; }
.reveal h2 { font-size: 40px; }
.reveal pre { font-size: 21px; width: auto; margin: 8px 0; box-shadow: none; white-space: pre-wrap; }
.reveal pre code { max-height: none; padding: 0; }
.reveal figure { margin: 0; }
"""


def deck(*slides: str) -> str:
    """A reveal.js deck in the lecture's DOM: one flat ``section.lecture-slide`` per slide."""
    sections = "\n".join(f'<section class="lecture-slide" id="s{i}">{body}</section>'
                         for i, body in enumerate(slides, 1))
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>deck</title>
<link rel="stylesheet" href="assets/reveal.js/dist/reveal.css">
<link rel="stylesheet" href="assets/reveal.js/dist/theme/white.css">
<style>{STYLE}</style>
<script>window.MathJax = {{tex: {{inlineMath: [["$", "$"]]}}, svg: {{fontCache: "global"}}}};</script>
<script src="assets/mathjax/es5/tex-svg-full.js"></script>
</head><body><div class="reveal lecture"><div class="slides">
{sections}
</div></div>
<script src="assets/reveal.js/dist/reveal.js"></script>
<script>Reveal.initialize({{width: 1280, height: 720, margin: 0, center: false, hash: true, transition: "none"}});</script>
</body></html>"""


def figure(width: int, height: int, font: int, label: str = "softmax") -> str:
    """An inline SVG drawn in a 1280 x 720 coordinate system, shown ``width`` x ``height`` on the
    slide: its text is ``font * width / 1280`` px on screen, as matplotlib's SVG would be."""
    return (f'<figure class="lecture-figure"><svg width="{width}" height="{height}" viewBox="0 0 1280 720">'
            f'<rect x="100" y="100" width="400" height="300" fill="#8cf"/>'
            f'<text x="120" y="480" style="font: {font}px sans-serif">{label} <tspan>scores</tspan></text>'
            f'<image x="600" y="100" width="4" height="4" href="data:image/png;base64,{PIXEL}"/></svg></figure>')


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
CODE = '<pre class="lecture-code"><code>scores = Q @ K.T / d_k ** 0.5\nweights = scores.softmax(-1)</code></pre>'
NOTES = '<aside class="notes">' + "A talking point for the speaker, never seen by the hall. " * 20 + "</aside>"

GOOD = (
    '<h2>Scaled dot-product attention</h2><ul class="lecture-points"><li>each query scores every key</li>'
    '<li>the scores are divided by $\\sqrt{d_k}$</li><li>a softmax turns them into weights</li></ul>'
    + CODE + NOTES,
    "<h2>The weights, drawn</h2>" + figure(1024, 576, 28),
    '<h2>One step, then the next</h2><div class="r-stack">' + figure(1024, 576, 28)
    + figure(1024, 576, 28).replace('class="lecture-figure"', 'class="lecture-figure fragment"') + "</div>",
    '<h2>What it prints</h2><pre class="lecture-output">tensor([[0.50, 0.50],\n        [0.27, 0.73]])</pre>'
    '<p>See the <a href="other.html#/2">next deck</a>.</p>',
    '<h2>A table</h2><table><tr><th>d_k</th><th>spread</th></tr><tr><td>64</td><td>8</td></tr></table>'
    '<ol><li>first</li><li>second</li></ol>',
)

LONG_LINE = "print(" + ", ".join(f"weights[{i}]" for i in range(14)) + ")"
# Each bad slide breaks one rule; the pattern is what its message must say.
BAD = {
    "words": ('<h2>Too much to read</h2><p>' + "many words " * 40 + "</p>",
              rf"{4 + 2 * 40} words of prose, more than {MAX_WORDS}"),
    "prose": ('<h2>Small print</h2><ul><li style="font-size: 18px">too small</li></ul>',
              rf"prose at 18\.0 px on screen \(li \"too small\"\), less than {MIN_PROSE_PX} px"),
    "code": ('<h2>Small code</h2><pre style="font-size: 14px">x = 1</pre>',
             rf"code at 14\.0 px on screen \(pre \"x = 1\"\), less than {MIN_CODE_PX} px"),
    "figure": ("<h2>A figure shrunk</h2>" + figure(320, 180, 20),
               rf"figure text at 5\.0 px on screen \(text \"softmax scores\"\), less than {MIN_FIGURE_TEXT_PX} px"),
    "raster": (f'<h2>A picture</h2><img src="data:image/png;base64,{PIXEL}" width="200" height="100" alt="">',
               re.escape(RASTER)),
    "scroll": ('<h2>Output in a box</h2><pre style="max-height: 100px; overflow-y: auto">'
               + "\n".join(f"line {i}" for i in range(20)) + "</pre>",
               r"a scroll box \(pre \"line 0 .*\) hides \d+ px below and 0 px beside"),
    "right": ('<h2>Too wide</h2><div style="width: 1500px">a wide table</div>',
              r"div \"a wide table\" runs 220 px past the right edge of the slide \(at most 2\)"),
    "left": ('<h2>Off the left</h2><div style="margin-left: -100px">pushed out</div>',
             r"div \"pushed out\" starts 100 px left of the slide's left edge \(at most 2\)"),
    "tall": ('<h2>Too tall</h2><div style="height: 900px"></div>', r"is 9\d\d px tall, more than 720 \+ 24"),
    "wrapped": (f"<h2>A long line</h2><pre>{LONG_LINE}\nprint()</pre>",
                r"pre \"print\(weights.*\" has 2 lines of text drawn on [3-9]: lines wrapped"),
    "heading": ("<h2>" + "a heading that goes on " * 12 + "</h2>",
                r"heading h2 \"a heading .*\" wraps to \d lines, more than 2"),
    "split": ("<ul><li>the rest of a list</li><li>cut in two</li></ul>",
              r"a list or table continued from the previous slide \(the slide has no heading and opens with a <ul>\)"),
    "numbered": ('<h2>Steps, continued</h2><ol start="4"><li>fourth</li></ol>',
                 r"a list or table continued from the previous slide \(a numbered list starts at 4\)"),
    "link": ('<h2>The deck</h2><p><a href="../build/slides/03.slides.html.html">deck 03</a></p>',
             rf"link to file://.*/03\.slides\.html\.html: {DECK_SOURCE}"),
}


@pytest.fixture(scope="module")
def browser():
    with offline_browser(1280, 720) as context:
        yield context


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("decks")
    install_assets(root / "assets")
    (root / "good.html").write_text(deck(*GOOD), encoding="utf-8")
    (root / "bad.html").write_text(deck(*(body for body, _ in BAD.values())), encoding="utf-8")
    return root


def measured(browser, path):
    log = PageLog()
    page = open_page(browser, path.as_uri(), log)
    try:
        wait_for_mathjax(page)
        return lecture_report(page), log
    finally:
        page.close()


@pytest.fixture(scope="module")
def good(browser, folder):
    return measured(browser, folder / "good.html")


@pytest.fixture(scope="module")
def bad(browser, folder):
    return measured(browser, folder / "bad.html")[0]


def test_a_deck_an_audience_can_read_has_no_problem(good):
    stats, log = good
    assert stats.problems == [] and log.failed_requests == [] and log.console_errors == []
    assert stats.slides == len(GOOD)


def test_the_good_deck_is_measured_as_drawn(good):
    stats, _ = good
    assert stats.smallest_prose_px == pytest.approx(26, abs=0.1)  # the body text, at scale 1
    assert stats.smallest_code_px == pytest.approx(21, abs=0.1)
    assert stats.smallest_figure_text_px == pytest.approx(28 * 1024 / 1280, abs=0.1)  # 22.4 px on screen
    assert 0 < stats.most_words <= MAX_WORDS and stats.most_heading_lines == 1
    assert stats.raster_figures == stats.scroll_boxes == stats.wrapped_blocks == stats.split_lists == 0


def test_the_notes_and_the_equations_are_not_counted_as_prose(good):
    # Slide 1: 3 words of heading and 17 of points (the equation one word); 220 words of notes and
    # the code left out.
    stats, _ = good
    assert stats.most_words == 20


@pytest.mark.parametrize("rule", list(BAD))
def test_each_rule_fails_on_its_own_slide_and_names_it(bad, rule):
    number = list(BAD).index(rule) + 1
    pattern = BAD[rule][1]
    here = [p for p in bad.problems if p.startswith((f"slide {number}:", f"slide {number} "))]
    assert any(re.search(pattern, p) for p in here), f"slide {number} ({rule}): {here}"


def test_no_rule_fails_on_a_slide_that_does_not_break_it(bad):
    numbers = [int(re.match(r"slide (\d+)", p).group(1)) for p in bad.problems]
    assert sorted(numbers) == list(range(1, len(BAD) + 1)), "\n".join(bad.problems)


def test_audience_report_is_the_list_of_problems(browser, folder):
    page = open_page(browser, (folder / "bad.html").as_uri(), PageLog())
    wait_for_mathjax(page)
    assert len(audience_report(page)) == len(BAD)
    page.close()
