"""The audience check (annotated/support/audience.py) on small decks written here: a good deck
passes, and each rule fails once, on purpose, on a slide of its own, naming that slide.

Runs where Chromium is installed, like tests/test_browser.py; about 20 seconds.
"""

import re
import struct

import pytest

from annotated.support.audience import (
    DECK_SOURCE, MAX_WORDS, MIN_CODE_PX, MIN_FIGURE_TEXT_PX, MIN_PROSE_PX, RASTER, audience_report, lecture_report,
)
from annotated.support.browser import PageLog, browser_missing, offline_browser, open_page, wait_for_mathjax
from annotated.support.site_check import check_site
from annotated.support.slides import install_assets

NO_BROWSER = browser_missing()
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
<script>Reveal.initialize({{width: 1280, height: 720, margin: 0, center: false, hash: true,
                            transition: "none"}});</script>
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
    '<p>See the <a href="good.html#/2">third slide</a>.</p>',
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
    "overlap": ('<h2>Labels on labels</h2><svg width="1024" height="576" viewBox="0 0 1280 720">'
                '<text x="100" y="100" style="font: 30px sans-serif">.view(batch, L, h, d_k)</text>'
                '<text x="200" y="105" style="font: 30px sans-serif">10</text></svg>',
                r"figure labels drawn over each other: text \".view\(batch, L, h, d_k\)\" and text \"10\""),
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
def assets(tmp_path_factory):
    """reveal.js and MathJax, installed once for the module's decks."""
    return install_assets(tmp_path_factory.mktemp("decks") / "assets")


@pytest.fixture(scope="module")
def measured(assets):
    """The good and the bad deck measured, with the good deck's loading log, and the bad deck's
    audience_report; the browser is closed afterwards (the site check opens its own)."""
    root = assets.parent
    (root / "good.html").write_text(deck(*GOOD), encoding="utf-8")
    (root / "bad.html").write_text(deck(*(body for body, _ in BAD.values())), encoding="utf-8")
    result = {}
    with offline_browser(1280, 720) as browser:
        for name in ("good", "bad"):
            log = PageLog()
            page = open_page(browser, (root / f"{name}.html").as_uri(), log)
            wait_for_mathjax(page)
            result[name] = lecture_report(page), log
            if name == "bad":
                result["audience_report"] = audience_report(page)
            page.close()
    return result


@pytest.fixture(scope="module")
def good(measured):
    return measured["good"]


@pytest.fixture(scope="module")
def bad(measured):
    return measured["bad"][0]


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
    assert stats.overlapping_labels == stats.raster_figures == stats.scroll_boxes == 0
    assert stats.wrapped_blocks == stats.split_lists == 0


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


def test_audience_report_is_the_list_of_problems(measured, bad):
    assert measured["audience_report"] == bad.problems


# ---------------------------------------------------------------- wired into the site check


def test_the_site_check_measures_the_lecture_decks_and_the_links_to_them(tmp_path, assets):
    """A small site: a lecture deck, a full deck, and a guide page whose links go to a slide the
    deck has, one it does not have, and two pages of a deck's source."""
    (tmp_path / "assets").symlink_to(assets, target_is_directory=True)
    page = '<!DOCTYPE html><html><head><meta charset="utf-8"><title>p</title></head><body>{}</body></html>'
    for name, text in {"lectures/good.html": deck(*GOOD).replace('"assets/', '"../assets/'),
                       "lectures/bad.html": deck(BAD["words"][0], BAD["link"][0]).replace('"assets/', '"../assets/'),
                       "slides/good.slides.html": deck(GOOD[0]).replace('"assets/', '"../assets/'),
                       "build/slides/good.slides.html": page.format("the deck's source, shown as a page"),
                       "slides/good.slides.html.html": page.format("the deck's HTML source"),
                       "guide/good.html": page.format(
                           '<a href="../lectures/good.html#/2">slides 3</a> <a href="../lectures/good.html#/s5">5</a>'
                           ' <a href="../lectures/good.html#/9">slide 10</a>'
                           ' <a href="../build/slides/good.slides.html">deck</a>'
                           ' <a href="../slides/good.slides.html.html">deck</a>')}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    report = check_site(tmp_path, screenshots=tmp_path / "shots", lecture_slides=[("good", 3)])
    problems = "\n".join(report.problems)
    assert [p for p in report.problems if p.startswith("lectures/good.html")] == []
    assert re.search(r"^lectures/bad\.html: slide 1: 84 words of prose", problems, re.M)
    assert re.search(rf"^lectures/bad\.html: slide 2: link to .*03\.slides\.html\.html: {DECK_SOURCE}",
                     problems, re.M)
    assert "guide/good.html: link to lectures/good.html#/9, a slide the deck does not have (5 slides" in problems
    assert "#/2," not in problems and "#/s5" not in problems
    for source in ("build/slides/good.slides.html", "slides/good.slides.html.html"):
        assert re.search(rf"^guide/good\.html: link to file://.*/{re.escape(source)}: {DECK_SOURCE}", problems, re.M)
    assert not any(p.startswith("slides/good.slides.html:") for p in report.problems)  # the full deck: height only
    assert report.lectures.decks == 2 and report.lectures.slides == len(GOOD) + 2
    assert report.lectures.most_words == 84
    assert "2 lecture decks, 7 slides; at most 84 words of prose (limit 60)" in report.lectures.summary()
    shot = (tmp_path / "shots" / "lecture_good_3.png").read_bytes()  # the slide, as the hall sees it
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", shot[16:24]) == (1280, 720)
