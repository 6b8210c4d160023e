"""The site and the decks in a real browser: headless Chromium, network off.

Runs where Debian's Chromium is installed (``.ci/run`` installs it and sets
``ANNOTATED_REQUIRE_BROWSER=1``, so that there a missing browser fails instead of skipping).
The screenshots go to ``build/screenshots/`` for a person to look at.
"""

import re
import struct
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

from annotated.support.browser import (BrowserError, PageLog, browser_missing, offline_browser, open_page,
                                       wait_for_mathjax)
from annotated.support.course import ROOT
from annotated.support.site_check import (
    OVERFLOW_ALLOWED, SCREENSHOT_PAGES, SCREENSHOTS, check_site,
)
from annotated.support.lecture import SLIDES_PER_SESSION, build as build_lectures, plans as lecture_plans, write_pdfs
from annotated.support.slides import SLIDE_HEIGHT, build as build_decks, install_assets

NO_BROWSER = browser_missing()
pytestmark = pytest.mark.skipif(bool(NO_BROWSER), reason=NO_BROWSER)


@pytest.fixture(scope="module")
def report(built_site):
    return check_site(built_site.out, SCREENSHOTS)


def test_every_page_and_deck_loads_offline_with_no_failed_request_console_error_or_broken_link(report):
    assert not report.problems, "\n".join(report.problems[:20])


def test_every_page_of_the_site_was_opened(report, built_site):
    pages = [p for p in built_site.out.rglob("*.html") if "assets" not in p.relative_to(built_site.out).parts]
    assert len(report.pages) == len(pages) > 60


def test_math_is_typeset_on_every_page_that_has_math(report, built_site):
    by_page = {p.page: p for p in report.pages}
    for folder in ("notebooks", "solutions"):
        for notebook in sorted((ROOT / folder).glob("*.ipynb")):
            text = "".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "markdown")
            if "$" in text:
                assert by_page[f"{folder}/{notebook.stem}.html"].math > 0, notebook
    assert by_page["notebooks/01_softmax_and_scaling.html"].math >= 50
    assert by_page["slides/01_softmax_and_scaling.slides.html"].math >= 50


def test_the_figures_are_on_the_pages(report):
    by_page = {p.page: p for p in report.pages}
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = nbformat.read(notebook, as_version=4).cells
        figures = sum("image/png" in out.get("data", {}) for c in cells for out in c.get("outputs", []))
        assert by_page[f"notebooks/{notebook.stem}.html"].images >= figures, notebook


def test_every_slide_of_every_deck_fits_the_1280_by_720_screen(report):
    decks = [p for p in report.pages if p.page.startswith("slides/")]
    assert len(decks) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    for deck in decks:
        assert deck.slides >= 10, deck.page
        assert deck.tallest_slide <= SLIDE_HEIGHT + OVERFLOW_ALLOWED, (deck.page, deck.tallest_slide)


def test_every_notebook_has_a_lecture_deck_that_passes_the_audience_check(report):
    """The check itself (words, font sizes, figure text, scroll boxes, edges, wrapped lines, split lists)
    is tested rule by rule in tests/test_audience.py; here every lecture deck of the site passes it."""
    stats = report.lectures
    assert stats.decks == len(list((ROOT / "notebooks").glob("*.ipynb"))) == len(lecture_plans())
    assert stats.slides >= SLIDES_PER_SESSION[0] * stats.decks, stats.summary()
    assert not stats.problems, "\n".join(stats.problems[:20])
    print(stats.summary())  # the sizes the README states: run with -s to read them
    assert stats.most_words <= 60 and stats.smallest_prose_px >= 24 and stats.smallest_code_px >= 20
    assert stats.smallest_figure_text_px >= 14, stats.summary()


def test_the_guide_pages_link_their_lecture_decks_not_pages_of_their_source(report):
    by_page = {p.page: p for p in report.pages}
    for plan in lecture_plans():
        links = by_page[f"guide/{plan.stem}.html"].links
        assert any(link.endswith(f"/lectures/{plan.stem}.html") for link in links), plan.stem
        assert not any(link.endswith(".html.html") for link in links), plan.stem


def test_the_explorer_page_loads_offline_and_notebook_10_links_to_it(report, built_site):
    by_page = {p.page: p for p in report.pages}
    assert by_page["explorer/index.html"].problems == []
    page = (built_site.out / "notebooks" / "12_what_the_heads_learned.html").read_text(encoding="utf-8")
    assert 'href="../explorer/index.html"' in page and "widget-view+json" not in page


def pdf_pages(pdf) -> int:
    return len(re.findall(rb"/Type\s*/Page(?!s)", pdf.read_bytes()))


def pdf_links(pdf) -> list[str]:
    """The targets of a PDF's links (Chromium writes each as a /URI action)."""
    return [uri.decode("latin-1") for uri in re.findall(rb"/URI\s*\(([^)]*)\)", pdf.read_bytes())]


def test_a_pdf_handout_has_one_page_per_slide_and_links_only_to_the_web(built_site, tmp_path):
    deck = built_site.out / "lectures" / "02_scaled_dot_product_attention.html"
    pdf = write_pdfs([deck], tmp_path)[0]
    assert pdf.read_bytes()[:5] == b"%PDF-"
    slides = deck.read_text(encoding="utf-8").count('<section class="lecture-slide')
    assert pdf_pages(pdf) == slides
    # No path of the machine that printed it, no link into the folder it was built in (since deleted).
    assert not [uri for uri in pdf_links(pdf) if not uri.startswith(("https://", "http://"))], pdf_links(pdf)


def test_a_handout_prints_2_or_4_slides_a_page_and_the_speaker_notes(standalone_decks, tmp_path):
    deck = standalone_decks / "04_multi_head_attention.html"
    slides = deck.read_text(encoding="utf-8").count('<section class="lecture-slide')
    two = write_pdfs([deck], tmp_path / "two", per_page=2)[0]
    four = write_pdfs([deck], tmp_path / "four", per_page=4)[0]
    assert (pdf_pages(two), pdf_pages(four)) == (-(-slides // 2), -(-slides // 4))
    noted = write_pdfs([deck], tmp_path / "notes", notes=True, per_page=4)[0]
    assert pdf_pages(noted) >= -(-slides // 4) and noted.stat().st_size > four.stat().st_size
    for pdf in (two, four, noted):
        assert not [uri for uri in pdf_links(pdf) if not uri.startswith(("https://", "http://"))], pdf


RAW = (".md", ".ipynb", ".toml")  # a browser shows these as source text


def raw_or_missing(url: str) -> str | None:
    """Why a link found in a page is wrong (it opens raw source, or nothing), or None."""
    parts = urlsplit(url)
    if parts.scheme != "file":
        return None
    target = Path(unquote(parts.path))
    if target.suffix.lower() in RAW:
        return f"{url} opens raw source"
    if not target.exists():
        return f"{url} does not exist"
    return None


@pytest.fixture(scope="module")
def standalone_decks(tmp_path_factory):
    """Every lecture deck built on its own, as ``python -m annotated.support.lecture`` builds build/lectures/."""
    out = tmp_path_factory.mktemp("lectures") / "lectures"
    build_lectures(lecture_plans(), out)
    return out


def test_no_link_of_a_deck_built_on_its_own_opens_a_raw_or_missing_file_nor_the_guide(standalone_decks):
    decks = sorted(standalone_decks.glob("*.html"))
    assert len(decks) == len(lecture_plans())
    problems = []
    with offline_browser(1280, 720) as context:
        for deck in decks:
            page = open_page(context, deck.as_uri(), PageLog())
            found = page.evaluate("""() => ({
                links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
                shown: Array.from(document.querySelectorAll('a[href]')).filter(a => !a.closest('aside.notes'))
                            .map(a => a.textContent)})""")
            page.close()
            problems += [f"{deck.name}: {why}" for why in map(raw_or_missing, found["links"]) if why]
            problems += [f"{deck.name}: a link the audience sees: {text}" for text in found["shown"]
                         if "guide" in text.lower()]
    assert not problems, "\n".join(problems[:20])


def test_no_link_of_the_site_opens_a_raw_or_missing_file(report):
    problems = [f"{page.page}: {why}" for page in report.pages for why in map(raw_or_missing, page.links) if why]
    assert not problems, "\n".join(problems[:20])


def test_the_screenshots_are_written_for_a_person_to_look_at(report):
    shots = sorted(SCREENSHOTS.glob("*.png"))
    expected = {name.replace("/", "_").removesuffix(".html") + ".png" for name in SCREENSHOT_PAGES}
    assert expected <= {p.name for p in shots}
    for shot in shots:
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", data[16:24]) == (1280, 720), shot
        assert len(data) > 20_000, f"{shot} is nearly empty"


# ---------------------------------------------------------------- the check catches each fault


def _page(body: str, assets: str = "assets") -> str:
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title>'
            f'<script>window.MathJax = {{tex: {{inlineMath: [["$", "$"]]}}}};</script>'
            f'<script src="{assets}/mathjax/es5/tex-svg-full.js"></script></head><body>{body}</body></html>')


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory):
    """A small site with one fault per page, next to a good page, using the real assets."""
    root = tmp_path_factory.mktemp("broken")
    install_assets(root / "assets")
    pages = {
        "good.html": '<p>Fine: $x^2$ and <a href="cdn.html">a page</a> and <a href="good.html#here">here</a>'
                     '<span id="here"></span></p>',
        "cdn.html": '<script src="https://cdn.example.org/lib.js"></script>',
        "console.html": '<script>console.error("boom")</script>',
        "image.html": '<img src="missing.png" alt="">',
        "link.html": '<a href="nowhere.html">x</a> <a href="good.html#absent">y</a>',
        "tex.html": "<p>$$\\frac{a}{b$$</p>",
    }
    for name, body in pages.items():
        (root / name).write_text(_page(body), encoding="utf-8")
    # A deck with a slide far taller than the screen: forty printed lines forced onto one slide.
    tall = nbformat.v4.new_code_cell("print('\\n'.join(map(str, range(40))))",
                                     metadata={"slideshow": {"slide_type": "slide"}})
    tall.outputs = [nbformat.v4.new_output("stream", text="\n".join(map(str, range(40))) + "\n")]
    words = [nbformat.v4.new_markdown_cell(f"Line {i} of words.", metadata={"slideshow": {"slide_type": "-"}})
             for i in range(30)]
    notebook = root / "tall.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[tall, *words]), notebook)
    build_decks([notebook], root / "slides", root / "assets")
    return check_site(root, screenshots=None)


def test_the_check_reports_each_fault_on_its_own_page(broken_site):
    problems = {p.page: p.problems for p in broken_site.pages}
    assert problems["good.html"] == [] and problems["cdn.html"]
    assert any("https://cdn.example.org/lib.js" in p and "refused" in p for p in problems["cdn.html"])
    assert any("console error: boom" in p for p in problems["console.html"])
    assert any("images that did not load" in p for p in problems["image.html"])
    assert any("TeX left untypeset" in p for p in problems["tex.html"])
    assert any("slide 0/0 is" in p and "slide_layout" in p for p in problems["slides/tall.slides.html"])
    broken = "\n".join(broken_site.broken_links)
    assert "link.html: link to nowhere.html, which does not exist" in broken
    assert "link.html: link to good.html#absent, which has no such anchor" in broken
    assert "good.html" not in broken.replace("link.html: link to good.html#absent", "")


NEVER_READY = """<!doctype html><html><head><title>never ready</title><script>
window.Reveal = {isReady: () => false};  // a deck whose reveal.js never starts
window.MathJax = {startup: {promise: new Promise(() => {})}};  // typesetting that never ends
</script></head><body><p>x</p></body></html>"""


@pytest.mark.parametrize("wait, what", [
    (lambda page: page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=500),
     r"reveal\.js \(Reveal\.isReady\(\)\) did not become ready within 0\.5 s"),
    (lambda page: page.wait_for_function("() => document.querySelector('.reveal .slides > .pdf-page')", timeout=500),
     r"reveal\.js's print view \(its \.pdf-page elements\) did not become ready within 0\.5 s"),
    (lambda page: wait_for_mathjax(page, timeout_ms=500), r"MathJax.* did not become ready within 0\.5 s"),
], ids=["reveal", "print view", "mathjax"])
def test_a_page_that_never_becomes_ready_is_one_line_naming_the_page_and_what_it_waited_for(tmp_path, wait, what):
    # Before: Playwright's TimeoutError traceback after 30 s ("Timeout 30000ms exceeded"), naming neither.
    deck = tmp_path / "lectures" / "never.html"
    deck.parent.mkdir()
    deck.write_text(NEVER_READY, encoding="utf-8")
    with offline_browser() as context:
        page = open_page(context, deck.as_uri() + "?print-pdf", PageLog())
        with pytest.raises(BrowserError, match=r"^lectures/never\.html\?print-pdf: " + what + "; open the page") as caught:
            wait(page)
    assert "\n" not in str(caught.value)
