"""The engine's contracts added for the later chapters (annotated.support.grading.engine and
annotated.support.record), on small declarations of this file's own, in the notebook and through the
grader's record: NumPy numbers where an exercise accepts them, arguments changed in place that are
plain values, sets, integer tensors of allowed dtypes, modules with tied weights, probes judged
together."""

import numpy as np
import pytest
import torch

from annotated.support import record
from annotated.support.grading import engine
from annotated.support.grading.engine import Declaration, Failure, Probe, Value


def _graded(decl, fn, tmp_path):
    probes, plan = engine.plan(decl)
    torch.save(plan, tmp_path / "plan.pt")
    record.record_file({decl.function: fn}, decl.function, str(tmp_path / "plan.pt"), str(tmp_path / "out.pt"))
    return engine.judge_record(decl, probes, torch.load(tmp_path / "out.pt", weights_only=True))


def _both(decl, fn, tmp_path):
    """The notebook's verdict (None or the failure's message) and the grader's, which must agree."""
    try:
        engine.run(decl, fn, "meta")
        mine = None
    except Failure as failure:
        mine = str(failure)
    verdict = _graded(decl, fn, tmp_path)
    assert (verdict.verdict == "passed") == (mine is None), (mine, verdict)
    assert mine is None or verdict.diagnosis == mine
    return mine


# ---------------------------------------------------------------- NumPy numbers


def _sum(xs):
    return sum(xs)


def _numbers(kind, numpy):
    return Declaration(
        check="check_total", function="total", roles=("xs",), reference=lambda xs: {"int": int, "float": float}[kind](
            sum(xs)),
        probes=lambda device: [Probe(([1, 2, 4],), "{what} of {name}([1, 2, 4])")],
        returns=Value("the total", kind=kind, numpy=numpy))


@pytest.mark.parametrize("kind, numpy, fn, message", [
    ("int", True, lambda xs: np.int64(sum(xs)), None),
    ("int", True, lambda xs: np.int32(sum(xs)), None),
    ("int", True, lambda xs: np.float32(sum(xs)), r"as an int \(a whole number\), got a float32"),
    ("int", True, lambda xs: np.float64(sum(xs)), r"as an int \(a whole number\), got a float, 7\.0"),
    ("int", True, lambda xs: torch.tensor(sum(xs)), r"as an int \(a whole number\), got a tensor of shape \(\)"),
    ("int", True, lambda xs: np.int64(sum(xs) + 1), r"mismatch in the total .*: 8 instead of 7"),
    ("int", False, lambda xs: np.int64(sum(xs)), r"got an int64: return a Python int, int\(\.\.\.\) of it"),
    ("float", True, lambda xs: np.float32(sum(xs)), None),
    ("float", True, lambda xs: np.int64(sum(xs)), r"as a float, got an int64"),
    ("float", True, lambda xs: torch.tensor(float(sum(xs))), r"as a float, got a tensor of shape \(\)"),
    ("float", False, lambda xs: np.float32(sum(xs)), r"as a float, got a float32"),
])
def test_a_numpy_number_of_the_kind_passes_where_the_exercise_allows_it_and_a_tensor_does_not(
        kind, numpy, fn, message, tmp_path):
    got = _both(_numbers(kind, numpy), fn, tmp_path)
    if message is None:
        assert got is None
    else:
        assert got is not None and __import__("re").search(message, got), got
