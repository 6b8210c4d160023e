"""Opens every page of the built site and every slide deck in headless Chromium with the
network off, and says what a reader would hit: ``python -m annotated.support.site_check``.

    python -m annotated.support.site            # build first
    python -m annotated.support.site_check      # then check build/site; screenshots in build/screenshots
    python -m annotated.support.site_check --slide 04_multi_head_attention:3   # and of that lecture slide

Per page: no failed request (a request for anything but a local file counts as failed), no
console error, every equation typeset by MathJax (none left as raw TeX, none in error), every
image loaded, every link inside the site resolving to a file and, with a ``#fragment``, to an
element of that page (in a lecture deck, ``#/N`` or ``#/id`` to a slide it has), no link to the
page of a deck's source instead of the deck. Per lecture deck (``lectures/*.html``): every slide
as an audience sees it, by the rules of :mod:`annotated.support.audience` (words, font sizes on
screen, figure text, scroll boxes, edges, wrapped lines, split lists, links), each problem naming
its slide. Per full notebook deck (``slides/*.slides.html``): every (sub)slide no taller than the
720-pixel slide by more than ``OVERFLOW_ALLOWED`` pixels, measured with all its fragments shown.
"""

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from annotated.support.audience import DECK_SOURCE, OVERFLOW_ALLOWED, LectureStats, ends_in_html_html, lecture_report
from annotated.support.browser import PageLog, offline_browser, open_page, wait_for_mathjax
from annotated.support.course import ROOT
from annotated.support.errors import run_command
from annotated.support.files import signals_as_interrupt, write_bytes
from annotated.support.site import DEFAULT_OUT
from annotated.support.slide_layout import slide_heights
from annotated.support.slides import SLIDE_HEIGHT, SLIDE_WIDTH

SCREENSHOTS = ROOT / "build" / "screenshots"
SCREENSHOT_PAGES = ("index.html", "notebooks/02_scaled_dot_product_attention.html")

# Run in the page: what the check needs to know about it.
INSPECT = """() => {
    const body = document.body.cloneNode(true);
    body.querySelectorAll('pre, code, script, style, mjx-container, .jp-OutputArea, .highlight, nav')
        .forEach(e => e.remove());
    const raw = (body.textContent.match(/\\$\\$|\\\\(frac|sqrt|text|mathrm|sum|left|right|top)\\b/g) || []);
    return {
        math: document.querySelectorAll('mjx-container').length,
        mathErrors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
        rawTex: raw.slice(0, 5),
        images: Array.from(document.images).map(img => [img.currentSrc.slice(0, 80), img.complete && img.naturalWidth > 0]),
        links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
        ids: Array.from(document.querySelectorAll('[id], a[name]')).map(e => e.id || e.name),
    };
}"""


@dataclass
class PageReport:
    page: str
    problems: list[str] = field(default_factory=list)
    math: int = 0
    images: int = 0
    links: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    tallest_slide: float = 0.0
    slides: int = 0
    lecture: LectureStats | None = None  # what an audience sees, for a lecture deck


@dataclass
class SiteReport:
    pages: list[PageReport]
    broken_links: list[str]

    @property
    def problems(self) -> list[str]:
        return [f"{p.page}: {problem}" for p in self.pages for problem in p.problems] + self.broken_links

    @property
    def lectures(self) -> LectureStats:
        """The lecture decks' count, slides and worst value of each measure, over the whole site."""
        return sum((p.lecture for p in self.pages if p.lecture), LectureStats())


def is_lecture(page: str) -> bool:
    """A page of the site that is a lecture deck: ``lectures/NN_name.html``."""
    parts = page.split("/")
    return len(parts) == 2 and parts[0] == "lectures" and parts[1].endswith(".html")


def deck_source_links(root: Path) -> Callable[[str], bool]:
    """Whether a link points at a page of a deck's source rather than at a deck of the site under
    ``root``: a page named ``....html.html``, or a file named like a deck of ``slides/`` or
    ``lectures/`` in another folder of that name (the repository's ``build/slides/`` shown as
    source pages)."""
    root = root.resolve()
    decks = {("slides", p.name) for p in (root / "slides").glob("*.slides.html")}
    decks |= {("lectures", p.name) for p in (root / "lectures").glob("*.html")}

    def is_source(url: str) -> bool:
        parts = urlsplit(url)
        if ends_in_html_html(url):
            return True
        if parts.scheme != "file":
            return False
        target = Path(unquote(parts.path)).resolve()
        if not target.is_relative_to(root):
            return False
        rel = target.relative_to(root).parts
        return len(rel) > 2 and rel[-2:] in decks
    return is_source


def inspect_page(context, path: Path, root: Path,
                 deck_source: Callable[[str], bool] = ends_in_html_html) -> PageReport:
    report = PageReport(path.relative_to(root).as_posix())
    log = PageLog()
    page = open_page(context, path.as_uri(), log)
    try:
        wait_for_mathjax(page)
        seen = page.evaluate(INSPECT)
        if is_lecture(report.page):
            report.lecture = lecture_report(page, deck_source)
            report.problems += report.lecture.problems
            report.slides, report.tallest_slide = report.lecture.slides, report.lecture.tallest_px
        elif report.page.startswith("slides/") and path.name.endswith(".slides.html"):
            heights = slide_heights(page)
            report.slides = len(heights)
            report.tallest_slide = max(h for h, _ in heights)
            for height, index in heights:
                if height > SLIDE_HEIGHT + OVERFLOW_ALLOWED:
                    report.problems.append(f"slide {index} is {height:.0f} px tall, more than {SLIDE_HEIGHT} + "
                                           f"{OVERFLOW_ALLOWED}: run `python -m annotated.support.slide_layout`")
    finally:
        page.close()
    report.problems += [f"failed request: {r}" for r in log.failed_requests]
    report.problems += [f"console error: {e}" for e in log.console_errors]
    if seen["mathErrors"]:
        report.problems.append(f"{seen['mathErrors']} equations MathJax could not typeset")
    if seen["rawTex"]:
        report.problems.append(f"TeX left untypeset: {seen['rawTex']}")
    broken = [src for src, ok in seen["images"] if not ok]
    if broken:
        report.problems.append(f"images that did not load: {broken}")
    on_slides = set(report.lecture.source_links) if report.lecture else set()  # reported with their slide
    report.problems += [f"link to {link}: {DECK_SOURCE}" for link in dict.fromkeys(seen["links"])
                        if deck_source(link) and link not in on_slides]
    report.math, report.images = seen["math"], len(seen["images"])
    report.links, report.ids = seen["links"], set(seen["ids"])
    return report


def check_links(reports: list[PageReport], root: Path) -> list[str]:
    """Every link that points into the site names a file that exists, and its #fragment an
    element of that page."""
    by_page = {(root / r.page).resolve(): r for r in reports}
    broken = []
    for report in reports:
        for link in dict.fromkeys(report.links):  # a link repeated on a page is reported once
            parts = urlsplit(link)
            if parts.scheme != "file":
                continue
            target = Path(unquote(parts.path)).resolve()
            if not target.is_relative_to(root.resolve()):
                broken.append(f"{report.page}: link {link} leaves the site")
            elif not target.is_file():
                broken.append(f"{report.page}: link to {target.relative_to(root.resolve())}, which does not exist")
            elif parts.fragment.startswith("/") and is_lecture(target.relative_to(root.resolve()).as_posix()):
                # reveal.js's own links: #/N (0-based) or #/id of a slide
                page = by_page.get(target)
                slide = unquote(parts.fragment)[1:].split("/")[0]
                if page is not None and page.lecture and not (
                        slide in page.ids or (slide.isdigit() and int(slide) < page.lecture.slides)):
                    broken.append(f"{report.page}: link to {page.page}#{unquote(parts.fragment)}, a slide the deck "
                                  f"does not have ({page.lecture.slides} slides, #/0 to #/{page.lecture.slides - 1})")
            elif parts.fragment and not target.name.endswith(".slides.html"):
                # Browsers try the fragment as written, then percent-decoded (nbconvert's ids keep the %-escapes).
                page = by_page.get(target)
                if page is not None and not {parts.fragment, unquote(parts.fragment)} & page.ids:
                    broken.append(f"{report.page}: link to {page.page}#{unquote(parts.fragment)}, which has no "
                                  f"such anchor")
    return broken


def check_site(root: Path, screenshots: Path | None = SCREENSHOTS,
               lecture_slides: Sequence[tuple[str, int]] = ()) -> SiteReport:
    """Open every page under ``root`` (the assets aside); write screenshots of SCREENSHOT_PAGES,
    of a full deck's third slide and of ``lecture_slides`` into ``screenshots``
    (:func:`take_screenshots`)."""
    root = root.resolve()
    pages = sorted(p for p in root.rglob("*.html") if "assets" not in p.relative_to(root).parts)
    if not pages:
        raise FileNotFoundError(f"{root} holds no pages: build the site first (python -m annotated.support.site)")
    reports = []
    deck_source = deck_source_links(root)
    with offline_browser(SLIDE_WIDTH, SLIDE_HEIGHT) as context:
        for path in pages:
            reports.append(inspect_page(context, path, root, deck_source))
        if screenshots is not None:
            take_screenshots(context, root, screenshots, lecture_slides)
    return SiteReport(reports, check_links(reports, root))


def take_screenshots(context, root: Path, folder: Path, lecture_slides: Sequence[tuple[str, int]] = ()) -> list[Path]:
    """Screenshots of SCREENSHOT_PAGES (those the site has), of the third deck's third slide, and of
    each (lecture deck name, 1-based slide number) of ``lecture_slides`` (by default the third
    slide of the first lecture deck), as an audience sees it, every fragment shown."""
    root = root.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    shots = []
    for name in SCREENSHOT_PAGES:
        if not (root / name).is_file():
            continue
        page = open_page(context, (root / name).as_uri(), PageLog())
        wait_for_mathjax(page)
        shot = folder / (name.replace("/", "_").removesuffix(".html") + ".png")
        write_bytes(shot, page.screenshot(full_page=False), option="--screenshots")  # whole, never through a link
        page.close()
        shots.append(shot)
    decks = sorted((root / "slides").glob("*.slides.html"))
    if decks:
        deck = decks[min(2, len(decks) - 1)]
        shots.append(screenshot_slide(context, deck, 3, folder / f"slide_{deck.stem.removesuffix('.slides')}.png",
                                      strict=False))
    lectures = sorted((root / "lectures").glob("*.html"))
    if lectures and not lecture_slides:
        lecture_slides = [(lectures[0].stem, 3)]
    for name, number in lecture_slides:
        deck = root / "lectures" / f"{name.removesuffix('.html')}.html"
        if not deck.is_file():
            raise FileNotFoundError(f"no lecture deck {deck.relative_to(root)}; the site has "
                                    f"{', '.join(p.stem for p in lectures) or 'none'}")
        shots.append(screenshot_slide(context, deck, number, folder / f"lecture_{deck.stem}_{number}.png"))
    return shots


def screenshot_slide(context, deck: Path, number: int, shot: Path, strict: bool = True) -> Path:
    """The ``number``-th slide (1-based, in the deck's order) of a reveal.js deck, every fragment
    shown, into ``shot``; a deck with fewer slides is an error, or if not ``strict`` its last slide
    is taken."""
    page = open_page(context, deck.as_uri(), PageLog())
    wait_for_mathjax(page)
    page.wait_for_function("() => window.Reveal && Reveal.isReady()")
    found = page.evaluate("""([number, strict]) => {
        Reveal.configure({transition: 'none'});
        const slides = Reveal.getSlides();
        if (number > slides.length && strict) return slides.length;
        const at = Reveal.getIndices(slides[Math.min(number, slides.length) - 1]);
        Reveal.slide(at.h, at.v, Number.MAX_SAFE_INTEGER);
        return 0;
    }""", [number, strict])
    if found:
        page.close()
        raise ValueError(f"{deck.name} has {found} slides, no slide {number}")
    page.wait_for_timeout(500)  # the slide's fade-in
    write_bytes(shot, page.screenshot(), option="--screenshots")
    page.close()
    return shot


def _lecture_slide(text: str) -> tuple[str, int]:
    name, _, number = text.rpartition(":")
    if not name or not number.isdigit() or int(number) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a lecture deck and a slide, as 04_multi_head_attention:3")
    return name, int(number)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.site_check",
                                     description="Check the built site and decks in headless Chromium, offline.")
    parser.add_argument("site", nargs="?", type=Path, default=DEFAULT_OUT,
                        help=f"the built site (default: {DEFAULT_OUT})")
    parser.add_argument("--screenshots", type=Path, default=SCREENSHOTS,
                        help=f"folder for the screenshots (default: {SCREENSHOTS})")
    parser.add_argument("--slide", dest="slides", type=_lecture_slide, action="append", default=[],
                        metavar="DECK:N", help="also take a screenshot of slide N of lectures/DECK.html, every "
                                               "fragment shown (repeat for more; default: slide 3 of the first)")
    args = parser.parse_args(argv)

    def body() -> int:
        report = check_site(args.site, args.screenshots, args.slides)
        decks = [p for p in report.pages if p.page.endswith(".slides.html")]
        print(f"{len(report.pages)} pages, {sum(p.math for p in report.pages)} equations, "
              f"{sum(p.images for p in report.pages)} images, {sum(len(p.links) for p in report.pages)} links; "
              f"{len(decks)} full decks, {sum(p.slides for p in decks)} slides, tallest "
              f"{max((p.tallest_slide for p in decks), default=0):.0f} px")
        print(report.lectures.summary())
        for problem in report.problems:
            print(f"PROBLEM {problem}")
        print(f"screenshots in {args.screenshots}")
        return 1 if report.problems else 0

    with signals_as_interrupt():  # SIGTERM and SIGHUP as Ctrl-C: no half-written screenshot left
        return run_command(body, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
