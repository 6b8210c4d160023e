"""The lecture cut of every notebook: a deck an audience can read, ``python -m annotated.support.lecture``.

    python -m annotated.support.lecture                    # every lecture -> build/lectures/NN_name.html
    python -m annotated.support.lecture --core             # the 50-minute cores -> build/lectures-core/
    python -m annotated.support.lecture --pdf              # and a PDF handout of each -> build/lectures/pdf/
    python -m annotated.support.lecture --pdf --per-page 4 --handout-notes   # 4 slides an A4 page, with notes
    python -m annotated.support.lecture lectures/04_multi_head_attention.toml --out /tmp/lectures
    python -m annotated.support.lecture --figures notebooks/04_multi_head_attention.ipynb
    python -m annotated.support.lecture --list             # the slides of every lecture, numbered

The full notebook deck (:mod:`annotated.support.slides`) shows every cell; a lecture is a 50-minute
talk of at most 25 core slides (``MAX_CORE_SLIDES``, the title and closing slides included), and may
carry optional slides beyond them (``SLIDES_PER_SESSION`` bounds the whole deck). Each slide has a
title, a few words (60 at most), and one figure, one short piece of code or one result, large enough
to read from the back of a hall. What the speaker says goes to the speaker notes (press S): talking
points and the notebook's prose, never code.

An optional slide carries a small "optional" tag in its corner and "Optional." first in its notes;
the key O skips from any slide to the next core slide, and ``--core`` leaves the optional slides out
(slide numbers stay those of the whole deck, so the instructor guide's timetable still reads). The
slide that opens a section carries its time, and the build writes "About N minutes for this section
(M of 50 elapsed at its end)." first in its notes; the core sections add up to 50 minutes.

A lecture is a plan, ``lectures/NN_name.toml``, that names the notebook's cells by their id, so it
cannot drift from the notebook: a cell that is gone, or changed since its figure was drawn, stops the
build with a message saying what to run. Each ``[[slide]]`` of the plan takes these keys, every one
checked (type, range, the cell it names) before anything is built (:func:`check_slide`):

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
``notes_from``  Markdown cell ids whose prose goes to the speaker notes as it stands in the notebook
                (a code block in it is left out: the notes are prose)
``optional``    ``true``: not part of the 50-minute core
``minutes``     the lecturing time of the section this (core) slide opens, until the next ``minutes``

A deck built on its own (``build/lectures/``) links only to the decks beside it: the notebook and the
instructor guide are named in its speaker notes as text (a link would open a notebook's JSON or the
guide's Markdown); the site's copies (:mod:`annotated.support.site`) link the site's pages. The PDF
handout links only to the web.

Figures are drawn by executing the notebook once with the slide style (:func:`slide_style`: SVG with
its text kept as text, at least ``MIN_FONT_PT``, scaled to the slide) and stored in
``lectures/figures/NN_name/`` with the SHA-256 of the cell that drew each, so that the decks build in
seconds and a stale figure is caught (``--figures`` draws them again; it runs the whole notebook, and
rewrites only the figures whose SVG changed: the SVG of a figure is the same bytes each time).
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
from annotated.support.files import atomic_write, build_folder, check_output_folder, signals_as_interrupt
from annotated.support.slides import SLIDE_HEIGHT, SLIDE_WIDTH, install_assets, read_notebook, title_of
from annotated.support.web_assets import mathjax_html

LECTURES = ROOT / "lectures"
FIGURES = LECTURES / "figures"
DEFAULT_OUT = ROOT / "build" / "lectures"
DEFAULT_CORE_OUT = ROOT / "build" / "lectures-core"  # the --core decks, beside the whole ones
MAX_WORDS = 60  # of prose on a slide, its title included
# Slides a deck may have, title and closing slides and optional slides included: from 16, so that a notebook
# of one sitting (at most 80 cells) has a 50-minute lecture, to 40, so that the optional slides stay a few.
SLIDES_PER_SESSION = (16, 40)
# A figure is drawn FIGURE_INCHES large and shown up to 1200 x 540 px: 1 pt of SVG (72 per inch) is
# then about 1.35 px on screen, so MIN_FONT_PT keeps every label above 14 px with room to spare.
FIGURE_INCHES = (12.0, 5.4)
MIN_FONT_PT = 14.0
SVG_SALT = "annotated-lecture"  # matplotlib's svg.hashsalt: the ids of a figure's SVG depend on its content only
KEYS = {"title", "points", "build", "text", "figure", "run", "after", "diagram", "code", "code_lines",
        "output", "output_lines", "notes", "notes_from", "optional", "minutes"}
CELL_REF = re.compile(r"^([0-9a-zA-Z_-]+)(?:#(\d+))?$")
LECTURE_MINUTES = 50  # a lecture: the core slides' sections add up to this
MAX_CORE_SLIDES = 25  # core slides of a deck, title and closing slides included
RAW_SUFFIXES = (".md", ".ipynb", ".toml")  # files a browser shows as source text: never a deck's link target


class LectureError(CourseError, ValueError):
    """A plan that names a cell the notebook lacks, a figure not drawn or stale, a key that does
    not exist, a value of the wrong type or out of range; the message says which file, which slide
    (its number and title), which key and what to write instead."""


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
    optional: bool = False  # not part of the 50-minute core: tagged, skipped with O, left out by --core
    minutes: int | None = None  # lecturing time of the section this slide opens (core slides only)

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

    @property
    def total(self) -> int:
        """Slides of the whole deck, the title and closing slides included."""
        return len(self.slides) + 2

    def core(self) -> list[Slide]:
        """The slides of the 50-minute lecture (the plan's, without the optional ones)."""
        return [s for s in self.slides if not s.optional]

    def timing(self) -> dict[int, tuple[int, int]]:
        """{slide number: (its section's minutes, minutes elapsed at the section's end)} for every core
        slide that opens a section (carries ``minutes``), in order."""
        elapsed, result = 0, {}
        for slide in self.core():
            if slide.minutes is not None:
                elapsed += slide.minutes
                result[slide.number] = (slide.minutes, elapsed)
        return result


def timing_problems(plan: Plan) -> list[str]:
    """What keeps ``plan`` from being a 50-minute lecture, one line each: more than MAX_CORE_SLIDES core
    slides, a first core slide that opens no timed section, core minutes that do not add up to
    LECTURE_MINUTES. (Checked by tests/test_lectures.py; a deck still builds while its plan is edited.)"""
    problems, core = [], plan.core()
    where = plan.path.name
    if len(core) + 2 > MAX_CORE_SLIDES:
        problems.append(f"{where}: {len(core) + 2} core slides (title and closing included), more than "
                        f"{MAX_CORE_SLIDES}; mark some optional = true")
    if core and core[0].minutes is None:
        problems.append(f"{where}: slide {core[0].number}, the first core slide, has no minutes, so the time "
                        f"before the first timed section is not counted")
    total = sum(minutes for minutes, _ in plan.timing().values())
    if total != LECTURE_MINUTES:
        problems.append(f"{where}: the core sections' minutes add up to {total}, not {LECTURE_MINUTES}")
    return problems


def _cell_lines(text: str) -> int:
    return len(text.rstrip("\n").split("\n")) if text.strip() else 0


class _Check:
    """The checks of one ``[[slide]]`` table; every failure is one LectureError naming the file, the
    slide (number and title), the key and what to write."""

    def __init__(self, plan_name: str, number: int, table: dict, cells: dict, notebook: Path):
        self.table, self.cells, self.notebook = table, cells, notebook
        title = table.get("title")
        shown = f" ({title!r})" if isinstance(title, str) and title.strip() else ""
        self.where = f"{plan_name}, slide {number}{shown}"

    def fail(self, message: str) -> None:
        raise LectureError(f"{self.where}: {message}")

    def value(self, key: str) -> str:
        return f"{key} = {_toml(self.table[key])}"

    def text(self, key: str, example: str) -> None:
        if key in self.table and not (isinstance(self.table[key], str) and self.table[key].strip()):
            what = "empty" if isinstance(self.table[key], str) else "not text"
            self.fail(f"{self.value(key)} is {what}; write {key} = {example}")

    def texts(self, key: str, example: str) -> None:
        if key not in self.table:
            return
        value = self.table[key]
        if isinstance(value, str):
            self.fail(f"{self.value(key)} is one text, not a list; write {key} = {example}")
        if not isinstance(value, list) or not all(isinstance(x, str) and x.strip() for x in value):
            self.fail(f"{self.value(key)} is not a list of texts; write {key} = {example}")

    def flag(self, key: str) -> None:
        if key in self.table and not isinstance(self.table[key], bool):
            self.fail(f"{self.value(key)} is not true or false; write {key} = true (or leave the key out)")

    def cell(self, key: str, kinds: tuple[str, ...] = ("code", "markdown"), ref: str | None = None):
        """The cell that ``key`` names (``ref``: one entry of a list), of one of ``kinds``."""
        ref = self.table[key] if ref is None else ref
        match = CELL_REF.match(ref)
        if not match or match.group(1) not in self.cells or (match.group(2) and key != "figure"):
            only = ", and #k (its k-th figure) belongs to figure only" if match and match.group(2) else ""
            self.fail(f"{key} names {ref!r}, no cell of {self.notebook.name}; cell ids are in the notebook's JSON "
                      f"(\"id\"){only}")
        if match.group(2) is not None and int(match.group(2)) < 1:
            self.fail(f"{key} = {ref!r}: figures count from 1 (#1 is the cell's first figure)")
        cell = self.cells[match.group(1)]
        if cell.cell_type not in kinds:
            self.fail(f"{key} names {ref!r}, a {cell.cell_type} cell; {key} takes a {' or '.join(kinds)} cell")
        return cell

    def lines(self, key: str, of: str, available: int, what: str) -> None:
        """``key = [first, last]``, 1 <= first <= last <= available, for the cell that ``of`` names."""
        if key not in self.table:
            return
        if of not in self.table:
            self.fail(f"{self.value(key)} without {of}: {key} picks lines of the cell that {of} shows; add {of} "
                      f"or leave {key} out")
        value = self.table[key]
        hint = f"give [first, last], 1 <= first <= last <= {available} ({what} has {available} lines)"
        if not (isinstance(value, list) and len(value) == 2 and all(type(x) is int for x in value)):
            self.fail(f"{self.value(key)} is not two line numbers; {hint}, e.g. {key} = [1, {min(3, available)}]")
        first, last = value
        if first < 1:
            self.fail(f"{self.value(key)}: lines count from 1; {hint}")
        if first > last:
            self.fail(f"{self.value(key)}: the first line comes after the last; {hint}")
        if last > available:
            self.fail(f"{self.value(key)}: past the last line; {hint}")


def _toml(value) -> str:
    """A value as the plan writes it (so that a message quotes the line to fix)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def check_slide(plan_name: str, number: int, table, cells: dict, notebook: Path) -> Slide:
    """One ``[[slide]]`` table of a plan, every key's type and range checked, as a Slide."""
    if not isinstance(table, dict):
        raise LectureError(f"{plan_name}, slide {number}: {_toml(table)} is not a table; write each slide as a "
                           f"[[slide]] table of keys (title = \"...\", points = [...])")
    c = _Check(plan_name, number, table, cells, notebook)
    unknown = sorted(set(table) - KEYS)
    if unknown:
        c.fail(f"unknown keys {unknown}; the keys are {sorted(KEYS)}")
    if "title" not in table:
        c.fail("no title; every slide has one (title = \"...\")")
    for key, example in (("title", '"A few words"'), ("text", '"""a small Markdown table"""'),
                         ("run", '"""code run in the notebook\'s state"""'), ("after", '"<cell id>"'),
                         ("figure", '"<cell id>" or "<cell id>#2"'), ("code", '"<cell id>"'),
                         ("output", '"<cell id>"'), ("diagram", '"attention_flow"')):
        c.text(key, example)
    for key in ("points", "notes", "notes_from"):
        c.texts(key, '["a short line", "another"]' if key != "notes_from" else '["<cell id>", "<cell id>"]')
    for key in ("build", "optional"):
        c.flag(key)
    if "minutes" in table:
        minutes = table["minutes"]
        if type(minutes) is not int or minutes < 1:
            c.fail(f"{c.value('minutes')} is not a positive whole number of minutes; write minutes = 5 (the "
                   f"lecturing time of the section this slide opens)")
        if table.get("optional"):
            c.fail(f"{c.value('minutes')} on an optional slide: only core slides are timed (the optional ones are "
                   f"not in the {LECTURE_MINUTES} minutes); move minutes to a core slide or leave it out")
    if table.get("build") and not table.get("points"):
        c.fail("build = true without points: build shows the points one by one; add points or leave build out")
    if "diagram" in table and table["diagram"] not in _diagrams():
        c.fail(f"{c.value('diagram')} is no diagram of annotated/support/diagrams.py; the diagrams are "
               f"{sorted(_diagrams())}")
    for key, kinds in (("figure", ("code",)), ("after", ("code", "markdown")), ("code", ("code",)),
                       ("output", ("code",))):
        if key in table:
            c.cell(key, kinds)
    for ref in table.get("notes_from", []):
        c.cell("notes_from", ("markdown",), ref)  # prose for the speaker: a code cell's source is not
    if "code" in table:
        c.lines("code_lines", "code", _cell_lines(cells[table["code"]].source), f"cell {table['code']}")
    elif "code_lines" in table:
        c.lines("code_lines", "code", 0, "no cell")
    if "output" in table:
        shown = _output_html(cells[table["output"]])
        if not shown.strip():
            c.fail(f"output names {table['output']!r}, a cell that printed nothing (in the notebook as saved); "
                   f"run the notebook, or name the cell that prints")
        if "output_lines" in table and shown.startswith("<div"):
            c.fail(f"{c.value('output_lines')}: cell {table['output']} shows a table, which is shown whole; leave "
                   f"output_lines out")
        c.lines("output_lines", "output", _cell_lines(shown), f"the output of cell {table['output']}")
    elif "output_lines" in table:
        c.lines("output_lines", "output", 0, "no cell")
    if "run" in table and "after" not in table:
        c.fail("`run` needs `after`, the cell after which its code runs")
    if "after" in table and "run" not in table:
        c.fail(f"{c.value('after')} without run: after says where the code of run goes; add run or leave after out")
    if sum(key in table for key in ("figure", "run", "diagram")) > 1:
        c.fail("one figure per slide (figure, run or diagram)")
    values = dict(table)
    for key in ("code_lines", "output_lines"):
        if key in values:
            values[key] = tuple(values[key])
    slide = Slide(number=number, **values)
    if slide.words() > MAX_WORDS:
        c.fail(f"{slide.words()} words of prose, more than {MAX_WORDS}; move the rest to `notes`")
    return slide


def _diagrams() -> dict:
    from annotated.support.diagrams import STAGES
    return STAGES


def read_plan(path: Path) -> Plan:
    """The plan at ``path`` (``lectures/NN_name.toml``), every slide's keys, types and ranges
    checked against its notebook (:func:`check_slide`)."""
    path = Path(path)
    notebook = NOTEBOOKS / f"{path.stem}.ipynb"
    if not notebook.is_file():
        raise LectureError(f"{path}: no notebook {_shown(notebook)} for this plan; name the plan after "
                           f"its notebook (lectures/NN_name.toml)")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise LectureError(f"{path}: not valid TOML ({error})") from None
    except UnicodeDecodeError as error:
        raise LectureError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    extra = set(data) - {"slide"}
    if extra:
        raise LectureError(f"{path}: unknown top-level keys {sorted(extra)}; a plan holds [[slide]] tables only")
    tables = data.get("slide", [])
    if isinstance(tables, dict):
        raise LectureError(f"{path}: [slide] is written as one table; write each slide as [[slide]] (two brackets: "
                           f"an array of tables, one per slide)")
    if not isinstance(tables, list) or not tables:
        raise LectureError(f"{path}: no slides; write each slide as a [[slide]] table with a title")
    cells = {cell.get("id"): cell for cell in read_notebook(notebook).cells}
    # slide 1 is the title slide
    slides = [check_slide(path.name, i, table, cells, notebook) for i, table in enumerate(tables, start=2)]
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

    import matplotlib
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
        # The same figure gives the same bytes: ids from a fixed salt, no date (so --figures leaves it as it was).
        with matplotlib.rc_context({"svg.hashsalt": SVG_SALT}):
            fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    return buffer.getvalue()


def write_if_changed(path: Path, content: str) -> bool:
    """Write ``content`` to ``path`` (through a temporary file beside it) unless the file already
    holds exactly these bytes; return whether it was written."""
    data = content.encode("utf-8")
    if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
        return False
    with atomic_write(path, option="the file") as handle:
        handle.write(data)
    return True


def figure_folder(plan: Plan) -> Path:
    return FIGURES / plan.name


def draw_figures(plan: Plan, timeout: int = 3600) -> tuple[list[Path], list[Path]]:
    """Execute the plan's notebook with the slide style, code of ``run`` slides inserted after their
    cells, and store the figures the plan shows; returns their files and those of them that changed
    (a figure drawn as it was is not written again: :func:`write_if_changed`)."""
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
        return [], []
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
    manifest, files, changed = {}, [], []
    for key, (cell_id, k, digest) in sorted(wanted.items()):
        svgs = [o["data"]["image/svg+xml"] for o in outputs[cell_id] if "image/svg+xml" in o.get("data", {})]
        if not svgs or (k is not None and k > len(svgs)):
            raise LectureError(f"{plan.path.name}: cell {cell_id} drew {len(svgs)} figures, the plan wants "
                               f"{'figure ' + str(k) if k else 'one'}")
        svg = svgs[-1] if k is None else svgs[k - 1]
        path = folder / f"{key}.svg"
        if write_if_changed(path, svg if isinstance(svg, str) else "".join(svg)):
            changed.append(path)
        manifest[key] = digest
        files.append(path)
    old = _manifest(plan)
    for key in set(old) - set(manifest):  # figures of this command that the plan no longer shows
        (folder / f"{key}.svg").unlink(missing_ok=True)
    write_if_changed(folder / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return files, changed


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


def timing_line(minutes: int, elapsed: int) -> str:
    """The first line of the notes of a slide that opens a section."""
    return (f"About {minutes} minute{'s' if minutes != 1 else ''} for this section ({elapsed} of {LECTURE_MINUTES} "
            f"elapsed at its end).")


def _prose_only(notes_html: str) -> str:
    """Speaker notes are prose read at a glance: a code block of the notebook's text (```...```) is
    left out, with a word saying so."""
    notes_html = re.sub(r'<a class="anchor-link"[^>]*>.*?</a>', "", notes_html, flags=re.S)  # nbconvert's ¶
    return re.sub(r"<pre\b.*?</pre>", '<p class="lecture-left-out">(A code block of the notebook, not shown here.)'
                  '</p>', notes_html, flags=re.S)


def notes_html(slide: Slide, cells: dict, timing: dict[int, tuple[int, int]]) -> str:
    """The speaker notes of a slide: "Optional." or its section's time first, then the talking
    points, then the notebook's prose (``notes_from``). Prose only: no code block."""
    notes = []
    if slide.optional:
        notes.append('<p class="lecture-optional-note"><strong>Optional.</strong> Not in the '
                     f'{LECTURE_MINUTES}-minute core; O skips to the next core slide.</p>')
    if slide.number in timing:
        notes.append(f'<p class="lecture-timing"><strong>{timing_line(*timing[slide.number])}</strong></p>')
    if slide.notes:
        notes.append("<ul>" + "".join(f"<li>{_inline(n)}</li>" for n in slide.notes) + "</ul>")
    for ref in slide.notes_from:
        notes.append(_prose_only(_markdown(cells[ref].source)))
    return "".join(notes)


def slide_html(plan: Plan, slide: Slide, cells: dict, figures: dict[str, str],
               timing: dict[int, tuple[int, int]] | None = None) -> str:
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
    optional = ' lecture-optional" data-optional="true' if slide.optional else ""
    return (f'<section class="lecture-slide{optional}" id="s{slide.number}" data-slide="{slide.number}">\n'
            + "\n".join(parts) + f'\n<aside class="notes">{notes_html(slide, cells, timing or {})}</aside>\n'
                                 f'</section>')


@dataclass(frozen=True)
class Links:
    """Where a deck points. On its title and closing slides: the course, the notebook, the full
    deck and the next lecture; in the speaker notes only: the instructor guide (the audience sees
    no link to it). None where the target is not shipped with the deck: a deck built on its own
    names the repository's files in its notes, as text, and links none of them."""
    course: str | None = None
    notebook: str | None = None
    full_deck: str | None = None
    guide: str | None = None
    next_deck: str | None = None
    next_title: str | None = None


def _nav(items) -> str:
    shown = [f'<a href="{html.escape(url)}">{html.escape(label)}</a>' for label, url in items if url]
    return f'<p class="lecture-links">{" · ".join(shown)}</p>' if shown else ""


def _where(label: str, url: str | None, repo_path: str) -> str:
    """A file of the course in the speaker notes: a link where the deck ships it, else its path as text."""
    return f'<a href="{html.escape(url)}">{label}</a>' if url else f"{label} (<code>{repo_path}</code>)"


def deck_html(plan: Plan, assets: str, links: Links, rewrite=None, core: bool = False) -> str:
    """The lecture as one reveal.js page; ``assets`` is the relative URL of the assets folder;
    ``rewrite(html)`` points the links of the notebook's own text (written from notebooks/) at
    their targets from the deck's folder; ``core`` leaves the optional slides out."""
    require_fresh_figures(plan)
    nb = read_notebook(plan.notebook)
    cells = {cell.get("id"): cell for cell in nb.cells}
    shown = plan.core() if core else plan.slides
    figures = {key: (figure_folder(plan) / f"{key}.svg").read_text(encoding="utf-8")
               for key in (s.figure_key() for s in shown) if key}
    title = title_of(plan.notebook)
    total, last = len(shown) + 2, plan.total  # slides in this deck; the closing slide's number in the plan
    optional = len(plan.slides) - len(plan.core())
    timing = plan.timing()
    course = [("Course", links.course), ("Notebook", links.notebook), ("Every cell as slides", links.full_deck)]
    repo = f"notebooks/{plan.notebook.name}"
    guide = _where("instructor guide", links.guide, f"guide/{plan.name}.md")
    if core:
        extent = (f"This is the {LECTURE_MINUTES}-minute core ({total} slides); the {optional} optional slides "
                  f"are left out (slide numbers are those of the whole deck).")
    else:
        extent = (f"The {LECTURE_MINUTES}-minute core is {len(plan.core()) + 2} of the {total} slides; "
                  + (f"the {optional} optional ones are tagged “optional” in a corner and begin their notes with "
                     f"“Optional.”; O skips past them to the next core slide. " if optional else "")
                  + "Each section's time is at the top of its first slide's notes.")
    opening = (f'<section class="lecture-slide lecture-title" id="s1" data-slide="1">\n<h1>{html.escape(title)}</h1>\n'
               f'<p>"Attention Is All You Need", built step by step · {total} slides</p>\n{_nav(course)}\n'
               f'<aside class="notes"><p>Press S for these notes, F for full screen, Esc for an overview, O to skip '
               f'to the next core slide, ? for every key.</p><p>{extent}</p><p>Slide numbers match the '
               f'{guide}\'s timetable; the {_where("notebook", links.notebook, repo)} holds the whole argument.</p>'
               f'</aside>\n</section>')
    following = [("Next: " + (links.next_title or ""), links.next_deck)] if links.next_deck else []
    closing = (f'<section class="lecture-slide lecture-title" id="s{last}" data-slide="{last}">\n'
               f'<h2>{"Next: " + html.escape(links.next_title) if links.next_title else "The end of the course"}</h2>\n'
               f'{_nav(following + course)}\n<aside class="notes"><p>The exercises of this notebook are linked '
               f'from the course page and from the notebook.</p></aside>\n</section>')
    slides = "\n".join(slide_html(plan, s, cells, figures, timing) for s in shown)
    body = "\n".join([opening, rewrite(slides) if rewrite else slides, closing])
    # A core deck numbers its slides as the whole deck does, so the guide's timetable still reads.
    number = "(slide) => [Number(slide.dataset.slide || 0)]" if core else '"c/t"'
    return PAGE.format(title=html.escape(title), assets=assets, mathjax=mathjax_html(assets), body=body,
                       width=SLIDE_WIDTH, height=SLIDE_HEIGHT, slide_number=number)


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
Reveal.initialize({{hash: true, center: false, controls: true, progress: true, slideNumber: {slide_number},
    width: {width}, height: {height}, margin: 0, display: "flex", transition: "fade",
    pdfSeparateFragments: false, pdfMaxPagesPerSlide: 1, plugins: [RevealNotes]}});
// O: on to the next core slide, past the optional ones (the overview stays on Esc).
Reveal.addKeyBinding({{keyCode: 79, key: "O", description: "Skip to the next core slide (past the optional ones)"}},
    () => {{
        const slides = Reveal.getSlides(), here = slides.indexOf(Reveal.getCurrentSlide());
        const next = slides.slice(here + 1).find(slide => !slide.hasAttribute("data-optional"));
        if (next) {{ const at = Reveal.getIndices(next); Reveal.slide(at.h, at.v); }}
    }});
Reveal.registerKeyboardShortcut("ESC, O", "Slide overview (Esc; O skips the optional slides)");
</script>
</body>
</html>
"""


def install_lecture_assets(dest: Path) -> Path:
    install_assets(dest)
    css = Path(__file__).resolve().parent / "templates" / "lecture.css"
    with atomic_write(dest / "lecture.css") as handle:
        handle.write(css.read_bytes())
    return dest


def repo_links(plan: Plan, out: Path, next_plan: Plan | None) -> Links:
    """The links of a deck built on its own (``build/lectures/``): the next lecture's deck beside it,
    nothing else. The course's files are named in the notes as text; linked, a browser would show a
    notebook's JSON and the guide's Markdown source (the site's decks link their pages instead)."""
    return Links(next_deck=f"{next_plan.name}.html" if next_plan else None,
                 next_title=title_of(next_plan.notebook) if next_plan else None)


def drop_links(text: str, folder: Path, keep) -> str:
    """Every ``<a href>`` of ``text`` (written from ``folder``) whose relative target fails
    ``keep(path)`` becomes its text: a link to the raw source of a page, or to a file that is not
    shipped, reads as words instead of leading nowhere. Links with a scheme, absolute paths and
    bare ``#fragments`` stay."""
    def one(match: re.Match) -> str:
        target, inner = match.group(1), match.group(2)
        path_part = html.unescape(target).split("#", 1)[0]
        if not path_part or re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
            return match.group(0)
        file = folder / path_part
        if keep(file):
            return match.group(0)
        try:  # a file of the course named by its path, so that the reader can still find it
            named = file.resolve().relative_to(ROOT).as_posix() if is_raw(file) and file.exists() else None
        except ValueError:
            named = None
        return f"{inner} (<code>{named}</code>)" if named and named not in inner else inner
    return re.sub(r'<a\b[^>]*?\bhref="([^"]*)"[^>]*>(.*?)</a>', one, text, flags=re.S)


def is_raw(path: Path) -> bool:
    """A file a browser would show as source text, not as a page: Markdown, a notebook, a plan."""
    return Path(path).suffix.lower() in RAW_SUFFIXES


def build(plan_paths: Sequence[Path], out: Path, assets_dir: Path | None = None, links=None,
          rewrite=None, core: bool = False, keep_link=None) -> list[Path]:
    """Write one lecture deck per plan into ``out``; ``links(plan, out, next_plan) -> Links``,
    ``rewrite(html, plan, out)`` for the links of the notebook's text (by default to the repository's
    files) and ``keep_link(path)`` for the links that stay links (by default: to a file that exists
    and is not raw source; see :func:`drop_links`). ``core`` leaves the optional slides out.

    A symbolic link left in ``out`` is removed, never written through, and every file is written
    through a temporary file beside it (:func:`annotated.support.files.atomic_write`)."""
    from annotated.support.slides import links_to_files, remove_links

    out.mkdir(parents=True, exist_ok=True)
    remove_links(out)
    links = links or repo_links
    rewrite = rewrite or (lambda text, plan, folder: links_to_files(text, plan.notebook, folder))
    assets_dir = install_lecture_assets(assets_dir or out / "assets")
    relative = Path(os.path.relpath(assets_dir, out)).as_posix()
    # The next lecture is named by its file alone: a plan being edited elsewhere does not stop this one.
    every = [Plan(p, NOTEBOOKS / f"{p.stem}.ipynb", []) for p in plans() if (NOTEBOOKS / f"{p.stem}.ipynb").is_file()]
    names = [p.name for p in every]
    building = {f"{Path(p).stem}.html" for p in plan_paths}

    def standalone(path: Path) -> bool:
        return not is_raw(path) and (path.exists() or (path.parent.resolve() == out.resolve()
                                                       and path.name in building))
    keep_link = keep_link or standalone
    decks = []
    for path in plan_paths:
        plan = read_plan(path)
        i = names.index(plan.name) if plan.name in names else -1
        next_plan = every[i + 1] if 0 <= i < len(every) - 1 else None
        deck = out / f"{plan.name}.html"
        text = deck_html(plan, relative, links(plan, out, next_plan),
                         rewrite=lambda text, plan=plan: rewrite(text, plan, out), core=core)
        with atomic_write(deck, mode="w") as handle:
            handle.write(drop_links(text, out, keep_link))
        decks.append(deck)
    return decks


HANDOUT_LAYOUTS = (1, 2, 4)  # slides a page of the PDF handout

# Run in reveal.js's print view once it has laid the slides out (one .pdf-page each): links that
# would print as paths of the build machine become text; then, for 2 or 4 slides a page or with the
# speaker notes, the pages are grouped into A4 sheets.
HANDOUT = """([perPage, withNotes]) => {
    document.querySelectorAll('a[href]').forEach(a => {
        if (/^https?:/i.test(a.href)) return;
        const span = document.createElement('span');
        span.innerHTML = a.innerHTML;
        a.replaceWith(span);
    });
    if (perPage === 1 && !withNotes) return 0;
    const slides = document.querySelector('.reveal .slides');
    const pages = Array.from(slides.querySelectorAll(':scope > .pdf-page'));
    const landscape = perPage === 4 && !withNotes;
    const style = document.createElement('style');
    style.textContent = `@page { size: ${landscape ? '297mm 210mm' : '210mm 297mm'}; margin: 10mm; }`;
    document.head.appendChild(style);
    document.documentElement.classList.add('lecture-handout', `lecture-handout-${perPage}`);
    if (withNotes) document.documentElement.classList.add('lecture-handout-notes');
    document.body.style.width = landscape ? '277mm' : '190mm';
    document.body.style.height = 'auto';
    const boxes = [];
    const box = (page, parent) => {
        const frame = document.createElement('div');
        frame.className = 'handout-slide';
        parent.appendChild(frame);
        frame.appendChild(page);
        page.style.width = '1280px';
        boxes.push([frame, page]);
        return frame;
    };
    let sheet = null;
    pages.forEach((page, i) => {
        if (withNotes) {
            const item = document.createElement('div');
            item.className = 'handout-item';
            slides.appendChild(item);
            box(page, item);
            const notes = document.createElement('div');
            notes.className = 'handout-notes';
            const section = page.querySelector('section');
            const aside = section && section.querySelector('aside.notes');
            notes.innerHTML = aside ? aside.innerHTML : '';
            item.appendChild(notes);
        } else {
            if (i % perPage === 0) {
                sheet = document.createElement('div');
                sheet.className = 'handout-sheet';
                slides.appendChild(sheet);
            }
            box(page, sheet);
        }
    });
    boxes.forEach(([frame, page]) => {
        const zoom = Math.min(frame.clientWidth / 1280, (frame.clientHeight || 1e9) / 720);
        page.style.zoom = zoom;
        frame.style.height = `${720 * zoom}px`;
    });
    return boxes.length;
}"""


def write_pdfs(decks: Sequence[Path], folder: Path, notes: bool = False, per_page: int = 1) -> list[Path]:
    """A PDF handout of every deck (every step of a slide shown), printed by headless Chromium
    through reveal.js's print view (``?print-pdf``): one slide a page (1280 x 720), or ``per_page``
    2 or 4 to an A4 sheet; ``notes`` prints each slide's speaker notes beside it. The handout links
    only to the web: a link to a file would print as a path of the machine that built it."""
    from annotated.support.browser import PageLog, offline_browser, open_page, wait_for_mathjax

    if per_page not in HANDOUT_LAYOUTS:
        raise ValueError(f"per_page = {per_page}: a handout prints {', '.join(map(str, HANDOUT_LAYOUTS))} "
                         f"slides a page")
    folder.mkdir(parents=True, exist_ok=True)
    pdfs = []
    with offline_browser(SLIDE_WIDTH, SLIDE_HEIGHT) as context:
        for deck in decks:
            page = open_page(context, deck.as_uri() + "?print-pdf", PageLog())
            wait_for_mathjax(page)
            page.wait_for_function("() => window.Reveal && Reveal.isReady()")
            page.wait_for_function("() => document.querySelector('.reveal .slides > .pdf-page')")
            page.evaluate(HANDOUT, [per_page, notes])
            if per_page == 1 and not notes:
                data = page.pdf(width=f"{SLIDE_WIDTH}px", height=f"{SLIDE_HEIGHT}px", print_background=True)
            else:
                data = page.pdf(prefer_css_page_size=True, print_background=True)
            page.close()
            pdf = folder / f"{deck.stem}.pdf"
            with atomic_write(pdf) as handle:
                handle.write(data)
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
    parser.add_argument("--out", type=Path, default=None,
                        help=f"folder for the decks (default: {_shown(DEFAULT_OUT)}, with --core "
                             f"{_shown(DEFAULT_CORE_OUT)})")
    parser.add_argument("--core", action="store_true",
                        help=f"the {LECTURE_MINUTES}-minute core of each deck: the optional slides left out")
    parser.add_argument("--pdf", action="store_true", help="also print a PDF handout of each deck into OUT/pdf/ "
                                                           "(needs Chromium)")
    parser.add_argument("--per-page", type=int, choices=HANDOUT_LAYOUTS, default=1,
                        help="slides a page of the PDF handout: 1 (a page the slide's size, the default), or 2 or 4 "
                             "on an A4 sheet")
    parser.add_argument("--handout-notes", action="store_true",
                        help="print each slide's speaker notes beside it in the PDF handout (A4)")
    parser.add_argument("--figures", action="store_true",
                        help="draw the plans' figures again by executing their notebooks (minutes per notebook), "
                             "into lectures/figures/, rewriting only the figures that changed; no deck is built")
    parser.add_argument("--list", action="store_true", help="print every slide's number and title, build nothing")
    parser.add_argument("--force", action="store_true",
                        help="write into --out even if this command did not make it (what it holds is replaced)")
    args = parser.parse_args(argv)
    if (args.per_page != 1 or args.handout_notes) and not args.pdf:
        parser.error("--per-page and --handout-notes shape the PDF handout: add --pdf")
    out = args.out or (DEFAULT_CORE_OUT if args.core else DEFAULT_OUT)
    chosen = args.plans or plans()

    def body() -> int:
        loaded = [read_plan(p) for p in chosen]  # every plan checked before any work
        if args.list:
            for plan in loaded:
                print(f"{plan.name}: {plan.total} slides, {len(plan.core()) + 2} of them the core")
                for slide in plan.slides:
                    print(f"  {slide.number:3d}  {slide.title}{'  (optional)' if slide.optional else ''}")
            return 0
        if args.figures:
            for plan in loaded:
                files, changed = draw_figures(plan)
                print(f"{plan.name}: {len(files)} figures in {_shown(figure_folder(plan))}, {len(changed)} of them "
                      f"changed")
            return 0
        for plan in loaded:
            require_fresh_figures(plan)  # before any work
        check_output_folder(out, args.force, inputs=chosen, protected=course_paths())
        try:
            with build_folder(out, parser.prog, force=args.force, keep=True, inputs=chosen,
                              protected=course_paths()) as tmp:
                names = [deck.name for deck in build(chosen, tmp, core=args.core)]
                if args.pdf:
                    write_pdfs([tmp / name for name in names], tmp / "pdf", notes=args.handout_notes,
                               per_page=args.per_page)
        except KeyboardInterrupt:
            print(f"{parser.prog}: interrupted; {out} is as it was before", file=sys.stderr)
            return 130
        for name in names:
            print(out / name)
        if args.pdf:
            print(f"PDF handouts in {out / 'pdf'}")
        print(f"{len(names)} lectures in {out}; open one in a browser (no network needed), press S for the "
              f"speaker notes, O to skip the optional slides")
        return 0

    # SIGTERM and SIGHUP stop a build as Ctrl-C does: its temporary folder is removed, --out kept as it was.
    with signals_as_interrupt():
        return run_command(body, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
