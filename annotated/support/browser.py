"""Headless Chromium with the network off, for checking the decks and the site as a reader's
browser shows them (``tests/test_browser.py``, ``python -m annotated.support.slide_layout``).

Chromium is Debian's package (``apt-get install chromium``; ``.ci/run`` installs it), driven
with Playwright's Python API; give another binary with ``ANNOTATED_CHROMIUM=PATH``. Every
request that is not for a local file is refused and recorded, so a page that would need the
network shows it as a failed request rather than silently using it.
"""

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from annotated.support.errors import CourseError

CHROMIUM_ENV_VAR = "ANNOTATED_CHROMIUM"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Without the background-networking flags Chromium keeps trying to reach Google's servers.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


class BrowserError(CourseError, RuntimeError):
    """No usable Chromium, or no Playwright; the message says how to install them."""


def find_chromium() -> Path:
    """``$ANNOTATED_CHROMIUM``, else the first Chromium on the PATH."""
    given = os.environ.get(CHROMIUM_ENV_VAR)
    if given:
        if not Path(given).is_file():
            raise BrowserError(f"{CHROMIUM_ENV_VAR}={given} is not a file: give the path of a Chromium binary")
        return Path(given)
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise BrowserError("no Chromium found: install Debian's package (`sudo apt-get install chromium`) "
                       f"or set {CHROMIUM_ENV_VAR} to a Chromium binary")


def browser_missing() -> str:
    """Why the browser tests cannot run here ("" when they can). Where ``ANNOTATED_REQUIRE_BROWSER=1``
    (CI) a missing browser is an error, not a reason to skip."""
    try:
        find_chromium()
        return ""
    except BrowserError as err:
        if os.environ.get("ANNOTATED_REQUIRE_BROWSER") == "1":
            raise RuntimeError(f"ANNOTATED_REQUIRE_BROWSER=1 but {err}") from None
        return str(err)


@dataclass
class PageLog:
    """What went wrong while a page loaded: requests that failed (or were refused because they
    were not local) and console errors, uncaught exceptions among them."""
    failed_requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)


@contextmanager
def offline_browser(width: int = 1280, height: int = 720) -> Iterator:
    """A Playwright browser context with a ``width`` x ``height`` viewport in which only
    ``file://`` and ``data:`` URLs load. Pages made with :func:`open_page` keep a :class:`PageLog`."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as err:
        raise BrowserError("the browser checks need Playwright's Python package: `pip install -e \".[test]\"`") from err
    chromium = find_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=FLAGS)
        try:
            context = browser.new_context(viewport={"width": width, "height": height}, offline=True)
            yield context
        finally:
            browser.close()


def open_page(context, url: str, log: PageLog):
    """Open ``url`` in a new page of ``context``, recording failures into ``log``."""
    page = context.new_page()

    def route(route_) -> None:
        if route_.request.url.startswith(("file:", "data:", "blob:", "about:")):
            route_.continue_()
        else:
            log.failed_requests.append(f"{route_.request.url} (refused: not a local file)")
            route_.abort()

    page.route("**/*", route)
    page.on("requestfailed", lambda request: log.failed_requests.append(f"{request.url} ({request.failure})"))
    page.on("console", lambda message: log.console_errors.append(message.text)
            if message.type == "error" else None)
    page.on("pageerror", lambda error: log.console_errors.append(f"uncaught: {error}"))
    page.goto(url, wait_until="load")
    return page


def wait_for_mathjax(page, timeout_ms: int = 60_000) -> None:
    """Return when MathJax has finished typesetting the page (at once if the page has none)."""
    page.wait_for_function("() => !window.MathJax || (MathJax.startup && MathJax.startup.promise)",
                           timeout=timeout_ms)
    page.evaluate("() => window.MathJax && MathJax.startup.promise.then(() => true)")
