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
from annotated.support.grading.engine import Declaration, Failure, Items, Mistake, Probe, Tensor, Value
from tests.test_declarations import judged_from_record


def _both(decl, fn, tmp_path):
    """The notebook's verdict (None or the failure's message) and the grader's, which must agree."""
    try:
        engine.run(decl, fn, "meta")
        mine = None
    except Failure as failure:
        mine = str(failure)
    verdict = judged_from_record(decl, fn, tmp_path)
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


# ---------------------------------------------------------------- lists and dicts changed in place


def _merged(counts, pair):
    """A dict keyed by tuples of symbols, as BPE's corpus is."""
    out = {}
    for symbols, n in counts.items():
        out[tuple(s.replace(" ", "") for s in symbols)] = n
    return {k: v * pair for k, v in out.items()}


IN_PLACE = Declaration(
    check="check_sorted_copy", function="sorted_copy", roles=("xs",), reference=sorted,
    probes=lambda device: [Probe(([1, 7, 8, 2],), "{what} of {name}([1, 7, 8, 2])")],
    returns=Value("the sorted list", kind="list"))
TUPLE_KEYS = Declaration(
    check="check_merged", function="merged", roles=("counts", "pair"), reference=_merged,
    probes=lambda device: [Probe(({("l", "o"): 3, ("w",): 1}, 2), "{what} of {name}(counts, 2)")],
    returns=Value("the corpus", kind="dict"))


def _sort_in_place(xs):
    xs.sort()
    return xs


def _pop(counts, pair):
    counts.pop(("w",))
    return _merged(counts, pair) | {("w",): 2}


@pytest.mark.parametrize("decl, fn, message", [
    (IN_PLACE, sorted, None),
    (IN_PLACE, _sort_in_place, r"^_sort_in_place changed its first argument `xs` in place \(now \[1, 2, 7, 8\]\)\. A function must not "
                               r"change its inputs: .*Work on a copy: list\(x\), dict\(x\), sorted\(x\)"),
    (IN_PLACE, lambda xs: xs.append(0) or sorted(xs[:-1]), r"changed its first argument `xs` in place \(now \[1, 7, 8, 2, 0\]\)"),
    (TUPLE_KEYS, _merged, None),
    (TUPLE_KEYS, lambda counts, pair: {k: v * pair + 1 for k, v in counts.items()},
     r"mismatch in the corpus .*: 7 instead of 6 at \[\('l', 'o'\)\]"),
    (TUPLE_KEYS, _pop, r"changed its first argument `counts` in place \(now \{\('l', 'o'\): 3\}\)"),
])
def test_a_list_or_dict_argument_changed_in_place_is_named_with_what_it_became(decl, fn, message, tmp_path):
    got = _both(decl, fn, tmp_path)
    if message is None:
        assert got is None
    else:
        assert got is not None and __import__("re").search(message, got), got


def test_a_dict_keyed_by_tuples_of_symbols_is_a_plain_value():
    found = record.describe({("l", "o", "w</w>"): 5, ("a",): 1})
    assert found["kind"] == "value" and found["value"] == {("l", "o", "w</w>"): 5, ("a",): 1}
    assert record.describe({(torch.tensor(1),): 1})["kind"] == "object"


# ---------------------------------------------------------------- sets


REJECTED = Declaration(
    check="check_small", function="small", roles=("p_values",),
    reference=lambda p_values: {k for k, p in p_values.items() if p < 0.05},
    probes=lambda device: [Probe(({"A1": 0.01, ("B8", "BLEU"): 0.02, "E": 0.5},), "{what} of {name}(p_values)")],
    returns=Value("the names", kind="set"))


@pytest.mark.parametrize("fn, message", [
    (lambda p_values: {k for k, p in p_values.items() if p < 0.05}, None),
    (lambda p_values: frozenset(k for k, p in p_values.items() if p < 0.05), None),
    (lambda p_values: {k for k, p in p_values.items() if p < 0.015}, r"mismatch in the names .*\{'A1'\} instead of"),
    (lambda p_values: [k for k, p in p_values.items() if p < 0.05], r"should return the names as a set, got a list"),
])
def test_a_set_travels_as_its_sorted_items_and_is_compared_as_a_set(fn, message, tmp_path):
    got = _both(REJECTED, fn, tmp_path)
    assert (got is None) if message is None else (got is not None and __import__("re").search(message, got)), got


def test_a_set_is_described_as_its_items_sorted():
    found = record.describe({"b", ("a", "x"), "a"})
    assert (found["kind"], found["type"], found["length"]) == ("value", "set", 3)
    assert found["value"] == sorted(["b", ("a", "x"), "a"], key=repr)


# ---------------------------------------------------------------- modules with tied weights


def test_a_built_module_with_tied_weights_arrives_tied_and_computes_the_same(tmp_path):
    model = record.build("annotated.support.grading.training._teacher_model", sizes={"vocab": 11})
    assert model.generator.proj.weight is model.tgt_embed[0].lut.weight
    torch.save({"model": record.encode(model)}, tmp_path / "plan.pt")
    again = record.decode(torch.load(tmp_path / "plan.pt", weights_only=True)["model"])
    assert again.generator.proj.weight is again.tgt_embed[0].lut.weight  # one tensor, as in the original
    assert [n for n, _ in again.named_parameters()] == [n for n, _ in model.named_parameters()]
    for (n, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), n
    src = torch.tensor([[1, 4, 5, 2]])
    with torch.no_grad():
        assert torch.equal(model.encode(src, None), again.encode(src, None))


# ---------------------------------------------------------------- integer tensors made from numbers


def _counts(dtypes):
    return Declaration(
        check="check_counts", function="counts", roles=("x",), reference=lambda x: (x > 0).sum(-1),
        probes=lambda device: [Probe((torch.tensor([[1.0, -2.0, 3.0], [-1.0, -1.0, 4.0]]),), "{what} of {name}(x)")],
        returns=Tensor("the counts", dtype="ids", like=None, dtypes=dtypes))


@pytest.mark.parametrize("dtypes, fn, message", [
    (("integer",), lambda x: (x > 0).sum(-1), None),
    (("integer",), lambda x: (x > 0).sum(-1).int(), None),
    (("integer",), lambda x: (x > 0).sum(-1).float(), r"as torch\.float32; expected an integer tensor"),
    (("integer",), lambda x: (x > 0).sum(-1) > 0, r"as torch\.bool; expected an integer tensor"),
    (("int64",), lambda x: (x > 0).sum(-1).int(), r"as torch\.int32; expected torch\.int64"),
    (("int64",), lambda x: (x > 0).sum(-1) + 1, r"mismatch in the counts"),
])
def test_an_integer_tensor_without_an_integer_argument_takes_the_dtypes_allowed(dtypes, fn, message, tmp_path):
    got = _both(_counts(dtypes), fn, tmp_path)
    assert (got is None) if message is None else (got is not None and __import__("re").search(message, got)), got


# ---------------------------------------------------------------- several calls judged together


def _rate_with_max(step, d_model, warmup):
    step = max(step, 1)
    return d_model ** -0.5 * max(step ** -0.5, step * warmup ** -1.5)


def _rate_dividing_by_zero(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("fn, verdict, message", [
    (None, "passed", ""),
    (_rate_with_max, "failed", r"^max instead of min"),  # the whole curve: before the peak it is 'no warm-up'
    (_rate_dividing_by_zero, "failed", r"^_rate_dividing_by_zero\(0, d_model=512, warmup=4000\) raised "
                                       r"ZeroDivisionError"),
    (lambda step, d_model, warmup: torch.tensor(0.1), "failed", r"returned a tensor; return a Python float"),
])
def test_a_probe_of_several_calls_is_judged_as_one_curve_in_the_notebook_and_by_the_grader(fn, verdict, message,
                                                                                          tmp_path):
    from annotated.support.grading.training import RATE

    fn = fn or RATE.reference
    got = judged_from_record(RATE, fn, tmp_path)
    assert got.verdict == verdict and __import__("re").search(message, got.diagnosis), got
    assert (_both(RATE, fn, tmp_path) or "") == got.diagnosis


# ---------------------------------------------------------------- a result read as the exercise allows


def _read_pair(found):
    """(name, score) from a plain pair or one whose score is a 0-d tensor; None for anything else."""
    items = found.get("items") or [record.describe(v) for v in found.get("value") or []]
    if found["kind"] not in ("value", "sequence") or len(items) != 2 or items[0]["kind"] != "value":
        return None
    score = items[1]
    number = score["values"].item() if score["kind"] == "tensor" and score["values"].numel() == 1 else (
        score.get("value") if score["kind"] == "value" else None)
    return None if not isinstance(number, float) else (items[0]["value"], number)


BEST = Declaration(
    check="check_best", function="best", roles=("scores",), reference=lambda scores: max(scores.items(),
                                                                                        key=lambda kv: kv[1]),
    probes=lambda device: [Probe(({"a": 0.5, "b": 2.5},), "{what} of {name}(scores)")],
    returns=Value("the best pair", kind="tuple", precision=(0.0, 1e-6), read=_read_pair,
                  other=lambda found, name, what: f"{name} should return a pair (name, score), got {found['type']}"))


@pytest.mark.parametrize("fn, message", [
    (lambda scores: max(scores.items(), key=lambda kv: kv[1]), None),
    (lambda scores: ["b", torch.tensor(2.5, dtype=torch.float64)], None),  # a list, a 0-d tensor: read as a pair
    (lambda scores: ("b", torch.tensor(2.0)), r"mismatch in the best pair .*: 2\.0 instead of 2\.5"),
    (lambda scores: {"b": 2.5}, r"should return a pair \(name, score\), got dict"),
])
def test_a_value_read_as_the_exercise_allows_takes_0d_tensors_in_lists(fn, message, tmp_path):
    got = _both(BEST, fn, tmp_path)
    assert (got is None) if message is None else (got is not None and __import__("re").search(message, got)), got


# ---------------------------------------------------------------- a mistake tried on right results too


def _counted(x, counter):
    counter(x)
    return x * 2


def _counted_twice(x, counter):
    counter(x)
    counter(x)
    return x * 2


COUNTED = Declaration(
    check="check_counted", function="counted", roles=("x", "counter"), reference=_counted,
    probes=lambda device: [Probe((torch.ones(3), record.build("annotated.support.grading.sublayers._FixedDropout",
                                                                p=0.0, seed=0).eval()), "{what} of {name}(x)")],
    returns=Tensor("the doubled tensor"),
    mistakes=(Mistake("", "the counter called twice", stage="always", example=_counted_twice,
                      find=lambda found, p: "you called the counter twice" if len(
                          found["calls"][1]["value"] if found["calls"][1]["kind"] == "value" else
                          found["calls"][1]["items"]) > 1 else None),))


@pytest.mark.parametrize("fn, message", [
    (_counted, None),
    (_counted_twice, r"^you called the counter twice$"),  # a right result, named from the calls
    (lambda x, counter: x * 3, r"mismatch in the doubled tensor"),
])
def test_an_always_mistake_names_a_right_result_from_what_an_argument_kept_of_its_calls(fn, message, tmp_path):
    got = _both(COUNTED, fn, tmp_path)
    assert (got is None) if message is None else (got is not None and __import__("re").search(message, got)), got


# ---------------------------------------------------------------- calls chained on one dict they fill


def _push(x, store):
    store["seen"] = torch.cat([store["seen"], x]) if "seen" in store else x
    return store["seen"].sum()


def _push_replacing(x, store):
    store["seen"] = x
    return x.sum()


def _push_forgetting(x, store):
    return x.sum()


CHAINED = Declaration(
    check="check_push", function="push", roles=("x", "store"), reference=_push,
    probes=lambda device: [Probe(tuple((torch.tensor([float(i)]), {}) for i in range(1, t + 1)),
                                 f"{{what}} of {{name}} at call {t}", each=True, chain=1, fills=(1, ("seen",)))
                           for t in (1, 3)],
    returns=Items((Tensor("the total"), Tensor("store['seen']", other=lambda found, name, what: (
        f"{what} is missing: the dict holds {found['value']['holds']}" if found["kind"] == "value" else None))),
        what="the total and what it stored"))


@pytest.mark.parametrize("fn, message", [
    (_push, None),
    (_push_replacing, r"wrong shape for store\['seen'\] of _push_replacing at call 3: expected \(3,\), got \(1,\)"),
    (_push_forgetting, r"^store\['seen'\] is missing: the dict holds \[\]$"),
])
def test_chained_calls_share_one_dict_and_what_they_leave_in_it_is_judged(fn, message, tmp_path):
    got = _both(CHAINED, fn, tmp_path)
    assert (got is None) if message is None else (got is not None and __import__("re").search(message, got)), got
