"""nbgrader, the autograder many courses use, run for real on the course's notebooks.

The solution notebooks carry nbgrader's cell metadata (written by ``python -m
annotated.support.exercises``). In a temporary course directory made by ``python -m
annotated.support.nbgrader_course`` (one assignment per notebook), ``nbgrader generate_assignment``
must make notebooks equivalent to exercises/, and ``nbgrader autograde`` must give a solved
submission every point and a blank one none, exercise by exercise as the course's grader does.
Tiny synthetic assignments, autograded by real nbgrader, show the course grader's limits at work:
a correct answer that takes 40 s keeps its point, a kernel killed midway keeps the points earned
before, a 50 MB print is cut, and a student who hands in one notebook gets no warning for the others.

nbgrader is an extra (``pip install -e ".[instructor]"``): without it the tests that run it skip,
unless ANNOTATED_REQUIRE_NBGRADER=1 (CI sets it), when they fail instead.
"""

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

import annotated.support.exercises as exercises
import annotated.support.nbgrader_course as nbgrader_course
from annotated.support import grade
from annotated.support.course import ROOT
from annotated.support.exercises import EXERCISES, SOLUTIONS, nbgrader_metadata

try:
    from nbgrader.api import Gradebook
except ImportError:  # the [instructor] extra is not installed
    Gradebook = None

REQUIRED = os.environ.get("ANNOTATED_REQUIRE_NBGRADER") == "1"
GRADED = ["01_softmax_and_scaling.ipynb", "03_masking.ipynb"]  # small, quick to run
HEADING = re.compile(r"^##\s+Exercise\s+(\d+)\.(\d+)\b")
GRADE_ID = re.compile(r"^[a-zA-Z0-9_\-]+$")  # nbgrader's schema allows no other character


def exercise_numbers(path: Path) -> list[str]:
    """``1_1``, ``1_2``, ... for the ``## Exercise N.M`` headings of a notebook."""
    return [f"{m.group(1)}_{m.group(2)}" for c in nbformat.read(path, as_version=4).cells
            if c.cell_type == "markdown" and (m := HEADING.match(c.source.strip()))]


def cell(nb, grade_id: str):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


# ---------------------------------------------------------------- the metadata (no nbgrader needed)


@pytest.mark.parametrize("solution", sorted(SOLUTIONS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_each_exercise_has_one_solution_cell_and_one_check_cell_worth_one_point(solution):
    nb = nbformat.read(solution, as_version=4)
    meta = [c.metadata.get("nbgrader") for c in nb.cells]
    assert meta == nbgrader_metadata(nb), (
        f"{solution.name}: nbgrader metadata missing or stale: run python -m annotated.support.exercises")
    ids = [m["grade_id"] for m in meta]
    assert len(set(ids)) == len(ids) and all(GRADE_ID.match(i) for i in ids)
    numbers = exercise_numbers(solution)
    assert sorted(m["grade_id"] for m in meta if m["solution"]) == sorted(f"ex{n}-solution" for n in numbers)
    tests = [m for m in meta if m["grade"]]
    assert sorted(m["grade_id"] for m in tests) == sorted(f"ex{n}-check" for n in numbers)
    assert all(m["points"] == 1 and m["locked"] for m in tests)
    for c, m in zip(nb.cells, meta):
        if m["grade"]:
            assert c.source.startswith("check_"), (solution.name, c.source)
        if not m["grade"] and not m["solution"]:
            assert m["locked"], (solution.name, c.source[:60])


@pytest.fixture
def one_solution(tmp_path, monkeypatch):
    """The generator pointed at a copy of one solution notebook (and no exercise yet)."""
    solution = SOLUTIONS / GRADED[0]
    (tmp_path / "solutions").mkdir()
    shutil.copy(solution, tmp_path / "solutions" / solution.name)
    monkeypatch.setattr(exercises, "ROOT", tmp_path)
    monkeypatch.setattr(exercises, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(exercises, "EXERCISES", tmp_path / "exercises")
    return tmp_path / "solutions" / solution.name


def test_check_reports_a_solution_whose_nbgrader_metadata_is_missing_or_stale(one_solution, capsys):
    assert exercises.main([]) == 0
    assert exercises.main(["--check"]) == 0
    original = nbformat.read(one_solution, as_version=4)
    for spoil in ("missing", "stale"):
        nb = copy.deepcopy(original)
        if spoil == "missing":
            del cell(nb, "ex1_1-check").metadata["nbgrader"]
        else:
            cell(nb, "ex1_1-check").metadata["nbgrader"]["points"] = 5
        nbformat.write(nb, one_solution)
        capsys.readouterr()
        assert exercises.main(["--check"]) == 1
        assert f"{one_solution.name} lacks nbgrader's cell metadata, or has stale metadata" in capsys.readouterr().err
        assert exercises.main([]) == 0  # writes it again: only the metadata
        assert nbformat.read(one_solution, as_version=4) == original
        assert exercises.main(["--check"]) == 0


def test_writing_the_metadata_changes_nothing_else(one_solution):
    nb = nbformat.read(one_solution, as_version=4)
    for c in nb.cells:
        c.metadata.pop("nbgrader", None)
    nbformat.write(nb, one_solution)
    assert exercises.main([]) == 0
    written = nbformat.read(one_solution, as_version=4)
    assert written.metadata == nb.metadata and len(written.cells) == len(nb.cells)
    for before, after in zip(nb.cells, written.cells):
        assert "nbgrader" in after.metadata
        assert {k: v for k, v in after.metadata.items() if k != "nbgrader"} == before.metadata
        assert {k: v for k, v in after.items() if k != "metadata"} == {
            k: v for k, v in before.items() if k != "metadata"}  # source, outputs, id, execution count


# ---------------------------------------------------------------- nbgrader itself


def needs_nbgrader() -> None:
    if Gradebook is None:
        message = "nbgrader is not installed (pip install -e '.[instructor]')"
        if REQUIRED:
            pytest.fail(f"ANNOTATED_REQUIRE_NBGRADER=1 but {message}", pytrace=False)
        pytest.skip(message)


def nbgrader(course: Path, *args: str, check: bool = True) -> str:
    """Run ``nbgrader ARGS`` in ``course``; its log (nbgrader logs to the standard error). With
    ``check=False`` a failure is not an error here: the log ends with ``exit code N``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 or not check, \
        f"nbgrader {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return f"{done.stdout}{done.stderr}\nexit code {done.returncode}\n"


def cheat(solution: Path) -> nbformat.NotebookNode:
    """A notebook 01 that tries to score without solving: a wrong stable_softmax whose check cell
    is replaced by ``pass``; a wrong softmax_with_temperature whose cell also defines a
    check_softmax_with_temperature that accepts anything; a wrong score_variances whose check
    cell is deleted."""
    nb = nbformat.read(solution, as_version=4)
    cell(nb, "ex1_1-solution").source = "def stable_softmax(x, dim=-1):\n    return x"
    cell(nb, "ex1_1-check").source = "pass"
    cell(nb, "ex1_2-solution").source = (
        "def softmax_with_temperature(x, temperature):\n    return x\n\n\n"
        "def check_softmax_with_temperature(*args, **kwargs):\n    pass")
    cell(nb, "ex1_3-solution").source = "def score_variances(d_k, n_pairs, sample):\n    return None"
    nb.cells.remove(cell(nb, "ex1_3-check"))
    return nb


def course_grader(submissions: Path, report: Path) -> subprocess.Popen | None:
    """The course's grader started on the submissions, writing its JSON gradebook to ``report``;
    None if it has no ``--json``."""
    command = [sys.executable, "-m", "annotated.support.grade"]
    if "--json" not in subprocess.run([*command, "--help"], capture_output=True, text=True).stdout:
        return None
    return subprocess.Popen([*command, str(submissions), "--json", str(report)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def submit(course: Path, student: str, name: str, notebook) -> None:
    """Hand in ``notebook`` as ``student``'s ``name``: submitted/<student>/<assignment>/<name>, for
    the assignment whose source holds ``name`` (nbgrader_course: the notebook's stem)."""
    assignment = next((course / "source").glob(f"*/{name}")).parent.name
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, folder / name)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course directory made by ``python -m annotated.support.nbgrader_course`` (every
    notebook of solutions/, an assignment each), released by nbgrader, and three students
    autograded: ``solved`` (the solution notebooks 01 and 03), ``blank`` (the exercise
    notebooks 01 and 03, as handed out) and ``cheater`` (notebook 01, ``cheat``). The course's
    grader grades the same submissions meanwhile, into ``ours.json``."""
    needs_nbgrader()
    root = tmp_path_factory.mktemp("nbgrader_course") / "course"
    done = subprocess.run([sys.executable, "-m", "annotated.support.nbgrader_course", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    start = time.perf_counter()
    nbgrader(root, "generate_assignment", "*")
    generated = time.perf_counter()
    submissions = {("solved", name): nbformat.read(SOLUTIONS / name, as_version=4) for name in GRADED}
    submissions |= {("blank", name): nbformat.read(EXERCISES / name, as_version=4) for name in GRADED}
    submissions[("cheater", GRADED[0])] = cheat(SOLUTIONS / GRADED[0])
    for (student, name), notebook in submissions.items():
        submit(root, student, name, notebook)
        (root / "ours" / student).mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, root / "ours" / student / name)
    ours = course_grader(root / "ours", root / "ours.json")
    try:
        log = nbgrader(root, "autograde", "*")
    finally:
        if ours is not None:
            ours.wait(timeout=600)
    (root / "autograde.log").write_text(log)
    print(f"nbgrader: generate_assignment {generated - start:.0f} s, autograde {time.perf_counter() - generated:.0f} s")
    return root


def scores(course: Path, student: str, name: str) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        notebook = gb.find_submission_notebook(Path(name).stem, Path(name).stem, student)
        return {g.name: g.score for g in notebook.grades}


def test_the_release_is_the_exercise_notebooks(course):
    released = sorted((course / "release").glob("*/*.ipynb"))
    assert [p.name for p in released] == [p.name for p in sorted(EXERCISES.glob("*.ipynb"))]
    assert all(p.parent.name == p.stem for p in released)  # one assignment per notebook
    for path in released:
        release, exercise = nbformat.read(path, as_version=4), nbformat.read(EXERCISES / path.name, as_version=4)
        assert [(c.cell_type, c.id, c.source) for c in release.cells] == [
            (c.cell_type, c.id, c.source) for c in exercise.cells], path.name
        assert release.metadata == exercise.metadata, path.name
        for ours, theirs in zip(exercise.cells, release.cells):
            # What nbgrader adds: a checksum of each cell it tracks and the type the cell had; it
            # also keeps the timings of the solution's run, which the generator drops.
            added = {"checksum", "cell_type"}
            assert {k: v for k, v in theirs.metadata["nbgrader"].items() if k not in added} == \
                ours.metadata["nbgrader"], (path.name, ours.source[:60])
            assert {k: v for k, v in theirs.metadata.items() if k not in ("nbgrader", "execution")} == \
                {k: v for k, v in ours.metadata.items() if k != "nbgrader"}, (path.name, ours.source[:60])
            if theirs.cell_type == "code":
                assert theirs.outputs == [] and theirs.execution_count is None


@pytest.mark.parametrize("name", GRADED)
def test_a_solved_submission_scores_every_point_and_a_blank_one_none(course, name):
    checks = {f"ex{n}-check" for n in exercise_numbers(SOLUTIONS / name)}
    assert scores(course, "solved", name) == {check: 1.0 for check in checks}
    assert scores(course, "blank", name) == {check: 0.0 for check in checks}


def test_a_check_cell_replaced_or_deleted_does_not_score(course):
    name = GRADED[0]
    graded = nbformat.read(course / "autograded" / "cheater" / Path(name).stem / name, as_version=4)
    restored = cell(graded, "ex1_1-check")  # autograde overwrites locked and test cells from the source
    assert restored.source == "check_stable_softmax(stable_softmax)"
    assert [o.output_type for o in restored.outputs] == ["error"]
    got = scores(course, "cheater", name)
    assert got["ex1_1-check"] == 0.0 and got["ex1_3-check"] == 0.0
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        notebook = gb.find_submission_notebook(Path(name).stem, Path(name).stem, "cheater")
        flagged = {g.name for g in notebook.grades if g.needs_manual_grade}
    assert flagged == {"ex1_3-check"}  # the deleted cell: no score of its own, left to the instructor


def test_nbgrader_credits_a_check_that_the_solution_cell_redefines(course):
    """What nbgrader cannot see: the test cell runs in the student's kernel, where the student's
    own code may have replaced the check. The course's grader runs its checks itself."""
    assert scores(course, "cheater", GRADED[0])["ex1_2-check"] == 1.0


def test_nbgrader_and_the_course_grader_agree_exercise_by_exercise(course):
    if not (course / "ours.json").exists():
        pytest.skip("python -m annotated.support.grade has no --json gradebook to compare with")
    ours = {}
    for row in json.loads((course / "ours.json").read_text())["results"]:
        number = re.search(r"Exercise\s+(\d+)\.(\d+)", row["exercise"])
        ours[row["student"], f"ex{number.group(1)}_{number.group(2)}-check"] = row["verdict"]
    theirs = {(student, check): score for student, name in
              [("solved", n) for n in GRADED] + [("blank", n) for n in GRADED] + [("cheater", GRADED[0])]
              for check, score in scores(course, student, name).items()}
    assert set(ours) == set(theirs)
    spoofed = ("cheater", "ex1_2-check")  # test_nbgrader_credits_a_check_that_the_solution_cell_redefines
    assert ours.pop(spoofed) != "passed" and theirs.pop(spoofed) == 1.0
    assert {key: verdict == "passed" for key, verdict in ours.items()} == {
        key: score == 1.0 for key, score in theirs.items()}
    assert {verdict for (student, _), verdict in ours.items() if student == "blank"} == {"not attempted"}


def test_a_student_who_hands_in_two_of_fifteen_notebooks_gets_no_missing_file_warning(course):
    # One assignment of 15 notebooks gave each such student 13 "No submitted file" warnings.
    assert "No submitted file" not in (course / "autograde.log").read_text()


# ---------------------------------------------------------------- the course folder (no nbgrader needed)


def run_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "annotated.support.nbgrader_course", *args],
                          capture_output=True, text=True, timeout=120)


def test_the_command_makes_one_assignment_per_notebook_and_a_config_with_the_graders_limits(tmp_path):
    done = run_command(str(tmp_path / "mycourse"), "--notebooks", "01", "03_masking.ipynb", "--course-id", "nlp101")
    assert done.returncode == 0, done.stderr
    course = tmp_path / "mycourse"
    assert sorted(str(p.relative_to(course)) for p in course.rglob("*") if p.is_file()) == [
        "nbgrader_config.py", "source/01_softmax_and_scaling/01_softmax_and_scaling.ipynb",
        "source/03_masking/03_masking.ipynb"]
    for path in course.glob("source/*/*.ipynb"):
        assert path.read_bytes() == (SOLUTIONS / path.name).read_bytes()
    config = (course / "nbgrader_config.py").read_text()
    # The limits are read from the course grader at every run, never copied as numbers.
    assert "c.Execute.timeout = grade.CELL_SECONDS" in config
    assert "c.CourseExecute.notebook_timeout = grade.NOTEBOOK_SECONDS" in config
    assert not re.search(r"=\s*\d", config)
    assert "c.CourseDirectory.course_id = 'nlp101'" in config


def test_the_config_gives_nbgrader_the_graders_limits_and_the_course_steps(tmp_path):
    needs_nbgrader()
    from nbgrader.preprocessors import Execute, LimitOutput
    from traitlets.config import Config

    nbgrader_course.make_course(tmp_path / "c", ["01"])
    config = Config()
    exec(compile((tmp_path / "c" / "nbgrader_config.py").read_text(), "nbgrader_config.py", "exec"),
         {"get_config": lambda: config})
    assert config.Execute.timeout == grade.CELL_SECONDS == 60
    assert config.CourseExecute.notebook_timeout == grade.NOTEBOOK_SECONDS
    steps = config.Autograde.autograde_preprocessors
    assert Execute not in steps and nbgrader_course.CourseExecute in steps
    assert steps.index(nbgrader_course.LimitOutputSize) == steps.index(LimitOutput) + 1
    executor = nbgrader_course.CourseExecute(config=config)
    assert executor.timeout == grade.CELL_SECONDS and executor.notebook_timeout == grade.NOTEBOOK_SECONDS


def test_the_command_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for args, words in [
        ([str(mine)], "is not empty"),
        ([str(mine / "notes.txt")], "is a file"),
        ([str(tmp_path / "new"), "--notebooks", "99"], "'99' names no notebook"),
        ([str(tmp_path / "new"), "--course-id", "a b"], "--course-id 'a b'"),
        ([str(SOLUTIONS)], "the course's checkout or one of its folders"),
    ]:
        done = run_command(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_a_solution_that_is_not_a_notebook_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "solutions").mkdir()
    nbformat.write(tiny(), tmp_path / "solutions" / "01_fine.ipynb")
    (tmp_path / "solutions" / "02_broken.ipynb").write_text('{"cells": [')  # cut short
    with pytest.raises(nbgrader_course.CourseError, match="02_broken.ipynb is not a notebook nbformat reads"):
        nbgrader_course.make_course(tmp_path / "course", solutions=tmp_path / "solutions")
    assert not (tmp_path / "course").exists()


def test_force_writes_only_the_commands_files_and_keeps_the_gradebook(tmp_path):
    course = tmp_path / "course"
    nbgrader_course.make_course(course, ["01"])
    (course / "gradebook.db").write_bytes(b"grades")
    (course / "submitted" / "ana").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text("stale")
    with pytest.raises(nbgrader_course.UsageError, match="--force"):
        nbgrader_course.make_course(course, ["01", "03"])
    nbgrader_course.make_course(course, ["01", "03"], force=True)
    assert (course / "gradebook.db").read_bytes() == b"grades" and (course / "submitted" / "ana").is_dir()
    assert (course / "nbgrader_config.py").read_text() == nbgrader_course.config_text("attention")
    assert (course / "source" / "03_masking" / "03_masking.ipynb").is_file()


def test_a_run_that_fails_midway_removes_what_it_made_and_nothing_else(tmp_path, monkeypatch):
    empty = tmp_path / "empty"  # the user's folder: it stays
    empty.mkdir()
    real = nbgrader_course.atomic_write
    written = []

    def failing(path, *args, **kwargs):
        written.append(path)
        if len(written) == 3:
            raise OSError(28, "No space left on device", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(nbgrader_course, "atomic_write", failing)
    for target in (empty, tmp_path / "new" / "course"):
        written.clear()
        with pytest.raises(OSError):
            nbgrader_course.make_course(target, ["01", "02", "03"])
    assert empty.is_dir() and not any(empty.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_an_output_is_cut_by_its_bytes_with_a_note():
    limit = 1000
    stream = nbformat.v4.new_output("stream", name="stdout", text="x" * 50_000)  # one line: LimitOutput keeps it
    assert nbgrader_course.cut_output(stream, limit)
    assert stream.text.startswith("x" * limit) and "x" * (limit + 1) not in stream.text
    assert "output cut: it had 50,000 bytes" in stream.text
    image = nbformat.v4.new_output("display_data", data={"image/png": "A" * 5000, "text/plain": "<Figure>"})
    assert nbgrader_course.cut_output(image, limit)
    assert set(image.data) == {"text/plain"} and "output cut" in image.data["text/plain"]
    error = nbformat.v4.new_output("error", ename="ValueError", evalue="v" * 5000, traceback=["t" * 100] * 100)
    assert nbgrader_course.cut_output(error, limit) and error.ename == "ValueError"
    assert nbgrader_course.output_bytes(error) < 2 * limit
    small = nbformat.v4.new_output("stream", name="stdout", text="fine\n")
    assert not nbgrader_course.cut_output(small, limit) and small.text == "fine\n"


# ---------------------------------------------------------------- the grader's limits, through real nbgrader


def solution(grade_id: str, source: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3,
                                 "solution": True}
    return cell


def check(grade_id: str, source: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "locked": True, "points": 1,
                                 "schema_version": 3, "solution": False}
    return cell


def tiny(*cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=list(cells))
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


# Three tiny assignments: the source (what the instructor wrote) and what a student handed in.
SLOW = ("a1_slow.ipynb",
        tiny(solution("answer", "def answer():\n    return 42"), check("answer-check", "assert answer() == 42")),
        {0: "import time\ntime.sleep(40)  # a correct answer, slower than nbgrader's 30 s\n\n\n"
            "def answer():\n    return 42"})
DIES = ("a2_dies.ipynb",
        tiny(solution("first", "def first():\n    return 1"), check("first-check", "assert first() == 1"),
             solution("between", "scratch = 0"),
             solution("second", "def second():\n    return 2"),
             check("second-check", "assert second() + first() == 3")),  # first(): from the cells run again
        {2: "import os\nos.kill(os.getpid(), 9)  # the kernel dies here"})
PRINTS = ("a3_prints.ipynb",
          tiny(solution("third", "def third():\n    return 3"), check("third-check", "assert third() == 3")),
          {0: "print('x' * 50_000_000)  # 50 MB on one line\n\n\ndef third():\n    return 3"})
STUDENTS = {"ana": SLOW, "ben": DIES, "cy": PRINTS}  # each hands in one notebook of the three


@pytest.fixture(scope="module")
def tiny_course(tmp_path_factory):
    """The three tiny assignments made into a course by nbgrader_course, released, and each
    student's one notebook autograded by real nbgrader; the log kept in ``autograde.log``."""
    needs_nbgrader()
    sources = tmp_path_factory.mktemp("tiny_solutions")
    for name, nb, _ in STUDENTS.values():
        nbformat.write(nb, sources / name)
    root = tmp_path_factory.mktemp("tiny") / "course"
    nbgrader_course.make_course(root, solutions=sources)
    nbgrader(root, "generate_assignment", "*")
    for student, (name, nb, answers) in STUDENTS.items():
        handed_in = copy.deepcopy(nb)
        for index, source in answers.items():
            handed_in.cells[index].source = source
        submit(root, student, name, handed_in)
    start = time.perf_counter()
    log = nbgrader(root, "autograde", "*", check=False)  # each test says what went wrong for its student
    print(f"nbgrader autograde of the tiny assignments: {time.perf_counter() - start:.0f} s")
    (root / "autograde.log").write_text(log)
    return root


def tiny_scores(course: Path, student: str) -> dict[str, float]:
    """The student's score per check; empty if nbgrader kept no grade (its autograding failed)."""
    from nbgrader.api import MissingEntry

    name = STUDENTS[student][0]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        try:
            notebook = gb.find_submission_notebook(Path(name).stem, Path(name).stem, student)
        except MissingEntry:
            return {}
        return {g.name: g.score for g in notebook.grades}


def autograded(course: Path, student: str) -> Path:
    name = STUDENTS[student][0]
    return course / "autograded" / student / Path(name).stem / name


def test_a_correct_answer_that_takes_40_s_gets_its_point_under_the_graders_60_s(tiny_course):
    assert tiny_scores(tiny_course, "ana") == {"answer-check": 1.0}


def test_a_kernel_killed_midway_keeps_the_points_earned_before_and_the_notebook_goes_on(tiny_course):
    assert tiny_scores(tiny_course, "ben") == {"first-check": 1.0, "second-check": 1.0}
    nb = nbformat.read(autograded(tiny_course, "ben"), as_version=4)
    died = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    assert [o.ename for o in died] == ["DeadKernelError"] and "the kernel died while this cell ran" in died[0].evalue
    assert not any(o.output_type == "error" for c in nb.cells if c is not nb.cells[2] for o in c.outputs)


def test_a_50_mb_print_is_cut_in_the_autograded_notebook(tiny_course):
    path = autograded(tiny_course, "cy")
    assert path.stat().st_size < 2 * nbgrader_course.OUTPUT_BYTES
    text = "".join(o.get("text", "") for o in nbformat.read(path, as_version=4).cells[0].outputs)
    assert text.startswith("x" * 1000), text[:200]
    had = re.search(r"output cut: it had ([\d,]+) bytes", text)
    assert had and int(had.group(1).replace(",", "")) >= 50_000_000, text[-300:]
    assert tiny_scores(tiny_course, "cy") == {"third-check": 1.0}


def test_one_assignment_per_notebook_gives_no_missing_file_warning_for_one_notebook_handed_in(tiny_course):
    log = (tiny_course / "autograde.log").read_text()
    assert "No submitted file" not in log
    assert log.count("Autograding") >= len(STUDENTS)  # nbgrader did run: each student's notebook


def test_nbgrader_finished_every_submission(tiny_course):
    assert (tiny_course / "autograde.log").read_text().endswith("exit code 0\n")


# ---------------------------------------------------------------- CourseExecute by itself, with short limits


def executed(tmp_path, *sources: str, **limits) -> nbformat.NotebookNode:
    """A notebook of ``sources`` run by CourseExecute with ``limits`` (its traits)."""
    needs_nbgrader()
    nb = tiny(*(nbformat.v4.new_code_cell(source) for source in sources))
    nbgrader_course.CourseExecute(**limits).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    return nb


def errors(cell) -> list[str]:
    return [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]


def test_a_kernel_that_ignores_the_interrupt_is_replaced_and_the_notebook_goes_on(tmp_path):
    nb = executed(tmp_path, "x = 41\nprint('once')",
                  "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)",
                  "print(x + 1)", timeout=3)
    assert [o.text for o in nb.cells[0].outputs] == ["once\n"]  # its first run's output, not the replay's
    assert "CellTimeoutError" in [e.split(":")[0] for e in errors(nb.cells[1])]
    assert [o.get("text") for o in nb.cells[2].outputs] == ["42\n"]


def test_the_notebooks_time_limit_stops_the_cells_left_each_with_the_reason(tmp_path):
    # The notebook's limit counts from the start, the kernel's start included, as in the course grader.
    nb = executed(tmp_path, "import time", "time.sleep(60)", "print('late')", "print('later')",
                  timeout=60, notebook_timeout=15)
    assert errors(nb.cells[0]) == []
    assert "CellTimeoutError" in [e.split(":")[0] for e in errors(nb.cells[1])]  # cut to the seconds left
    for cell in nb.cells[2:]:
        assert errors(cell) == ["NotRun: not run: the notebook's time limit (15 s) ran out"]


def test_a_kernel_that_keeps_dying_is_replaced_at_most_restarts_times(tmp_path):
    kill = "import os\nos.kill(os.getpid(), 9)"
    nb = executed(tmp_path, "y = 1", kill, "print(y)", kill, "print('never')", restarts=1)
    assert errors(nb.cells[0]) == [] and [o.get("text") for o in nb.cells[2].outputs] == ["1\n"]
    assert errors(nb.cells[1])[0].startswith("DeadKernelError: the kernel died while this cell ran")
    assert errors(nb.cells[3]) == ["DeadKernelError: the kernel died while this cell ran (out of memory, or the "
                                   "cell ended it); no fresh kernel after 1 restart"]
    assert errors(nb.cells[4]) == ["NotRun: not run: the kernel died, 2 times (the notebook gets at most "
                                   "1 fresh kernel)"]
