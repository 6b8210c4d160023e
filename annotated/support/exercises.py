"""Make the exercise notebooks from the solution notebooks, with nbgrader's markers.

    python -m annotated.support.exercises            # write exercises/X.ipynb for each solutions/X.ipynb
    python -m annotated.support.exercises --check    # only report exercises that are out of date

In each code cell of a solution notebook, the lines from ``### BEGIN SOLUTION`` to
``### END SOLUTION`` become ``# YOUR CODE HERE`` and ``raise NotImplementedError()``, at
the indentation of the first marker; the lines from ``### BEGIN HIDDEN TESTS`` to
``### END HIDDEN TESTS`` are removed, and a cell left empty by that is dropped. These are
nbgrader's markers, which teachers know; the script applies them without nbgrader's
database and server. Outputs and execution counts are cleared: students run the
exercises themselves. Edit the solution, never the exercise, then run the command.
"""

import argparse
import copy
import sys
from pathlib import Path

import nbformat

from annotated.support.course import ROOT

SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
BLANK = ["# YOUR CODE HERE", "raise NotImplementedError()"]


def replace_regions(
    source: str, begin: str, end: str, replacement: list[str], where: str
) -> tuple[str, int]:
    """Replace every ``begin`` .. ``end`` block of lines (markers included) by ``replacement``,
    indented like the ``begin`` line; return the new source and the number of blocks."""
    out: list[str] = []
    opened_at = None
    count = 0
    for number, line in enumerate(source.split("\n"), start=1):
        marker = line.strip()
        if marker.startswith(begin):
            if opened_at is not None:
                raise ValueError(
                    f"{where}, line {number}: {begin!r} inside the block opened at line {opened_at}"
                )
            opened_at = number
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + text for text in replacement]
        elif marker.startswith(end):
            if opened_at is None:
                raise ValueError(f"{where}, line {number}: {end!r} without a {begin!r} before it")
            opened_at = None
            count += 1
        elif opened_at is None:
            out.append(line)
    if opened_at is not None:
        raise ValueError(f"{where}, line {opened_at}: {begin!r} is never closed by {end!r}")
    return "\n".join(out), count


def make_exercise(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """The exercise notebook of a solution notebook (which is left unchanged)."""
    exercise = copy.deepcopy(solution)
    cells = []
    solutions = 0
    for index, cell in enumerate(exercise.cells):
        if cell.cell_type == "code":
            where = f"{name}, code cell {index}"
            source, hidden = replace_regions(cell.source, BEGIN_HIDDEN, END_HIDDEN, [], where)
            if hidden and not source.strip():
                continue  # a cell of hidden tests only
            cell.source, count = replace_regions(source, BEGIN_SOLUTION, END_SOLUTION, BLANK, where)
            solutions += count
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)  # the solution run's timestamps
        cells.append(cell)
    if not solutions:
        raise ValueError(
            f"{name} has no {BEGIN_SOLUTION!r} .. {END_SOLUTION!r} block: its exercise would be "
            "the solution itself; mark the lines students should write"
        )
    exercise.cells = cells
    return exercise


def exercise_path(solution_path: Path) -> Path:
    return EXERCISES / solution_path.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if an exercise is out of date"
    )
    parser.add_argument(
        "--overwrite", action="store_true",
        help="replace exercise notebooks whose cells differ from the generated ones (a student's answers "
             "are lost); without it they are listed and kept",
    )
    args = parser.parse_args(argv)
    stale, kept = [], []
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        exercise = make_exercise(nbformat.read(path, as_version=4), path.name)
        target = exercise_path(path)
        current = nbformat.read(target, as_version=4) if target.exists() else None
        differs = current is None or [(c.cell_type, c.source) for c in current.cells] != [
            (c.cell_type, c.source) for c in exercise.cells
        ]
        if args.check:
            if differs:
                stale.append(target)
        elif current is not None and differs and not args.overwrite:
            kept.append(target)  # maybe a student's answers: never replaced without --overwrite
        elif differs:
            target.parent.mkdir(exist_ok=True)
            nbformat.write(exercise, target)
            print(f"{path.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
    orphans = sorted(p for p in EXERCISES.glob("*.ipynb") if not (SOLUTIONS / p.name).exists())
    for path in orphans:
        print(f"{path.relative_to(ROOT)} has no solution in solutions/: delete it or add one",
              file=sys.stderr)
    for path in kept:
        print(f"{path.relative_to(ROOT)} differs from the generated exercise (answers written in it?) and was "
              f"kept: copy it elsewhere, then run again with --overwrite", file=sys.stderr)
    for path in stale:
        print(f"{path.relative_to(ROOT)} is out of date: run python -m annotated.support.exercises",
              file=sys.stderr)
    return 1 if stale or orphans or kept else 0


if __name__ == "__main__":
    sys.exit(main())
