"""The course map of notebook 00 ("The course map"): every row names a notebook that exists,
with its title, and the modules it builds, the same as the modules' docstrings and
``annotated.support.course.TAUGHT_MODULES`` say."""

import importlib
import itertools
import json
import re

from annotated.support.course import NOTEBOOKS, TAUGHT_MODULES


def course_map_rows() -> list[tuple[str, str, str]]:
    """(number, title, builds) of every row of the course-map table, read from notebook 00's
    markdown cells from "## The course map" on (on the slides the table spans three cells)."""
    cells = json.loads((NOTEBOOKS / "00_introduction.ipynb").read_text(encoding="utf-8"))["cells"]
    start = next(i for i, c in enumerate(cells) if "## The course map" in "".join(c["source"]))
    text = "\n".join("".join(c["source"]) for c in itertools.takewhile(lambda c: c["cell_type"] == "markdown",
                                                                       cells[start:]))
    return re.findall(r"^\| (\d\d) \| (.+?) \| .+? \| (.+?) \|$", text, flags=re.MULTILINE)


def test_the_course_map_has_one_row_per_notebook_in_order():
    numbers = [number for number, _, _ in course_map_rows()]
    assert numbers == sorted(p.name[:2] for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), numbers


def test_every_row_names_its_notebooks_title_and_the_modules_it_teaches():
    docstring_map = {}  # notebook file -> modules whose docstring names it
    for name in TAUGHT_MODULES:
        notebook = re.search(r"Notebook: ``(.+?\.ipynb)``", importlib.import_module(name).__doc__).group(1)
        docstring_map.setdefault(notebook, set()).add(name)
    for number, title, builds in course_map_rows():
        (notebook,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
        heading = json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]["source"][0].strip()
        assert heading == f"# {number} · {title}", (heading, title)
        listed = {f"annotated.{m}" for m in re.findall(r"`annotated\.(\w+)`", builds)}
        assert listed == docstring_map.get(notebook.name, set()), (number, listed)
        assert listed == {m for m, taught in TAUGHT_MODULES.items() if taught == notebook.name}, (number, listed)
