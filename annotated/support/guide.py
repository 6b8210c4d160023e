"""Write the "Common mistakes" section of the instructor guide from the exercise checks.

    python -m annotated.support.guide            # rewrite the section in every guide/NN_*.md
    python -m annotated.support.guide --check    # write nothing; exit 1 if a section is out of date
    python -m annotated.support.guide guide/03_masking.md   # only the guides named

Every guide file, ``guide/NN_name.md`` for ``notebooks/NN_name.ipynb``, holds a section
between two marker comments (``BEGIN`` and ``END`` below). For each exercise of the
notebook, in the order of ``solutions/NN_name.ipynb`` (an ``## Exercise N.M: title``
heading, then a cell that calls ``check_...``), the section lists the mistakes that the
check recognizes: the "Diagnoses:" paragraph of the check's docstring, word for word. So
the guide and the checks cannot disagree: edit a check's docstring, then run the command.
A notebook without a solution notebook (00) gets a line on its environment instead.
"""

import argparse
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from annotated.support.course import NOTEBOOKS, ROOT
from annotated.support.errors import run_command
from annotated.support.files import signals_as_interrupt, write_text

GUIDE = ROOT / "guide"
SOLUTIONS = ROOT / "solutions"

BEGIN = ("<!-- generated from the exercise checks' diagnoses by `python -m annotated.support.guide`; "
         "edit the checks, not this section -->")
END = "<!-- end of the generated section -->"

NO_EXERCISES = ("Notebook {number} has no checked exercises; the mistakes students make here are "
                "environment ones: run `python -m annotated.doctor`.")

_EXERCISE_HEADING = re.compile(r"^## Exercise (\d+\.\d+): (.+)$", re.MULTILINE)
_CHECK_CALL = re.compile(r"^(check_\w+)\(")


class GuideError(Exception):
    """A guide or an exercise notebook the generator cannot work with; the message says which and why."""


@dataclass(frozen=True)
class Exercise:
    number: str  # "4.3"
    title: str   # "`multi_head_attention` (§3.2.2)", as in the solution notebook's heading
    check: str   # "check_multi_head_attention"


def exercises(solution: Path) -> list[Exercise]:
    """The exercises of a solution notebook in order, each with the check that its check cell calls."""
    found: list[Exercise] = []
    heading = None
    for cell in nbformat.read(solution, as_version=4).cells:
        if cell.cell_type == "markdown" and (match := _EXERCISE_HEADING.match(cell.source)):
            heading = match.groups()
        elif cell.cell_type == "code" and (match := _CHECK_CALL.match(cell.source.strip())):
            if heading is None:
                raise GuideError(
                    f"{solution.name}: the cell calling {match.group(1)} comes before any "
                    "'## Exercise N.M: title' heading; put it under its exercise's heading"
                )
            found.append(Exercise(heading[0], heading[1].strip(), match.group(1)))
    return found


def diagnoses(check: str) -> str:
    """The "Diagnoses:" paragraph of a check's docstring, on one line, without the label."""
    # Imported here: the grading modules import torch, which `--help` does not need.
    from annotated.support.grading import CHECKS

    if check not in CHECKS:
        raise GuideError(
            f"{check} is called by a solution notebook but is not a check of "
            "annotated.support.grading (CHECKS); define it in the notebook's grading module"
        )
    doc = inspect.getdoc(CHECKS[check]) or ""
    for paragraph in doc.split("\n\n"):
        if paragraph.startswith("Diagnoses:"):
            return " ".join(paragraph[len("Diagnoses:"):].split())
    raise GuideError(
        f"the docstring of {check} has no paragraph starting 'Diagnoses:'; add one listing the "
        "mistakes the check names, since the instructor guide is written from it"
    )


def _markdown(text: str) -> str:
    """Docstring text as Markdown: ``code`` becomes `code`, and tokens such as <s> are put in
    code spans, where they cannot be read as HTML tags."""
    text = text.replace("``", "`")
    pieces = text.split("`")
    for i in range(0, len(pieces), 2):  # the even pieces lie outside code spans
        pieces[i] = re.sub(r"</?[A-Za-z]+>", lambda m: f"`{m.group(0)}`", pieces[i])
    return "`".join(pieces)


def section(notebook: str) -> str:
    """The generated text (between the markers) of the guide of ``notebook``, e.g. "03_masking"."""
    solution = SOLUTIONS / f"{notebook}.ipynb"
    if not solution.exists():
        return NO_EXERCISES.format(number=notebook[:2])
    items = exercises(solution)
    if not items:
        raise GuideError(
            f"{solution.relative_to(ROOT)} has no '## Exercise N.M: title' heading followed by a "
            "check cell; the guide's common mistakes are taken from those checks"
        )
    lines = [
        f"What the checks of [the exercises](../exercises/{notebook}.ipynb) recognize, in the words "
        "of their docstrings; a student whose answer makes one of these mistakes is told which.",
        "",
    ]
    for item in items:
        lines.append(f"- **Exercise {item.number}, {item.title}** (`{item.check}`): "
                     f"{_markdown(diagnoses(item.check))}")
    return "\n".join(lines)


def render(text: str, generated: str, where: str) -> str:
    """``text`` with everything between the markers replaced by ``generated``."""
    begin, end = text.count(BEGIN), text.count(END)
    if begin != 1 or end != 1 or text.index(BEGIN) > text.index(END):
        raise GuideError(
            f"{where}: needs the marker lines, once each and in this order, under '## Common "
            f"mistakes' (found the first {begin} times, the second {end} times):\n{BEGIN}\n{END}"
        )
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{generated}\n{END}{tail}"


def guide_path(notebook: str, guide_dir: Path = GUIDE) -> Path:
    return guide_dir / f"{notebook}.md"


def notebook_names() -> list[str]:
    """The course's notebooks, "00_introduction" .. , in order."""
    return sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def update(path: Path, check: bool = False) -> bool:
    """Rewrite the generated section of one guide file; return True when it was out of date
    (with ``check``, only report it)."""
    if not path.exists():
        raise GuideError(
            f"{path} is missing: every notebook in notebooks/ has a guide of the same name; write "
            "it with the headings of guide/README.md and the two marker lines"
        )
    text = path.read_text(encoding="utf-8")
    new = render(text, section(path.stem), str(path))
    if new == text:
        return False
    if not check:  # whole or not at all: a full disk keeps the page, hand-written sections and all
        write_text(path, new, option="guide")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.guide", description=__doc__.splitlines()[0])
    parser.add_argument("guides", nargs="*", type=Path,
                        help="guide files to update (default: guide/NN_name.md of every notebook)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a guide's generated section is out of date")
    args = parser.parse_args(argv)
    with signals_as_interrupt():  # SIGTERM is a Ctrl-C
        return run_command(lambda: _update_all(args), parser.prog)


def _update_all(args: argparse.Namespace) -> int:
    paths = args.guides or [guide_path(name) for name in notebook_names()]
    failed = False
    for path in paths:
        try:
            changed = update(path, check=args.check)
        except GuideError as err:
            print(f"error: {err}", file=sys.stderr)
            failed = True
            continue
        if changed and args.check:
            print(f"{path}: the common mistakes differ from the checks' diagnoses; "
                  "run python -m annotated.support.guide", file=sys.stderr)
            failed = True
        elif changed:
            print(f"{path}: common mistakes rewritten")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
