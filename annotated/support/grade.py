"""Grade exercise notebooks: run each in a fresh kernel and report every check.

    python -m annotated.support.grade exercises/                       # every notebook of a folder
    python -m annotated.support.grade submissions/                     # and of its subfolders, one per student
    python -m annotated.support.grade submissions/ana/04_multi_head_attention.ipynb
    python -m annotated.support.grade exercises/ --timeout 300         # seconds per cell
    python -m annotated.support.grade exercises/ --jobs 1              # one notebook at a time

An exercise is the part of a notebook under a heading ``## Exercise N.M: ...``; its checks
are the code cells that start with a call ``check_...(...)``. Every notebook runs top to
bottom in a fresh kernel, in its own folder, and goes on after a failing cell, so that one
mistake does not hide the other exercises. The table printed says, for each check, whether it
passed and, when not, the check's diagnosis (the first line of its message; ``--full`` prints
all of it). A notebook is never changed on disk. Several notebooks run side by side, each in
its own kernel (``--jobs``, by default as many as the machine has cores, at most 4); the table
keeps the order of the paths. With several notebooks, each one's count of passed checks
follows the table.

Exit code: 0 when every check passed, 1 when one failed or a notebook had no check to run,
2 for a usage error (a path that is not a notebook or a folder of notebooks).
"""

import argparse
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat

from annotated.support.errors import UsageError, run_command
from annotated.support.options import MAX_SECONDS, machine_cores

EXERCISE_HEADING = re.compile(r"^##\s+(Exercise\s+[\w.]+)\s*:?\s*(.*)$")
CHECK_CALL = re.compile(r"^\s*(check_\w+)\s*\(")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Result:
    """One check of one notebook: passed, or failed with the diagnosis."""

    notebook: str
    exercise: str
    check: str
    passed: bool
    diagnosis: str = ""


def notebooks_in(path: Path) -> list[tuple[Path, str]]:
    """The notebooks that ``path`` names, each with the name the table shows: itself, or those
    of the folder and its subfolders (one per student: ``ana/04_....ipynb``), in path order;
    hidden files and folders (Jupyter's ``.ipynb_checkpoints``) are skipped."""
    if path.is_dir():
        found = sorted(p for p in path.rglob("*.ipynb")
                       if not any(part.startswith(".") for part in p.relative_to(path).parts))
        if not found:
            raise UsageError(f"{path} holds no .ipynb notebook; give a folder of exercise notebooks or one notebook")
        return [(p, p.relative_to(path).as_posix()) for p in found]
    if not path.exists():
        raise UsageError(f"no such file or folder: {path}")
    if path.suffix != ".ipynb":
        raise UsageError(f"{path} is not a notebook (.ipynb); give a notebook or a folder of them")
    return [(path, path.name)]


def error_text(cell) -> str | None:
    """The error a cell raised when it ran (name and message, without colour codes), or None."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            message = ANSI.sub("", output.get("evalue", "")).strip()
            return f"{output.get('ename', 'Error')}: {message}" if message else output.get("ename", "Error")
    return None


def results_of(nb, name: str) -> list[Result]:
    """The checks of an executed notebook, each under the exercise heading above it."""
    exercise, results = "(before any exercise)", []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            heading = EXERCISE_HEADING.match(cell.source.strip().split("\n", 1)[0])
            if heading:
                exercise = f"{heading.group(1)}: {heading.group(2)}".rstrip(": ")
        elif cell.cell_type == "code":
            call = CHECK_CALL.match(cell.source)
            if call:
                error = error_text(cell)
                results.append(Result(name, exercise, call.group(1), error is None, error or ""))
    return results


def grade_notebook(path: Path, timeout: int = 600, name: str | None = None) -> list[Result]:
    """Run one notebook in a fresh kernel (cells after a failure still run) and read its checks;
    ``name`` is what the table calls it (by default the file's name)."""
    name = name or path.name
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:  # not JSON, not a notebook
        return [Result(name, "(the notebook)", "(read)", False, f"cannot read the notebook: {err}")]
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.resolve().parent)}})
    try:
        client.execute()
    except (CellTimeoutError, DeadKernelError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return [Result(name, "(the notebook)", "(run)", False, f"the notebook stopped: {first}")]
    results = results_of(nb, name)
    if not results:
        return [Result(name, "(the notebook)", "(none)", False,
                       "no check_...() cell found: is this an exercise notebook of the course?")]
    return results


def table(results: list[Result], full: bool = False) -> str:
    """The results as a plain-text table, one line per check (and the whole diagnosis with ``full``)."""
    rows = [("notebook", "exercise", "check", "result", "diagnosis")]
    for r in results:
        diagnosis = r.diagnosis if full else r.diagnosis.split("\n", 1)[0]
        rows.append((r.notebook, r.exercise, r.check, "passed" if r.passed else "FAILED", diagnosis))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4] for row in rows]
    passed = sum(r.passed for r in results)
    notebooks = list(dict.fromkeys(r.notebook for r in results))
    totals = []
    if len(notebooks) > 1:  # a folder of submissions: each notebook's count, then the whole
        width = max(map(len, notebooks))
        totals = [f"{n.ljust(width)}  {sum(r.passed for r in results if r.notebook == n)} of "
                  f"{sum(r.notebook == n for r in results)} passed" for n in notebooks] + [""]
    return "\n".join([*(line.rstrip() for line in lines), "", *totals,
                      f"{passed} of {len(results)} checks passed"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.grade",
                                     description="Run exercise notebooks in a fresh kernel and report every check.")
    parser.add_argument("paths", nargs="+", help="exercise notebooks, or folders of them")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may run (default 600)")
    parser.add_argument("--full", action="store_true", help="print each diagnosis whole, not its first line")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1),
                        help="notebooks run at once, each in its own kernel (default: the cores, at most 4)")
    args = parser.parse_args(argv)
    if not 1 <= args.timeout <= MAX_SECONDS:
        parser.error(f"--timeout must be a positive number of seconds, at most {MAX_SECONDS:g} (a day: longer "
                     f"ones overflow the kernel's timers), got {args.timeout}")
    most_jobs = max(4, machine_cores())  # each job is a kernel of its own, a process with its memory
    if not 1 <= args.jobs <= most_jobs:
        parser.error(f"--jobs must be a positive number of notebooks, at most {most_jobs} (this machine's CPU cores, "
                     f"or 4: each job is a kernel of its own, more only wait on each other), got {args.jobs}")

    def body() -> int:
        paths = [nb for p in args.paths for nb in notebooks_in(Path(p))]

        def run(found: tuple[Path, str]) -> list[Result]:
            path, name = found
            print(f"running {path} ...", file=sys.stderr, flush=True)
            return grade_notebook(path, args.timeout, name)

        # Each notebook runs in a kernel of its own (a separate process): threads only wait on them.
        with ThreadPoolExecutor(max_workers=min(args.jobs, len(paths))) as pool:
            results = [r for found in pool.map(run, paths) for r in found]
        print(table(results, args.full))
        return 0 if all(r.passed for r in results) else 1

    return run_command(body, parser.prog)


if __name__ == "__main__":
    raise SystemExit(main())
