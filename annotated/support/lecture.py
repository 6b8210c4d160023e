"""The lecture cut of every notebook: a deck an audience can read, ``python -m annotated.support.lecture``.

    python -m annotated.support.lecture                    # every lecture -> build/lectures/NN_name.html
    python -m annotated.support.lecture --pdf              # and a PDF handout of each -> build/lectures/pdf/
    python -m annotated.support.lecture lectures/04_multi_head_attention.toml --out /tmp/lectures
    python -m annotated.support.lecture --figures notebooks/04_multi_head_attention.ipynb
    python -m annotated.support.lecture --list             # the slides of every lecture, numbered

The full notebook deck (:mod:`annotated.support.slides`) shows every cell; a lecture shows 16 to 40
slides (``SLIDES_PER_SESSION``: from 16, so that a notebook of one sitting may have a 50-minute
lecture), each with a title, a few words (60 at most), and one figure, one short piece of code or
one result, large enough to read from the back of a hall. What the speaker says goes to the speaker
notes (press S): talking points, the notebook's prose, the plotting code.

A lecture is a plan, ``lectures/NN_name.toml``, that names the notebook's cells by their id, so it
cannot drift from the notebook: a cell that is gone, or changed since its figure was drawn, stops the
build with a message saying what to run. Each ``[[slide]]`` of the plan takes these keys:

``title``       the slide's title (required)
``points``      a list of short lines (Markdown, ``$math$``); ``build = true`` shows them one by one
``text``        Markdown instead of points (a small table)
``figure``      ``"<cell id>"`` (its last figure) or ``"<cell id>#k"`` (its k-th): drawn again at slide size
``run``         code run in the notebook's state after cell ``after``, whose figure the slide shows
                (a view made for the hall: one layer, a few heads)
``diagram``     a board diagram of :mod:`annotated.support.diagrams`, built step by step
``code``        ``"<cell id>"``: the cell's code (``code_lines = [first, last]`` to show a part)
``output``      ``"<cell id>"``: what the cell printed (``output_lines = [first, last]`` for a part)
``notes``       talking points for the speaker notes
``notes_from``  cell ids whose Markdown goes to the speaker notes as it stands in the notebook

Figures are drawn by executing the notebook once with the slide style (:func:`slide_style`: SVG with
its text kept as text, at least ``MIN_FONT_PT``, scaled to the slide) and stored in
``lectures/figures/NN_name/`` with the SHA-256 of the cell that drew each, so that the decks build in
seconds and a stale figure is caught (``--figures`` draws them again; it runs the whole notebook).
"""

import argparse
import hashlib
import html
import json
import os
import re
import sys
import textwrap
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from annotated.support.course import NOTEBOOKS, ROOT, course_paths
from annotated.support.errors import CourseError, run_command
from annotated.support.files import atomic_write, build_folder, check_output_folder
from annotated.support.slides import SLIDE_HEIGHT, SLIDE_WIDTH, install_assets, read_notebook, title_of
from annotated.support.web_assets import mathjax_html

LECTURES = ROOT / "lectures"
FIGURES = LECTURES / "figures"
DEFAULT_OUT = ROOT / "build" / "lectures"
MAX_WORDS = 60  # of prose on a slide, its title included
# Slides a deck may have, title and closing slides included: from 16, so that a notebook of one sitting
# (at most 80 cells) may have a 50-minute lecture; the guide's 90-minute session adds exercises and discussion.
SLIDES_PER_SESSION = (16, 40)
# A figure is drawn FIGURE_INCHES large and shown up to 1200 x 540 px: 1 pt of SVG (72 per inch) is
# then about 1.35 px on screen, so MIN_FONT_PT keeps every label above 14 px with room to spare.
FIGURE_INCHES = (12.0, 5.4)
MIN_FONT_PT = 14.0
KEYS = {"title", "points", "build", "text", "figure", "run", "after", "diagram", "code", "code_lines",
        "output", "output_lines", "notes", "notes_from"}
CELL_REF = re.compile(r"^([0-9a-zA-Z_-]+)(?:#(\d+))?$")


class LectureError(CourseError, ValueError):
    """A plan that names a cell the notebook lacks, a figure not drawn or stale, a key that does
    not exist; the message says which file, which slide and what to run."""


# ------------------------------------------------------------------ the plan

@dataclass
class Slide:
    number: int  # 1 is the title slide
    title: str
    points: list[str] = field(default_factory=list)
    build: bool = False
    text: str = ""
    figure: str = ""
    run: str = ""
    after: str = ""
    diagram: str = ""
    code: str = ""
    code_lines: tuple[int, int] | None = None
    output: str = ""
    output_lines: tuple[int, int] | None = None
    notes: list[str] = field(default_factory=list)
    notes_from: list[str] = field(default_factory=list)

    def words(self) -> int:
        """Words of prose on the slide (title, points, text; math counts as one word)."""
        prose = " ".join([self.title, *self.points, self.text])
        prose = re.sub(r"\$\$.*?\$\$|\$[^$]*\$", " x ", prose, flags=re.S)
        prose = re.sub(r"`[^`]*`", " x ", prose)
        return len(re.findall(r"[\w'’]+", re.sub(r"[|*#_]", " ", prose)))

    def figure_key(self) -> str | None:
        if self.figure:
            cell, k = CELL_REF.match(self.figure).groups()
            return f"{cell}-{k or 'last'}"
        if self.run:
            return "run-" + hashlib.sha256(f"{self.after}\n{self.run}".encode()).hexdigest()[:12]
        return None


@dataclass
class Plan:
    path: Path
    notebook: Path
    slides: list[Slide]

    @property
    def name(self) -> str:
        return self.notebook.stem


def read_plan(path: Path) -> Plan:
    """The plan at ``path`` (``lectures/NN_name.toml``), checked against its notebook."""
    path = Path(path)
    notebook = NOTEBOOKS / f"{path.stem}.ipynb"
    if not notebook.is_file():
        raise LectureError(f"{path}: no notebook {_shown(notebook)} for this plan; name the plan after "
                           f"its notebook (lectures/NN_name.toml)")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise LectureError(f"{path}: not valid TOML ({error})") from None
    extra = set(data) - {"slide"}
    if extra:
        raise LectureError(f"{path}: unknown top-level keys {sorted(extra)}; a plan holds [[slide]] tables only")
    cells = {cell.get("id"): cell for cell in read_notebook(notebook).cells}
    slides = []
    for i, table in enumerate(data.get("slide", []), start=2):  # slide 1 is the title slide
        where = f"{path.name}, slide {i}"
        unknown = set(table) - KEYS
        if unknown:
            raise LectureError(f"{where}: unknown keys {sorted(unknown)}; the keys are {sorted(KEYS)}")
        if "title" not in table:
            raise LectureError(f"{where}: no title")
        for key in ("code_lines", "output_lines"):
            if key in table:
                table[key] = tuple(table[key])
        slide = Slide(number=i, **table)
        for key in ("figure", "code", "output", "after"):
            ref = getattr(slide, key)
            if not ref:
                continue
            match = CELL_REF.match(ref)
            if not match or match.group(1) not in cells:
                raise LectureError(f"{where}: {key} = {ref!r} names no cell of {notebook.name}; cell ids are in "
                                   f"the notebook's JSON (\"id\")")
        for ref in slide.notes_from:
            if ref not in cells:
                raise LectureError(f"{where}: notes_from names {ref!r}, no cell of {notebook.name}")
        if slide.run and not slide.after:
            raise LectureError(f"{where}: `run` needs `after`, the cell after which its code runs")
        if sum(bool(x) for x in (slide.figure, slide.run, slide.diagram)) > 1:
            raise LectureError(f"{where}: one figure per slide (figure, run or diagram)")
        if slide.words() > MAX_WORDS:
            raise LectureError(f"{where}: {slide.words()} words of prose, more than {MAX_WORDS}; move the rest "
                               f"to `notes`")
        slides.append(slide)
    return Plan(path, notebook, slides)


def _shown(path: Path) -> str:
    """``path`` as the user would type it from the repository's folder."""
    return Path(path).relative_to(ROOT).as_posix() if Path(path).is_relative_to(ROOT) else str(path)


def plans() -> list[Path]:
    return sorted(LECTURES.glob("*.toml"))


def cell_hash(cell) -> str:
    return hashlib.sha256(cell.source.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------ figures

def slide_style() -> None:
    """In a running notebook kernel: draw every figure as SVG with text kept as text, scaled to the
    slide (FIGURE_INCHES), every label at least MIN_FONT_PT."""
    import matplotlib
    import matplotlib.pyplot  # noqa: F401  (sets up the inline backend, which chooses PNG; then SVG is chosen here)
    from IPython import get_ipython
    from matplotlib.figure import Figure
    from matplotlib_inline.config import InlineBackend

    InlineBackend.instance().figure_formats = {"svg"}

    matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 16, "axes.titlesize": 17,
                                "axes.labelsize": 16, "xtick.labelsize": MIN_FONT_PT, "ytick.labelsize": MIN_FONT_PT,
                                "legend.fontsize": MIN_FONT_PT, "figure.titlesize": 18})
    formatters = get_ipython().display_formatter.formatters
    formatters["image/png"].pop(Figure, None)
    formatters["image/svg+xml"].for_type(Figure, slide_svg)


def slide_svg(fig) -> str:
    """``fig`` as SVG text, scaled to fill FIGURE_INCHES and every text at least MIN_FONT_PT."""
    import io
    import warnings

    from matplotlib.text import Text

    width, height = fig.get_size_inches()
    scale = min(FIGURE_INCHES[0] / width, FIGURE_INCHES[1] / height)
    fig.set_size_inches(width * scale, height * scale)
    for text in fig.findobj(Text):
        if text.get_text().strip() and text.get_fontsize() < MIN_FONT_PT:
            text.set_fontsize(MIN_FONT_PT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if fig.get_layout_engine() is None:
            try:
                fig.tight_layout()
            except Exception:  # a figure laid out by hand keeps its layout
                pass
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", bbox_inches="tight")
    return buffer.getvalue()


def figure_folder(plan: Plan) -> Path:
    return FIGURES / plan.name


def draw_figures(plan: Plan, timeout: int = 3600) -> list[Path]:
    """Execute the plan's notebook with the slide style, code of ``run`` slides inserted after their
    cells, and store the figures the plan shows; returns their files."""
    import nbformat
    from nbclient import NotebookClient

    nb = read_notebook(plan.notebook)
    by_id = {cell.get("id"): i for i, cell in enumerate(nb.cells)}
    wanted: dict[str, tuple[str, int | None, str]] = {}  # key -> (cell id to read, figure number, hash)
    inserts: dict[str, list] = {}
    for slide in plan.slides:
        key = slide.figure_key()
        if key is None:
            continue
        if slide.figure:
            cell_id, k = CELL_REF.match(slide.figure).groups()
            wanted[key] = (cell_id, int(k) if k else None, cell_hash(nb.cells[by_id[cell_id]]))
        else:
            run_id = key
            cell = nbformat.v4.new_code_cell(slide.run)
            cell["id"] = run_id
            inserts.setdefault(slide.after, []).append(cell)
            after_hash = cell_hash(nb.cells[by_id[slide.after]])
            wanted[key] = (run_id, None, hashlib.sha256(f"{after_hash}\n{slide.run}".encode()).hexdigest())
    cells = [nbformat.v4.new_code_cell("from annotated.support.lecture import slide_style\nslide_style()")]
    cells[0]["id"] = "lecture-style"
    for cell in nb.cells:
        cells.append(cell)
        cells.extend(inserts.get(cell.get("id"), []))
    # Run up to the last cell a figure needs; the cells that raise on purpose (NBVAL_RAISES_EXCEPTION)
    # may raise, a cell that draws a figure may not.
    if not wanted:
        return []
    last = max(i for i, cell in enumerate(cells) if cell.get("id") in {c for c, _, _ in wanted.values()})
    nb.cells = cells[:last + 1]
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    outputs = {cell.get("id"): cell.get("outputs", []) for cell in nb.cells}
    for cell_id, _, _ in wanted.values():
        errors = [o for o in outputs[cell_id] if o.get("output_type") == "error"]
        if errors:
            raise LectureError(f"{plan.path.name}: cell {cell_id} raised {errors[0]['ename']}: {errors[0]['evalue']}")
    folder = figure_folder(plan)
    folder.mkdir(parents=True, exist_ok=True)
    manifest, written = {}, []
    for key, (cell_id, k, digest) in sorted(wanted.items()):
        svgs = [o["data"]["image/svg+xml"] for o in outputs[cell_id] if "image/svg+xml" in o.get("data", {})]
        if not svgs or (k is not None and k > len(svgs)):
            raise LectureError(f"{plan.path.name}: cell {cell_id} drew {len(svgs)} figures, the plan wants "
                               f"{'figure ' + str(k) if k else 'one'}")
        svg = svgs[-1] if k is None else svgs[k - 1]
        svg = svg if isinstance(svg, str) else "".join(svg)
        path = folder / f"{key}.svg"
        with atomic_write(path, mode="w") as handle:
            handle.write(svg)
        manifest[key] = digest
        written.append(path)
    old = _manifest(plan)
    for key in set(old) - set(manifest):  # figures of this command that the plan no longer shows
        (folder / f"{key}.svg").unlink(missing_ok=True)
    with atomic_write(folder / "manifest.json", mode="w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.write("\n")
    return written


def _manifest(plan: Plan) -> dict[str, str]:
    path = figure_folder(plan) / "manifest.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def stale_figures(plan: Plan) -> list[str]:
    """The plan's figures that are missing or were drawn from a cell that has changed since."""
    nb = read_notebook(plan.notebook)
    by_id = {cell.get("id"): cell for cell in nb.cells}
    manifest = _manifest(plan)
    stale = []
    for slide in plan.slides:
        key = slide.figure_key()
        if key is None:
            continue
        if slide.figure:
            digest = cell_hash(by_id[CELL_REF.match(slide.figure).group(1)])
        else:
            digest = hashlib.sha256(f"{cell_hash(by_id[slide.after])}\n{slide.run}".encode()).hexdigest()
        if manifest.get(key) != digest or not (figure_folder(plan) / f"{key}.svg").is_file():
            stale.append(f"slide {slide.number} ({slide.title})")
    return stale


def require_fresh_figures(plan: Plan) -> None:
    """A LectureError naming the stale figures and the command that draws them, if there are any."""
    stale = stale_figures(plan)
    if stale:
        raise LectureError(f"{plan.path.name}: figures missing or older than their cells: {', '.join(stale[:5])}; "
                           f"run `python -m annotated.support.lecture --figures {_shown(plan.notebook)}`")


def _svg_body(svg: str) -> str:
    """The ``<svg>`` element of a file, without its XML prolog, sized by CSS."""
    start = svg.find("<svg")
    body = svg[start:]
    return re.sub(r'<svg([^>]*?)\swidth="[^"]*"\s+height="[^"]*"', r'<svg\1', body, count=1)


def _unique_ids(svg: str, prefix: str) -> str:
    """matplotlib names clip paths and glyphs with ids that repeat between figures; inline on one page
    they must not collide. One pass: every id, and every reference to one (``#id``, ``url(#id)``)."""
    ids = set(re.findall(r'\bid="([^"]+)"', svg))

    def one(match: re.Match) -> str:
        before, name = match.groups()
        return f"{before}{prefix}{name}" if name in ids else match.group(0)
    return re.sub(r'(\bid="|#)([\w.:-]+)(?=["\)])', one, svg)


# ------------------------------------------------------------------ the deck

def _markdown(text: str) -> str:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune
    return markdown2html_mistune(text)


def _angles(text: str) -> str:
    """``<`` and ``>`` of a plan's line as text, not HTML: a token such as <s> or <pad> is written as it
    reads (in math as \\lt and \\gt, in code spans as they are)."""
    pieces = re.split(r"(`[^`]*`|\$\$.*?\$\$|\$[^$]*\$)", text, flags=re.S)
    for i, piece in enumerate(pieces):
        if piece.startswith("$"):
            pieces[i] = piece.replace("<", r"\lt ").replace(">", r"\gt ")
        elif not piece.startswith("`"):
            pieces[i] = piece.replace("<", "&lt;").replace(">", "&gt;")
    return "".join(pieces)


def _inline(text: str) -> str:
    """One line of a plan's Markdown as inline HTML (no enclosing paragraph)."""
    return re.sub(r"^<p>(.*)</p>\s*$", r"\1", _markdown(_angles(text)).strip(), flags=re.S)


def _code_html(source: str) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer
    body = highlight(source, PythonLexer(), HtmlFormatter(nowrap=True, noclasses=True, style="default"))
    return f'<pre class="lecture-code"><code>{body.rstrip()}</code></pre>'


def _part(text: str, lines: tuple[int, int] | None) -> str:
    rows = text.rstrip("\n").split("\n")
    return "\n".join(rows[lines[0] - 1:lines[1]] if lines else rows)


def _output_html(cell) -> str:
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            texts.append(out.get("text", ""))
        elif out.get("output_type") in ("execute_result", "display_data"):
            data = out.get("data", {})
            if "text/markdown" in data:
                return f'<div class="lecture-table">{_markdown(data["text/markdown"])}</div>'
            if "text/plain" in data and not any(k.startswith("image/") for k in data):
                texts.append(data["text/plain"])
        elif out.get("output_type") == "error":
            texts.append(f"{out['ename']}: {out['evalue']}")
    return "".join(texts)


def diagram_svgs(name: str) -> list[str]:
    """Every step of a board diagram as SVG text."""
    import matplotlib
    import matplotlib.pyplot as plt

    from annotated.support import diagrams

    with matplotlib.rc_context({"svg.fonttype": "none"}):
        result = []
        for step in range(1, diagrams.steps(name) + 1):
            fig = getattr(diagrams, name)(step=step)
            result.append(slide_svg(fig))
            plt.close(fig)
    return result


def slide_html(plan: Plan, slide: Slide, cells: dict, figures: dict[str, str]) -> str:
    parts = [f"<h2>{_inline(slide.title)}</h2>"]
    if slide.points:
        item = ' class="fragment"' if slide.build else ""
        parts.append('<ul class="lecture-points">' + "".join(f"<li{item}>{_inline(p)}</li>" for p in slide.points)
                     + "</ul>")
    if slide.text:
        parts.append(f'<div class="lecture-text">{_markdown(_angles(slide.text))}</div>')
    if slide.code:
        parts.append(_code_html(textwrap.dedent(_part(cells[slide.code].source, slide.code_lines))))
    if slide.output:
        shown = _output_html(cells[slide.output])
        if shown.startswith("<div"):
            parts.append(shown)
        else:
            parts.append(f'<pre class="lecture-output">{html.escape(_part(shown, slide.output_lines))}</pre>')
    key = slide.figure_key()
    if key:
        parts.append(f'<figure class="lecture-figure">{_unique_ids(_svg_body(figures[key]), f"s{slide.number}-")}'
                     f'</figure>')
    if slide.diagram:
        steps = diagram_svgs(slide.diagram)
        layers = "".join(
            f'<div class="lecture-step{" fragment" if k else ""}">'
            f'{_unique_ids(_svg_body(svg), f"s{slide.number}-{k}-")}</div>' for k, svg in enumerate(steps))
        parts.append(f'<figure class="lecture-figure r-stack">{layers}</figure>')
    notes = []
    if slide.notes:
        notes.append("<ul>" + "".join(f"<li>{_inline(n)}</li>" for n in slide.notes) + "</ul>")
    for ref in slide.notes_from:
        notes.append(_markdown(cells[ref].source))
    for ref in {slide.figure.split("#")[0], slide.code} - {""}:
        if cells[ref].cell_type == "code":
            notes.append(f"<p>Cell <code>{ref}</code> of the notebook:</p><pre>{html.escape(cells[ref].source)}</pre>")
    if slide.run:
        notes.append(f"<p>Drawn for the lecture, after cell <code>{slide.after}</code>:</p>"
                     f"<pre>{html.escape(slide.run)}</pre>")
    return (f'<section class="lecture-slide" id="s{slide.number}" data-slide="{slide.number}">\n'
            + "\n".join(parts) + f'\n<aside class="notes">{"".join(notes)}</aside>\n</section>')


@dataclass(frozen=True)
class Links:
    """Where a deck's title and closing slides point: the course, the guide, the notebook, the
    full deck, and the next lecture (None where there is none)."""
    course: str
    guide: str | None
    notebook: str
    full_deck: str | None
    next_deck: str | None
    next_title: str | None


def deck_html(plan: Plan, assets: str, links: Links, rewrite=None) -> str:
    """The lecture as one reveal.js page; ``assets`` is the relative URL of the assets folder;
    ``rewrite(html)`` points the links of the notebook's own text (written from notebooks/) at
    their targets from the deck's folder."""
    require_fresh_figures(plan)
    nb = read_notebook(plan.notebook)
    cells = {cell.get("id"): cell for cell in nb.cells}
    figures = {key: (figure_folder(plan) / f"{key}.svg").read_text(encoding="utf-8")
               for key in (s.figure_key() for s in plan.slides) if key}
    title = title_of(plan.notebook)
    total = len(plan.slides) + 2

    def nav(items) -> str:
        return '<p class="lecture-links">' + " · ".join(
            f'<a href="{html.escape(url)}">{html.escape(label)}</a>' for label, url in items if url) + "</p>"

    course = [("Course", links.course), ("Instructor guide", links.guide), ("Notebook", links.notebook),
              ("Every cell as slides", links.full_deck)]
    opening = (f'<section class="lecture-slide lecture-title" id="s1" data-slide="1">\n<h1>{html.escape(title)}</h1>\n'
               f'<p>"Attention Is All You Need", built step by step · {total} slides</p>\n{nav(course)}\n'
               f'<aside class="notes">Press S for these notes, F for full screen, Esc for an overview. '
               f'Slide numbers match the instructor guide\'s timetable.</aside>\n</section>')
    following = [("Next: " + (links.next_title or ""), links.next_deck)] if links.next_deck else []
    closing = (f'<section class="lecture-slide lecture-title" id="s{total}" data-slide="{total}">\n'
               f'<h2>{"Next: " + html.escape(links.next_title) if links.next_title else "The end of the course"}</h2>\n'
               f'{nav(following + course)}\n<aside class="notes">The exercises of this notebook are linked from '
               f'the course page.</aside>\n</section>')
    slides = "\n".join(slide_html(plan, s, cells, figures) for s in plan.slides)
    body = "\n".join([opening, rewrite(slides) if rewrite else slides, closing])
    return PAGE.format(title=html.escape(title), assets=assets, mathjax=mathjax_html(assets), body=body,
                       width=SLIDE_WIDTH, height=SLIDE_HEIGHT)


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}: lecture</title>
<link rel="stylesheet" href="{assets}/reveal.js/dist/reset.css">
<link rel="stylesheet" href="{assets}/reveal.js/dist/reveal.css">
<link rel="stylesheet" href="{assets}/reveal.js/dist/theme/white.css">
<link rel="stylesheet" href="{assets}/lecture.css">
{mathjax}
</head>
<body>
<div class="reveal lecture"><div class="slides">
{body}
</div></div>
<script src="{assets}/reveal.js/dist/reveal.js"></script>
<script src="{assets}/reveal.js/plugin/notes/notes.js"></script>
<script>
Reveal.initialize({{hash: true, center: false, controls: true, progress: true, slideNumber: "c/t",
    width: {width}, height: {height}, margin: 0, display: "flex", transition: "fade",
    pdfSeparateFragments: false, pdfMaxPagesPerSlide: 1, plugins: [RevealNotes]}});
</script>
</body>
</html>
"""


def install_lecture_assets(dest: Path) -> Path:
    install_assets(dest)
    css = Path(__file__).resolve().parent / "templates" / "lecture.css"
    (dest / "lecture.css").write_text(css.read_text(encoding="utf-8"), encoding="utf-8")
    return dest


def repo_links(plan: Plan, out: Path, next_plan: Plan | None) -> Links:
    """Links from a deck in ``out`` to the repository's files (the site maps them to its pages)."""
    def rel(path: Path) -> str:
        return Path(os.path.relpath(path, out.resolve())).as_posix()
    guide = ROOT / "guide" / f"{plan.name}.md"
    return Links(course=rel(ROOT / "README.md"), guide=rel(guide) if guide.is_file() else None,
                 notebook=rel(plan.notebook), full_deck=None,
                 next_deck=f"{next_plan.name}.html" if next_plan else None,
                 next_title=title_of(next_plan.notebook) if next_plan else None)


def build(plan_paths: Sequence[Path], out: Path, assets_dir: Path | None = None, links=None,
          rewrite=None) -> list[Path]:
    """Write one lecture deck per plan into ``out``; ``links(plan, out, next_plan) -> Links`` and
    ``rewrite(html, plan, out)`` for the links of the notebook's text (by default to the repository's files)."""
    from annotated.support.slides import links_to_files

    links = links or repo_links
    rewrite = rewrite or (lambda text, plan, folder: links_to_files(text, plan.notebook, folder))
    assets_dir = install_lecture_assets(assets_dir or out / "assets")
    out.mkdir(parents=True, exist_ok=True)
    relative = Path(os.path.relpath(assets_dir, out)).as_posix()
    # The next lecture is named by its file alone: a plan being edited elsewhere does not stop this one.
    every = [Plan(p, NOTEBOOKS / f"{p.stem}.ipynb", []) for p in plans() if (NOTEBOOKS / f"{p.stem}.ipynb").is_file()]
    names = [p.name for p in every]
    decks = []
    for path in plan_paths:
        plan = read_plan(path)
        i = names.index(plan.name) if plan.name in names else -1
        next_plan = every[i + 1] if 0 <= i < len(every) - 1 else None
        deck = out / f"{plan.name}.html"
        deck.write_text(deck_html(plan, relative, links(plan, out, next_plan),
                                  rewrite=lambda text, plan=plan: rewrite(text, plan, out)), encoding="utf-8")
        decks.append(deck)
    return decks


def write_pdfs(decks: Sequence[Path], folder: Path) -> list[Path]:
    """A PDF handout of every deck (one page per slide, every step shown), printed by headless
    Chromium through reveal.js's print view (``?print-pdf``)."""
    from annotated.support.browser import PageLog, offline_browser, open_page, wait_for_mathjax

    folder.mkdir(parents=True, exist_ok=True)
    pdfs = []
    with offline_browser(SLIDE_WIDTH, SLIDE_HEIGHT) as context:
        for deck in decks:
            page = open_page(context, deck.as_uri() + "?print-pdf", PageLog())
            wait_for_mathjax(page)
            page.wait_for_function("() => window.Reveal && Reveal.isReady()")
            pdf = folder / f"{deck.stem}.pdf"
            page.pdf(path=str(pdf), width=f"{SLIDE_WIDTH}px", height=f"{SLIDE_HEIGHT}px", print_background=True)
            page.close()
            pdfs.append(pdf)
    return pdfs


def _plan_arg(text: str) -> Path:
    path = Path(text)
    if path.suffix == ".ipynb":
        path = LECTURES / f"{path.stem}.toml"
    if path.suffix != ".toml" or not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a lecture plan; give one of lectures/*.toml (or its notebook)")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.lecture",
                                     description="Build the lecture cut of the notebooks: reveal.js decks for a hall, "
                                                 "offline, and PDF handouts.")
    parser.add_argument("plans", nargs="*", type=_plan_arg,
                        help="lecture plans (lectures/NN_name.toml) or their notebooks (default: every plan)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder for the decks (default: {DEFAULT_OUT})")
    parser.add_argument("--pdf", action="store_true", help="also print a PDF handout of each deck into OUT/pdf/ "
                                                           "(needs Chromium)")
    parser.add_argument("--figures", action="store_true",
                        help="draw the plans' figures again by executing their notebooks (minutes per notebook), "
                             "into lectures/figures/; no deck is built")
    parser.add_argument("--list", action="store_true", help="print every slide's number and title, build nothing")
    parser.add_argument("--force", action="store_true",
                        help="write into --out even if this command did not make it (what it holds is replaced)")
    args = parser.parse_args(argv)
    chosen = args.plans or plans()

    def body() -> int:
        loaded = [read_plan(p) for p in chosen]  # every plan checked before any work
        if args.list:
            for plan in loaded:
                print(f"{plan.name}: {len(plan.slides) + 2} slides")
                for slide in plan.slides:
                    print(f"  {slide.number:3d}  {slide.title}")
            return 0
        if args.figures:
            for plan in loaded:
                files = draw_figures(plan)
                print(f"{plan.name}: {len(files)} figures in {_shown(figure_folder(plan))}")
            return 0
        for plan in loaded:
            require_fresh_figures(plan)  # before any work
        check_output_folder(args.out, args.force, inputs=chosen, protected=course_paths())
        try:
            with build_folder(args.out, parser.prog, force=args.force, keep=True, inputs=chosen,
                              protected=course_paths()) as tmp:
                names = [deck.name for deck in build(chosen, tmp)]
                if args.pdf:
                    write_pdfs([tmp / name for name in names], tmp / "pdf")
        except KeyboardInterrupt:
            print(f"{parser.prog}: interrupted; {args.out} is as it was before", file=sys.stderr)
            return 130
        for name in names:
            print(args.out / name)
        if args.pdf:
            print(f"PDF handouts in {args.out / 'pdf'}")
        print(f"{len(names)} lectures in {args.out}; open one in a browser (no network needed), press S for the "
              f"speaker notes")
        return 0

    return run_command(body, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
