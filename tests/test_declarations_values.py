"""The declared checks (annotated.support.grading.engine) on results that are plain values
(engine.Value: numbers, bools, strings, lists, tuples and dicts of them), on small declarations
of this file's own: the engine names a wrong type, compares exactly (floats within a precision,
NaN equal to NaN), finds the known mistakes on them, and the grader's record carries them as
data that torch.load(weights_only=True) reads back."""

import functools
import io
import math
import re

import numpy as np
import pytest
import torch

from annotated.support import record
from annotated.support.grading import engine
from annotated.support.grading.engine import Declaration, Failure, Items, Mistake, Probe, Tensor, Value
from tests.test_declarations import judged_from_record


def _rate(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


RATE = Declaration(
    check="check_rate", function="rate", roles=("step", "d_model", "warmup"), reference=_rate,
    probes=lambda device: [Probe((s, d, w), f"{{what}} of {{name}}(step={s}, d_model={d}, warmup={w})",
                                 sizes=dict(d_model=d))
                           for s, d, w in [(1, 512, 4000), (100, 512, 4000), (50, 64, 10)]],
    returns=Value("the learning rate", kind="float", precision=1e-12),
    mistakes=(Mistake("the factor d_model ** -0.5 is missing", "no d_model factor",
                      like=lambda s, d, w: min(s ** -0.5, s * w ** -1.5)),),
    passed="check_rate passed: {name}")


def _split(text, lower):
    return (text.lower() if lower else text).split()


def _vocabulary(words):
    counts = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    return counts


_TEXT = " ".join(f"Word{i % 17} the" for i in range(60))  # 120 tokens, 1,000 characters or so
SPLIT = Declaration(
    check="check_split", function="split", roles=("text", "lower"), reference=_split,
    probes=lambda device: [Probe((_TEXT, False), "{what} of {name}(text, lower=False)"),
                           Probe((_TEXT, True), "{what} of {name}(text, lower=True)", again=("b a", True))],
    returns=Value("the tokens", kind="list"),
    mistakes=(Mistake("the lower flag is ignored", "lower ignored", like=lambda text, lower: text.split()),),
)
VOCABULARY = Declaration(
    check="check_vocabulary", function="vocabulary", roles=("words",), reference=_vocabulary,
    probes=lambda device: [Probe((_TEXT.split(),), "{what} of {name}(120 words)")],
    returns=Value("the counts", kind="dict"),
    mistakes=(Mistake("you counted the words lowercased", "lowercased",
                      like=lambda words: _vocabulary([w.lower() for w in words])),),
)


def _statistic(x):
    n = len(x)
    mean = sum(x) / n
    return mean, (float("nan") if n < 2 else sum((v - mean) ** 2 for v in x) / (n - 1))


PAIR = Declaration(
    check="check_pair", function="pair", roles=("x",), reference=_statistic,
    probes=lambda device: [Probe(([1.0, 2.0, 4.0],), "{what} of {name}([1.0, 2.0, 4.0])"),
                           Probe(([3.0],), "{what} of {name}([3.0])")],
    returns=Items((Value("the mean"), Value("the variance", precision=1e-9)), what="the pair (mean, variance)"),
    mistakes=(Mistake("the variance divides by n, not n - 1", "population variance", items=(1,),
                      like=lambda x: (sum(x) / len(x), sum((v - sum(x) / len(x)) ** 2 for v in x) / len(x))),),
)
COUNT = Declaration(
    check="check_count", function="count", roles=("mask",), reference=lambda mask: int(mask.sum()),
    probes=lambda device: [Probe((torch.tensor([True, False, True]),), "{what} of {name}(mask of 3)")],
    returns=Value("the count", kind="int", numbers=True),
)
OURS = (RATE, SPLIT, VOCABULARY, PAIR, COUNT)


@pytest.mark.parametrize("decl", OURS, ids=lambda d: d.check)
def test_a_plain_reference_passes_in_the_notebook_and_through_the_graders_record(decl, tmp_path):
    engine.run(decl, decl.reference, "meta")
    probes, plan = engine.plan(decl)
    torch.save(plan, tmp_path / "plan.pt")
    record.record_file({decl.function: decl.reference}, decl.function, str(tmp_path / "plan.pt"),
                       str(tmp_path / "out.pt"))
    verdict = engine.judge_record(decl, probes, torch.load(tmp_path / "out.pt", weights_only=True))
    assert verdict.verdict == "passed", verdict.diagnosis


@pytest.mark.parametrize("decl", [d for d in OURS if d.mistakes], ids=lambda d: d.check)
def test_a_known_mistake_on_a_plain_value_is_found_in_the_notebook_and_by_the_grader(decl, tmp_path):
    mistake = decl.mistakes[0]
    with pytest.raises(Failure) as caught:
        engine.run(decl, mistake.like)
    assert caught.value.mistake is mistake and str(caught.value) == mistake.message
    probes, plan = engine.plan(decl)
    torch.save(plan, tmp_path / "plan.pt")
    record.record_file({decl.function: mistake.like}, decl.function, str(tmp_path / "plan.pt"),
                       str(tmp_path / "out.pt"))
    verdict = engine.judge_record(decl, probes, torch.load(tmp_path / "out.pt", weights_only=True))
    assert (verdict.verdict, verdict.diagnosis, verdict.mistake) == ("failed", mistake.message, mistake.name)


_KEPT: list = []


def _kept(text, lower):
    _KEPT[:] = _split(text, lower)
    return _KEPT


@pytest.mark.parametrize("decl, wrong, message", [
    (RATE, lambda s, d, w: torch.tensor(_rate(s, d, w)),
     r"^<lambda> should return the learning rate as a float, got a tensor of shape \(\): return a Python float, "
     r"the tensor's \.item\(\)$"),
    (RATE, lambda s, d, w: np.float32(_rate(s, d, w)), r"as a float, got a float32: return a Python float, float"),
    (RATE, lambda s, d, w: 0, r"as a float, got an int \(a whole number\), 0: convert it, float\(\.\.\.\)$"),
    (RATE, lambda s, d, w: None, r"returned None: did you forget the `return` of the learning rate\?"),
    (RATE, lambda s, d, w: _rate(s, d, w) * (1 + 1e-6),
     r"(?s)^mismatch in the learning rate of <lambda>\(step=100, d_model=512, warmup=4000\): 1\.74692985.* "
     r"instead of 1\.7469281.* \(more than 1e-12 apart\)\.\n  yours:    1\.7469298.*\n  expected: 1\.746928"),
    (SPLIT, lambda text, lower: " ".join(_split(text, lower)),
     r"should return the tokens as a list, got a string, 'Word0 the"),
    (SPLIT, lambda text, lower: _split(text, lower)[:-1], r"mismatch in the tokens of .*: 119 items instead of 120"),
    (SPLIT, lambda text, lower: _split(text, lower)[:-1] + ["The"],
     r"(?s)'The' instead of 'the' at \[119\]\.\n  yours:    \['Word0', 'the', .* \(\d+ characters\)\n  expected"),
    (SPLIT, _kept, r"a second call of _kept, on other inputs, changed the tokens that the first call had "
                   r"returned, from \['word0', .* to \['b', 'a'\]: your function returns a list it keeps"),
    (VOCABULARY, lambda words: {**_vocabulary(words), "extra": 1},
     r"0 key\(s\) missing \(\[\]\) and 1 key\(s\) not in the expected dict \(\['extra'\]\)"),
    (VOCABULARY, lambda words: {k: float(v) for k, v in _vocabulary(words).items()},
     r"a float \(4\.0\) instead of an int \(4\) at \['Word0'\]"),
    (VOCABULARY, lambda words: list(_vocabulary(words).items()), r"as a dict, got a list, \[\('Word0', 4\)"),
    (PAIR, lambda x: sum(x) / len(x), r"should return the pair \(mean, variance\), got float"),
    (PAIR, lambda x: (sum(x) / len(x), torch.tensor(1.0)), r"as a float, got a tensor of shape \(\)"),
    (PAIR, lambda x: (sum(x) / len(x), _statistic(x)[1] + 1e-8), r"mismatch in the variance of <lambda>\(\[1\.0"),
    (PAIR, lambda x: (sum(x) / len(x), _statistic(x)[1] if len(x) > 1 else -1.0),
     r"mismatch in the variance of <lambda>\(\[3\.0\]\): -1\.0 instead of nan"),
    (COUNT, lambda mask: mask.sum().float(), r"as an int \(a whole number\), got a tensor "
     r"of shape \(\): return a Python int, int\(t\.item\(\)\) of the tensor t$"),
    (COUNT, lambda mask: int(mask.sum()) + 1, r"mismatch in the count of .*: 3 instead of 2"),
])
def test_the_engine_names_a_wrong_plain_value(decl, wrong, message):
    with pytest.raises(Failure, match=message):
        engine.run(decl, wrong)


def test_nan_equals_nan_and_a_number_read_from_a_tensor_passes_where_the_exercise_allows_it():
    engine.run(PAIR, lambda x: tuple(_statistic(x)))  # NaN for one number, as the reference
    engine.run(COUNT, lambda mask: mask.sum())        # a 0-d integer tensor: numbers=True
    engine.run(RATE, lambda s, d, w: np.float64(_rate(s, d, w)))  # a float subclass is a float


def test_a_plain_result_is_data_with_all_its_items_and_a_cap():
    found = record.describe({"a": [1, 2.5, "x" * 300, None, (True,)], 3: list(range(100))})
    assert found["kind"] == "value" and found["value"][3] == list(range(100)) and len(found["value"]["a"][2]) == 300
    buffer = io.BytesIO()
    torch.save(found, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True) == found
    huge = record.describe(list(range(record.MAX_PLAIN + 1)))
    assert huge["kind"] == "sequence" and len(huge["items"]) == 32 and huge["length"] == record.MAX_PLAIN + 1
    assert record.describe([torch.ones(1), 1.0])["kind"] == "sequence"  # a tensor inside: as before
    assert record.describe(np.float32(0.5)) == {"kind": "object", "type": "float32", "module": "numpy", "value": 0.5}
    assert math.isnan(record.describe(float("nan"))["value"])


def test_a_dict_argument_travels_to_the_kernel_as_data():
    arg = {"pad": 0, "tokens": [torch.arange(3), "x"], 2: None}
    sent = record.encode(arg)
    buffer = io.BytesIO()
    torch.save(sent, buffer)
    buffer.seek(0)
    back = record.decode(torch.load(buffer, weights_only=True))
    assert back.keys() == arg.keys() and torch.equal(back["tokens"][0], arg["tokens"][0])
    assert back["tokens"][1] == "x" and back["pad"] == 0 and back[2] is None


def test_a_tensor_contract_still_names_a_plain_list_or_number():
    decl = Declaration(check="check_t", function="t", roles=("x",), reference=lambda x: x * 2,
                       probes=lambda device: [Probe((torch.ones(2),), "{what} of {name}")],
                       returns=Tensor("the doubled tensor"))
    with pytest.raises(Failure, match=r"as a tensor, got a list of 2 numbers: return them as one tensor, torch\.stack"):
        engine.run(decl, lambda x: (x * 2).tolist())
    with pytest.raises(Failure, match=r"got float: keep to torch operations"):
        engine.run(decl, lambda x: 2.0)


# ---------------------------------------------------------------- modules and functions as arguments


def _layer(in_features, out_features, dtype=torch.float32):
    layer = record.build("torch.nn.Linear", in_features=in_features, out_features=out_features)
    return layer.to(dtype)


def _apply_probes(device):
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    return [Probe((_layer(4, 2), x), "{what} of {name}(Linear(4, 2), x of shape (3, 4))", sizes=dict(n=4)),
            Probe((_layer(5, 3).double(), torch.randn(2, 5).double()), "{what} of {name}(Linear(5, 3), float64 x)",
                  grad=(0, 1), sizes=dict(n=5)),
            Probe((_layer(4, 2).eval(), x), "{what} of {name}(Linear(4, 2) in evaluation mode, x)", grad=(0,))]


APPLY = Declaration(check="check_apply", function="apply", roles=("layer", "x"), reference=lambda layer, x: layer(x),
                    probes=_apply_probes, returns=Tensor("the output", like=1),
                    mistakes=(Mistake("the bias is missing", "no bias", like=lambda layer, x: x @ layer.weight.T),))
TWICE = Declaration(
    check="check_twice", function="twice", roles=("f", "x"), reference=lambda f, x: f(f(x)),
    probes=lambda device: [Probe((torch.tanh, torch.linspace(-2, 2, 5)), "{what} of {name}(tanh, x)"),
                           Probe((functools.partial(torch.clamp, min=0.5), torch.linspace(-2, 2, 5)),
                                 "{what} of {name}(clamp at 0.5, x)")],
    returns=Tensor("the result", like=1),
    mistakes=(Mistake("you applied f once", "once", like=lambda f, x: f(x)),))


@pytest.mark.parametrize("decl", [APPLY, TWICE], ids=lambda d: d.check)
def test_module_and_function_arguments_travel_as_data_and_the_reference_passes(decl, tmp_path):
    engine.run(decl, decl.reference)
    assert judged_from_record(decl, decl.reference, tmp_path).verdict == "passed"
    wrong = decl.mistakes[0].like
    verdict = judged_from_record(decl, wrong, tmp_path)
    assert verdict.mistake == decl.mistakes[0].name
    with pytest.raises(Failure) as caught:
        engine.run(decl, wrong)
    assert str(caught.value) == verdict.diagnosis


def _cut(layer, x):
    return torch.nn.functional.linear(x, layer.weight, layer.bias.detach())


def _switched(layer, x):
    layer.train()
    return layer(x)


@pytest.mark.parametrize("wrong, message", [
    (_cut, r"no gradient reaches the layer's bias through the output of _cut"),
    (lambda layer, x: layer(x) + 0 * layer.weight.sum() + layer.bias.detach() - layer.bias.detach(),
     r"^$|passed"),
    (_switched, r"_switched switched layer from evaluation mode to training mode"),
])
def test_a_module_arguments_gradients_and_mode_are_judged_in_the_notebook_and_by_the_grader(wrong, message,
                                                                                             tmp_path):
    verdict = judged_from_record(APPLY, wrong, tmp_path)
    if message == r"^$|passed":  # the same gradients by another way: passes
        assert verdict.verdict == "passed", verdict.diagnosis
        return
    assert re.search(message, verdict.diagnosis), verdict.diagnosis
    with pytest.raises(Failure, match=message):
        engine.run(APPLY, wrong)


def test_a_module_argument_is_built_again_with_its_numbers_dtype_flags_and_mode():
    layer = _layer(3, 2).double().eval()
    layer.bias.requires_grad_(False)
    buffer = io.BytesIO()
    torch.save(record.encode(layer), buffer)
    buffer.seek(0)
    again = record.decode(torch.load(buffer, weights_only=True))
    assert type(again) is torch.nn.Linear and not again.training and again.weight.dtype == torch.float64
    assert torch.equal(again.weight, layer.weight) and again is not layer
    assert again.weight.requires_grad and not again.bias.requires_grad
    with pytest.raises(TypeError, match="make it with record.build"):
        record.encode(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="cannot be sent as data"):
        record.encode(lambda x: x)
    with pytest.raises(ValueError, match="annotated or torch only"):
        record.decode({"call": "os.system"})
    assert record.describe(layer) | {"module": ""} == {
        "kind": "module", "type": "Linear", "module": "", "training": False,
        "parameters": {"weight": [2, 3], "bias": [2]}}


# ---------------------------------------------------------------- results that are modules


def _make_layer(d_in, d_out, seed):
    torch.manual_seed(seed)  # the course's seeded init (the engine forks the generator around each check)
    return torch.nn.Linear(d_in, d_out)


LAYER = Declaration(
    check="check_make_layer", function="make_layer", roles=("d_in", "d_out", "seed"), reference=_make_layer,
    probes=lambda device: [Probe((3, 2, 0), "{what} of {name}(3, 2, seed=0)", on=(torch.ones(4, 3),)),
                           Probe((5, 4, 1), "{what} of {name}(5, 4, seed=1)")],
    returns=engine.Module("the layer"),
    mistakes=(Mistake("the layer has no bias", "no bias",
                      like=lambda d_in, d_out, seed: (torch.manual_seed(seed),
                                                      torch.nn.Linear(d_in, d_out, False))[1]),))


def test_a_module_result_is_judged_by_its_parameters_mode_and_output_in_the_notebook_and_by_the_grader(tmp_path):
    test_module_and_function_arguments_travel_as_data_and_the_reference_passes(LAYER, tmp_path)


@pytest.mark.parametrize("wrong, message", [
    (lambda d_in, d_out, seed: torch.ones(d_out, d_in), r"should return the layer as a module \(an nn\.Module\), "
                                                        r"got a tensor"),
    (lambda d_in, d_out, seed: _make_layer(d_in, d_out, seed).eval(), r"\(3, 2, seed=0\): it is in evaluation mode"),
    (lambda d_in, d_out, seed: _make_layer(d_out, d_in, seed),
     r"its parameters \(name: shape\) are \{'weight': \[3, 2\]"),
    (lambda d_in, d_out, seed: _make_layer(d_in, d_out, seed + 1), r"its output on the probe's input differs"),
])
def test_the_engine_names_another_module(wrong, message, tmp_path):
    with pytest.raises(Failure, match=message):
        engine.run(LAYER, wrong)
    assert re.search(message, judged_from_record(LAYER, wrong, tmp_path).diagnosis)
