"""Headless Chromium with the network off, for checking the decks and the site as a reader's
browser shows them (``tests/test_browser.py``, ``python -m annotated.support.slide_layout``).

Chromium is Debian's package (``apt-get install chromium``; ``.ci/run`` installs it), driven
with Playwright's Python API; give another binary with ``ANNOTATED_CHROMIUM=PATH``. Every
request that is not for a local file is refused and recorded, so a page that would need the
network shows it as a failed request rather than silently using it.

A page that never becomes ready (a deck whose reveal.js does not start, MathJax that never
finishes, a print view that never lays out) is a :class:`BrowserError` of one line naming the page
and what it waited for, not Playwright's 30-second timeout traceback (or, for MathJax, a wait
without end): :func:`open_page` gives every wait of its page that message.
"""

import functools
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

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
    for name, value in (("width", width), ("height", height)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive number of pixels, got {value!r}; e.g. 1280 x 720")
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


DEFAULT_TIMEOUT_MS = 30_000  # Playwright's own default for a wait
# What a wait's JavaScript condition waits for, in words (the first that the condition names).
WAITED_FOR = (("pdf-page", "reveal.js's print view (its .pdf-page elements)"),
              ("Reveal", "reveal.js (Reveal.isReady())"), ("MathJax", "MathJax"))


def _check_timeout(timeout_ms: float) -> None:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or not 0 < timeout_ms < float("inf"):
        raise ValueError(f"timeout_ms must be a finite number of milliseconds > 0, got {timeout_ms!r}; e.g. 30_000")


def page_name(url: str) -> str:
    """The page's file as the site names it (its folder and name) and its query: 'lectures/04.html?print-pdf'."""
    parts = urlsplit(url)
    path = Path(unquote(parts.path))
    name = "/".join(path.parts[-2:]) if parts.scheme == "file" else url
    return name + (f"?{parts.query}" if parts.query else "")


def not_ready(page, what: str, timeout_ms: float) -> BrowserError:
    return BrowserError(f"{page_name(page.url)}: {what} did not become ready within {timeout_ms / 1000:g} s; open "
                        f"the page in a browser and look at its console (F12) for the script that failed")


def _named_timeouts(page) -> None:
    """Make ``page.wait_for_function`` raise :func:`not_ready` instead of Playwright's TimeoutError."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    wait = page.wait_for_function

    @functools.wraps(wait)
    def wait_for_function(expression: str, *args, **kwargs):
        try:
            return wait(expression, *args, **kwargs)
        except PlaywrightTimeout:
            what = next((words for key, words in WAITED_FOR if key in expression), f"the condition {expression!r}")
            raise not_ready(page, what, kwargs.get("timeout") or DEFAULT_TIMEOUT_MS) from None

    page.wait_for_function = wait_for_function


def open_page(context, url: str, log: PageLog, timeout_ms: float = DEFAULT_TIMEOUT_MS):
    """Open ``url`` in a new page of ``context``, recording failures into ``log``. A page that does
    not load within ``timeout_ms``, and any later ``page.wait_for_function`` that times out, is a
    :class:`BrowserError` naming the page and what it waited for."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    _check_timeout(timeout_ms)
    page = context.new_page()
    _named_timeouts(page)

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
    try:
        page.goto(url, wait_until="load", timeout=timeout_ms)
    except PlaywrightTimeout:
        error = not_ready(page, "the page's load event", timeout_ms)
        page.close()
        raise error from None
    return page


def wait_for_mathjax(page, timeout_ms: int = 60_000) -> None:
    """Return when MathJax has finished typesetting the page (at once if the page has none); a
    :class:`BrowserError` naming the page if it has not after ``timeout_ms``."""
    _check_timeout(timeout_ms)
    page.wait_for_function("() => !window.MathJax || (MathJax.startup && MathJax.startup.promise)",
                           timeout=timeout_ms)
    # A promise that never settles would hold page.evaluate, which has no timeout, for ever: race it.
    typeset = page.evaluate("""(ms) => !window.MathJax || Promise.race([
        MathJax.startup.promise.then(() => true), new Promise(done => setTimeout(() => done(false), ms))])""",
                            timeout_ms)
    if not typeset:
        raise not_ready(page, "MathJax's typesetting (MathJax.startup.promise)", timeout_ms)
