"""Chooses the notebooks' slide metadata: ``python -m annotated.support.slide_layout [NOTEBOOK ...]``.

The rule, one idea per slide:

* a markdown cell opens a slide and the code cells after it (its code, its figure) stay on it:
  "words, code, figure" is one idea;
* a cell whose first line is a ``#`` or ``##`` heading opens a new horizontal slide (a section of
  the notebook); every other markdown cell opens a sub-slide below it, so a long derivation
  becomes a column of sub-slides;
* when an idea is taller than the slide, its code cells move to sub-slides of their own;
* a code cell taller than the slide on its own: if it shows nothing (it defines functions), it
  goes to the speaker notes (``notes``); if it shows a figure or a printout, the slide shows that
  and its code goes to the notes (the cell tag ``code-in-notes``, :class:`annotated.support.slides.CodeInNotes`);
* a markdown cell taller than the slide is cut at blank lines into several cells, each its
  own sub-slide.

Heights are measured, not guessed: every cell is rendered alone on a 1280 x 720 slide in
headless Chromium (:mod:`annotated.support.browser`) and its height read back.
"""

import argparse
import copy
import math
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import nbformat

from annotated.support.course import NOTEBOOKS, ROOT
from annotated.support.errors import run_command
from annotated.support.files import signals_as_interrupt, write_notebook, write_text
from annotated.support.slides import CODE_IN_NOTES, SLIDE_HEIGHT, SLIDE_WIDTH, export_deck, install_assets

# A slide is filled to this height at most; the browser test allows OVERFLOW_ALLOWED beyond 720.
BUDGET = SLIDE_HEIGHT - 40
HEADINGS = ("# ", "## ")


def measure_cells(notebook: Path, assets_dir: Path) -> list[float]:
    """The rendered height (CSS pixels at the 1280 x 720 slide size) of every cell of ``notebook``,
    each shown alone on a slide."""
    from annotated.support.browser import PageLog, offline_browser, open_page, wait_for_mathjax

    nb = nbformat.read(notebook, as_version=4)
    alone = copy.deepcopy(nb)
    for cell in alone.cells:
        cell.metadata["slideshow"] = {"slide_type": "slide"}
    with tempfile.TemporaryDirectory(dir=assets_dir.parent) as tmp:
        probe = Path(tmp) / notebook.name
        write_notebook(alone, probe)
        deck = Path(tmp) / "probe.slides.html"
        write_text(deck, export_deck(probe, Path("..", assets_dir.name).as_posix()))
        with offline_browser(SLIDE_WIDTH, SLIDE_HEIGHT) as context:
            log = PageLog()
            page = open_page(context, deck.as_uri(), log)
            wait_for_mathjax(page)
            heights = slide_heights(page)
    if len(heights) != len(nb.cells):
        raise RuntimeError(f"{notebook}: {len(nb.cells)} cells but {len(heights)} slides were measured")
    return [h for h, _ in heights]


def slide_heights(page) -> list[tuple[float, str]]:
    """(content height, "h/v" index) of every (sub)slide of the reveal.js deck open in ``page``,
    each measured while it is the current slide, with every fragment shown."""
    return [(height, index) for height, index in page.evaluate("""() => {
        Reveal.configure({transition: 'none', viewDistance: 1000});
        const result = [];
        Reveal.getHorizontalSlides().forEach((column, h) => {
            const rows = column.querySelectorAll(':scope > section');
            const count = Math.max(rows.length, 1);
            for (let v = 0; v < count; v++) {
                Reveal.slide(h, v, Number.MAX_SAFE_INTEGER);
                const slide = Reveal.getCurrentSlide();
                result.push([slide.scrollHeight, `${h}/${v}`]);
            }
        });
        return result;
    }""")]


def _first_line(cell) -> str:
    return cell.source.lstrip().split("\n", 1)[0]


def split_markdown(source: str, parts: int) -> list[str]:
    """``source`` cut into about ``parts`` pieces of equal length: at blank lines, between the
    items of a list, or between the rows of a table (each piece of a table repeats its header);
    never inside a code fence or a ``$$`` block. Fewer pieces if there are fewer places to cut."""
    lines = source.split("\n")
    cuts: dict[int, list[str]] = {}  # line index a piece may start at -> lines to put before it
    fenced = math_block = False
    header: list[str] = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
        elif stripped.startswith("$$") and not (stripped.endswith("$$") and len(stripped) > 2):
            math_block = not math_block
        if fenced or math_block or i == 0 or not stripped:
            continue
        if stripped.startswith("|"):
            if i + 1 < len(lines) and set(lines[i + 1].strip()) <= set("|-: ") and lines[i + 1].strip():
                header = [line, lines[i + 1]]  # a table starts: its header row and separator
            elif header and line not in header and lines[i - 1].strip().startswith("|") and lines[i - 1] not in header:
                cuts[i] = header
            continue
        header = []
        starts_item = re.match(r"([*-]|\d+\.) ", line) is not None
        if (not lines[i - 1].strip() and not line.startswith((" ", "\t"))) or starts_item:
            cuts.setdefault(i, [])
    chosen: list[int] = []
    for k in range(1, parts):
        target = len(lines) * k / parts
        later = [c for c in cuts if not chosen or c > chosen[-1]]
        if later:
            chosen.append(min(later, key=lambda c: abs(c - target)))
    pieces, start = [], 0
    for cut in chosen:
        pieces.append(lines[start:cut])
        start = cut
    pieces.append(lines[start:])
    result = []
    for n, piece in enumerate(pieces):
        before = cuts[chosen[n - 1]] if n else []
        text = "\n".join(before + piece).strip("\n")
        if text.strip():
            result.append(text)
    return result


def choose_slide_types(cells: Sequence, heights: Sequence[float], budget: float = BUDGET) -> list[str]:
    """The slide type of every cell by the rule of this module's docstring (cells tagged
    ``code-in-notes`` are measured by their outputs alone)."""
    types: list[str] = []
    used = 0.0  # height already on the current slide
    for i, (cell, height) in enumerate(zip(cells, heights)):
        if cell.cell_type != "code":
            types.append("slide" if i == 0 or _first_line(cell).startswith(HEADINGS) else "subslide")
            used = height
        elif height > budget and not cell.get("outputs"):
            types.append("notes")
        elif used + height > budget:
            types.append("subslide")
            used = height
        else:
            types.append("-")
            used += height
    return types


def shorten_tall_cells(nb, heights: Sequence[float], budget: float = BUDGET) -> int:
    """Cut markdown cells taller than ``budget`` into several, and tag code cells taller than it
    that have outputs ``code-in-notes``; return how many cells changed."""
    changed = 0
    for i in reversed(range(len(nb.cells))):
        cell, height = nb.cells[i], heights[i]
        if height <= budget:
            continue
        if cell.cell_type == "markdown":
            pieces = split_markdown(cell.source, math.ceil(height / (0.9 * budget)))
            if len(pieces) > 1:
                parts = [nbformat.v4.new_markdown_cell(piece) for piece in pieces]
                parts[0].id = cell.id  # a lecture plan that names the cell still finds its first part
                nb.cells[i:i + 1] = parts
                changed += 1
        elif cell.cell_type == "code" and cell.get("outputs"):
            tags = cell.metadata.setdefault("tags", [])
            if CODE_IN_NOTES not in tags:
                tags.append(CODE_IN_NOTES)
                changed += 1
    return changed


def lay_out(notebook: Path, assets: Path) -> tuple[list[str], list[float]]:
    """Shorten the tall cells of ``notebook`` (measuring again after each change) and write the
    slide types; return the types and the cells' final heights."""
    for _ in range(4):
        heights = measure_cells(notebook, assets)
        nb = nbformat.read(notebook, as_version=4)
        if not shorten_tall_cells(nb, heights):
            break
        write_notebook(nb, notebook, option="notebook")  # whole, or the notebook as it was
    types = choose_slide_types(nb.cells, heights)
    for cell, kind in zip(nb.cells, types, strict=True):
        cell.metadata["slideshow"] = {"slide_type": kind}
    write_notebook(nb, notebook, option="notebook")
    return types, heights


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.slide_layout",
                                     description="Measure every cell in Chromium and set the notebooks' slide types.")
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to lay out (default: every notebook in notebooks/)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted(NOTEBOOKS.glob("*.ipynb"))

    def body() -> int:
        assets = install_assets(ROOT / "build" / "layout" / "assets")
        for notebook in notebooks:
            types, heights = lay_out(notebook, assets)
            counts = {kind: types.count(kind) for kind in ("slide", "subslide", "-", "notes")}
            tall = [i for i, (kind, h) in enumerate(zip(types, heights)) if kind != "notes" and h > BUDGET]
            print(f"{notebook.name}: {counts}; cells still taller than a slide: {tall or 'none'}")
        return 0

    with signals_as_interrupt():  # SIGTERM and SIGHUP as Ctrl-C: the temporary probes are removed
        return run_command(body, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
