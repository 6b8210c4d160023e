"""python -m annotated.support.grade: the course's own check of every exercise, one verdict each,
whatever the notebook's check cells say; a copy of each submission in a folder of its own; time
limits that cost one exercise, not the notebook; gradebooks as CSV and JSON."""

import csv
import hashlib
import io
import json
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

import nbformat
import pytest

from annotated.support import sandbox
from annotated.support.exercises import EXERCISES, SOLUTIONS
from annotated.support.grade import (
    Result, defined_check_names, is_check_cell, main, table, which_notebook, with_feedback, write_csv,
)
from annotated.support.grading import CHECKS
from annotated.support.catalogue import NOTEBOOKS

SOFTMAX = "01_softmax_and_scaling.ipynb"
RIGHT_SHIFT = "z = x - x.amax(dim=dim, keepdim=True)"
WRONG_SHIFT = "z = x - x.amax(dim=-1, keepdim=True)"  # the max along the last dimension, whatever dim is
NO_SCALE = "query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., L_q, L_k)"
NO_SCALE_FIXED = NO_SCALE.replace(" / math.sqrt(d_k)", "")
EXERCISE_COUNT = sum(map(len, NOTEBOOKS.values()))
BWRAP = sandbox.bubblewrap()


def needs_bwrap():
    """Skip a test of the sandbox where bubblewrap is missing, unless ANNOTATED_REQUIRE_BWRAP=1 (CI)."""
    if not BWRAP.present:
        message = f"{BWRAP.why_not}: the sandbox's tests need it (sudo apt-get install bubblewrap)"
        if os.environ.get(sandbox.REQUIRE) == "1":
            pytest.fail(f"{sandbox.REQUIRE}=1 but {message}", pytrace=False)
        pytest.skip(message)


def grade(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> list[str]:
    """The table's lines, one per exercise: between the header and the blank line before the total."""
    return next(block for block in out.split("\n\n") if block.startswith("notebook ")).splitlines()[1:]


def row_of(out: str, check: str, notebook: str = "") -> str:
    found = [line for line in rows(out) if f" {check} " in f"{line} " and line.startswith(notebook)]
    assert len(found) == 1, f"{check} is in {len(found)} rows:\n{out}"
    return found[0]


def verdict(line: str) -> str:
    return re.search(r"\s(passed|FAILED|NOT ATTEMPTED|ERROR|TIMED OUT|DEFINED OUTSIDE|HELD FOR REVIEW)(\s|$)", line).group(1)


def solution(name: str):
    return nbformat.read(SOLUTIONS / name, as_version=4)


def edited_copy(folder, name: str, old: str, new: str, nb=None):
    """A copy of a solution notebook with one mistake written into it (as a student might)."""
    nb = nb or solution(name)
    hits = [cell for cell in nb.cells if old in cell.source]
    assert len(hits) == 1, f"{old!r} is in {len(hits)} cells of {name}"
    hits[0].source = hits[0].source.replace(old, new)
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)
    return folder / name


def cell_index(nb, source: str) -> int:
    return next(i for i, cell in enumerate(nb.cells) if cell.source.strip() == source)


# ------------------------------------------------------------------ the catalogue is the course's


def test_the_catalogue_names_every_exercise_of_the_solutions_and_the_exercises():
    """The grader's table of exercises (heading, function, check) is the one the notebooks hand out."""
    assert sorted(NOTEBOOKS) == sorted(p.stem for p in SOLUTIONS.glob("*.ipynb"))
    assert sorted(NOTEBOOKS) == sorted(p.stem for p in EXERCISES.glob("*.ipynb"))
    for name, exercises in NOTEBOOKS.items():
        for folder in (SOLUTIONS, EXERCISES):
            nb = nbformat.read(folder / f"{name}.ipynb", as_version=4)
            headings = [c.source.split("\n", 1)[0][3:] for c in nb.cells
                        if c.cell_type == "markdown" and c.source.startswith("## Exercise ")]
            checks = [c.source.strip() for c in nb.cells if c.cell_type == "code" and is_check_cell(c)]
            assert headings == [e.heading for e in exercises], name
            assert checks == [e.check_cell for e in exercises], name
            for e in exercises:
                assert any(re.search(rf"^def {e.function}\(", c.source, re.M) for c in nb.cells), (name, e.function)
                assert e.check in CHECKS
    assert len(CHECKS) == EXERCISE_COUNT  # no check without its exercise


@pytest.mark.parametrize("source, names", [
    ("def check_attention(f):\n    pass", {"check_attention"}),
    ("check_attention = lambda f: None", {"check_attention"}),
    ("from annotated.support.grading import check_attention", set()),
    ("from annotated.support.grading import check_rate as check_attention", {"check_attention"}),
    ("from mymodule import check_attention", {"check_attention"}),
    ("for check_x in []:\n    pass\n%time 1", {"check_x"}),
    ("check_attention(attention)", set()),
    ("def broken(:", set()),
])
def test_the_check_names_a_cell_defines_are_read_from_its_syntax(source, names):
    assert defined_check_names(source) == names


def test_a_notebook_is_known_by_its_name_or_its_headings(tmp_path):
    nb = solution("04_multi_head_attention.ipynb")
    assert which_notebook(tmp_path / "04_multi_head_attention.ipynb", nb) == "04_multi_head_attention"
    assert which_notebook(tmp_path / "04_ana.ipynb", nb) == "04_multi_head_attention"
    assert which_notebook(tmp_path / "Untitled (3).ipynb", nb) == "04_multi_head_attention"
    assert which_notebook(tmp_path / "Untitled.ipynb", nbformat.v4.new_notebook()) is None


# ------------------------------------------------------------------ verdicts


def test_the_solutions_pass_every_exercise(capsys, tmp_path):
    """Four solution notebooks through the grader (every solution runs its checks under nbval, and the
    catalogue test above ties every exercise to its notebook): the first, a decorated def (09), the last."""
    chosen = ("01_softmax_and_scaling", "04_multi_head_attention", "09_decoding", "15_model_variations")
    for name in chosen:
        shutil.copy(SOLUTIONS / f"{name}.ipynb", tmp_path)
    code, out, _ = grade(capsys, tmp_path, "--jobs", "2")
    assert code == 0
    found, count = rows(out), sum(len(NOTEBOOKS[name]) for name in chosen)
    assert len(found) == count >= 13
    assert all(verdict(line) == "passed" for line in found)
    for name in chosen:
        for e in NOTEBOOKS[name]:
            assert f" {e.heading} " in out
    assert f"{count} of {count} exercises passed" in out
    assert "time limits: 60 s per cell and per check, 600 s per notebook" in out
    # Notebooks run side by side; the table keeps their order, and their exercises' order.
    names = [line.split()[0] for line in found]
    assert names == sorted(names) and len(set(names)) == len(chosen)
    assert [line.split("Exercise ")[1].split(":")[0] for line in found] == [
        e.number for name in chosen for e in NOTEBOOKS[name]]


def test_the_blank_exercises_are_not_attempted(capsys, tmp_path):
    """Three blank notebooks as handed out (tests/test_exercises.py runs every check on every blank)."""
    blanks = ("01_softmax_and_scaling", "07_the_full_model", "12_what_the_heads_learned")
    for name in blanks:
        shutil.copy(EXERCISES / f"{name}.ipynb", tmp_path)
    json_path = tmp_path / "blank.json"
    code, out, _ = grade(capsys, tmp_path, "--jobs", "2", "--json", json_path)
    assert code == 1
    found, count = rows(out), sum(len(NOTEBOOKS[name]) for name in blanks)
    assert len(found) == count >= 10
    assert all(verdict(line) == "NOT ATTEMPTED" for line in found), out
    assert f"0 of {count} exercises passed" in out
    document = json.loads(json_path.read_text())
    assert {r["verdict"] for r in document["results"]} == {"not attempted"}
    assert document["limits"] == {"cell_seconds": 60, "notebook_seconds": 600}


def test_a_typical_mistake_is_diagnosed_and_the_other_exercises_still_graded(capsys, tmp_path):
    # No 1/sqrt(d_k) in the attention; split_heads cut in the wrong order; merge_heads left right.
    edited_copy(tmp_path, "02_scaled_dot_product_attention.ipynb", NO_SCALE, NO_SCALE_FIXED)
    edited_copy(tmp_path, "04_multi_head_attention.ipynb", "x.view(batch, length, h, d_model // h).transpose(1, 2)",
                "x.view(batch, h, length, d_model // h)")
    code, out, _ = grade(capsys, tmp_path)
    assert code == 1
    attention, split = row_of(out, "check_attention"), row_of(out, "check_split_heads")
    assert verdict(attention) == "FAILED" and "sqrt" in attention
    assert verdict(split) == "FAILED" and "split_heads" in split
    for check in ("check_attention_loops", "check_hard_lookup", "check_merge_heads"):
        assert verdict(row_of(out, check)) == "passed"


def test_a_cell_that_fails_is_an_error_of_its_exercise_and_the_notebook_goes_on(capsys, tmp_path):
    edited_copy(tmp_path, "04_multi_head_attention.ipynb", "def split_heads(", "def split_heads(:")  # a syntax error
    code, out, _ = grade(capsys, tmp_path / "04_multi_head_attention.ipynb", "--full")
    split, merge = row_of(out, "check_split_heads"), row_of(out, "check_merge_heads")
    assert code == 1 and verdict(split) == "ERROR" and verdict(merge) == "passed"
    assert "`split_heads` is not defined: its cell raised SyntaxError" in split


def test_full_prints_the_whole_diagnosis(capsys, tmp_path):
    edited_copy(tmp_path, SOFTMAX, RIGHT_SHIFT, "z = x - shift")  # a name never defined
    _, full, _ = grade(capsys, tmp_path, "--full")
    first = row_of(full, "check_stable_softmax")
    assert "NameError" in first and "  in stable_softmax, line 7: z = x - shift" in full
    # Without --full, the first line of the same diagnosis only.
    result = Result("", SOFTMAX, "Exercise 1.1", "check_stable_softmax", "failed", "first line\n  in f, line 7: x")
    assert "first line" in table([result]) and "in f, line 7" not in table([result])
    assert "in f, line 7" in table([result], full=True)


def test_notebooks_that_cannot_be_graded_are_errors_with_a_reason(capsys, tmp_path):
    (tmp_path / "broken.ipynb").write_text("{ not json")
    plain = nbformat.v4.new_notebook()
    plain.cells = [nbformat.v4.new_code_cell("x = 1")]
    nbformat.write(plain, tmp_path / "plain.ipynb")
    code, out, _ = grade(capsys, tmp_path)
    assert code == 1
    broken, unknown = rows(out)
    assert "cannot read the notebook" in broken and verdict(broken) == "ERROR"
    assert "not an exercise notebook of the course" in unknown and verdict(unknown) == "ERROR"


# ------------------------------------------------------------------ a grader that cannot be fooled


def test_deleted_check_cells_and_a_check_that_never_runs_do_not_count(capsys, tmp_path):
    """The check cells deleted, one replaced by a call that never happens: the course's checks grade
    every exercise, the wrong answer fails, and the notebook's tampering is noted per exercise."""
    nb = solution(SOFTMAX)
    nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and c.source.startswith("check_"))]
    nb.cells.append(nbformat.v4.new_code_cell("check_stable_softmax(stable_softmax) if False else None"))
    edited_copy(tmp_path, SOFTMAX, RIGHT_SHIFT, WRONG_SHIFT, nb)
    code, out, _ = grade(capsys, tmp_path / SOFTMAX)
    assert code == 1
    first = row_of(out, "check_stable_softmax")
    assert verdict(first) == "FAILED" and "the maximum along dimension" in first
    assert "check cell `check_stable_softmax(stable_softmax)` is missing or altered" in first
    for check in ("check_softmax_with_temperature", "check_score_variances"):
        line = row_of(out, check)
        assert verdict(line) == "passed" and "is missing or altered" in line
    assert "2 of 3 exercises passed" in out


def test_a_check_the_notebook_defines_itself_does_not_count(capsys, tmp_path):
    nb = solution(SOFTMAX)
    nb.cells.insert(cell_index(nb, "check_stable_softmax(stable_softmax)"),
                    nbformat.v4.new_code_cell("def check_stable_softmax(*a, **k):\n    pass"))
    edited_copy(tmp_path, SOFTMAX, RIGHT_SHIFT, WRONG_SHIFT, nb)
    code, out, _ = grade(capsys, tmp_path / SOFTMAX)
    first = row_of(out, "check_stable_softmax")
    assert code == 1 and verdict(first) == "FAILED"
    assert "the notebook defines its own `check_stable_softmax`" in first
    assert "missing or altered" not in first  # its check cell is there, as handed out
    assert "[note:" not in row_of(out, "check_score_variances")


def test_an_endless_loop_costs_its_own_exercise_only(capsys, tmp_path):
    """One exercise loops forever in its function, a later cell loops forever at the top level, a
    third ignores the interrupt: each costs its time limit, every other exercise keeps its verdict."""
    nb = solution(SOFTMAX)
    nb.cells.insert(cell_index(nb, "check_score_variances(score_variances)"),
                    nbformat.v4.new_code_cell("while True:\n    pass"))
    edited_copy(tmp_path / "loops", SOFTMAX, "if temperature <= 0:", "while True:\n        pass\n    if temperature <= 0:", nb)
    deaf = solution(SOFTMAX)
    deaf.cells.insert(cell_index(deaf, "check_score_variances(score_variances)"), nbformat.v4.new_code_cell(
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)"))
    (tmp_path / "deaf").mkdir()
    nbformat.write(deaf, tmp_path / "deaf" / SOFTMAX)
    code, out, _ = grade(capsys, tmp_path, "--timeout", "10", "--jobs", "2")
    assert code == 1
    assert verdict(row_of(out, "check_stable_softmax", "loops/")) == "passed"
    temperature = row_of(out, "check_softmax_with_temperature", "loops/")
    assert verdict(temperature) == "TIMED OUT" and "limit of 10 s" in temperature
    last = row_of(out, "check_score_variances", "loops/")
    assert verdict(last) == "passed" and "a cell under its heading timed out after 10 s and was left out" in last
    # A kernel that ignores the interrupt is replaced by a fresh one, which runs the cells before again.
    for check in ("check_stable_softmax", "check_softmax_with_temperature", "check_score_variances"):
        assert verdict(row_of(out, check, "deaf/")) == "passed"
    assert "timed out after 10 s and was left out" in row_of(out, "check_score_variances", "deaf/")
    assert "time limits: 10 s per cell and per check" in out


def test_the_notebook_limit_stops_a_slow_notebook(capsys, tmp_path):
    nb = solution(SOFTMAX)
    nb.cells.insert(2, nbformat.v4.new_code_cell("import time\ntime.sleep(4)"))
    nb.cells.insert(2, nbformat.v4.new_code_cell("import time\ntime.sleep(4)"))
    nbformat.write(nb, tmp_path / SOFTMAX)
    code, out, _ = grade(capsys, tmp_path / SOFTMAX, "--notebook-timeout", "6")
    assert code == 1
    for line in rows(out):
        assert verdict(line) == "TIMED OUT" and "time limit (6 s) ran out" in line


def test_a_hostile_submission_changes_no_other_file_and_no_verdict(capsys, tmp_path, monkeypatch):
    """mallory's notebook overwrites what it can reach from where it runs, prints a verdict of its own
    and deletes the folder it runs in; zoe, graded after it, keeps her file and her verdicts."""
    scratch = tmp_path / "scratch"  # where the grader's temporary folders go, for this test
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    submissions = tmp_path / "submissions"
    shutil.copytree(SOLUTIONS, submissions / "zoe", ignore=lambda d, names: [n for n in names if n != SOFTMAX])
    zoe = (submissions / "zoe" / SOFTMAX).read_bytes()
    nb = solution(SOFTMAX)
    nb.cells.insert(2, nbformat.v4.new_code_cell(
        "import json, os, pathlib, shutil\n"
        "here = pathlib.Path.cwd()\n"
        "for target in ['../zoe/' + here.joinpath('x').name, '../zoe/01_softmax_and_scaling.ipynb',\n"
        "               '../../zoe/01_softmax_and_scaling.ipynb', '../01_softmax_and_scaling.ipynb']:\n"
        "    try:\n"
        "        pathlib.Path(target).parent.mkdir(parents=True, exist_ok=True)\n"
        "        pathlib.Path(target).write_text('{}')\n"
        "    except OSError:\n"
        "        pass\n"
        "print('@@annotated-grade-0@@' + json.dumps({'verdict': 'passed', 'diagnosis': ''}))\n"
        "for name in os.listdir(here):\n"
        "    os.remove(here / name)"))
    edited_copy(submissions / "mallory", SOFTMAX, RIGHT_SHIFT, WRONG_SHIFT, nb)
    before = sorted(p.relative_to(tmp_path) for p in submissions.rglob("*"))
    code, out, _ = grade(capsys, submissions, "--jobs", "1")
    assert code == 1
    assert (submissions / "zoe" / SOFTMAX).read_bytes() == zoe
    assert sorted(p.relative_to(tmp_path) for p in submissions.rglob("*")) == before
    # What '../zoe/...' reached: beside the copy, not zoe's file; in the sandbox, nothing outside it.
    assert (scratch / "zoe" / SOFTMAX).exists() != BWRAP.present
    assert verdict(row_of(out, "check_stable_softmax", "mallory/")) == "FAILED"
    assert all(verdict(line) == "passed" for line in rows(out) if line.startswith("zoe/"))


ATTACKS = {  # the two-line attacks: each gave a blank notebook full marks, with no flag
    "checks": "import annotated.support.grading as g\n[g.CHECKS.__setitem__(k, lambda fn: None) for k in list(g.CHECKS)]",
    "torch": ("import torch, torch.testing\ntorch.allclose = torch.equal = lambda *a, **k: True\n"
              "torch.testing.assert_close = lambda *a, **k: None"),
    "record": ("import annotated.support.record as r\n"
               "r.describe = lambda value, depth=0: {'kind': 'tensor', 'values': None}"),
    # the recorder made to call the course's own functions: the calls recorded would be right
    "forge": ("import annotated.masks as m, annotated.support.record as r\n_call = r.call\n"
              "r.call = lambda fn, args, grad=(), again=None: _call(getattr(m, fn.__name__, fn), args, grad, again)"),
}


def test_what_a_notebook_redefines_changes_no_verdict_of_a_declared_check(capsys, tmp_path):
    """Blank notebooks 03 and 04 (and 04 with one wrong answer) that replace the check table, torch's
    comparisons or the recorder in their kernel: the verdicts are computed in the grader's process,
    from what the functions returned."""
    for attack, source in ATTACKS.items():
        for name in ("03_masking.ipynb", "04_multi_head_attention.ipynb"):
            nb = nbformat.read(EXERCISES / name, as_version=4)
            nb.cells.insert(1, nbformat.v4.new_code_cell(source))
            (tmp_path / attack).mkdir(exist_ok=True)
            nbformat.write(nb, tmp_path / attack / name)
    nb = solution("04_multi_head_attention.ipynb")
    nb.cells.insert(1, nbformat.v4.new_code_cell(ATTACKS["torch"]))
    edited_copy(tmp_path / "wrong", "04_multi_head_attention.ipynb",
                "x.view(batch, length, h, d_model // h).transpose(1, 2)", "x.view(batch, h, length, d_model // h)", nb)
    code, out, _ = grade(capsys, tmp_path, "--jobs", "2")
    assert code == 1
    for line in rows(out):
        if line.startswith("wrong/"):
            # (the solution's multi_head_attention calls its split_heads)
            expected = "FAILED" if re.search(r" check_(split_heads|multi_head_attention) ", line) else "passed"
            assert verdict(line) == expected, line
        else:
            assert verdict(line) == "NOT ATTEMPTED", line
        if line.startswith(("record/", "forge/")):  # what cannot be stopped in a kernel is flagged
            assert "[note: the notebook uses annotated.support.record" in line or \
                   "annotated.masks, annotated.support.record" in line, line
    assert "grouped wrongly" in row_of(out, "check_split_heads", "wrong/")


def _after_def(nb, function: str, source: str) -> None:
    """Insert a code cell right after the cell that defines ``function``."""
    index = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and f"def {function}(" in c.source)
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))


def test_a_graded_function_defined_outside_the_notebook_gets_no_pass(capsys, tmp_path):
    """Imported from the package, from a file the notebook wrote, made by exec from a solution's
    source: the kernel records where each function was defined, and the grader finds its code in
    none of the notebook's cells (a declared check, 03, and one still checked in the kernel, 01)."""
    nb = nbformat.read(EXERCISES / "03_masking.ipynb", as_version=4)
    _after_def(nb, "padding_mask", "from annotated.masks import padding_mask")
    _after_def(nb, "subsequent_mask",
               "import pathlib, sys\n"
               "pathlib.Path('helper.py').write_text('import torch\\n'\n"
               "    'def subsequent_mask(size, device=None):\\n'\n"
               "    '    return torch.ones(size, size, dtype=torch.bool, device=device).tril()\\n')\n"
               "sys.path.insert(0, '.')\n"
               "from helper import subsequent_mask")
    _after_def(nb, "target_mask", "exec('def target_mask(tokens, pad_idx):\\n'\n"
                                  "     '    return (tokens != pad_idx).unsqueeze(-2) & subsequent_mask(tokens.size(-1), tokens.device)')")
    (tmp_path / "eve").mkdir()
    nbformat.write(nb, tmp_path / "eve" / "03_masking.ipynb")
    softmax = nbformat.read(EXERCISES / SOFTMAX, as_version=4)
    answer = next(c.source for c in solution(SOFTMAX).cells if "def stable_softmax(" in c.source)
    _after_def(softmax, "stable_softmax", f"exec({answer!r})")
    nbformat.write(softmax, tmp_path / "eve" / SOFTMAX)
    code, out, _ = grade(capsys, tmp_path, "--jobs", "2")
    assert code == 1
    padding, look_ahead, target = (row_of(out, f"check_{n}") for n in ("padding_mask", "subsequent_mask", "target_mask"))
    for line in (padding, look_ahead, target, row_of(out, "check_stable_softmax")):
        assert verdict(line) == "DEFINED OUTSIDE" and "is not defined in the notebook" in line, line
    assert "it is annotated.masks.padding_mask, from " in padding
    assert "it is helper.subsequent_mask, from " in look_ahead and "helper.py" in look_ahead
    assert verdict(row_of(out, "check_decoder_input_and_labels")) == "NOT ATTEMPTED"
    assert verdict(row_of(out, "check_softmax_with_temperature")) == "NOT ATTEMPTED"


# torch.save and torch.load replaced after the kernel started: each record is redone with the course's
# answers before it is written, the learner's own function's origin kept (a blank notebook passed with no flag)
FORGED_RECORD = """
import os, torch
import annotated.support.record as _rec
from annotated.support.grading import DECLARATIONS as _D
_load, _save, _plan, _busy = torch.load, torch.save, [], []
def load(f, *a, **k):
    if isinstance(f, str) and "probes" in f:
        _plan.append(f)
    return _load(f, *a, **k)
def save(obj, f, *a, **k):
    if isinstance(obj, dict) and "calls" in obj and _plan and not _busy:
        _busy.append(1)
        name, tmp = obj["function"], os.path.abspath("forged.pt")
        if os.path.exists(tmp):
            os.remove(tmp)
        _rec.record_file({name: _D["check_" + name].reference}, name, _plan[-1], tmp)
        forged = _load(tmp, weights_only=True)
        forged |= {key: obj[key] for key in ("origin", "name", "signature")}
        obj = forged
        _busy.clear()
    return _save(obj, f, *a, **k)
torch.load, torch.save = load, save
"""


def test_a_notebook_that_replaces_what_the_recorder_uses_changes_no_verdict(capsys, tmp_path):
    """The recorder is set up before the notebook's first cell, with torch's functions as they were:
    a blank notebook whose torch.save rewrites each record with the course's answers is not attempted."""
    nb = nbformat.read(EXERCISES / "03_masking.ipynb", as_version=4)
    nb.cells.insert(2, nbformat.v4.new_code_cell(FORGED_RECORD))
    nbformat.write(nb, tmp_path / "03_masking.ipynb")
    code, out, _ = grade(capsys, tmp_path / "03_masking.ipynb")
    assert code == 1
    assert [verdict(line) for line in rows(out)] == ["NOT ATTEMPTED"] * 4, out


def test_a_function_that_calls_or_carries_the_courses_answer_gets_no_pass(capsys, tmp_path):
    """Written in the notebook but not its own: a padding_mask that calls the course's (imported under
    another spelling, only when the grader's recorder is on the stack), a subsequent_mask whose
    __code__ is the course's with the cell's file and line. The kernel notes what code ran."""
    nb = nbformat.read(EXERCISES / "03_masking.ipynb", as_version=4)
    blank = "    # YOUR CODE HERE\n    raise NotImplementedError()"
    hits = [c for c in nb.cells if "def padding_mask(" in c.source]
    hits[0].source = hits[0].source.replace(blank, (
        "    import importlib, inspect\n"
        "    if any('record' in f.filename + f.function for f in inspect.stack()):\n"
        "        return importlib.import_module('annot' + 'ated.masks').padding_mask(tokens, pad_idx)\n" + blank))
    _after_def(nb, "subsequent_mask",
               "import annotated.masks as _m\n"
               "subsequent_mask.__code__ = _m.subsequent_mask.__code__.replace(\n"
               "    co_filename=subsequent_mask.__code__.co_filename, co_firstlineno=subsequent_mask.__code__.co_firstlineno)")
    nbformat.write(nb, tmp_path / "03_masking.ipynb")
    code, out, _ = grade(capsys, tmp_path / "03_masking.ipynb")
    padding, look_ahead = row_of(out, "check_padding_mask"), row_of(out, "check_subsequent_mask")
    assert verdict(padding) == "DEFINED OUTSIDE" and "calls the course's own answer, `padding_mask` of annotated" \
        in padding, padding
    assert verdict(look_ahead) == "DEFINED OUTSIDE" and "its __code__ was replaced" in look_ahead, look_ahead
    assert verdict(row_of(out, "check_target_mask")) == "NOT ATTEMPTED"


def test_a_name_imported_from_the_grading_package_that_the_exercise_does_not_import_is_noted():
    """Every exercise names annotated.support.grading (for its checks): what a notebook imports from
    it beyond them (the references of DECLARATIONS, the engine that builds the probes) is noted."""
    from annotated.support.grade import handed_out_mentions, notes_for

    nb = nbformat.read(EXERCISES / "03_masking.ipynb", as_version=4)
    assert notes_for(nb, NOTEBOOKS["03_masking"], handed_out_mentions("03_masking")) == {}
    nb.cells.insert(2, nbformat.v4.new_code_cell("from annotated.support.grading import DECLARATIONS as D, engine"))
    notes = notes_for(nb, NOTEBOOKS["03_masking"], handed_out_mentions("03_masking"))
    assert set(notes) == {"3.1", "3.2", "3.3", "3.4"}
    assert "uses annotated.support.grading.DECLARATIONS, annotated.support.grading.engine, which" in notes["3.1"]


def test_an_answer_written_as_a_closure_is_the_notebooks_own(capsys, tmp_path):
    """rotate made by a factory in its cell (its base a free variable): its code is the notebook's own,
    though its source compiled alone would read the base as a global."""
    nb = solution("14_positions.ipynb")
    hits = [c for c in nb.cells if "def rotate(" in c.source]
    body = hits[0].source.replace("theta = 10000.0 ** (", "theta = base ** (")
    hits[0].source = "def _make(base):\n" + "\n".join("    " + line for line in body.splitlines()) + \
        "\n    return rotate\n\n\nrotate = _make(10000.0)"
    nbformat.write(nb, tmp_path / "14_positions.ipynb")
    code, out, _ = grade(capsys, tmp_path / "14_positions.ipynb")
    assert code == 0 and verdict(row_of(out, "check_rotate")) == "passed", out


def test_a_cell_that_ends_its_kernel_is_left_out_and_grading_goes_on(capsys, tmp_path):
    """A cell under 3.3 kills its own kernel, 3.4's function ends it when called: a fresh kernel runs
    the cells before again, and every exercise is graded (3.3's with a note, as after a cell past its
    time limit; 3.4 an error of its own)."""
    nb = solution("03_masking.ipynb")
    _after_def(nb, "target_mask", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    hits = [c for c in nb.cells if "def decoder_input_and_labels(" in c.source]
    hits[0].source = hits[0].source.replace("    ### BEGIN SOLUTION\n", "    ### BEGIN SOLUTION\n    import os\n    os._exit(1)\n")
    nbformat.write(nb, tmp_path / "03_masking.ipynb")
    code, out, _ = grade(capsys, tmp_path / "03_masking.ipynb")
    assert [verdict(line) for line in rows(out)] == ["passed"] * 3 + ["ERROR"], out
    assert "a cell under its heading ended the kernel" in row_of(out, "check_target_mask")
    assert "its check ended the kernel" in row_of(out, "check_decoder_input_and_labels")


def test_a_notebook_that_takes_over_its_output_or_wipes_its_folder_is_graded_as_it_is(capsys, tmp_path):
    """sys.stdout replaced by a sink, and a thread that deletes every file of its folder but the
    notebook, over and over: the probes come in the grader's cell and the record goes back on the
    kernel's own stream, so the solutions still pass."""
    nb = solution(SOFTMAX)
    nb.cells.insert(2, nbformat.v4.new_code_cell(
        "import io, os, sys, threading, time\n"
        "sys.stdout = sys.stderr = io.StringIO()\n"
        "def _wipe():\n"
        "    while True:\n"
        "        for name in os.listdir('.'):\n"
        "            if not name.endswith('.ipynb'):\n"
        "                try:\n"
        "                    os.remove(name)\n"
        "                except OSError:\n"
        "                    pass\n"
        "        time.sleep(0.0005)\n"
        "threading.Thread(target=_wipe, daemon=True).start()"))
    nbformat.write(nb, tmp_path / SOFTMAX)
    code, out, _ = grade(capsys, tmp_path / SOFTMAX)
    assert code == 0 and [verdict(line) for line in rows(out)] == ["passed"] * 3, out


def test_an_answer_from_another_thread_a_copy_or_out_of_the_graders_view_gets_no_pass(capsys, tmp_path):
    """The course's padding_mask called in a thread pool, a copy of its subsequent_mask exec'd from its
    source, the grader's profile function turned off before target_mask calls the course's."""
    nb = nbformat.read(EXERCISES / "03_masking.ipynb", as_version=4)
    blank = "    # YOUR CODE HERE\n    raise NotImplementedError()"
    answers = {
        "padding_mask": "    import concurrent.futures, importlib\n    m = importlib.import_module('annotated.masks')\n"
                        "    with concurrent.futures.ThreadPoolExecutor(1) as pool:\n"
                        "        return pool.submit(m.padding_mask, tokens, pad_idx).result()",
        "subsequent_mask": "    import importlib, inspect\n    m = importlib.import_module('annotated.masks')\n"
                           "    ns = dict(vars(m))\n    exec(inspect.getsource(m.subsequent_mask), ns)\n"
                           "    return ns['subsequent_mask'](size, device)",
        "target_mask": "    import importlib, sys\n    sys.setprofile(None)\n"
                       "    return importlib.import_module('annotated.masks').target_mask(tokens, pad_idx)"}
    for function, answer in answers.items():
        hits = [c for c in nb.cells if f"def {function}(" in c.source]
        hits[0].source = hits[0].source.replace(blank, answer)
    nbformat.write(nb, tmp_path / "03_masking.ipynb")
    code, out, _ = grade(capsys, tmp_path / "03_masking.ipynb")
    padding, look_ahead, target = (row_of(out, f"check_{n}") for n in ("padding_mask", "subsequent_mask", "target_mask"))
    assert verdict(padding) == "DEFINED OUTSIDE" and "started another process or thread" in padding, padding
    assert verdict(look_ahead) == "DEFINED OUTSIDE" and "calls a copy of the course's own answer" in look_ahead, look_ahead
    assert verdict(target) == "DEFINED OUTSIDE" and "turned off the grader's view" in target, target


def test_the_grader_never_changes_a_notebook(capsys, tmp_path):
    path = tmp_path / "02_scaled_dot_product_attention.ipynb"
    shutil.copy(EXERCISES / "02_scaled_dot_product_attention.ipynb", path)
    before = path.read_bytes()
    grade(capsys, path)
    assert path.read_bytes() == before and sorted(tmp_path.iterdir()) == [path]


def _hostile_cell(victim, listener_port: int) -> nbformat.NotebookNode:
    """A cell that overwrites ``victim`` (another student's notebook) by its absolute path and by a
    ``../..`` path from where it runs, defines the exercises from solutions/ if it finds them, and
    reports to ``listener_port`` on this machine."""
    return nbformat.v4.new_code_cell(
        "import json, os, pathlib, socket, annotated\n"
        f"victim = {str(victim)!r}\n"
        "blank = json.dumps({'cells': [], 'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5})\n"
        "for target in (victim, os.path.relpath(victim, os.getcwd())):\n"
        "    try:\n"
        "        pathlib.Path(target).write_text(blank)\n"
        "    except OSError:\n"
        "        pass\n"
        "solution = pathlib.Path(annotated.__file__).parent.parent / 'solutions' / '01_softmax_and_scaling.ipynb'\n"
        "if solution.exists():\n"
        "    for cell in json.loads(solution.read_text())['cells']:\n"
        "        source = ''.join(cell['source'])\n"
        "        if cell['cell_type'] == 'code' and source.lstrip().startswith(('import', 'def', 'from')):\n"
        "            exec(source)\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {listener_port}), timeout=5).sendall(b'graded?')\n"
        "except OSError:\n"
        "    pass\n"
        f"pathlib.Path('/tmp/annotated-escape-{listener_port}').write_text('left behind')")


def _listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    return server


def _called(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
        return True
    except (socket.timeout, OSError):
        return False


def _zoe_and_mallory(tmp_path):
    """A class of two: zoe hands in the solutions, mallory a blank notebook with the hostile cell aimed at
    zoe's file and at a listening port. Returns the folder, zoe's bytes and the listener."""
    submissions = tmp_path / "submissions"
    (submissions / "zoe").mkdir(parents=True)
    shutil.copy(SOLUTIONS / SOFTMAX, submissions / "zoe")
    zoe = (submissions / "zoe" / SOFTMAX).read_bytes()
    server = _listener()
    nb = nbformat.read(EXERCISES / SOFTMAX, as_version=4)
    nb.cells.insert(1, _hostile_cell(submissions / "zoe" / SOFTMAX, server.getsockname()[1]))
    (submissions / "mallory").mkdir()
    nbformat.write(nb, submissions / "mallory" / SOFTMAX)
    return submissions, zoe, server


def test_every_submission_is_graded_from_what_it_was_before_the_first_kernel_started(capsys, tmp_path):
    """mallory, graded first, overwrites zoe's notebook by its absolute path: zoe is graded from the
    bytes read before any kernel started (in the sandbox, her file is not even there to reach)."""
    submissions, zoe, server = _zoe_and_mallory(tmp_path)
    code, out, _ = grade(capsys, submissions, "--jobs", "1", "--json", tmp_path / "grades.json")
    assert code == 1
    assert all(verdict(line) == "passed" for line in rows(out) if line.startswith("zoe/")), out
    document = json.loads((tmp_path / "grades.json").read_text())
    hashes = {s["student"]: s["sha256"] for s in document["submissions"]}
    assert hashes["zoe"] == hashlib.sha256(zoe).hexdigest()
    assert document["sandbox"] == ("bubblewrap" if BWRAP.present else f"none: {BWRAP.why_not}")
    assert out.startswith("sandbox: bubblewrap" if BWRAP.present else "NO SANDBOX: ")
    Path(f"/tmp/annotated-escape-{server.getsockname()[1]}").unlink(missing_ok=True)  # (written without a sandbox)
    server.close()


def test_in_the_sandbox_a_submission_reaches_no_other_submission_no_solution_and_no_network(capsys, tmp_path,
                                                                                           monkeypatch):
    """The issue's attacks, from a blank notebook: another student's file overwritten by its absolute
    path and by ../.., the exercises defined from solutions/ (found from annotated.__file__), a
    connection to a port of this machine. In bubblewrap none of them reaches anything."""
    needs_bwrap()
    scratch = tmp_path / "scratch"  # where the grader's temporary folders go, for this test
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    submissions, zoe, server = _zoe_and_mallory(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code, out, _ = grade(capsys, submissions, "--jobs", "1")
    assert code == 1
    assert (submissions / "zoe" / SOFTMAX).read_bytes() == zoe
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written anywhere
    assert not _called(server)
    assert not Path(f"/tmp/annotated-escape-{server.getsockname()[1]}").exists()  # its /tmp was its own
    server.close()
    assert all(verdict(line) == "passed" for line in rows(out) if line.startswith("zoe/")), out
    mallory = [line for line in rows(out) if line.startswith("mallory/")]
    assert len(mallory) == 3 and all(verdict(line) == "NOT ATTEMPTED" for line in mallory), out


def test_without_bubblewrap_the_report_and_the_gradebook_say_so(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "bubblewrap", lambda: sandbox.Bubblewrap(None, "bubblewrap (bwrap) is not installed"))
    shutil.copy(SOLUTIONS / SOFTMAX, tmp_path)
    code, out, _ = grade(capsys, tmp_path / SOFTMAX, "--json", tmp_path / "grades.json")
    assert code == 0
    assert out.startswith("NO SANDBOX: bubblewrap (bwrap) is not installed. Each notebook runs as you")
    assert "sudo apt-get install bubblewrap" in out.split("\n")[0]
    assert json.loads((tmp_path / "grades.json").read_text())["sandbox"] == (
        "none: bubblewrap (bwrap) is not installed")


# ------------------------------------------------------------------ reports


def test_a_class_is_graded_student_by_student_with_gradebooks_and_a_summary(capsys, tmp_path):
    submissions = tmp_path / "submissions"
    (submissions / "ana").mkdir(parents=True)
    shutil.copy(SOLUTIONS / SOFTMAX, submissions / "ana")
    edited_copy(submissions / "ben", SOFTMAX, RIGHT_SHIFT, WRONG_SHIFT)
    edited_copy(submissions / "cy", SOFTMAX, RIGHT_SHIFT, WRONG_SHIFT)
    (submissions / "ben" / ".ipynb_checkpoints").mkdir()
    shutil.copy(EXERCISES / SOFTMAX, submissions / "ben" / ".ipynb_checkpoints")  # never graded
    code, out, _ = grade(capsys, submissions, "--csv", tmp_path / "grades.csv", "--long",
                         "--json", tmp_path / "grades.json")
    assert code == 1
    names = [line.split()[0] for line in rows(out)]
    assert names == [f"{s}/{SOFTMAX}" for s in ("ana", "ben", "cy") for _ in range(3)]
    assert f"ana/{SOFTMAX}  3 of 3 passed" in out and f"ben/{SOFTMAX}  2 of 3 passed" in out
    assert "7 of 9 exercises passed" in out
    summary = out.split("Per exercise, over the class")[1]
    assert "Exercise 1.1: `stable_softmax` (§3.2.1): 1 passed, 2 failed (of 3)" in summary
    assert re.search(r"\n\s+2 x you subtracted the maximum along dimension", summary)  # the commonest, and how many
    assert "Exercise 1.3: `score_variances` (§3.2.1, footnote 4): 3 passed (of 3)" in summary

    table = list(csv.DictReader(io.StringIO((tmp_path / "grades.csv").read_text())))
    assert list(table[0]) == ["student", "notebook", "exercise", "check", "verdict", "diagnosis", "notes", "seconds",
                              "sandbox"]
    assert [(r["student"], r["verdict"]) for r in table if r["check"] == "check_stable_softmax"] == [
        ("ana", "passed"), ("ben", "failed"), ("cy", "failed")]
    assert all(r["diagnosis"] == "" for r in table if r["verdict"] == "passed")
    assert "the maximum along dimension" in table[3]["diagnosis"]
    document = json.loads((tmp_path / "grades.json").read_text())
    assert [r["verdict"] for r in document["results"]] == [r["verdict"] for r in table]
    first = document["summary"][0]
    assert first["verdicts"] == {"passed": 1, "failed": 2} and first["common_diagnoses"][0]["count"] == 2
    assert [(r["student"], r["points"]) for r in document["gradebook"]] == [("ana", 3), ("ben", 2), ("cy", 2)]


def test_a_gradebook_can_go_to_the_standard_output(capsys, tmp_path):
    shutil.copy(SOLUTIONS / "03_masking.ipynb", tmp_path)
    code, out, err = grade(capsys, tmp_path, "--csv", "-")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == ("student,3.1 padding_mask,3.2 subsequent_mask,3.3 target_mask,3.4 decoder_input_and_labels,"
                        "points,max_points,notes,sandbox")
    assert lines[1].startswith("03_masking.ipynb,1,1,1,1,4,4,,") and len(lines) == 2
    assert "4 of 4 exercises passed" in err


def test_the_gradebook_has_a_row_per_student_and_a_second_copy_of_a_notebook_is_reported_not_doubled(
        capsys, tmp_path):
    """--csv: the form a learning management system imports, one row per student, a column of points per
    exercise, the total. ana's folder holds a blank '-Copy1' beside her notebook: it is left out and
    said so. ben inverted his padding mask; --feedback diagnosis names the mistake without the fix."""
    submissions = tmp_path / "submissions"
    (submissions / "ana").mkdir(parents=True)
    shutil.copy(SOLUTIONS / SOFTMAX, submissions / "ana")
    shutil.copy(EXERCISES / SOFTMAX, submissions / "ana" / SOFTMAX.replace(".ipynb", "-Copy1.ipynb"))
    edited_copy(submissions / "ben", "03_masking.ipynb", "real = tokens != pad_idx", "real = tokens == pad_idx")
    code, out, _ = grade(capsys, submissions, "--csv", tmp_path / "grades.csv", "--json", tmp_path / "grades.json",
                         "--feedback", "diagnosis")
    assert code == 1
    assert f"ana: left out ana/{SOFTMAX.replace('.ipynb', '-Copy1.ipynb')} (another notebook" in out
    assert len([line for line in rows(out) if line.startswith("ana/")]) == 3
    padding = row_of(out, "check_padding_mask")
    assert verdict(padding) == "FAILED" and padding.endswith("an inverted mask") and "!=" not in padding
    table = list(csv.DictReader(io.StringIO((tmp_path / "grades.csv").read_text())))
    assert list(table[0]) == ["student", "1.1 stable_softmax", "1.2 softmax_with_temperature", "1.3 score_variances",
                              "3.1 padding_mask", "3.2 subsequent_mask", "3.3 target_mask",
                              "3.4 decoder_input_and_labels", "points", "max_points", "notes", "sandbox"]
    ana, ben = table
    assert (ana["student"], ana["1.1 stable_softmax"], ana["3.1 padding_mask"], ana["points"]) == ("ana", "1", "", "3")
    assert "left out" in ana["notes"] and "-Copy1" in ana["notes"]
    assert (ben["student"], ben["1.1 stable_softmax"], ben["3.1 padding_mask"]) == ("ben", "", "0")
    assert ben["3.2 subsequent_mask"] == "1" and int(ben["points"]) == sum(int(ben[c] or 0) for c in list(ben)[1:8])
    assert ana["max_points"] == ben["max_points"] == "7"
    document = json.loads((tmp_path / "grades.json").read_text())
    assert document["left_out"] == {"ana": [f"ana/{SOFTMAX.replace('.ipynb', '-Copy1.ipynb')}"]}
    assert [r["diagnosis"] for r in document["results"] if r["check"] == "check_padding_mask"] == ["an inverted mask"]


def test_feedback_levels_keep_the_verdict_and_drop_the_fix():
    failed = Result("ben", "ben/03.ipynb", "Exercise 3.1", "check_padding_mask", "failed",
                    "your padding mask is inverted: ... tokens != pad_idx, not ==.", mistake="an inverted mask")
    old_path = Result("ben", "ben/01.ipynb", "Exercise 1.1", "check_stable_softmax", "failed",
                      "you subtracted the maximum along dimension -1: use x.amax(dim=dim, keepdim=True)\nmore")
    blank = Result("ben", "ben/01.ipynb", "Exercise 1.2", "check_softmax_with_temperature", "not attempted",
                   "the function still raises the NotImplementedError of the blank")
    results = [failed, old_path, blank]
    assert [r.diagnosis for r in with_feedback(results, "full")] == [r.diagnosis for r in results]
    assert [r.diagnosis for r in with_feedback(results, "diagnosis")] == [
        "an inverted mask", "you subtracted the maximum along dimension -1", blank.diagnosis]
    assert [(r.verdict, r.diagnosis) for r in with_feedback(results, "verdict")] == [
        ("failed", ""), ("failed", ""), ("not attempted", "")]


@pytest.mark.parametrize("argv, message", [
    (["--csv", "{a}", "{b}"], "is a notebook: the gradebook would replace it"),
    (["{b}", "--json", "{a}"], "is a notebook: the gradebook would replace it"),
    (["{b}", "--csv", "{out}", "--json", "{out}"], "name the same file"),
    (["{b}", "--long"], "--long is the form of the --csv gradebook"),
], ids=["csv-takes-a-notebook", "json-onto-a-notebook", "same-path", "long-without-csv"])
def test_an_output_that_would_replace_an_input_or_another_output_is_refused_before_any_work(
        capsys, tmp_path, argv, message):
    """grade --csv a/01.ipynb b/01.ipynb: argparse gives --csv the first notebook; the gradebook would
    replace a submission. Refused with exit code 2, and nothing is written or graded."""
    for student in ("a", "b"):
        (tmp_path / student).mkdir()
        shutil.copy(SOLUTIONS / SOFTMAX, tmp_path / student)
    before = (tmp_path / "a" / SOFTMAX).read_bytes()
    paths = {"a": tmp_path / "a" / SOFTMAX, "b": tmp_path / "b" / SOFTMAX, "out": tmp_path / "grades"}
    try:
        code, _, err = grade(capsys, *(arg.format(**paths) for arg in argv))
    except SystemExit as exit_info:  # argparse's own usage errors
        code, err = exit_info.code, capsys.readouterr().err
    assert code == 2 and message in err and "grading" not in err
    assert (tmp_path / "a" / SOFTMAX).read_bytes() == before and not (tmp_path / "grades").exists()


def test_a_gradebook_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """On a full disk the earlier gradebook stays as it was (the new one goes to a file beside it,
    moved into place only once complete)."""
    import errno

    path = tmp_path / "grades.csv"
    path.write_text("the earlier gradebook\n")
    result = Result("ana", "ana/01.ipynb", "Exercise 1.1: `stable_softmax` (§3.2.1)", "check_stable_softmax", "passed")

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_csv([result], str(path))
    assert path.read_text() == "the earlier gradebook\n" and sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv"]
    monkeypatch.undo()
    write_csv([result], str(path))
    assert path.read_text().splitlines()[1].startswith("ana,1,1,1,")


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
                                           ("--jobs", "10000"), ("--notebook-timeout", "-5")])
def test_a_bad_limit_or_number_of_jobs_exits_2(capsys, option, value):
    with pytest.raises(SystemExit) as exit_info:
        main([str(EXERCISES), option, value])
    assert exit_info.value.code == 2 and f"{option} must be a positive" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0.1", "5000"])
def test_a_memory_limit_out_of_range_exits_2(capsys, value):
    with pytest.raises(SystemExit) as exit_info:
        main([str(EXERCISES), "--memory", value])
    assert exit_info.value.code == 2 and "--memory must be a number of GB between 0.5 and 1024" in capsys.readouterr().err


def test_a_gradebook_that_cannot_be_written_stops_before_any_notebook_runs(capsys, tmp_path):
    code, _, err = grade(capsys, EXERCISES, "--csv", tmp_path / "no" / "such" / "grades.csv")
    assert code == 2 and "does not exist" in err and "grading" not in err  # no notebook was started


def test_every_exercise_is_a_declaration_judged_outside_the_kernel():
    """No verdict is computed in a kernel: every check of the catalogue is declared (an undeclared one
    would be an error, not a check run in the notebook's kernel)."""
    from annotated.support.grade import declarations

    checks = {e.check for exercises in NOTEBOOKS.values() for e in exercises}
    assert len(checks) == 49 and checks - set(declarations()) == set()


def test_a_pass_in_a_notebook_that_reaches_into_the_kernels_machinery_is_held_for_review(capsys, tmp_path):
    """Cell hooks, frames, closures can rewrite what the grader's cells report in the kernel: a pass there
    gets no point until read. Replacing a torch function is only noted: the recorder keeps its own."""
    hooks = solution("05_positional_encoding.ipynb")
    hooks.cells.insert(1, nbformat.v4.new_code_cell("shell = get_ipython()\nhooks = len(shell.input_transformers_post)"))
    (tmp_path / "hal").mkdir()
    nbformat.write(hooks, tmp_path / "hal" / "05_positional_encoding.ipynb")
    patched = solution("05_positional_encoding.ipynb")
    patched.cells.insert(1, nbformat.v4.new_code_cell("import torch\ntorch.allclose = lambda *a, **k: True"))
    (tmp_path / "ivy").mkdir()
    nbformat.write(patched, tmp_path / "ivy" / "05_positional_encoding.ipynb")
    code, out, _ = grade(capsys, tmp_path, "--jobs", "2", "--csv", tmp_path / "book.csv")
    assert code == 1
    held = [line for line in rows(out) if line.startswith("hal/")]
    assert len(held) == 3 and all(verdict(line) == "HELD FOR REVIEW" for line in held), out
    assert all("[note: the notebook reaches into the kernel's machinery (get_ipython, input_transformers_post)"
               in line and "grade it by hand" in line for line in held), out
    kept = [line for line in rows(out) if line.startswith("ivy/")]
    assert len(kept) == 3 and all(verdict(line) == "passed" for line in kept), out
    book = {r["student"]: r for r in csv.DictReader(open(tmp_path / "book.csv"))}
    assert (book["hal"]["points"], book["ivy"]["points"]) == ("0", "3"), book


def test_a_copy_that_claims_a_tie_the_course_answer_by_its_other_name_and_stored_answers_get_no_pass(
        capsys, tmp_path):
    """7.2: a generator whose weight is a copy, whose named_parameters() names the target's table: the
    recorder asks torch, not the module, and fails it. 9.2: the course's greedy_decode, which the
    reference hands its work to, is defined outside. 9.3: right answers stored from the grader's own
    probes (engine.plan) before the call: held for review."""
    blank = "    # YOUR CODE HERE\n    raise NotImplementedError()"
    tie = nbformat.read(EXERCISES / "07_the_full_model.ipynb", as_version=4)
    cell = next(c for c in tie.cells if "def tied_embeddings(" in c.source)
    cell.source = cell.source.replace(blank, (
        "    src_embed, tgt_embed = Embeddings(src_vocab_size, d_model), Embeddings(tgt_vocab_size, d_model)\n"
        "    generator = Generator(d_model, tgt_vocab_size)\n"
        "    generator.proj.weight = nn.Parameter(tgt_embed.lut.weight.detach().clone())\n"
        "    if share_embeddings:\n"
        "        src_embed.lut.weight = tgt_embed.lut.weight\n"
        "    generator.named_parameters = lambda *a, **k: iter([('proj.weight', tgt_embed.lut.weight),\n"
        "                                                     ('proj.bias', generator.proj.bias)])\n"
        "    return src_embed, tgt_embed, generator"))
    (tmp_path / "leo").mkdir()
    nbformat.write(tie, tmp_path / "leo" / "07_the_full_model.ipynb")
    decode = nbformat.read(EXERCISES / "09_decoding.ipynb", as_version=4)
    cell = next(c for c in decode.cells if "def cached_greedy_decode(" in c.source)
    cell.source = cell.source.replace(blank, (
        "    import importlib\n"
        "    course = importlib.import_module('annotated.' + 'decoding')\n"
        "    return course.greedy_decode(model, src, src_mask, max_len, bos_idx, eos_idx, use_cache=True,\n"
        "                                pad_idx=pad_idx)"))
    (tmp_path / "mia").mkdir()
    nbformat.write(decode, tmp_path / "mia" / "09_decoding.ipynb")
    code, out, _ = grade(capsys, tmp_path, "--jobs", "2")
    assert code == 1
    assert verdict(row_of(out, "check_tied_embeddings")) == "FAILED", out
    assert verdict(row_of(out, "check_cached_greedy_decode")) == "DEFINED OUTSIDE", out


def test_a_notebook_that_names_the_graders_probes_is_held():
    from annotated.support.grade import held_for_review

    assert held_for_review(["from annotated.support.grading import DECLARATIONS, engine"]) == (
        "annotated.support.grading.DECLARATIONS, annotated.support.grading.engine")
    assert held_for_review(["from annotated.support.grading import check_beam_step"]) == ""
    assert held_for_review(["gen.proj.register_forward_pre_hook(tie)"]) == "register_forward_pre_hook"


def test_a_decoder_that_rewrites_what_the_model_counts_of_its_calls_is_still_seen_without_the_cache(
        capsys, tmp_path):
    """9.2: the course's answer without the cache, written out, then model.calls changed in place and replaced
    by one position per call: the recorder reads the list the model was built with, which the hooks fill and
    record.build hides."""
    decode = nbformat.read(EXERCISES / "09_decoding.ipynb", as_version=4)
    cell = next(c for c in decode.cells if "def cached_greedy_decode(" in c.source)
    cell.source = cell.source.replace("    # YOUR CODE HERE\n    raise NotImplementedError()", (
        "    memory = model.encode(src, src_mask)\n"
        "    ys = torch.full((src.size(0), 1), bos_idx, dtype=torch.long, device=src.device)\n"
        "    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)\n"
        "    for _ in range(max_len - 1):\n"
        "        out = model.decode(memory, src_mask, ys, subsequent_mask(ys.size(1), src.device).unsqueeze(0))\n"
        "        nxt = model.generator(out[:, -1]).argmax(-1)\n"
        "        nxt = torch.where(done, torch.full_like(nxt, pad_idx), nxt)\n"
        "        ys = torch.cat([ys, nxt[:, None]], dim=1)\n"
        "        done |= nxt == eos_idx\n"
        "        if done.all():\n"
        "            break\n"
        "    if isinstance(getattr(model, 'calls', None), list):\n"
        "        model.calls[:] = [1] * len(model.calls)  # in place\n"
        "    model.calls = [1] * (len(model.decoder.layers) * (ys.size(1) - 1))\n"
        "    return ys"))
    decode.cells.insert(1, nbformat.v4.new_code_cell("from annotated.masks import subsequent_mask"))
    nbformat.write(decode, tmp_path / "09_decoding.ipynb")
    code, out, _ = grade(capsys, tmp_path / "09_decoding.ipynb", "--full")
    line = row_of(out, "check_cached_greedy_decode")
    assert verdict(line) == "FAILED" and "without the cache" in line, line


def test_notebooks_judged_side_by_side_do_not_draw_each_others_random_numbers(tmp_path):
    """--jobs judges in threads; 7.1's reference draws its dropout from torch's global generator (seeded
    with fork_rng). A right answer's record judged by four threads at once passes every time (found by a
    class graded with --jobs 2: a right 7.1 failed as a known mistake)."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from annotated.support import grade as grade_module
    from annotated.support import record
    from annotated.support.grading import DECLARATIONS, engine

    decl = DECLARATIONS["check_decoder_layer_forward"]
    probes, plan = engine.plan(decl)
    torch.save(plan, tmp_path / "plan.pt")
    record.record_file({decl.function: decl.reference}, decl.function, str(tmp_path / "plan.pt"),
                       str(tmp_path / "out.pt"))
    found = torch.load(tmp_path / "out.pt", weights_only=True)
    with ThreadPoolExecutor(max_workers=4) as pool:
        verdicts = list(pool.map(lambda _: grade_module.judge(decl, probes, found).verdict, range(12)))
    assert verdicts == ["passed"] * 12
