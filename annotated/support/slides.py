"""Slide decks from the notebooks, for lecturing: ``python -m annotated.support.slides``.

Every notebook's cells carry Jupyter's slide metadata (``cell.metadata.slideshow.slide_type``:
``slide``, ``subslide``, ``fragment``, ``-``, ``notes`` or ``skip``), the same that RISE uses to
present live from JupyterLab. This command turns each notebook into a reveal.js deck with
nbconvert's ``--to slides`` exporter and the course's template, which loads reveal.js and
MathJax from the build folder, so the decks open from disk with the network off::

    python -m annotated.support.slides                 # every notebook -> build/slides/
    python -m annotated.support.slides notebooks/03_masking.ipynb --out /tmp/decks

The slide size is 1280 x 720; ``python -m annotated.support.slide_layout`` chose the metadata so
that every slide fits it (``tests/test_browser.py`` measures each slide in Chromium).

The decks are written into a temporary copy of ``--out`` and swapped in at the end (a Ctrl-C
midway leaves the earlier decks whole); a folder this command did not write is not replaced
without ``--force`` (see :func:`annotated.support.files.build_folder`).
"""

import argparse
import copy
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor

from annotated.support.course import NOTEBOOKS, ROOT, course_paths
from annotated.support.errors import CourseError, run_command
from annotated.support.files import atomic_write, build_folder, check_output_folder, signals_as_interrupt
from annotated.support.web_assets import install, mathjax_html

SLIDE_WIDTH, SLIDE_HEIGHT = 1280, 720
HREF = re.compile(r'(href|src)="([^"]*)"')
SLIDE_TYPES = ("slide", "subslide", "fragment", "-", "notes", "skip")
TEMPLATES = Path(__file__).resolve().parent / "templates"
DEFAULT_OUT = ROOT / "build" / "slides"


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path``, or a CourseError in one line naming the file and what is wrong
    (not JSON, not a notebook, not UTF-8)."""
    try:
        return nbformat.read(path, as_version=4)
    except OSError:
        raise  # a missing file, a permission: the command lines name it in one line
    except Exception as error:  # nbformat's NotJSONError, a validation error, bytes that are not UTF-8
        first = str(error).strip().splitlines()[0][:160] if str(error).strip() else type(error).__name__
        raise CourseError(f"{path} is not a valid notebook ({type(error).__name__}: {first}); open it in "
                          f"Jupyter to repair it, or restore it with git checkout") from None


def title_of(path: Path) -> str:
    """The notebook's title: the text of its first heading ("03 · Masking")."""
    nb = read_notebook(path)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return path.stem


def slide_type(cell) -> str | None:
    """The cell's slide type as Jupyter stores it, or None if it has none."""
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type")


def deck_name(notebook: Path) -> str:
    return f"{notebook.stem}.slides.html"


CODE_IN_NOTES = "code-in-notes"  # the cell tag: on the slide the cell's outputs, its code in the speaker notes


class CodeInNotes(Preprocessor):
    """A cell tagged ``code-in-notes`` (long code whose figure or printout is the point) shows
    only its outputs on the slide; its code goes to the speaker notes just before it."""

    def preprocess(self, nb, resources):
        cells = []
        for cell in nb.cells:
            if cell.cell_type == "code" and CODE_IN_NOTES in cell.metadata.get("tags", []):
                notes = nbformat.v4.new_code_cell(cell.source, metadata={"slideshow": {"slide_type": "notes"}})
                cells.append(notes)
                cell = copy.deepcopy(cell)
                cell.metadata["transient"] = {"remove_source": True}
            cells.append(cell)
        nb.cells = cells
        return nb, resources


class ShortTracebacks(Preprocessor):
    """On a slide an error is shown by its last line, the message the course wrote for it
    (``ValueError: ...``); the full traceback stays in the notebook and on the site."""

    def preprocess_cell(self, cell, resources, index):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = [f"{output['ename']}: {output['evalue']}"]
        return cell, resources


def export_deck(notebook: Path, assets: str) -> str:
    """The deck of ``notebook`` as one HTML text; ``assets`` is the relative URL of the folder
    that :func:`annotated.support.web_assets.install` filled."""
    from nbconvert import SlidesExporter

    nb = read_notebook(notebook)
    missing = [i for i, cell in enumerate(nb.cells) if slide_type(cell) not in SLIDE_TYPES]
    if missing:
        raise CourseError(f"{notebook}: cells {missing[:10]} have no slide type (metadata.slideshow.slide_type); "
                          f"run `python -m annotated.support.slide_layout {notebook}` to set them")
    exporter = SlidesExporter(
        template_name="course_slides",
        extra_template_basedirs=[str(TEMPLATES)],
        reveal_url_prefix=f"{assets}/reveal.js",
        reveal_width=str(SLIDE_WIDTH),
        reveal_height=str(SLIDE_HEIGHT),
        reveal_theme="white",
    )
    resources = {"course_css": f"{assets}/course.css", "course_mathjax": mathjax_html(assets),
                 "metadata": {"name": notebook.stem}}
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    return body


def map_links(text: str, folder: Path, url_for: Callable[[Path], str | None]) -> str:
    """Rewrite the relative links (``href``, ``src``) of ``text``, written from ``folder``:
    ``url_for(file)`` gives the new URL of the file a link names (its ``#fragment`` is kept), or
    None to leave the link as it is. Links with a scheme, absolute paths, bare ``#fragments``
    and links to no file are left alone."""
    def one(match: re.Match) -> str:
        attribute, target = match.groups()
        path_part, hash_, fragment = target.partition("#")
        if not path_part or re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
            return match.group(0)
        file = (folder / path_part).resolve()
        url = url_for(file) if file.is_file() else None
        return match.group(0) if url is None else f'{attribute}="{url}{hash_}{fragment}"'
    return HREF.sub(one, text)


def links_to_files(text: str, notebook: Path, out: Path) -> str:
    """Point the deck's relative links (``../exercises/03_masking.ipynb``) at the repository's
    files from the deck's folder ``out``."""
    return map_links(text, notebook.parent, lambda file: Path(os.path.relpath(file, out.resolve())).as_posix())


def build(notebooks: Sequence[Path], out: Path, assets_dir: Path | None = None,
          links: Callable[[str, Path, Path], str] = links_to_files) -> list[Path]:
    """Write one deck per notebook into ``out``, with the assets in ``assets_dir`` (default
    ``out/assets``), its links rewritten by ``links(html, notebook, out)``; return the decks' paths."""
    out.mkdir(parents=True, exist_ok=True)
    remove_links(out)
    assets_dir = install_assets(assets_dir or out / "assets")
    relative = Path(os.path.relpath(assets_dir, out)).as_posix()
    decks = []
    for notebook in notebooks:
        deck = out / deck_name(notebook)
        with atomic_write(deck, mode="w") as handle:
            handle.write(links(export_deck(notebook, relative), notebook, out))
        decks.append(deck)
    return decks


def remove_links(folder: Path) -> list[Path]:
    """Remove every symbolic link inside ``folder`` (one left there by hand, or copied from an
    earlier build) and return them: a build writes its own files in their place and never writes
    through a link to a file outside its folder. What a link points to is left untouched."""
    found = []
    for parent, dirs, files in os.walk(folder):  # does not follow links to folders
        for name in dirs + files:
            path = Path(parent) / name
            if path.is_symlink():
                path.unlink()
                found.append(path)
    return found


def install_assets(dest: Path) -> Path:
    """reveal.js, MathJax and the course's style sheet, into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    remove_links(dest)
    install(dest)
    with atomic_write(dest / "course.css") as handle:
        handle.write((TEMPLATES / "course.css").read_bytes())
    return dest


def _notebook(text: str) -> Path:
    path = Path(text)
    if path.suffix != ".ipynb" or not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a notebook file (.ipynb); give one of {NOTEBOOKS}/*.ipynb")
    try:
        read_notebook(path)  # not JSON or not a notebook: a usage error now, before any deck is built
    except CourseError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.slides",
                                     description="Build a reveal.js deck per notebook, offline (no CDN).")
    parser.add_argument("notebooks", nargs="*", type=_notebook,
                        help="notebooks to turn into decks (default: every notebook in notebooks/)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder for the decks (default: {DEFAULT_OUT})")
    parser.add_argument("--force", action="store_true",
                        help="write into --out even if this command did not make it (what it holds is replaced)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted(NOTEBOOKS.glob("*.ipynb"))

    def body() -> int:
        check_output_folder(args.out, args.force, inputs=notebooks, protected=course_paths())  # before any work
        try:
            # Decks already in --out stay (a copy of it is the starting point); the new ones are added.
            with build_folder(args.out, "python -m annotated.support.slides", force=args.force, keep=True,
                              inputs=notebooks, protected=course_paths()) as tmp:
                names = [deck.name for deck in build(notebooks, tmp)]
        except KeyboardInterrupt:
            print(f"{parser.prog}: interrupted; {args.out} is as it was before", file=sys.stderr)
            return 130
        decks = [args.out / name for name in names]
        for deck in decks:
            print(deck)
        print(f"{len(decks)} decks in {args.out}; open one in a browser (no network needed), "
              f"press S for the speaker notes")
        return 0

    # SIGTERM and SIGHUP stop a build as Ctrl-C does: its temporary folder is removed, --out kept as it was.
    with signals_as_interrupt():
        return run_command(body, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
