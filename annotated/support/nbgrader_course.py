"""An nbgrader course folder for the exercises, run under the course grader's limits.

    python -m annotated.support.nbgrader_course mycourse                       # every notebook of solutions/
    python -m annotated.support.nbgrader_course mycourse --notebooks 01 03     # some of them
    python -m annotated.support.nbgrader_course mycourse --course-id nlp101 --force

The folder gets one nbgrader assignment per notebook, ``source/<stem>/<stem>.ipynb`` (the
solution notebook, whose cells carry nbgrader's metadata), so a student who hands in one
notebook is graded on that one alone; and an ``nbgrader_config.py`` that gives nbgrader the
course grader's limits (``annotated.support.grade``: ``CELL_SECONDS`` per cell,
``NOTEBOOK_SECONDS`` per notebook, read from it at every run, never copied) and two steps of
this module in nbgrader's autograding:

- :class:`CourseExecute` in place of nbgrader's ``Execute``: the notebook-wide time limit, and
  a kernel that dies (out of memory, or a cell that ends it) or stops answering after a time
  limit is replaced by a fresh one. The cell it died in gets an error output that says so,
  the cells that had run are run again on the fresh kernel (their outputs kept as they
  were), and the notebook goes on, so the checks that passed before keep their points. At
  most ``restarts`` fresh kernels (``grade.RESTARTS``); after that, or once the notebook's
  time is up, the cells left get an error output saying why they did not run, and score 0.
- :class:`LimitOutputSize` after nbgrader's ``LimitOutput``, which counts lines (a 50 MB
  print on one line passes it): every output is cut to :data:`OUTPUT_BYTES`, with a note.
  :class:`CourseExecute` keeps nothing more of a cell that has printed more than that, so a
  cell that prints without end cannot fill the grader's memory.

The course's own grader keeps no output at all (it writes no notebook, only verdicts), so
:data:`OUTPUT_BYTES` is this module's: large enough for any output of the course's notebooks
(the largest, a figure of notebook 12, is 250 kB), small enough that an autograded notebook
stays one that opens. What still differs from the course grader: README, "Grading with nbgrader".

An existing folder that is not empty is refused unless ``--force``; with it, only this
command's files (``nbgrader_config.py`` and ``source/<stem>/<stem>.ipynb``) are written: the
gradebook, submissions and everything else in the folder are left as they are. A run that
fails midway removes the files and folders it created, and only those.
"""

import argparse
import copy
import json
import math
import re
import sys
import time
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

from annotated.support import grade
from annotated.support.course import ROOT
from annotated.support.errors import CourseError, UsageError, run_command
from annotated.support.files import COURSE_FOLDERS, atomic_write, signals_as_interrupt

SOLUTIONS = ROOT / "solutions"
COURSE_ID = "attention"
OUTPUT_BYTES = 2**20    # the most of one output an autograded notebook keeps (1 MiB)
PROBE_SECONDS = 10      # after a time limit: how long an interrupted kernel has to answer again
ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a course id, as a folder and a gradebook name
PROG = "python -m annotated.support.nbgrader_course"

try:  # nbgrader is an extra (pip install -e ".[instructor]"); without it the folder can still be made
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from nbgrader.preprocessors import Execute, NbGraderPreprocessor
    from traitlets import Integer
except ImportError:  # pragma: no cover - exercised where nbgrader is missing
    Execute = NbGraderPreprocessor = None


# ------------------------------------------------------------------------------ output sizes


def _size(value) -> int:
    """Bytes of one value of an output (a string, a list of lines, or JSON)."""
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sum(len(v.encode("utf-8")) for v in value)
    return len(json.dumps(value).encode("utf-8"))


def output_bytes(output) -> int:
    """Bytes an output takes in the notebook, roughly: its text, data, or error."""
    kind = output.get("output_type")
    if kind == "stream":
        return _size(output.get("text", ""))
    if kind == "error":
        return _size(output.get("evalue", "")) + _size(output.get("traceback", []))
    return sum(_size(v) for v in output.get("data", {}).values())


def _note(size: int, limit: int) -> str:
    return (f"[output cut: it had {size:,} bytes; an autograded notebook keeps the first {limit:,} of "
            f"an output (annotated.support.nbgrader_course.OUTPUT_BYTES)]")


def _cut_text(text, limit: int, size: int) -> str:
    """The first ``limit`` bytes of ``text`` (a string or a list of lines), then the note."""
    text = "".join(text) if isinstance(text, list) else text
    kept = text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")
    return f"{kept}\n{_note(size, limit)}\n"


def cut_output(output, limit: int = OUTPUT_BYTES) -> bool:
    """Cut ``output`` in place to at most about ``limit`` bytes, with a note; True if it was cut.

    Text is cut (a stream's text, an error's message and traceback, a ``text/*`` value); data
    that a cut would break (an image, JSON) is replaced by the note."""
    size = output_bytes(output)
    if size <= limit:
        return False
    kind = output.get("output_type")
    if kind == "stream":
        output["text"] = _cut_text(output["text"], limit, size)
    elif kind == "error":
        output["evalue"] = _cut_text(output.get("evalue", ""), limit // 2, size)
        lines, kept = [], 0
        for line in output.get("traceback", []):
            kept += _size(line)
            if kept > limit // 2:
                break
            lines.append(line)
        output["traceback"] = lines + [_note(size, limit)]
    else:
        data, budget = output.setdefault("data", {}), limit
        for mime in list(data):  # each kind of data in turn while the budget lasts
            if _size(data[mime]) <= budget:
                budget -= _size(data[mime])
            elif mime.startswith("text/") and mime != "text/html":  # HTML cut midway could break the page
                data[mime], budget = _cut_text(data[mime], budget, size), 0
            else:
                del data[mime]
        if not str(data.get("text/plain", "")).endswith(f"{_note(size, limit)}\n"):
            data["text/plain"] = f"{''.join(data.get('text/plain', ''))}\n{_note(size, limit)}\n"
    return True


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _times(n: int, word: str = "time") -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


class _Stuck(Exception):
    """The kernel did not answer after the interrupt of a time limit: it must be replaced."""


def _is_test_cell(cell) -> bool:
    """An autograded test cell (a check): it defines nothing later cells use, so it is not run again."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution")


# ------------------------------------------------------------------------------ nbgrader steps


if Execute is not None:

    class LimitOutputSize(NbGraderPreprocessor):
        """Cut every output of a code cell to ``max_bytes`` (nbgrader's LimitOutput counts lines)."""

        max_bytes = Integer(OUTPUT_BYTES, help="the most bytes of one output an autograded notebook keeps "
                                               "(-1: no limit)").tag(config=True)

        def preprocess_cell(self, cell, resources, cell_index):
            if cell.cell_type == "code" and self.max_bytes >= 0:
                for output in cell.get("outputs", []):
                    cut_output(output, self.max_bytes)
            return cell, resources

    class CourseExecute(Execute):
        """nbgrader's Execute, with the course grader's limits and a kernel that survives its death.

        Each code cell runs within ``timeout`` seconds and the notebook within
        ``notebook_timeout``; a cell past its limit is interrupted (nbgrader's error output) and
        the notebook goes on. A kernel that dies, or does not answer ``PROBE_SECONDS`` after the
        interrupt, is replaced: the cell gets an error output naming what happened, a fresh
        kernel runs again the cells that had run within their limits (checks excepted; the
        notebook keeps the outputs of their first run), then the cells after it. At most
        ``restarts`` fresh kernels; then, as when the notebook's time is up, each cell left gets
        an error output saying why it was not run."""

        notebook_timeout = Integer(grade.NOTEBOOK_SECONDS, help="seconds the whole notebook may run, "
                                   "its kernels' restarts and replays included").tag(config=True)
        restarts = Integer(grade.RESTARTS, help="fresh kernels after a kernel that died or stopped "
                           "answering; after that the cells left are not run").tag(config=True)
        max_output_bytes = Integer(OUTPUT_BYTES, help="while a cell runs, no further output is kept once its "
                                   "outputs have passed this many bytes (-1: no limit)").tag(config=True)

        def preprocess(self, nb, resources=None, km=None):
            # As ExecutePreprocessor.preprocess, with a fresh kernel for each death.
            from nbclient import NotebookClient

            NotebookClient.__init__(self, nb, km)
            self.reset_execution_trackers()
            self._check_assign_resources(resources)
            cell_limit = self.timeout
            deadline = time.monotonic() + self.notebook_timeout
            self._kept_bytes = {}
            ran: list[int] = []  # cells that ran within their limits, in order: run again on a fresh kernel
            position, fresh, why_not = 0, 0, ""
            try:
                while position < len(self.nb.cells) and not why_not:
                    replaced = ""  # why this kernel is replaced: it died, or stopped answering
                    running = dead_cell = None
                    with self.setup_kernel():
                        info = self.wait_for_reply(self.kc.kernel_info())
                        self.nb.metadata["language_info"] = info["content"]["language_info"]
                        try:
                            for index in list(ran):
                                if time.monotonic() >= deadline:
                                    break
                                running = ("again", index)
                                if self._hidden(copy.deepcopy(self.nb.cells[index]), cell_limit, deadline):
                                    running = ("probe", None)
                                    self._answers()
                            while position < len(self.nb.cells):
                                cell = self.nb.cells[position]
                                if cell.cell_type != "code" or not cell.source.strip():
                                    position += 1
                                    continue
                                if time.monotonic() >= deadline:
                                    why_not = f"the notebook's time limit ({self.notebook_timeout} s) ran out"
                                    break
                                running = ("cell", position)
                                late = self._timed(cell, position, cell_limit, deadline)
                                position += 1
                                if late:  # interrupted: it must answer again, else a fresh kernel
                                    running = ("probe", None)
                                    self._answers()
                                elif not _is_test_cell(cell):
                                    ran.append(position - 1)
                            running = None
                        except (DeadKernelError, _Stuck) as error:
                            died = isinstance(error, DeadKernelError)
                            replaced = "the kernel died" if died else \
                                "the kernel did not answer after it was interrupted at the time limit"
                            kind, index = running or ("probe", None)
                            if kind == "cell":
                                position = index + 1
                                if died:  # the rest of the message once it is known whether the notebook goes on
                                    dead_cell = self.nb.cells[index]
                            elif kind == "again":  # a cell that had run failed when run again: left out from now on
                                ran.remove(index)
                                self.nb.cells[index].outputs.append(_error(
                                    "DeadKernelError" if died else "CellTimeoutError",
                                    f"{replaced} when this cell was run again on a fresh kernel; "
                                    f"the cells after it ran without it"))
                        finally:
                            self.timeout = cell_limit
                    if replaced:
                        fresh += 1
                        if fresh > self.restarts:
                            why_not = f"{replaced}, {_times(fresh)} (the notebook gets at most " \
                                      f"{_times(self.restarts, 'fresh kernel')})"
                    if dead_cell is not None:
                        dead_cell.outputs.append(_error("DeadKernelError", (
                            "the kernel died while this cell ran (out of memory, or the cell ended it); " + (
                                "a fresh kernel ran the cells before it again and went on" if not why_not else
                                f"no fresh kernel after {_times(fresh - 1, 'restart')}"))))
            finally:
                self.timeout = cell_limit
            for cell in self.nb.cells[position:]:
                if cell.cell_type == "code" and cell.source.strip():
                    cell.outputs = [_error("NotRun", f"not run: {why_not}")]
            self.set_widgets_metadata()
            return self.nb, self.resources

        def _limit(self, cell_limit, deadline) -> int:
            # Rounded up, so that a cell cut by the notebook's limit runs until it (not a second short of it).
            return max(1, math.ceil(min(cell_limit or math.inf, deadline - time.monotonic())))

        def _timed(self, cell, index, cell_limit, deadline) -> bool:
            """Run a cell of the notebook within its limit; True if it ran past it (and was
            interrupted); :class:`_Stuck` if the kernel did not finish the cell after that."""
            self.timeout = self._limit(cell_limit, deadline)
            self._kept_bytes.clear()
            start = time.monotonic()
            try:
                self.execute_cell(cell, index, store_history=True)
            except CellTimeoutError:
                # nbclient waited in vain for the cell's last output after the interrupt (or, with
                # interrupt_on_timeout off, did not interrupt): the kernel is still busy.
                if not any(o.get("output_type") == "error" for o in cell.outputs):
                    cell.outputs.append(NotebookNode(output_type="error", **self.error_on_timeout))
                raise _Stuck() from None
            return time.monotonic() - start >= self.timeout

        def _hidden(self, cell, cell_limit, deadline) -> bool:
            """Run ``cell`` (a copy, or a probe) on the kernel without putting it in the notebook;
            True if it ran past its limit."""
            self.nb.cells.append(cell)
            try:
                return self._timed(cell, len(self.nb.cells) - 1, cell_limit, deadline)
            finally:
                self.nb.cells.pop()

        def _answers(self) -> None:
            """After a time limit: :class:`_Stuck` unless the interrupted kernel runs a ``pass``
            within PROBE_SECONDS."""
            probe = nbformat.v4.new_code_cell("pass")
            if self._hidden(probe, PROBE_SECONDS, time.monotonic() + PROBE_SECONDS):
                raise _Stuck()

        def output(self, outs, msg, display_id, cell_index):
            # So that a cell that prints without end cannot fill the grader's memory: once a
            # cell has kept more than the limit, its further outputs are dropped as they come
            # (a note says so). LimitOutputSize cuts what is kept to the limit afterwards, once
            # nbclient has joined the pieces of each stream.
            out = super().output(outs, msg, display_id, cell_index)
            if out is None or self.max_output_bytes < 0:
                return out
            key = id(outs)
            before = self._kept_bytes.get(key, 0)
            if before > self.max_output_bytes:
                outs.remove(out)
                if not any(o.get("metadata", {}).get("annotated_cut") for o in outs):
                    outs.append(NotebookNode(output_type="display_data", metadata={"annotated_cut": True}, data={
                        "text/plain": f"[further output of this cell not kept: it had more than "
                                      f"{self.max_output_bytes:,} bytes (annotated.support.nbgrader_course)]"}))
                return None
            self._kept_bytes[key] = before + output_bytes(out)
            return out


def autograde_preprocessors() -> list:
    """nbgrader's autograding steps, with :class:`CourseExecute` for ``Execute`` and
    :class:`LimitOutputSize` after ``LimitOutput``."""
    if Execute is None:
        raise CourseError("nbgrader is not installed: pip install -e \".[instructor]\" where nbgrader runs")
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import LimitOutput

    steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
    if Execute not in steps or LimitOutput not in steps:
        import nbgrader

        raise CourseError(f"nbgrader {nbgrader.__version__}'s autograding has no Execute or LimitOutput step; "
                          f"the course knows nbgrader 0.9: pip install 'nbgrader>=0.9,<0.10'")
    steps[steps.index(Execute)] = CourseExecute
    steps.insert(steps.index(LimitOutput) + 1, LimitOutputSize)
    return steps


# ------------------------------------------------------------------------------ the course folder


def config_text(course_id: str) -> str:
    """The ``nbgrader_config.py`` of a course folder: the limits read from the course grader at
    every run, this module's steps in autograding."""
    return f'''"""nbgrader's settings for the course {course_id!r}: written by {PROG}.

The limits are the course grader's (annotated.support.grade), read from it at every run; the
autograding steps run a notebook as annotated.support.nbgrader_course says (a kernel that dies is
replaced and the notebook goes on; every output cut to OUTPUT_BYTES)."""

from annotated.support import grade, nbgrader_course

c = get_config()  # noqa: F821 (nbgrader defines it)
c.CourseDirectory.course_id = {course_id!r}
c.Execute.timeout = grade.CELL_SECONDS                         # seconds a cell may run (nbgrader's default: 30)
c.CourseExecute.notebook_timeout = grade.NOTEBOOK_SECONDS      # seconds a notebook may run (nbgrader has no limit)
c.LimitOutputSize.max_bytes = nbgrader_course.OUTPUT_BYTES     # bytes of one output kept (LimitOutput counts lines)
c.Autograde.autograde_preprocessors = nbgrader_course.autograde_preprocessors()
'''


def choose(names: list[str] | None, solutions: Path = SOLUTIONS) -> list[Path]:
    """The solution notebooks named (a number ``01``, a stem, or a file name), or all of them."""
    found = sorted(solutions.glob("*.ipynb"))
    if not found:
        raise CourseError(f"{solutions} holds no notebook (*.ipynb); run this command from the course's checkout")
    if not names:
        return found
    chosen = []
    for name in names:
        key = Path(name).name.removesuffix(".ipynb")
        matches = [p for p in found if p.stem == key or p.stem.split("_", 1)[0] == key]
        if len(matches) != 1:
            raise UsageError(f"--notebooks: {name!r} names {'no' if not matches else 'more than one'} notebook of "
                             f"{solutions.name}/; give a number or a name: "
                             f"{', '.join(p.stem for p in found[:3])}, ...")
        if matches[0] not in chosen:
            chosen.append(matches[0])
    return chosen


def make_course(target: str | Path, notebooks: list[str] | None = None, course_id: str = COURSE_ID,
                force: bool = False, solutions: Path = SOLUTIONS) -> list[Path]:
    """Write the course folder ``target`` (see the module's docstring); return the files written."""
    if not ID.match(course_id):
        raise UsageError(f"--course-id {course_id!r}: use letters, digits, '_', '-' and '.', starting with a "
                         f"letter or digit, e.g. --course-id {COURSE_ID}")
    target = Path(target).expanduser()
    where = target.resolve()
    if where == ROOT or any(where.is_relative_to(ROOT / folder) for folder in COURSE_FOLDERS):
        raise UsageError(f"{target} is the course's checkout or one of its folders; name a folder outside "
                         f"them for the nbgrader course, e.g. {ROOT.parent / 'mycourse'}")
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} is a file; name a folder for the course (it is created), e.g. {target}-course")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise UsageError(f"{target} is not empty (an nbgrader course already?); name a new folder, or pass --force "
                         f"to write this command's files into it (its gradebook and submissions are kept)")
    files = [(target / "nbgrader_config.py", config_text(course_id).encode("utf-8"))]
    for path in choose(notebooks, solutions):  # each read before anything is written
        data = path.read_bytes()
        try:
            nbformat.reads(data.decode("utf-8"), as_version=4)
        except Exception as error:  # nbformat raises several kinds for a file that is not a notebook
            raise CourseError(f"{path} is not a notebook nbformat reads ({type(error).__name__}); "
                              f"restore it from git") from None
        files.append((target / "source" / path.stem / path.name, data))
    created: list[Path] = []  # what this run made (folders and files), removed if it fails midway
    try:
        for path, data in files:
            missing = [f for f in [path.parent, *path.parent.parents] if not f.exists()]
            for folder in reversed(missing):
                folder.mkdir()
                created.append(folder)
            new = not path.exists()
            with atomic_write(path, option="DIR") as out:
                out.write(data)
            if new:
                created.append(path)
    except BaseException:
        for path in reversed(created):
            try:
                path.rmdir() if path.is_dir() else path.unlink()
            except OSError:
                pass  # a folder that someone filled meanwhile is left as it is
        raise
    return [path for path, _ in files]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("dir", metavar="DIR", help="the course folder to create (new, or empty; or any with --force)")
    parser.add_argument("--notebooks", nargs="+", metavar="NAME",
                        help="the notebooks to make assignments of, by number (01) or name (default: all of "
                             "solutions/)")
    parser.add_argument("--course-id", default=COURSE_ID, help=f"nbgrader's course id (default {COURSE_ID})")
    parser.add_argument("--force", action="store_true",
                        help="write into a folder that is not empty: this command's files are replaced, "
                             "nothing else is touched")
    args = parser.parse_args(argv)

    def body() -> int:
        written = make_course(args.dir, args.notebooks, args.course_id, args.force)
        stems = [p.parent.name for p in written[1:]]
        print(f"{args.dir}: nbgrader_config.py and {len(stems)} assignment{'s' * (len(stems) != 1)} "
              f"({stems[0]}{', ...' if len(stems) > 1 else ''}); next, in {args.dir}: "
              f"nbgrader generate_assignment '*'")
        return 0

    with signals_as_interrupt():
        return run_command(body, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
