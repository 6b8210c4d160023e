"""python -m annotated.support.grade: every check of a folder of notebooks, passed or with its diagnosis."""

import shutil

import nbformat
import pytest

from annotated.support.exercises import EXERCISES, SOLUTIONS
from annotated.support.grade import main


def count_checks(where) -> int:
    """How many check cells a notebook, or the notebooks of a folder, hold: the rows the grader must print."""
    paths = sorted(where.glob("*.ipynb")) if where.is_dir() else [where]
    return sum(cell.cell_type == "code" and cell.source.lstrip().startswith("check_")
               for path in paths for cell in nbformat.read(path, as_version=4).cells)


CHECKS_IN_SOLUTIONS = count_checks(SOLUTIONS)


def grade(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> list[str]:
    """The table's lines, one per check: between the header and the blank line before the total."""
    return out.split("\n\n")[0].splitlines()[1:]


NO_SCALE = "query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., L_q, L_k)"
NO_SCALE_FIXED = NO_SCALE.replace(" / math.sqrt(d_k)", "")


def row_of(out: str, check: str) -> str:
    found = [line for line in rows(out) if f" {check} " in f"{line} "]
    assert len(found) == 1, f"{check} is in {len(found)} rows:\n{out}"
    return found[0]


def edited_copy(folder, name: str, old: str, new: str):
    """A copy of a solution notebook with one mistake written into it (as a student might)."""
    nb = nbformat.read(SOLUTIONS / name, as_version=4)
    hits = [cell for cell in nb.cells if old in cell.source]
    assert len(hits) == 1, f"{old!r} is in {len(hits)} cells of {name}"
    hits[0].source = hits[0].source.replace(old, new)
    path = folder / name
    nbformat.write(nb, path)
    return path


def test_the_solutions_pass_every_check(capsys):
    code, out, _ = grade(capsys, SOLUTIONS)
    assert code == 0
    found = rows(out)
    assert CHECKS_IN_SOLUTIONS >= 4 and len(found) == CHECKS_IN_SOLUTIONS
    assert all(" passed" in line for line in found)
    headings = [cell.source.split(":")[0][3:] for path in SOLUTIONS.glob("*.ipynb")
                for cell in nbformat.read(path, as_version=4).cells
                if cell.cell_type == "markdown" and cell.source.startswith("## Exercise ")]
    assert len(headings) >= 4
    for exercise in headings:  # "Exercise 2.1", ...
        assert f" {exercise}: " in out
    assert f"{CHECKS_IN_SOLUTIONS} of {CHECKS_IN_SOLUTIONS} checks passed" in out
    # Notebooks run side by side; the table keeps their order, and their exercises' order.
    names = [line.split()[0] for line in found]
    assert names == sorted(names)
    assert len(set(names)) == len(list(SOLUTIONS.glob("*.ipynb")))


def test_the_blank_exercises_fail_every_check_and_say_why(capsys):
    code, out, _ = grade(capsys, EXERCISES)
    assert code == 1
    found = rows(out)
    assert len(found) == count_checks(EXERCISES) == CHECKS_IN_SOLUTIONS
    assert all("FAILED" in line and "not done yet" in line for line in found)
    assert f"0 of {CHECKS_IN_SOLUTIONS} checks passed" in out


def test_a_typical_mistake_is_diagnosed_and_the_other_exercises_still_graded(capsys, tmp_path):
    # No 1/sqrt(d_k) in the attention; split_heads cut in the wrong order; merge_heads left right.
    edited_copy(tmp_path, "02_scaled_dot_product_attention.ipynb", NO_SCALE, NO_SCALE_FIXED)
    edited_copy(tmp_path, "04_multi_head_attention.ipynb", "x.view(batch, length, h, d_model // h).transpose(1, 2)",
                "x.view(batch, h, length, d_model // h)")
    code, out, _ = grade(capsys, tmp_path)
    assert code == 1
    attention, split = row_of(out, "check_attention"), row_of(out, "check_split_heads")
    assert "FAILED" in attention and "sqrt" in attention
    assert "FAILED" in split and "split_heads" in split
    # A mistake in one exercise does not hide the next ones.
    for check in ("check_attention_loops", "check_hard_lookup", "check_merge_heads"):
        assert " passed" in row_of(out, check)


def test_a_cell_that_fails_before_the_check_is_reported_and_the_notebook_goes_on(capsys, tmp_path):
    edited_copy(tmp_path, "04_multi_head_attention.ipynb", "def split_heads(", "def split_heads(:")  # a syntax error
    code, out, _ = grade(capsys, tmp_path / "04_multi_head_attention.ipynb")
    split, merge = row_of(out, "check_split_heads"), row_of(out, "check_merge_heads")
    assert code == 1 and "FAILED" in split and "NameError" in split and " passed" in merge


def test_full_prints_the_whole_diagnosis(capsys, tmp_path):
    edited_copy(tmp_path, "02_scaled_dot_product_attention.ipynb", NO_SCALE, NO_SCALE_FIXED)
    _, short, _ = grade(capsys, tmp_path)
    _, full, _ = grade(capsys, tmp_path, "--full")
    assert len(full.splitlines()) >= len(short.splitlines())
    assert rows(short)[0] in full.splitlines()[1] or rows(short)[0].split("FAILED")[0] in full


def test_notebooks_that_cannot_be_graded_are_failures_with_a_reason(capsys, tmp_path):
    (tmp_path / "broken.ipynb").write_text("{ not json")
    plain = nbformat.v4.new_notebook()
    plain.cells = [nbformat.v4.new_code_cell("x = 1")]
    nbformat.write(plain, tmp_path / "plain.ipynb")
    code, out, _ = grade(capsys, tmp_path)
    assert code == 1
    broken, no_checks = rows(out)
    assert "cannot read the notebook" in broken
    assert "no check_...() cell found" in no_checks


@pytest.mark.parametrize("where, message", [
    ("missing", "no such file or folder"),
    ("not a notebook", "is not a notebook"),
    ("empty folder", "holds no .ipynb notebook"),
])
def test_a_bad_path_exits_2_with_a_clear_message(capsys, tmp_path, where, message):
    path = {"missing": tmp_path / "no" / "such", "not a notebook": SOLUTIONS.parent / "README.md",
            "empty folder": tmp_path}[where]
    code, _, err = grade(capsys, path)
    assert code == 2 and message in err


@pytest.mark.parametrize("option, value", [("--timeout", "0"), ("--jobs", "0"), ("--timeout", str(10**12)),
                                           ("--jobs", "10000")])
def test_a_bad_timeout_or_number_of_jobs_exits_2(capsys, option, value):
    with pytest.raises(SystemExit) as exit_info:
        main([str(EXERCISES), option, value])
    assert exit_info.value.code == 2 and f"{option} must be a positive" in capsys.readouterr().err


def test_one_job_at_a_time_gives_the_same_table(capsys, tmp_path):
    edited_copy(tmp_path, "02_scaled_dot_product_attention.ipynb", NO_SCALE, NO_SCALE_FIXED)
    shutil.copy(SOLUTIONS / "04_multi_head_attention.ipynb", tmp_path)
    _, together, _ = grade(capsys, tmp_path, "--jobs", "2")
    _, one_by_one, _ = grade(capsys, tmp_path, "--jobs", "1")
    assert together == one_by_one


def test_the_grader_never_changes_a_notebook(capsys, tmp_path):
    path = tmp_path / "02_scaled_dot_product_attention.ipynb"
    shutil.copy(EXERCISES / "02_scaled_dot_product_attention.ipynb", path)
    before = path.read_bytes()
    grade(capsys, path)
    assert path.read_bytes() == before


def test_a_folder_of_submissions_is_graded_student_by_student(capsys, tmp_path):
    (tmp_path / "ana").mkdir()
    (tmp_path / "ben").mkdir()
    (tmp_path / "ben" / ".ipynb_checkpoints").mkdir()
    shutil.copy(SOLUTIONS / "05_positional_encoding.ipynb", tmp_path / "ana")
    edited_copy(tmp_path / "ben", "05_positional_encoding.ipynb", "def sinusoidal_table(", "def sinusoidal_table(:")
    shutil.copy(EXERCISES / "05_positional_encoding.ipynb", tmp_path / "ben" / ".ipynb_checkpoints")  # never graded
    code, out, _ = grade(capsys, tmp_path)
    assert code == 1
    checks = count_checks(SOLUTIONS / "05_positional_encoding.ipynb")
    names = [line.split()[0] for line in rows(out)]
    assert names == ["ana/05_positional_encoding.ipynb"] * checks + ["ben/05_positional_encoding.ipynb"] * checks
    assert f"ana/05_positional_encoding.ipynb  {checks} of {checks} passed" in out
    ben = sum(" passed" in line for line in rows(out) if line.startswith("ben/"))
    assert ben < checks and any("NameError" in line for line in rows(out) if line.startswith("ben/"))
    assert f"ben/05_positional_encoding.ipynb  {ben} of {checks} passed" in out
    assert f"{checks + ben} of {2 * checks} checks passed" in out
