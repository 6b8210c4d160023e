"""The declared checks of the tied embeddings (7.2) and of a row's paired test (15.2): what the recorder
describes of their results (which Parameters the returned modules share, a dict of 0-d tensors and NumPy
numbers, an argument of one call of a set changed in place), that the grader judges them from that record
as the notebook does, and that it takes the record's path for them. That every known mistake of theirs is
caught with its own message, in the notebook and from the record, is tested in test_declarations.py."""

import io

import numpy as np
import pytest
import torch
import torch.nn as nn
from scipy import stats

from annotated.model import Generator
from annotated.positional import Embeddings
from annotated.support import grade, record
from annotated.support.grading import engine, model, variations
from annotated.variations import paired_test
from tests.test_exercises_07_the_full_model import tied_the_other_way

pytestmark = pytest.mark.usefixtures("one_thread")


def _through_a_file(found: dict) -> dict:
    """What the grader reads back of a record: data only (weights_only)."""
    buffer = io.BytesIO()
    torch.save(found, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _judged_from_record(decl, fn, tmp_path) -> engine.Verdict:
    probes, plan = engine.plan(decl)
    torch.save(plan, tmp_path / "plan.pt")
    record.record_file({decl.function: fn}, decl.function, str(tmp_path / "plan.pt"), str(tmp_path / "out.pt"))
    return engine.judge_record(decl, probes, torch.load(tmp_path / "out.pt", weights_only=True))


def test_the_parameters_of_returned_modules_are_described_with_which_are_one_and_which_share_memory():
    tgt, gen, copy = Embeddings(5, 4), Generator(4, 5), Generator(4, 5)
    gen.proj.weight = tgt.lut.weight                        # one Parameter
    copy.proj.weight = nn.Parameter(tgt.lut.weight.data)    # a second Parameter over the same memory
    found = _through_a_file(record.describe((tgt, gen, [copy])))
    tensors = found["tensors"]
    assert [(t["item"], t["name"], t["same"], t["memory"]) for t in tensors] == [
        ([0], "lut.weight", 0, 0), ([1], "proj.weight", 0, 0), ([1], "proj.bias", 2, 2),
        ([2, 0], "proj.weight", 3, 0), ([2, 0], "proj.bias", 4, 4)]
    assert torch.equal(tensors[3]["values"], tgt.lut.weight.detach()) and all(t["requires_grad"] for t in tensors)
    assert record.describe(tgt)["parameters"] == {"lut.weight": [5, 4]}  # a module alone: as before


def test_each_module_of_a_result_is_called_on_its_own_input_in_evaluation_mode_and_its_modes_put_back():
    embed, drop = Embeddings(5, 4), nn.Dropout(0.9)
    tokens, x = torch.tensor([[1, 2, 3]]), torch.ones(2, 3)
    found = record.describe((embed, drop), on=((tokens,), (x,)))
    outputs = [item["outputs"]["values"] for item in found["items"]]
    assert torch.equal(outputs[0], embed(tokens).detach()) and torch.equal(outputs[1], x)  # no dropout drawn
    assert torch.equal(found["items"][0]["inputs"][0]["values"], tokens)
    assert embed.training and drop.training


def test_a_dict_of_tensors_and_numpy_numbers_is_described_entry_by_entry():
    found = _through_a_file(record.describe([{"effect": torch.tensor(0.5), "p": np.float32(0.25), "n": 3},
                                             {"low": np.arange(3.0)}]))
    first, second = found["items"]
    assert first["type"] == "dict" and first["entries"]["effect"]["values"] == 0.5
    assert first["entries"]["p"]["value"] == 0.25 and first["entries"]["n"]["value"] == 3
    assert second["entries"]["low"] | {"module": ""} == {"kind": "object", "type": "ndarray", "module": "",
                                                         "shape": [3], "dtype": "float64", "length": 3}


def paired_by_torch(ds, spread, freedom):  # right: 0-d tensors and a NumPy float32
    d = torch.tensor(ds, dtype=torch.float64)
    half = float(stats.t.ppf(0.975, freedom)) * spread / len(ds) ** 0.5
    return {"effect": d.mean(), "low": d.mean() - half, "high": d.mean() + half,
            "p": np.float32(paired_test(ds, spread, freedom)["p"])}


@pytest.mark.parametrize("decl, fn", [(variations.PAIRED, paired_by_torch), (model.TIE, tied_the_other_way)],
                         ids=["paired_test", "tied_embeddings"])
def test_a_right_answer_written_another_way_passes_from_the_record(decl, fn, tmp_path):
    assert _judged_from_record(decl, fn, tmp_path).verdict == "passed"
    assert engine.run(decl, fn, engine.GRADER_DEVICE).startswith(f"{decl.check} passed: ")


def paired_sorting_the_last_list(ds, spread, freedom):
    if isinstance(ds, list) and len(ds) == 4 and ds[0] == 1.6:  # the last case of the first set only
        ds.sort()
    return paired_test(ds, spread, freedom)


def test_an_argument_of_one_call_of_a_set_changed_in_place_is_named_from_the_record(tmp_path):
    verdict = _judged_from_record(variations.PAIRED, paired_sorting_the_last_list, tmp_path)
    assert verdict.mistake == "an input changed in place"
    assert "changed its first argument `ds` in place (now [0.9, 1.6, 1.8, 2.3])" in verdict.diagnosis


def test_the_grader_judges_the_tied_embeddings_and_the_paired_test_in_its_own_process():
    assert {"check_tied_embeddings", "check_paired_test"} <= set(grade.declarations())
