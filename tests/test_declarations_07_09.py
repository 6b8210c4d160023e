"""The references of the declared checks of notebooks 07 and 09 agree, on every probe, with what they
stand for: the parameter count by formula with the parameters of the model make_model builds (and its
stacks with nn.Transformer's); and the grader, judging a kernel's record, finds each known mistake of
these checks as the notebook does."""

import dataclasses

import pytest
import torch

from annotated.model import count_parameters, make_model
from annotated.support import record
from annotated.support.grading import engine, model
from annotated.support.reference import torch_reference

DECLARED = [model.COUNT]


def test_the_count_formula_is_the_parameters_of_the_model_make_model_builds_on_every_probe():
    for probe in model.COUNT.probes(None):
        (c,) = probe.args
        with torch.device("meta"):  # the paper's models too, without their numbers
            built = make_model(c)
            if not c.share_embeddings:  # sharing changes no stack
                stacks = count_parameters(built.encoder) + count_parameters(built.decoder)
                assert stacks == count_parameters(torch_reference(dataclasses.replace(c, dropout=0.0))), probe.label
        assert model.course_parameter_count(c) == count_parameters(built), probe.label


def test_the_config_of_a_count_probe_arrives_in_the_kernel_as_it_was_sent():
    (c,) = model.COUNT.probes(None)[-1].args
    again = record.decode(record.encode(c))
    assert dataclasses.asdict(again) == dataclasses.asdict(c)


def _known_mistakes():
    for decl in DECLARED:
        for mistake in decl.mistakes:
            if mistake.stage != "source":  # a source mistake reads the code, which a lambda here does not show alone
                yield pytest.param(decl, mistake, id=f"{decl.check}-{mistake.name}")


@pytest.mark.parametrize("decl, mistake", list(_known_mistakes()))
def test_the_grader_judges_each_known_mistake_from_the_kernels_record_as_the_notebook_does(decl, mistake, tmp_path):
    wrong = mistake.example or mistake.like
    probes, plan = engine.plan(decl)
    torch.save(plan, tmp_path / "plan.pt")
    record.record_file({decl.function: wrong}, decl.function, str(tmp_path / "plan.pt"), str(tmp_path / "out.pt"))
    verdict = engine.judge_record(decl, probes, torch.load(tmp_path / "out.pt", weights_only=True))
    with pytest.raises(engine.Failure) as in_notebook:
        engine.run(decl, wrong, engine.GRADER_DEVICE)
    assert (verdict.verdict, verdict.mistake, verdict.diagnosis) == ("failed", mistake.name, str(in_notebook.value))
