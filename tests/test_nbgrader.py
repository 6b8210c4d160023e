"""nbgrader, the autograder many courses use, run for real on the course's notebooks.

The solution notebooks carry nbgrader's cell metadata (written by ``python -m
annotated.support.exercises``). In a temporary course directory, ``nbgrader generate_assignment``
must make notebooks equivalent to exercises/, and ``nbgrader autograde`` must give a solved
submission every point and a blank one none, exercise by exercise as the course's grader does.

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
from annotated.support.course import ROOT
from annotated.support.exercises import EXERCISES, SOLUTIONS, nbgrader_metadata

try:
    from nbgrader.api import Gradebook
except ImportError:  # the [instructor] extra is not installed
    Gradebook = None

REQUIRED = os.environ.get("ANNOTATED_REQUIRE_NBGRADER") == "1"
ASSIGNMENT = "course"
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


def nbgrader(course: Path, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


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


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course directory in which nbgrader has released the 15 exercise notebooks as one assignment and
    autograded three students: ``solved`` (the solution notebooks 01 and 03), ``blank`` (the
    exercise notebooks 01 and 03, as handed out) and ``cheater`` (notebook 01, ``cheat``). The
    course's grader grades the same submissions meanwhile, into ``ours.json``."""
    if Gradebook is None:
        message = "nbgrader is not installed (pip install -e '.[instructor]')"
        if REQUIRED:
            pytest.fail(f"ANNOTATED_REQUIRE_NBGRADER=1 but {message}", pytrace=False)
        pytest.skip(message)
    root = tmp_path_factory.mktemp("nbgrader_course")
    (root / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        "c.CourseDirectory.course_id = 'annotated'\n"
        f"c.CourseDirectory.root = {str(root)!r}\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(root / 'gradebook.db')!r}\n"
    )
    shutil.copytree(SOLUTIONS, root / "source" / ASSIGNMENT, ignore=shutil.ignore_patterns(".*"))
    start = time.perf_counter()
    nbgrader(root, "generate_assignment", ASSIGNMENT)
    generated = time.perf_counter()
    submissions = {("solved", name): nbformat.read(SOLUTIONS / name, as_version=4) for name in GRADED}
    submissions |= {("blank", name): nbformat.read(EXERCISES / name, as_version=4) for name in GRADED}
    submissions[("cheater", GRADED[0])] = cheat(SOLUTIONS / GRADED[0])
    for (student, name), notebook in submissions.items():
        for folder in (root / "submitted" / student / ASSIGNMENT, root / "ours" / student):
            folder.mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, folder / name)
    ours = course_grader(root / "ours", root / "ours.json")
    try:
        nbgrader(root, "autograde", ASSIGNMENT)
    finally:
        if ours is not None:
            ours.wait(timeout=600)
    print(f"nbgrader: generate_assignment {generated - start:.0f} s, autograde {time.perf_counter() - generated:.0f} s")
    return root


def scores(course: Path, student: str, name: str) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        notebook = gb.find_submission_notebook(Path(name).stem, ASSIGNMENT, student)
        return {g.name: g.score for g in notebook.grades}


def test_the_release_is_the_exercise_notebooks(course):
    released = sorted((course / "release" / ASSIGNMENT).glob("*.ipynb"))
    assert [p.name for p in released] == [p.name for p in sorted(EXERCISES.glob("*.ipynb"))]
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
    graded = nbformat.read(course / "autograded" / "cheater" / ASSIGNMENT / name, as_version=4)
    restored = cell(graded, "ex1_1-check")  # autograde overwrites locked and test cells from the source
    assert restored.source == "check_stable_softmax(stable_softmax)"
    assert [o.output_type for o in restored.outputs] == ["error"]
    got = scores(course, "cheater", name)
    assert got["ex1_1-check"] == 0.0 and got["ex1_3-check"] == 0.0
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        notebook = gb.find_submission_notebook(Path(name).stem, ASSIGNMENT, "cheater")
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
