"""Opens every page of the built site and every slide deck in headless Chromium with the
network off, and says what a reader would hit: ``python -m annotated.support.site_check``.

    python -m annotated.support.site            # build first
    python -m annotated.support.site_check      # then check build/site; screenshots in build/screenshots

Per page: no failed request (a request for anything but a local file counts as failed), no
console error, every equation typeset by MathJax (none left as raw TeX, none in error), every
image loaded, every link inside the site resolving to a file and, with a ``#fragment``, to an
element of that page. Per deck: every (sub)slide no taller than the 720-pixel slide by more than
``OVERFLOW_ALLOWED`` pixels, measured with all its fragments shown.
"""

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from annotated.support.browser import PageLog, offline_browser, open_page, wait_for_mathjax
from annotated.support.course import ROOT
from annotated.support.errors import run_command
from annotated.support.site import DEFAULT_OUT
from annotated.support.slide_layout import slide_heights
from annotated.support.slides import SLIDE_HEIGHT, SLIDE_WIDTH

OVERFLOW_ALLOWED = 24  # pixels a slide may run past the bottom of 720 (its bottom margin)
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


@dataclass
class SiteReport:
    pages: list[PageReport]
    broken_links: list[str]

    @property
    def problems(self) -> list[str]:
        return [f"{p.page}: {problem}" for p in self.pages for problem in p.problems] + self.broken_links


def inspect_page(context, path: Path, root: Path) -> PageReport:
    report = PageReport(path.relative_to(root).as_posix())
    log = PageLog()
    page = open_page(context, path.as_uri(), log)
    try:
        wait_for_mathjax(page)
        seen = page.evaluate(INSPECT)
        if path.name.endswith(".slides.html"):
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
    report.math, report.images = seen["math"], len(seen["images"])
    report.links, report.ids = seen["links"], set(seen["ids"])
    return report


def check_links(reports: list[PageReport], root: Path) -> list[str]:
    """Every link that points into the site names a file that exists, and its #fragment an
    element of that page."""
    by_page = {(root / r.page).resolve(): r for r in reports}
    broken = []
    for report in reports:
        for link in report.links:
            parts = urlsplit(link)
            if parts.scheme != "file":
                continue
            target = Path(unquote(parts.path)).resolve()
            if not target.is_relative_to(root.resolve()):
                broken.append(f"{report.page}: link {link} leaves the site")
            elif not target.is_file():
                broken.append(f"{report.page}: link to {target.relative_to(root.resolve())}, which does not exist")
            elif parts.fragment and not target.name.endswith(".slides.html"):
                # Browsers try the fragment as written, then percent-decoded (nbconvert's ids keep the %-escapes).
                page = by_page.get(target)
                if page is not None and not {parts.fragment, unquote(parts.fragment)} & page.ids:
                    broken.append(f"{report.page}: link to {page.page}#{unquote(parts.fragment)}, which has no "
                                  f"such anchor")
    return broken


def check_site(root: Path, screenshots: Path | None = SCREENSHOTS) -> SiteReport:
    """Open every page under ``root`` (the assets aside); write screenshots of SCREENSHOT_PAGES
    and of the first slide deck's third slide into ``screenshots``."""
    root = root.resolve()
    pages = sorted(p for p in root.rglob("*.html") if "assets" not in p.relative_to(root).parts)
    if not pages:
        raise FileNotFoundError(f"{root} holds no pages: build the site first (python -m annotated.support.site)")
    reports = []
    with offline_browser(SLIDE_WIDTH, SLIDE_HEIGHT) as context:
        for path in pages:
            reports.append(inspect_page(context, path, root))
        if screenshots is not None:
            take_screenshots(context, root, screenshots)
    return SiteReport(reports, check_links(reports, root))


def take_screenshots(context, root: Path, folder: Path) -> list[Path]:
    root = root.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    shots = []
    for name in SCREENSHOT_PAGES:
        page = open_page(context, (root / name).as_uri(), PageLog())
        wait_for_mathjax(page)
        shot = folder / (name.replace("/", "_").removesuffix(".html") + ".png")
        page.screenshot(path=str(shot), full_page=False)
        page.close()
        shots.append(shot)
    decks = sorted((root / "slides").glob("*.slides.html"))
    if decks:
        page = open_page(context, decks[min(2, len(decks) - 1)].as_uri(), PageLog())
        wait_for_mathjax(page)
        page.evaluate("Reveal.configure({transition: 'none'}); Reveal.slide(2, 0)")
        page.wait_for_timeout(500)  # the slide's fade-in
        shot = folder / f"slide_{decks[min(2, len(decks) - 1)].stem.removesuffix('.slides')}.png"
        page.screenshot(path=str(shot))
        page.close()
        shots.append(shot)
    return shots


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.site_check",
                                     description="Check the built site and decks in headless Chromium, offline.")
    parser.add_argument("site", nargs="?", type=Path, default=DEFAULT_OUT,
                        help=f"the built site (default: {DEFAULT_OUT})")
    parser.add_argument("--screenshots", type=Path, default=SCREENSHOTS,
                        help=f"folder for the screenshots (default: {SCREENSHOTS})")
    args = parser.parse_args(argv)

    def body() -> int:
        report = check_site(args.site, args.screenshots)
        decks = [p for p in report.pages if p.slides]
        print(f"{len(report.pages)} pages, {sum(p.math for p in report.pages)} equations, "
              f"{sum(p.images for p in report.pages)} images, {sum(len(p.links) for p in report.pages)} links; "
              f"{len(decks)} decks, {sum(p.slides for p in decks)} slides, tallest "
              f"{max((p.tallest_slide for p in decks), default=0):.0f} px")
        for problem in report.problems:
            print(f"PROBLEM {problem}")
        print(f"screenshots in {args.screenshots}")
        return 1 if report.problems else 0

    return run_command(body, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
