"""The exercises: generated from their solutions, their checks fail on blank and on typical
wrong answers with a message that names the mistake, and pass on the solutions."""

import contextlib
import importlib
import io
import math
import re
from pathlib import Path

import nbformat
import pytest
import torch

from annotated.attention import scaled_dot_product_attention
from annotated.multi_head import MultiHeadAttention
from annotated.positional import sinusoidal_table
from annotated.support import grading
from annotated.support.errors import CourseError
from annotated.support.exercises import EXERCISES, SOLUTIONS, make_exercise, replace_regions
from annotated.support.grading import (
    ExerciseFailed,
    check_attention,
    check_merge_heads,
    check_sinusoidal_table,
    check_split_heads,
)
from annotated.support.grading.attention import _call_attention
from annotated.support.grading.engine import _call
from annotated.support.notebooks import code_cells

SOLUTION_PATHS = sorted(SOLUTIONS.glob("*.ipynb"))
CHECKS = set(grading.CHECKS)


def is_check_cell(source: str) -> bool:
    return source.strip().startswith("check_")


def run(sources: list[str], namespace: dict) -> str:
    """exec the cells in ``namespace``, as a kernel would run them; return what they print."""
    printed = io.StringIO()
    # The cells seed torch and set its print options: keep both from leaking into other tests.
    with torch.random.fork_rng(), contextlib.redirect_stdout(printed):
        try:
            for source in sources:
                exec(compile(source, "<cell>", "exec"), namespace)
        finally:
            torch.set_printoptions(profile="default")
    return printed.getvalue()


# ---------------------------------------------------------------- the notebooks


def test_every_solution_has_its_exercise_and_every_exercise_its_solution():
    assert SOLUTION_PATHS, "solutions/ holds no notebook"
    assert [p.name for p in SOLUTION_PATHS] == sorted(p.name for p in EXERCISES.glob("*.ipynb"))


NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
TAUGHT = sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if not p.name.startswith("00_"))


@pytest.mark.parametrize("notebook", TAUGHT, ids=lambda p: p.stem)
def test_every_notebook_after_the_introduction_has_three_exercises_or_more_under_its_own_name(notebook):
    solution = SOLUTIONS / notebook.name
    assert solution.exists(), f"no solutions/{notebook.name}: its exercises are missing"
    statements = exercise_statements(solution)
    assert len(statements) >= 3, f"{notebook.name} has {len(statements)} exercises"
    number = int(notebook.name[:2])
    headings = [c.source.split("\n", 1)[0] for c in nbformat.read(solution, as_version=4).cells
                if c.cell_type == "markdown" and c.source.startswith("## Exercise ")]
    assert headings == [h for h in headings if h.startswith(f"## Exercise {number}.")]
    assert len(headings) == len(statements), "each exercise under its own '## Exercise N.M' heading"


@pytest.mark.parametrize("solution", SOLUTION_PATHS, ids=lambda p: p.stem)
def test_exercise_notebook_is_exactly_what_the_generator_makes_from_its_solution(solution):
    expected = make_exercise(nbformat.read(solution, as_version=4), solution.name)
    committed = nbformat.read(EXERCISES / solution.name, as_version=4)
    assert [(c.cell_type, c.source) for c in committed.cells] == [
        (c.cell_type, c.source) for c in expected.cells
    ], f"exercises/{solution.name} differs from its solution: run python -m annotated.support.exercises"
    for cell in committed.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "commit exercises unexecuted"
            assert "### BEGIN SOLUTION" not in cell.source and "### END SOLUTION" not in cell.source


@pytest.mark.parametrize("solution", SOLUTION_PATHS, ids=lambda p: p.stem)
def test_every_check_cell_calls_a_grading_check(solution):
    checks = [s for s in code_cells(solution) if is_check_cell(s)]
    assert checks, f"{solution.name} has no cell calling a check"
    for source in checks:
        assert source.split("(")[0].strip() in CHECKS, f"unknown check in {solution.name}: {source!r}"


PRACTISES = re.compile(r"\[[^\]]*\]\((\.\./notebooks/[^)]+\.ipynb)\)|\"([^\"]+)\"")


def exercise_statements(solution):
    """(markdown, code) for each cell with a solution block and the markdown cell before it."""
    cells = nbformat.read(solution, as_version=4).cells
    pairs = []
    for index, cell in enumerate(cells):
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source:
            before = [c for c in cells[:index] if c.cell_type == "markdown"]
            pairs.append((before[-1].source if before else "", cell.source))
    return pairs


@pytest.mark.parametrize("solution", SOLUTION_PATHS, ids=lambda p: p.stem)
def test_every_exercise_states_what_to_write_its_difficulty_time_and_the_sections_it_practises(
    solution,
):
    for statement, _ in exercise_statements(solution):
        for label in ("**Write**", "**Difficulty**", "**Time**", "**Practises**"):
            assert label in statement, f"{solution.name}: an exercise without {label}:\n{statement}"
        assert re.search(r"\*\*Difficulty\*\* [123] of 3", statement)
        assert re.search(r"\*\*Time\*\* about \d+ minutes", statement)


@pytest.mark.parametrize("solution", SOLUTION_PATHS, ids=lambda p: p.stem)
def test_the_sections_an_exercise_names_are_headings_of_the_notebook_it_links(solution):
    for statement, _ in exercise_statements(solution):
        practises = statement.split("**Practises**", 1)[1].split("\n\n", 1)[0]
        notebook, named = None, 0
        for link, section in PRACTISES.findall(practises):
            if link:
                notebook = (solution.parent / link).resolve()
                assert notebook.exists(), f"{solution.name} links {link}, which does not exist"
                headings = {
                    line.lstrip("#").strip()
                    for cell in nbformat.read(notebook, as_version=4).cells
                    if cell.cell_type == "markdown"
                    for line in cell.source.splitlines()
                    if line.startswith("#")
                }
            else:
                assert notebook is not None, f"{solution.name}: section {section!r} before any link"
                assert section in headings, f"{solution.name}: no section {section!r} in {notebook.name}"
                named += 1
        assert named, f"{solution.name}: an exercise names no section of a notebook"


def test_every_check_is_used_by_a_solution_notebook():
    used = {s.split("(")[0].strip() for p in SOLUTION_PATHS for s in code_cells(p) if is_check_cell(s)}
    assert used == CHECKS


@pytest.mark.parametrize("solution", SOLUTION_PATHS, ids=lambda p: p.stem)
def test_solution_notebook_passes_all_its_checks(solution):
    sources = code_cells(solution)
    printed = run(sources, {})
    assert printed.count(" passed: ") == sum(map(is_check_cell, sources))


@pytest.mark.parametrize("solution", SOLUTION_PATHS, ids=lambda p: p.stem)
def test_every_check_fails_on_the_blank_exercise_and_says_it_is_not_done(solution):
    sources = code_cells(EXERCISES / solution.name)
    namespace: dict = {}
    run([s for s in sources if not is_check_cell(s)], namespace)  # definitions run fine
    for source in filter(is_check_cell, sources):
        with pytest.raises(ExerciseFailed, match=r"raised NotImplementedError: the exercise is not done"):
            run([source], namespace)


# ---------------------------------------------------------------- the generator


def test_solution_block_becomes_the_blank_at_its_indentation():
    source = "def f(x):\n    ### BEGIN SOLUTION\n    y = x + 1\n    return y\n    ### END SOLUTION\nz = 1"
    blank, count = replace_regions(source, "### BEGIN SOLUTION", "### END SOLUTION",
                                   ["# YOUR CODE HERE", "raise NotImplementedError()"], "test")
    assert count == 1
    assert blank == "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\nz = 1"


def test_hidden_tests_are_removed_and_a_cell_of_hidden_tests_only_is_dropped():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
        nbformat.v4.new_code_cell(
            "assert f() == 1\n### BEGIN HIDDEN TESTS\nassert f() + 1 == 2\n### END HIDDEN TESTS"
        ),
        nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\nassert f() > 0\n### END HIDDEN TESTS"),
    ])
    exercise = make_exercise(nb)
    assert [c.source for c in exercise.cells] == [
        "def f():\n    # YOUR CODE HERE\n    raise NotImplementedError()",
        "assert f() == 1",
    ]
    assert "return 1" in nb.cells[0].source, "the solution notebook must be left unchanged"


@pytest.mark.parametrize("source, error", [
    ("### BEGIN SOLUTION\nx = 1", "never closed"),
    ("x = 1\n### END SOLUTION", "without"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "inside"),
])
def test_unbalanced_markers_are_errors(source, error):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    with pytest.raises(ValueError, match=error):
        make_exercise(nb)


def test_a_solution_without_markers_is_an_error():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(ValueError, match="no '### BEGIN SOLUTION'"):
        make_exercise(nb)


# ---------------------------------------------------------------- the checks


def reference_split(x, h):
    return MultiHeadAttention(x.size(-1), h).split_heads(x)


def reference_merge(x):
    return MultiHeadAttention(x.size(1) * x.size(3), x.size(1)).merge_heads(x)


@pytest.mark.parametrize("check, fn", [
    (check_attention, scaled_dot_product_attention),
    (check_split_heads, reference_split),
    (check_merge_heads, reference_merge),
    (check_sinusoidal_table, sinusoidal_table),
])
def test_check_passes_on_the_course_code(check, fn, capsys):
    check(fn)
    assert " passed: " in capsys.readouterr().out


def _attention(scale=None, dim=-1, mask_mode="before", fill=float("-inf"), zero_full_rows=True,
               transpose=(-2, -1), returns="pair", d_k_dim=-1, dtype=None):
    """A configurable attention, to write the usual wrong answers in one line each."""
    def attention(query, key, value, mask=None):
        d_k = query.size(d_k_dim)
        key_t = key.T if transpose == "T" else key.transpose(*transpose)
        scores = query @ key_t
        scores = scores / math.sqrt(d_k) if scale is None else scores * scale(d_k)
        if mask is not None and mask_mode == "before":
            scores = scores.masked_fill(~mask, fill)
        if mask is not None and mask_mode == "inverted":
            scores = scores.masked_fill(mask, fill)
        weights = scores.softmax(dim=dim, dtype=dtype)
        if mask is not None and mask_mode == "after":
            weights = weights.masked_fill(~mask, 0.0)
        if mask is not None and mask_mode.startswith("renormalized"):
            # Softmax over every key, then zero the masked weights and share out the rest.
            weights = weights.masked_fill(~mask, 0.0)
            total = weights.sum(-1, keepdim=True)
            weights = weights / (total.clamp_min(1e-9) if mask_mode.endswith("eps") else total)
        if mask is not None and mask_mode == "before" and zero_full_rows:
            weights = weights.masked_fill(~mask, 0.0)
        weights = weights.to(value.dtype)
        if returns == "output":
            return weights @ value
        if returns == "transposed":
            return weights @ value, weights.transpose(-2, -1)
        return weights @ value, weights
    return attention


def not_done(*args):
    raise NotImplementedError()


def split_view_without_transpose(x, h):
    batch, length, d_model = x.shape
    return x.view(batch, h, length, d_model // h)


def split_without_transpose(x, h):
    batch, length, d_model = x.shape
    return x.view(batch, length, h, d_model // h)


def split_interleaved(x, h):
    batch, length, d_model = x.shape
    return x.view(batch, length, d_model // h, h).permute(0, 3, 1, 2)


def split_hard_coded(x, h):
    return x.view(2, 3, 2, 4).transpose(1, 2)  # the sizes of a worked example


def split_hard_coded_to_the_first_sizes(x, h):
    return x.view(2, 3, 5, 6).transpose(1, 2)  # the first sizes the check runs


def _finish(scores, value, mask):
    """The course's attention from the scaled scores on: mask, softmax, zero fully masked rows."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights


def permute_3d(query, key, value, mask=None):
    return _finish(query @ key.permute(0, 2, 1) / math.sqrt(query.size(-1)), value, mask)  # 3-D keys only


def merge_hard_coded(x):
    return x.transpose(1, 2).reshape(2, 3, 8)


def merge_with_view(x):
    batch, h, length, d_k = x.shape
    return x.transpose(1, 2).view(batch, length, h * d_k)


def merge_without_transpose(x):
    batch, h, length, d_k = x.shape
    return x.reshape(batch, length, h * d_k)


def _table(order="sin-cos", exponent=lambda two_i, d_model: two_i / d_model, layout="interleaved"):
    def sinusoidal_table(max_len, d_model):
        pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
        angles = pos / 10000 ** exponent(two_i, d_model)
        first, second = torch.sin(angles), torch.cos(angles)
        if order == "cos-sin":
            first, second = second, first
        if layout == "halves":
            return torch.cat([first, second], dim=1)
        table = torch.zeros(max_len, d_model)
        table[:, 0::2], table[:, 1::2] = first, second
        return table
    return sinusoidal_table


def _table_hard_coded(d_model_in_exponent=None, shape=None, dtype=torch.float32):
    def sinusoidal_table(max_len, d_model):
        pos = torch.arange(max_len, dtype=dtype).unsqueeze(1)
        two_i = torch.arange(0, d_model, 2, dtype=dtype)
        angles = pos / 10000 ** (two_i / (d_model_in_exponent or d_model))
        table = torch.zeros(*(shape or (max_len, d_model)), dtype=dtype)
        table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
        return table
    return sinusoidal_table


def table_with_a_frequency_per_column(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    angles = pos / 10000 ** (torch.arange(d_model) / d_model)
    table = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, 1::2])
    return table


def _changed_result(fn, change):
    """``fn`` with its result (each tensor of a pair) passed through ``change``."""
    def wrong(*args):
        result = fn(*args)
        return tuple(change(r) for r in result) if isinstance(result, tuple) else change(result)
    return wrong


def attention_scaling_the_query_in_place(query, key, value, mask=None):
    query /= math.sqrt(query.size(-1))  # changes the caller's query
    return _finish(query @ key.transpose(-2, -1), value, mask)


def attention_transposing_the_key_in_place(query, key, value, mask=None):
    key.transpose_(-2, -1)  # the caller's key is now (..., d_k, L_k)
    return _finish(query @ key / math.sqrt(query.size(-1)), value, mask)


def attention_inverting_the_mask_in_place(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is None:
        return _finish(scores, value, None)
    hidden = mask.logical_not_()  # the caller's mask now says True where hidden
    weights = scores.masked_fill(hidden, float("-inf")).softmax(dim=-1).masked_fill(hidden, 0.0)
    return weights @ value, weights


def split_resizing_in_place(x, h):
    batch, length, d_model = x.shape
    return x.resize_(batch, length, h, d_model // h).transpose(1, 2)  # x itself is now 4-D


def merge_transposing_in_place(x):
    batch, h, length, d_k = x.shape
    return x.transpose_(1, 2).reshape(batch, length, h * d_k)  # x itself is now transposed


def attention_of_three_results(query, key, value, mask=None):
    return *scaled_dot_product_attention(query, key, value, mask), None


def attention_on_another_device(query, key, value, mask=None):
    output, weights = scaled_dot_product_attention(query, key, value, mask)
    return output.to("meta"), weights.to("meta")  # "meta": a device every machine has


def attention_with_a_nan(query, key, value, mask=None):
    output, weights = scaled_dot_product_attention(query, key, value, mask)
    output[(0,) * output.dim()] = float("nan")
    return output, weights


def attention_without_a_mask_parameter(query, key, value):
    return scaled_dot_product_attention(query, key, value)


def split_reading_a_missing_key(x, h):
    sizes = {"batch": x.size(0)}
    return x.view(sizes["batch"], sizes["length"], h, -1).transpose(1, 2)


def split_that_exits(x, h):
    raise SystemExit(1)


WRONG_ANSWERS = [
    # (check, wrong answer, what the message must say)
    (check_attention, not_done, r"raised NotImplementedError"),
    (check_attention, _attention(scale=lambda d_k: 1.0), r"forgot the 1/sqrt\(d_k\) scaling"),
    (check_attention, _attention(scale=lambda d_k: 1 / d_k),
     r"divided the scores by d_k = 6 instead of sqrt\(d_k\)"),
    (check_attention, _attention(scale=lambda d_k: 1 / 2.0),
     r"divided the scores by 2, but here d_k = 6.*written into your code.*query\.size\(-1\)"),
    (check_attention, _attention(scale=lambda d_k: 1 / math.sqrt(6)),
     r"divided the scores by 2\.449, but here d_k = 10.*written into your code"),
    (check_attention, _attention(d_k_dim=2),
     r"divided the scores by sqrt\(2\) = 1\.414, and 2 is L_q.*d_k = query\.size\(-1\)"),
    (check_attention, _attention(dim=-2), r"softmax over the wrong dimension.*softmax\(dim=-1\)"),
    (check_attention, _attention(mask_mode="after"), r"mask was applied after the softmax"),
    (check_attention, _attention(mask_mode="inverted"), r"mask is inverted.*True means 'may attend'"),
    (check_attention, _attention(mask_mode="ignored"), r"the mask was ignored"),
    (check_attention, _attention(zero_full_rows=False), r"all masked gets NaN"),
    (check_attention, _attention(fill=-1e9, zero_full_rows=False), r"all masked got uniform weights"),
    (check_attention, _attention(transpose=(1, 2)),
     r"key\.transpose\(-2, -1\), not key\.transpose\(1, 2\)"),
    (check_attention, permute_3d, r"works for \(batch, L, d\) inputs but not for \(batch, h, L, d\)"),
    (check_attention, _attention(transpose="T"),
     r"\.T on a tensor with more than two dimensions.*key\.transpose\(-2, -1\)"),
    (check_attention, _attention(mask_mode="renormalized"),
     r"softmax taken over all the keys, the masked weights zeroed and the rest renormalized"),
    (check_attention, _attention(mask_mode="renormalized-eps"),
     r"kept keys vanish .*renormalized afterwards"),
    (check_attention, _attention(mask_mode="renormalized", dtype=torch.float64),
     r"kept keys vanish .*renormalized afterwards"),
    (check_attention, _attention(returns="output"), r"should return a pair \(output, weights\)"),
    (check_attention, _attention(returns="transposed"),
     r"wrong shape for the weights .*: expected \(2, 3, 5\), got \(2, 5, 3\).*transposed"),
    (check_split_heads, not_done, r"raised NotImplementedError"),
    (check_split_heads, split_view_without_transpose,
     r"grouped wrongly: view\(batch, h, L, d_k\) without a transpose"),
    (check_split_heads, split_without_transpose,
     r"expected \(2, 5, 3, 6\), got \(2, 3, 5, 6\).*transpose\(1, 2\)"),
    (check_split_heads, split_hard_coded, r"fixed shape \[2, 3, 2, 4\].*size written into your code"),
    (check_split_heads, split_hard_coded_to_the_first_sizes,
     r"passed with \(batch=2, L=3, h=5, d_k=6\) but not with \(batch=4, L=7, h=2, d_k=3\)"),
    (check_split_heads, split_interleaved, r"every h-th column"),
    (check_merge_heads, not_done, r"raised NotImplementedError"),
    (check_merge_heads, merge_with_view, r"no longer contiguous.*\.reshape"),
    (check_merge_heads, merge_without_transpose, r"merged without transposing back"),
    (check_merge_heads, merge_hard_coded, r"fixed shape \[2, 3, 8\].*size written into your code"),
    (check_sinusoidal_table, not_done, r"raised NotImplementedError"),
    (check_sinusoidal_table, lambda max_len, d_model: None, r"returned None: did you forget the `return`"),
    (check_sinusoidal_table, _table(order="cos-sin"),
     r"sin and cos are swapped.*yours reads \[1, 0, 1, 0"),
    (check_sinusoidal_table, _table(layout="halves"), r"first half.*interleaves"),
    (check_sinusoidal_table, _table(exponent=lambda two_i, d: two_i / 2 / d), r"exponent is i/d_model"),
    (check_sinusoidal_table, table_with_a_frequency_per_column, r"share one frequency"),
    (check_sinusoidal_table, _table(exponent=lambda two_i, d: -two_i / d),
     r"multiplied pos .* instead of dividing"),
    (check_sinusoidal_table, _table_hard_coded(d_model_in_exponent=16),
     r"frequencies are those of d_model = 16, but this table has d_model = 22"),
    (check_sinusoidal_table, _table_hard_coded(shape=(50, 16)),
     r"passed with \(max_len=50, d_model=16\) but not with \(max_len=9, d_model=22\)"),
    (check_sinusoidal_table, _table_hard_coded(dtype=torch.float64), r"float64 table.*Build it in float32"),
    # Results of the wrong kind of tensor: complex (the right real part and a garbage
    # imaginary one), integer, bool, another floating dtype or another device.
    (check_attention, _changed_result(scaled_dot_product_attention, lambda t: t + 1j),
     r"the output as a torch\.complex64 tensor, a complex one; expected a real floating tensor, "
     r"torch\.float32, the dtype of the inputs"),
    (check_split_heads, _changed_result(reference_split, lambda t: t + 1j),
     r"the split tensor as a torch\.complex64 tensor, a complex one; expected a real floating"),
    (check_merge_heads, _changed_result(reference_merge, lambda t: t + 1j),
     r"the merged tensor as a torch\.complex64 tensor, a complex one; expected a real floating"),
    (check_sinusoidal_table, _changed_result(sinusoidal_table, lambda t: t + 1j),
     r"the table as a torch\.complex64 tensor, a complex one; expected a real floating tensor, "
     r"torch\.float32\. .*keep every step real"),
    (check_attention, _changed_result(scaled_dot_product_attention, torch.Tensor.long),
     r"the output as a torch\.int64 tensor, an integer one; expected a real floating tensor"),
    (check_split_heads, _changed_result(reference_split, torch.Tensor.long),
     r"the split tensor as a torch\.int64 tensor, an integer one"),
    (check_merge_heads, _changed_result(reference_merge, lambda t: t > 0),
     r"the merged tensor as a torch\.bool tensor, a bool one.*not numbers"),
    (check_attention, _changed_result(scaled_dot_product_attention, torch.Tensor.double),
     r"the output as torch\.float64 for torch\.float32 inputs; it must keep the dtype"),
    (check_split_heads, _changed_result(reference_split, torch.Tensor.double),
     r"the split tensor as torch\.float64 for torch\.float32 inputs"),
    (check_attention, attention_on_another_device,
     r"the output on the device meta, but the inputs are on cpu"),
    (check_sinusoidal_table, lambda max_len, d_model: sinusoidal_table(max_len, d_model).to("meta"),
     r"the table on the device meta, but the check expects it on the cpu"),
    (check_merge_heads, _changed_result(reference_merge, torch.Tensor.to_sparse),
     r"the merged tensor as a torch\.sparse_coo tensor; return an ordinary \(dense\) tensor"),
    # Inputs changed in place: named, before any comparison runs on the changed tensors.
    (check_attention, attention_scaling_the_query_in_place,
     r"changed its first argument `query` in place: 36 of its 36 numbers changed\. A function "
     r"must not change its inputs.*`x /= 2`"),
    (check_attention, attention_transposing_the_key_in_place,
     r"changed its second argument `key` in place: its shape went from \(2, 5, 6\) to \(2, 6, 5\)"),
    (check_attention, attention_inverting_the_mask_in_place,
     r"changed its fourth argument `mask` in place: 10 of its 10 numbers changed.*`~mask` rather "
     r"than `mask\.logical_not_\(\)`"),
    (check_split_heads, split_resizing_in_place,
     r"changed its first argument `x` in place: its shape went from \(2, 3, 30\) to \(2, 3, 5, 6\)"),
    (check_merge_heads, merge_transposing_in_place,
     r"changed its first argument `x` in place: its shape went from \(2, 5, 3, 6\) to \(2, 3, 5, 6\)"),
    # Other results that are not what they should be, and exceptions.
    (check_attention, attention_of_three_results,
     r"should return a pair \(output, weights\), got a tuple of 3 items \(Tensor, Tensor, NoneType\)"),
    (check_attention, attention_with_a_nan,
     r"the output .* contains NaN or inf in 1 of its 42 numbers, where the reference has finite "
     r"numbers \(the first at index \(0, 0, 0\): nan instead of"),
    (check_merge_heads, lambda x: reference_merge(x).numpy(), r"got ndarray: keep to torch operations"),
    (check_sinusoidal_table, lambda max_len, d_model: (sinusoidal_table(max_len, d_model),),
     r"got tuple of length 1: return the tensor itself, not a tuple"),
    (check_attention, attention_without_a_mask_parameter,
     r"takes 3 positional arguments but 4 were given\nHint: the check calls "
     r"attention_without_a_mask_parameter\(query, key, value, mask\) here"),
    (check_split_heads, split_reading_a_missing_key,
     r"^split_reading_a_missing_key\(tensor of shape \(2, 3, 30\), 5\) raised KeyError: 'length'\n"
     r"  in split_reading_a_missing_key, line \d+: return x\.view\(sizes\[\"batch\"\]"),
    (check_split_heads, split_that_exits, r"(?s)raised SystemExit: 1.*exit\(\) and sys\.exit\(\) stop"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


def all_wrong_answers():
    """WRONG_ANSWERS of this file and of every tests/test_exercises_NN_<name>.py."""
    found = list(WRONG_ANSWERS)
    for path in sorted(Path(__file__).parent.glob("test_exercises_*.py")):
        found += importlib.import_module(path.stem).WRONG_ANSWERS
    return found


def test_every_check_has_typical_wrong_answers():
    assert {check.__name__ for check, _, _ in all_wrong_answers()} == CHECKS


def test_an_unknown_mistake_still_fails_with_the_differences():
    def noisy(query, key, value, mask=None):
        out, weights = scaled_dot_product_attention(query, key, value, mask)
        return out + 0.1, weights
    message = r"mismatch in the output weights @ value \(no mask\), compared with the reference"
    with pytest.raises(ExerciseFailed, match=message):
        check_attention(noisy)


@pytest.mark.parametrize("check", sorted(grading.SIZE_SETS))
def test_the_sizes_of_a_check_all_differ_so_hard_coded_sizes_fail(check):
    def flat(sizes):  # lead=(batch, h) counts as two sizes
        names = ["batch", "h"][: len(sizes.get("lead", ()))]
        return {**dict(zip(names, sizes.get("lead", ()))), **{k: v for k, v in sizes.items() if k != "lead"}}
    sets = [flat(s) for s in grading.SIZE_SETS[check]]
    assert len(sets) >= 2
    for sizes in sets:
        assert sizes.get("d_k") != 4
        assert len(set(sizes.values())) == len(sizes), f"two sizes are equal in {sizes}"
    for name in {k for s in sets for k in s}:
        values = [s[name] for s in sets if name in s]
        assert len(set(values)) == len(values), f"{name} repeats across the sets: {values}"


def test_every_check_runs_several_sizes_or_says_why_its_inputs_are_fixed():
    fixed = {}
    for name in grading.MODULES:
        fixed.update(getattr(importlib.import_module(f"annotated.support.grading.{name}"), "FIXED_INPUTS", {}))
    assert not set(fixed) & set(grading.SIZE_SETS), "a check is both fixed and sized"
    assert set(fixed) | set(grading.SIZE_SETS) == CHECKS
    assert all(len(why) > 20 for why in fixed.values()), fixed


def test_check_attention_gives_masks_as_many_dimensions_as_the_scores_and_a_4d_case():
    seen = []

    def spy(query, key, value, mask=None):
        seen.append((query.dim(), None if mask is None else mask.dim()))
        return scaled_dot_product_attention(query, key, value, mask)

    with contextlib.redirect_stdout(io.StringIO()):
        check_attention(spy)
    assert {q for q, _ in seen} == {3, 4}
    assert all(m is None or m == q for q, m in seen), seen
    assert sum(m is not None for _, m in seen) >= 8


def test_key_dot_T_is_named_even_when_its_shapes_happen_to_fit():
    # batch == d_k: key.T, (d_k, L_k, batch), multiplies without an error and pairs wrong numbers.
    q, k, v = torch.randn(3, 2, 3), torch.randn(3, 4, 3), torch.randn(3, 4, 5)
    with pytest.raises(ExerciseFailed, match=r"\.T on a tensor with more than two dimensions"):
        _call_attention(_attention(transpose="T"), q, k, v)
    _call_attention(scaled_dot_product_attention, q, k, v)  # no .T, no complaint


@pytest.mark.parametrize("check, given, named", [
    (check_attention, None, r"None \(the result of calling a function that returns nothing\?\)"),
    (check_attention, torch.zeros(2, 3), r"a Tensor of shape \(2, 3\) \(the result of calling"),
    (check_split_heads, "split_heads", r"the string 'split_heads'"),
    (check_merge_heads, (torch.zeros(1),), r"a tuple of 1 items"),
    (check_sinusoidal_table, 16, r"an int"),
], ids=["None", "tensor", "string", "tuple", "int"])
def test_a_check_given_something_else_than_a_function_says_to_pass_the_function(check, given, named):
    expected = f"{check.__name__} takes your function itself.*got {named}.*{check.__name__}\\("
    with pytest.raises(ExerciseFailed, match=expected):
        check(given)


def test_a_change_of_layout_only_is_named_as_an_in_place_change():
    def transpose_in_place(x):
        return x.t_()  # same shape (square), other strides
    x = torch.arange(9.0).view(3, 3)
    with pytest.raises(ExerciseFailed, match=r"`x` in place: its layout in memory changed"):
        _call(transpose_in_place, x)


def test_an_exception_after_an_in_place_change_names_both():
    def scale_then_fail(x, h):
        x.mul_(2)
        raise ValueError("not yet")
    with pytest.raises(ExerciseFailed, match=r"(?s)raised ValueError: not yet.*\nBefore that, "
                       r"scale_then_fail changed its first argument `x` in place"):
        check_split_heads(scale_then_fail)


def test_a_failed_check_is_a_course_error_shown_in_a_notebook_as_its_message_only():
    assert issubclass(ExerciseFailed, CourseError) and issubclass(ExerciseFailed, AssertionError)
    with pytest.raises(ExerciseFailed) as caught:
        check_split_heads(split_reading_a_missing_key)
    # IPython shows the lines of _render_traceback_ instead of the traceback (the check's frames).
    lines = caught.value._render_traceback_()
    assert lines[0].startswith("ExerciseFailed: split_reading_a_missing_key(")
    assert "\n".join(lines) == f"ExerciseFailed: {caught.value}"
    assert caught.value.__cause__.__class__ is KeyError  # kept, for a debugger


def test_regenerating_the_exercises_keeps_one_a_student_has_written_in(tmp_path, monkeypatch, capsys):
    import shutil

    import annotated.support.exercises as exercises

    solution = sorted(SOLUTIONS.glob("*.ipynb"))[0]
    (tmp_path / "solutions").mkdir()
    shutil.copy(solution, tmp_path / "solutions" / solution.name)
    monkeypatch.setattr(exercises, "ROOT", tmp_path)
    monkeypatch.setattr(exercises, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(exercises, "EXERCISES", tmp_path / "exercises")
    assert exercises.main([]) == 0  # a new exercise notebook is written
    target = tmp_path / "exercises" / solution.name
    answered = nbformat.read(target, as_version=4)
    answered.cells[-1].source += "\n# my answer"
    nbformat.write(answered, target)
    assert exercises.main([]) == 1
    assert "was kept" in capsys.readouterr().err
    assert "# my answer" in target.read_text()
    assert exercises.main(["--overwrite"]) == 0
    assert "# my answer" not in target.read_text()


def test_running_a_notebook_that_is_not_there_is_a_usage_error(capsys):
    from annotated.support.notebooks import main as run_notebooks

    with pytest.raises(SystemExit) as exit_:
        run_notebooks(["no/such/notebook.ipynb"])
    assert exit_.value.code == 2 and "is not a notebook file" in capsys.readouterr().err


def test_an_earlier_exercise_left_undone_is_named_when_a_later_one_calls_it():
    def earlier(x, h):
        raise NotImplementedError()

    def later(x, h):
        return earlier(x, h)

    with pytest.raises(ExerciseFailed, match=r"^later calls earlier, which raised NotImplementedError: "
                                              r"that earlier exercise is not done yet"):
        check_split_heads(later)
    with pytest.raises(ExerciseFailed, match=r"^earlier raised NotImplementedError: the exercise is not done"):
        check_split_heads(earlier)


@pytest.mark.parametrize("notebook", TAUGHT, ids=lambda p: p.stem)
def test_every_notebook_ends_by_linking_its_exercises_and_lists_each_of_them(notebook):
    last = nbformat.read(notebook, as_version=4).cells[-1]
    assert last.cell_type == "markdown" and last.source.startswith("## Exercises"), notebook.name
    assert f"(../exercises/{notebook.name})" in last.source and f"(../solutions/{notebook.name})" in last.source
    headings = [c.source.split("\n", 1)[0][3:].split(":")[0]
                for c in nbformat.read(SOLUTIONS / notebook.name, as_version=4).cells
                if c.cell_type == "markdown" and c.source.startswith("## Exercise ")]
    listed = re.findall(r"^- (Exercise \d+\.\d+):", last.source, flags=re.M)
    assert listed == headings


def test_the_readme_names_every_check():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert [c for c in sorted(CHECKS) if f"`{c}`" not in readme] == []


def test_every_check_rejects_an_unfinished_answer_and_one_with_a_size_written_into_it():
    answers = all_wrong_answers()
    for check in sorted(CHECKS):
        messages = [m for c, _, m in answers if c.__name__ == check]
        assert any("NotImplementedError" in m or "not done" in m for m in messages), check
        assert any(re.search(r"written|passed with", m) for m in messages), check


def test_a_module_argument_is_named_by_its_class_when_its_repr_is_long():
    from annotated.support.grading.core import _describe

    big = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU())
    assert _describe((big, torch.zeros(2, 5), torch.nn.ReLU(), 3)) == (
        "a Sequential module, tensor of shape (2, 5), ReLU(), 3")
