"""What an audience sees on each slide of a lecture deck, measured in headless Chromium at
1280 x 720 (:mod:`annotated.support.site_check` runs it on every deck of ``lectures/``).

A slide works in a hall when the back row can read it and nothing on it is hidden:

1. at most ``MAX_WORDS`` words of prose (code, figures, equations and speaker notes aside;
   an equation counts as one word): the argument belongs in the speaker's voice;
2. prose at least ``MIN_PROSE_PX`` and code at least ``MIN_CODE_PX`` on screen;
3. the text of every figure at least ``MIN_FIGURE_TEXT_PX`` on screen, and no two labels drawn
   over each other; so figures are inline SVG whose labels are ``<text>`` (a raster image's
   text cannot be measured);
4. no scroll box: an audience cannot scroll, what is below the fold is lost;
5. nothing past the left or right edge of the slide;
6. nothing past the bottom by more than ``OVERFLOW_ALLOWED``;
7. no wrapped lines in code, headings on at most ``MAX_HEADING_LINES`` lines;
8. no list or table cut in two (a slide that opens with one and has no heading continues the
   previous slide);
9. no link to the source page of a deck instead of the deck.

Everything is measured in the page by one script (:data:`MEASURE`), slide by slide with every
fragment shown; the rules are applied here, so a limit is a constant and a message says which
slide (1-based, in the deck's order), what was measured and what the limit is::

    from annotated.support.audience import audience_report
    page = open_page(context, deck.as_uri(), PageLog())   # annotated.support.browser
    for problem in audience_report(page):
        print(problem)                                    # "slide 4: 83 words of prose, more than 60 ..."
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from annotated.support.slides import SLIDE_HEIGHT

MAX_WORDS = 60  # of prose on a slide; the rest goes to the speaker notes as talking points
MIN_PROSE_PX = 24  # body text and headings, on screen at 1280 x 720
MIN_CODE_PX = 20  # code and printed output, on screen
MIN_FIGURE_TEXT_PX = 14  # a figure's labels, ticks and numbers, on screen
EDGE_ALLOWED = 2  # pixels anything may stick out past the left or right edge (rounding)
OVERFLOW_ALLOWED = 24  # pixels a slide may run past the bottom of 720 (its bottom margin)
MAX_HEADING_LINES = 2
RASTER = "a raster figure: its text size cannot be measured; render it as SVG"
DECK_SOURCE = "links to the source of a deck, not the deck"

# Run in the page: visits every slide with all its fragments shown and returns, per slide, what
# the rules need. Values are in screen pixels of the 1280 x 720 viewport unless said otherwise.
MEASURE = """() => {
    if (!window.Reveal || !Reveal.isReady()) throw new Error('not a reveal.js deck, or not ready');
    // Transitions off, so that a measure never catches a fragment or a slide halfway in.
    const style = document.createElement('style');
    style.textContent = `.reveal .slides section, .reveal .slides section * { transition: none !important; }
        .audience-pre, .audience-pre * { white-space: pre !important; }
        .audience-nowrap, .audience-nowrap * { white-space: nowrap !important; }`;
    document.head.appendChild(style);
    Reveal.configure({transition: 'none', backgroundTransition: 'none'});
    const scale = Reveal.getScale();
    const width = parseFloat(Reveal.getConfig().width);
    // Not read by the audience (notes, scripts) or not prose (code, figures, equations).
    const HIDDEN = 'aside.notes, .notes, script, style, template';
    const NOT_PROSE = 'pre, code, svg, mjx-container, ' + HIDDEN;
    const shown = el => el.checkVisibility({visibilityProperty: true});
    const px = el => parseFloat(getComputedStyle(el).fontSize);
    const describe = el => {
        const text = (el.textContent || '').replace(/\\s+/g, ' ').trim().slice(0, 40);
        return el.tagName.toLowerCase() + (text ? ` "${text}"` : '');
    };
    const lowest = (worst, value, el) => (!worst || value < worst[0]) ? [value, describe(el)] : worst;

    // 1. Words: the visible text outside code, figures and notes; an equation is one word.
    const prose = node => {
        if (node.nodeType === Node.TEXT_NODE) return node.data;
        if (node.nodeType !== Node.ELEMENT_NODE || !shown(node)) return '';
        if (node.matches('mjx-container')) return ' x ';
        if (node.matches(NOT_PROSE)) return '';
        if (node.tagName === 'BR') return ' ';
        const inner = Array.from(node.childNodes, prose).join('');
        return getComputedStyle(node).display.startsWith('inline') ? inner : ` ${inner} `;
    };
    const countWords = slide => prose(slide).split(/\\s+/).filter(w => /[\\p{L}\\p{N}]/u.test(w)).length;

    // 7. Lines a block is drawn on, against the lines it would take without wrapping.
    const drawnLines = (el, cls, lines) => {
        const range = document.createRange();
        range.selectNodeContents(el);  // the text itself: not cut by a max-height or a scroll box
        const wrapped = range.getBoundingClientRect().height;
        el.classList.add(cls);
        const unwrapped = range.getBoundingClientRect().height;
        el.classList.remove(cls);
        return unwrapped > 0 ? Math.round(lines * wrapped / unwrapped) : lines;
    };

    const measure = (slide, number, hv) => {
        const own = Array.from(slide.querySelectorAll('*')).filter(el => !el.closest(HIDDEN) && shown(el));
        const m = {number, hv, words: countWords(slide), prose: null, code: null, figure_text: null,
                   overlaps: [], rasters: [], scroll_boxes: [], right: null, left: null, height: slide.scrollHeight,
                   wrapped: [], headings: [], split: null, links: []};
        // 2. Prose: every visible text outside code, figures and notes, at its font size on screen.
        const walker = document.createTreeWalker(slide, NodeFilter.SHOW_TEXT);
        for (let text = walker.nextNode(); text; text = walker.nextNode()) {
            const parent = text.parentElement;
            if (text.data.trim() && !parent.closest(NOT_PROSE) && shown(parent))
                m.prose = lowest(m.prose, px(parent) * scale, parent);
        }
        // 2. Code and printed output: what a reader has to read character by character.
        own.filter(el => el.matches('pre, code') && el.textContent.trim())
           .forEach(el => { m.code = lowest(m.code, px(el) * scale, el); });
        // 3. Figure text: SVG font sizes are in the figure's units, so scale them by the
        //    element's screen transform (the figure's viewBox and Reveal's scaling together).
        own.filter(el => el.matches('svg text, svg tspan') && !el.closest('mjx-container') && el.textContent.trim())
           .forEach(el => {
               const ctm = el.getScreenCTM();
               if (ctm) m.figure_text = lowest(m.figure_text, px(el) * Math.hypot(ctm.a, ctm.b), el);
           });
        // 3. Labels drawn over each other cannot be read at any size: pairs of <text> of one figure
        //    whose boxes share more than a third of the smaller one (figures stacked in a build
        //    cover one another on purpose).
        const labels = own.filter(el => el.matches('svg text') && !el.closest('mjx-container') && el.textContent.trim())
                          .map(el => [el, el.getBoundingClientRect()]);
        labels.forEach(([a, ra], i) => labels.slice(i + 1).forEach(([b, rb]) => {
            const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
            const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
            const smaller = Math.min(ra.width * ra.height, rb.width * rb.height);
            if (a.closest('svg') === b.closest('svg') && w > 0 && h > 0 && w * h > smaller / 3)
                m.overlaps.push([describe(a), describe(b)]);
        }));
        // 3. A raster image's text has no size to measure (an SVG <image>, imshow's pixels, is fine).
        m.rasters = own.filter(el => el.tagName === 'IMG').map(el => el.getAttribute('src') || '');
        // 4. Scroll boxes: content cut off or behind a scroll bar, which nobody in a hall can use.
        const clips = v => ['auto', 'scroll', 'hidden', 'clip'].includes(v);
        const boxes = own.filter(el => !el.parentElement.closest('svg, mjx-container'));  // not their insides
        for (const el of [slide, ...boxes.filter(el => el.tagName.toLowerCase() !== 'svg')]) {
            const cs = getComputedStyle(el);
            const below = clips(cs.overflowY) ? el.scrollHeight - el.clientHeight : 0;
            const beside = clips(cs.overflowX) ? el.scrollWidth - el.clientWidth : 0;
            if (below > 1 || beside > 1) m.scroll_boxes.push([describe(el), below, beside]);
        }
        // 5. Edges, in slide pixels: anything not inside a clipping box (rule 4 reports those).
        const origin = Reveal.getSlidesElement().getBoundingClientRect().left;
        const clipped = el => {
            for (let up = el.parentElement; up && up !== slide; up = up.parentElement)
                if (getComputedStyle(up).overflowX !== 'visible') return true;
            return false;
        };
        boxes.filter(el => !clipped(el)).forEach(el => {
            const r = el.getBoundingClientRect();
            if (!r.width && !r.height) return;
            const right = (r.right - origin) / scale - width, left = (origin - r.left) / scale;
            if (!m.right || right > m.right[0]) m.right = [right, describe(el)];
            if (!m.left || left > m.left[0]) m.left = [left, describe(el)];
        });
        // 7. Wrapped lines: a wrapped line of code reads as two lines, a heading on three is a paragraph.
        own.filter(el => el.tagName === 'PRE' && el.textContent.trim()).forEach(el => {
            const lines = el.textContent.replace(/\\n+$/, '').split('\\n').length;
            const drawn = drawnLines(el, 'audience-pre', lines);
            if (drawn > lines) m.wrapped.push([describe(el), lines, drawn]);
        });
        m.headings = own.filter(el => el.matches('h1, h2, h3') && el.textContent.trim())
                        .map(el => [describe(el), drawnLines(el, 'audience-nowrap', 1)]);
        // 8. A list or table cut in two: its second half opens a slide that has no heading.
        const content = el => Array.from(el.children).find(c => !c.matches(HIDDEN));
        let first = content(slide);
        while (first && first.tagName === 'DIV' && content(first)) first = content(first);
        const heading = own.some(el => el.matches('h1, h2, h3'));
        if (!heading && first && ['UL', 'OL', 'TABLE'].includes(first.tagName))
            m.split = `the slide has no heading and opens with a <${first.tagName.toLowerCase()}>`;
        const numbered = own.find(el => el.tagName === 'OL' && (el.getAttribute('start') || '1') !== '1');
        if (numbered) m.split = `a numbered list starts at ${numbered.getAttribute('start')}`;
        // 9. Links, resolved; the rules in Python decide which point at a deck's source.
        m.links = own.filter(el => el.matches('a[href]')).map(el => el.href);
        return m;
    };

    const slides = [];
    Reveal.getHorizontalSlides().forEach((column, h) => {
        const rows = column.querySelectorAll(':scope > section').length;
        for (let v = 0; v < Math.max(rows, 1); v++) {
            Reveal.slide(h, v, Number.MAX_SAFE_INTEGER);  // every fragment shown
            slides.push(measure(Reveal.getCurrentSlide(), slides.length + 1, `${h}/${v}`));
        }
    });
    Reveal.slide(0, 0);
    style.remove();
    return slides;
}"""


@dataclass
class SlideMeasure:
    """What :data:`MEASURE` found on one slide; a pair is (value, the element it was found on)."""
    number: int  # 1-based, in the deck's order
    hv: str  # reveal.js's "h/v" index
    words: int
    prose: list | None  # (smallest prose font size on screen, element)
    code: list | None
    figure_text: list | None
    overlaps: list  # (text, text) drawn over each other
    rasters: list[str]
    scroll_boxes: list  # (element, pixels hidden below, pixels hidden beside)
    right: list | None  # (slide pixels past the right edge, element); negative when inside
    left: list | None
    height: float
    wrapped: list  # (element, lines of text, lines drawn)
    headings: list  # (element, lines drawn)
    split: str | None
    links: list[str]


def ends_in_html_html(url: str) -> bool:
    """A page of a deck's HTML source is named after the deck plus ``.html``."""
    return unquote(urlsplit(url).path).endswith(".html.html")


def measure_deck(page) -> list[SlideMeasure]:
    """Every slide of the reveal.js deck open in ``page``, measured (:data:`MEASURE`)."""
    page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=30_000)
    return [SlideMeasure(**slide) for slide in page.evaluate(MEASURE)]


def slide_problems(m: SlideMeasure, deck_source: Callable[[str], bool] = ends_in_html_html,
                   flat: bool = True) -> list[str]:
    """The rules of the module docstring, applied to one slide; a slide of a deck that is not
    ``flat`` (it has vertical stacks) is named with its reveal.js address too: ``slide 94 (#/9/1)``."""
    at = f"slide {m.number}" if flat else f"slide {m.number} (#/{m.hv})"
    problems = []
    if m.words > MAX_WORDS:
        problems.append(f"{at}: {m.words} words of prose, more than {MAX_WORDS}; move the rest to the speaker notes")
    for kind, worst, limit in (("prose", m.prose, MIN_PROSE_PX), ("code", m.code, MIN_CODE_PX),
                               ("figure text", m.figure_text, MIN_FIGURE_TEXT_PX)):
        if worst and worst[0] < limit - 0.05:
            problems.append(f"{at}: {kind} at {worst[0]:.1f} px on screen ({worst[1]}), less than {limit} px")
    if m.overlaps:
        (a, b), more = m.overlaps[0], len(m.overlaps) - 1
        problems.append(f"{at}: figure labels drawn over each other: {a} and {b}"
                        + (f", and {more} more pairs" if more else ""))
    problems += [f"{at}: {RASTER} (<img src=\"{src.split(',')[0] + ',...' if src.startswith('data:') else src}\">)"
                 for src in m.rasters]
    problems += [f"{at}: a scroll box ({box}) hides {below} px below and {beside} px beside; an audience "
                 f"cannot scroll" for box, below, beside in m.scroll_boxes]
    if m.right and m.right[0] > EDGE_ALLOWED:
        problems.append(f"{at}: {m.right[1]} runs {m.right[0]:.0f} px past the right edge of the slide "
                        f"(at most {EDGE_ALLOWED})")
    if m.left and m.left[0] > EDGE_ALLOWED:
        problems.append(f"{at}: {m.left[1]} starts {m.left[0]:.0f} px left of the slide's left edge "
                        f"(at most {EDGE_ALLOWED})")
    if m.height > SLIDE_HEIGHT + OVERFLOW_ALLOWED:
        problems.append(f"{at} is {m.height:.0f} px tall, more than {SLIDE_HEIGHT} + {OVERFLOW_ALLOWED}")
    problems += [f"{at}: {pre} has {lines} lines of text drawn on {drawn}: lines wrapped"
                 for pre, lines, drawn in m.wrapped]
    problems += [f"{at}: heading {heading} wraps to {lines} lines, more than {MAX_HEADING_LINES}"
                 for heading, lines in m.headings if lines > MAX_HEADING_LINES]
    if m.split:
        problems.append(f"{at}: a list or table continued from the previous slide ({m.split})")
    problems += [f"{at}: link to {link}: {DECK_SOURCE}" for link in m.links if deck_source(link)]
    return problems


def audience_report(page, deck_source: Callable[[str], bool] = ends_in_html_html) -> list[str]:
    """The problems an audience would meet on the reveal.js deck open in ``page`` (viewport
    1280 x 720), each naming its slide, the measured value and the limit; [] if none.
    ``deck_source(url)`` says whether a link points at a deck's source page."""
    measures = measure_deck(page)
    return [p for m in measures for p in slide_problems(m, deck_source, is_flat(measures))]


def is_flat(measures: list[SlideMeasure]) -> bool:
    """A deck of horizontal slides only, as a lecture deck is."""
    return all(m.hv.endswith("/0") for m in measures)


@dataclass
class LectureStats:
    """The worst value of each measure over some lecture decks, for a closing note."""
    decks: int = 0
    slides: int = 0
    most_words: int = 0
    smallest_prose_px: float = float("inf")
    smallest_code_px: float = float("inf")
    smallest_figure_text_px: float = float("inf")
    overlapping_labels: int = 0
    raster_figures: int = 0
    scroll_boxes: int = 0
    most_past_an_edge_px: float = 0.0  # left or right, in slide pixels
    tallest_px: float = 0.0
    wrapped_blocks: int = 0
    most_heading_lines: int = 0
    split_lists: int = 0
    problems: list[str] = field(default_factory=list)
    source_links: list[str] = field(default_factory=list)  # links on slides to a deck's source

    @classmethod
    def of_deck(cls, measures: Iterable[SlideMeasure]) -> "LectureStats":
        measures = list(measures)
        stats = cls(decks=1, slides=len(measures))
        for m in measures:
            stats.most_words = max(stats.most_words, m.words)
            stats.smallest_prose_px = min(stats.smallest_prose_px, m.prose[0] if m.prose else float("inf"))
            stats.smallest_code_px = min(stats.smallest_code_px, m.code[0] if m.code else float("inf"))
            stats.smallest_figure_text_px = min(stats.smallest_figure_text_px,
                                                m.figure_text[0] if m.figure_text else float("inf"))
            stats.overlapping_labels += len(m.overlaps)
            stats.raster_figures += len(m.rasters)
            stats.scroll_boxes += len(m.scroll_boxes)
            stats.most_past_an_edge_px = max([stats.most_past_an_edge_px, *(e[0] for e in (m.right, m.left) if e)])
            stats.tallest_px = max(stats.tallest_px, m.height)
            stats.wrapped_blocks += len(m.wrapped)
            stats.most_heading_lines = max([stats.most_heading_lines, *(lines for _, lines in m.headings)])
            stats.split_lists += m.split is not None
        return stats

    def __add__(self, other: "LectureStats") -> "LectureStats":
        return LectureStats(
            self.decks + other.decks, self.slides + other.slides, max(self.most_words, other.most_words),
            min(self.smallest_prose_px, other.smallest_prose_px), min(self.smallest_code_px, other.smallest_code_px),
            min(self.smallest_figure_text_px, other.smallest_figure_text_px),
            self.overlapping_labels + other.overlapping_labels, self.raster_figures + other.raster_figures,
            self.scroll_boxes + other.scroll_boxes,
            max(self.most_past_an_edge_px, other.most_past_an_edge_px), max(self.tallest_px, other.tallest_px),
            self.wrapped_blocks + other.wrapped_blocks, max(self.most_heading_lines, other.most_heading_lines),
            self.split_lists + other.split_lists, self.problems + other.problems,
            self.source_links + other.source_links)

    def summary(self) -> str:
        """One line: the decks, the slides and the worst of each measure against its limit."""
        size = lambda v: "none" if v == float("inf") else f"{v:.1f} px"  # noqa: E731
        return (f"{self.decks} lecture deck{'' if self.decks == 1 else 's'}, {self.slides} slides; "
                f"at most {self.most_words} words of prose (limit {MAX_WORDS}); "
                f"smallest prose {size(self.smallest_prose_px)} (>= {MIN_PROSE_PX}), "
                f"code {size(self.smallest_code_px)} (>= {MIN_CODE_PX}), figure text "
                f"{size(self.smallest_figure_text_px)} (>= {MIN_FIGURE_TEXT_PX}); "
                f"{self.overlapping_labels} overlapping labels, {self.raster_figures} raster "
                f"figures, {self.scroll_boxes} scroll boxes, {self.wrapped_blocks} wrapped code blocks, "
                f"{self.split_lists} split lists; at most {self.most_past_an_edge_px:.0f} px past an edge "
                f"(<= {EDGE_ALLOWED}), tallest slide {self.tallest_px:.0f} px (<= {SLIDE_HEIGHT + OVERFLOW_ALLOWED}), "
                f"headings on at most {self.most_heading_lines} lines (<= {MAX_HEADING_LINES})")


def lecture_report(page, deck_source: Callable[[str], bool] = ends_in_html_html) -> LectureStats:
    """:func:`audience_report` and the deck's worst values together (one pass over the slides)."""
    measures = measure_deck(page)
    stats = LectureStats.of_deck(measures)
    stats.problems = [p for m in measures for p in slide_problems(m, deck_source, is_flat(measures))]
    stats.source_links = [link for m in measures for link in m.links if deck_source(link)]
    return stats

