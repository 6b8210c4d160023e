"""Make the exercise notebooks from the solution notebooks, with nbgrader's markers.

    python -m annotated.support.exercises            # write exercises/X.ipynb for each solutions/X.ipynb
    python -m annotated.support.exercises --check    # only report what is out of date

In each code cell of a solution notebook, the lines from ``### BEGIN SOLUTION`` to
``### END SOLUTION`` become ``# YOUR CODE HERE`` and ``raise NotImplementedError()``, at
the indentation of the first marker; the lines from ``### BEGIN HIDDEN TESTS`` to
``### END HIDDEN TESTS`` are removed, and a cell left empty by that is dropped. These are
nbgrader's markers, which teachers know; the script applies them without nbgrader's
database and server. Outputs and execution counts are cleared: students run the
exercises themselves. Edit the solution, never the exercise, then run the command.

The command also writes nbgrader's cell metadata (schema 3) into each solution notebook, so
that ``nbgrader generate_assignment`` and ``nbgrader autograde`` can use it as the source
version of an assignment (``nbgrader_metadata`` says which cell gets what). Only that
metadata is written: sources, outputs and other metadata are kept. The exercise notebooks carry
the same metadata, and the locks nbgrader's student version has (``editable``/``deletable``
false on read-only and check cells, ``deletable`` false on solution cells), so that an exercise
notebook handed out from this repository can be autograded by nbgrader too.
"""

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

from annotated.support.course import ROOT
from annotated.support.errors import CourseError, run_command
from annotated.support.files import signals_as_interrupt, write_notebook

SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
BLANK = ["# YOUR CODE HERE", "raise NotImplementedError()"]

NBGRADER_SCHEMA = 3
EXERCISE_HEADING = re.compile(r"^##\s+Exercise\s+(\d+)\.(\d+)\b")
CHECK_CALL = re.compile(r"^\s*check_\w+\s*\(")


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


def has_marker(source: str, marker: str) -> bool:
    return any(line.strip().startswith(marker) for line in source.split("\n"))


def nbgrader_metadata(solution: nbformat.NotebookNode) -> list[dict]:
    """nbgrader's metadata (schema 3) for each cell of a solution notebook, in order.

    A code cell with a ``### BEGIN SOLUTION`` block is a solution cell (students write in it);
    a code cell that calls a check (``check_foo(foo)``), or holds hidden tests, is an autograded
    test worth 1 point, locked; every other cell is read-only (locked). Each cell's ``grade_id``
    comes from the ``## Exercise N.M`` heading above it (nbgrader allows no dot in it):
    ``ex1_1-solution``, ``ex1_1-check``, and ``ex1_1-text-1``, ``ex1_1-code-1``, ... for the
    read-only cells of the exercise, counted in order (``intro-...`` before the first exercise);
    a second solution or test cell under one heading would be ``ex1_1-check-2``.
    """
    section, counts, metadata = "intro", {}, []
    for cell in solution.cells:
        source = cell.source
        if cell.cell_type == "markdown":
            heading = EXERCISE_HEADING.match(source.strip())
            if heading:
                section = f"ex{heading.group(1)}_{heading.group(2)}"
        if cell.cell_type == "code" and has_marker(source, BEGIN_SOLUTION):
            kind, grade, solution_cell, locked = "solution", False, True, False
        elif cell.cell_type == "code" and (CHECK_CALL.match(source) or has_marker(source, BEGIN_HIDDEN)):
            kind, grade, solution_cell, locked = "check", True, False, True
        else:
            kind = "text" if cell.cell_type == "markdown" else cell.cell_type
            grade, solution_cell, locked = False, False, True
        counts[section, kind] = count = counts.get((section, kind), 0) + 1
        if kind in ("solution", "check"):  # one of each per exercise in this course's notebooks
            grade_id = f"{section}-{kind}" if count == 1 else f"{section}-{kind}-{count}"
        else:
            grade_id = f"{section}-{kind}-{count}"
        meta = {"grade": grade, "grade_id": grade_id, "locked": locked,
                "schema_version": NBGRADER_SCHEMA, "solution": solution_cell}
        if grade:
            meta["points"] = 1
        metadata.append(meta)
    return metadata


def student_locks(meta: dict) -> dict:
    """The cell locks of nbgrader's student version for a cell of this nbgrader metadata."""
    if meta["solution"]:
        return {"deletable": False}
    if meta["grade"] or meta["locked"]:
        return {"deletable": False, "editable": False}
    return {}


def with_nbgrader_metadata(solution: nbformat.NotebookNode) -> bool:
    """Write nbgrader's metadata into the cells of a solution notebook (in memory); return
    whether any cell's changed."""
    changed = False
    for cell, meta in zip(solution.cells, nbgrader_metadata(solution)):
        if cell.metadata.get("nbgrader") != meta:
            cell.metadata["nbgrader"] = meta
            changed = True
    return changed


def make_exercise(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """The exercise notebook of a solution notebook (which is left unchanged), with nbgrader's
    metadata and the student version's locks on each cell."""
    exercise = copy.deepcopy(solution)
    cells = []
    solutions = 0
    for index, (cell, meta) in enumerate(zip(exercise.cells, nbgrader_metadata(solution))):
        cell.metadata["nbgrader"] = meta
        for lock in ("deletable", "editable"):
            cell.metadata.pop(lock, None)
        cell.metadata.update(student_locks(meta))
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
    parser = argparse.ArgumentParser(prog="python -m annotated.support.exercises", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true",
        help="write nothing; exit 1 if an exercise, or a solution's nbgrader metadata, is out of date",
    )
    parser.add_argument(
        "--overwrite", action="store_true",
        help="replace exercise notebooks whose cells differ from the generated ones (a student's answers "
             "are lost); without it they are listed and kept",
    )
    args = parser.parse_args(argv)
    # Every notebook is written whole or not at all (a full disk keeps the earlier file); SIGTERM is a Ctrl-C.
    with signals_as_interrupt():
        return run_command(lambda: _generate(args), parser.prog)


def _generate(args: argparse.Namespace) -> int:
    stale, kept, unmarked = [], [], []
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        solution = nbformat.read(path, as_version=4)
        try:
            exercise = make_exercise(solution, path.name)
        except ValueError as error:  # an unclosed or stray marker: the file and line, no traceback
            raise CourseError(f"{path.relative_to(ROOT)}: {error}; fix the markers, then run again") from None
        if with_nbgrader_metadata(solution):  # only the cells' "nbgrader" metadata changed
            if args.check:
                unmarked.append(path)
            else:
                write_notebook(solution, path)
                print(f"{path.relative_to(ROOT)}: nbgrader metadata written")
        target = exercise_path(path)
        current = nbformat.read(target, as_version=4) if target.exists() else None
        differs = current is None or [(c.cell_type, c.source) for c in current.cells] != [
            (c.cell_type, c.source) for c in exercise.cells
        ]
        metadata_differs = not differs and (current.metadata != exercise.metadata or [
            c.metadata for c in current.cells] != [c.metadata for c in exercise.cells])
        if args.check:
            if differs or metadata_differs:
                stale.append(target)
        elif current is not None and differs and not args.overwrite:
            kept.append(target)  # maybe a student's answers: never replaced without --overwrite
        elif differs:
            target.parent.mkdir(exist_ok=True)
            write_notebook(exercise, target)
            print(f"{path.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
        elif metadata_differs:  # the same cells: only the metadata is replaced, answers and outputs kept
            current.metadata = exercise.metadata
            for cell, generated in zip(current.cells, exercise.cells):
                cell.metadata = generated.metadata
            write_notebook(current, target)
            print(f"{path.relative_to(ROOT)} -> {target.relative_to(ROOT)} (metadata)")
    orphans = sorted(p for p in EXERCISES.glob("*.ipynb") if not (SOLUTIONS / p.name).exists())
    for path in orphans:
        print(f"{path.relative_to(ROOT)} has no solution in solutions/: delete it or add one",
              file=sys.stderr)
    for path in kept:
        print(f"{path.relative_to(ROOT)} differs from the generated exercise (answers written in it?) and was "
              f"kept: copy it elsewhere, then run again with --overwrite", file=sys.stderr)
    for path in unmarked:
        print(f"{path.relative_to(ROOT)} lacks nbgrader's cell metadata, or has stale metadata: run "
              f"python -m annotated.support.exercises", file=sys.stderr)
    for path in stale:
        print(f"{path.relative_to(ROOT)} is out of date: run python -m annotated.support.exercises",
              file=sys.stderr)
    return 1 if stale or orphans or kept or unmarked else 0


if __name__ == "__main__":
    sys.exit(main())
