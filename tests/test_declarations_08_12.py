"""The references of the declared checks of notebooks 08 and 12 agree, on every probe, with the
library or course code they stand for: label smoothing's loss with PyTorch's cross-entropy (the soft
target, and label_smoothing = eps V / (V - 2) plus the padding correction), the statistics of the
heads with ``annotated.heads.head_statistics``, one EM step with ``train_ibm_model1``. (Every known
mistake of these declarations is tested by tests/test_declarations.py.)"""

import pytest
import torch
import torch.nn.functional as F

from annotated.alignment import NULL, train_ibm_model1
from annotated.batching import Batch
from annotated.heads import head_statistics
from annotated.label_smoothing import smoothed_targets
from annotated.support.grading import engine, heads, training
from annotated.training import evaluate_loss

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_label_smoothing_reference_is_pytorchs_cross_entropy_in_both_forms_on_every_probe():
    for probe in training.LOSS.probes(None):
        logits, target, pad, eps = probe.args
        z, V = logits.double(), logits.size(-1)
        ours = training.course_loss(z, target, pad, eps)
        soft = F.cross_entropy(z, smoothed_targets(target, V, pad, eps, z.dtype), reduction="sum")
        builtin = torch.nn.CrossEntropyLoss(ignore_index=pad, label_smoothing=eps * V / (V - 2), reduction="sum")
        real = target != pad
        correction = eps / (V - 2) * (z[real, pad] - z[real, target[real]]).sum()
        assert torch.allclose(ours, soft, rtol=1e-12, atol=1e-9), probe.label
        assert torch.allclose(ours, builtin(z, target) + correction, rtol=1e-12, atol=1e-9), probe.label


def test_the_smoothed_targets_rows_are_distributions_and_pytorchs_differ_from_them():
    for probe in training.TARGETS.probes(None):
        target, V, pad, eps = probe.args
        q = training.TARGETS.reference(*probe.args)
        real = target != pad
        assert torch.allclose(q[real].sum(-1), torch.ones(int(real.sum())))
        assert not q[~real].any() and not q[:, pad].any()
        if eps > 0:  # PyTorch's label smoothing: eps / V on every token, padding included
            theirs = (1 - eps) * F.one_hot(target, V) + eps / V
            assert not torch.allclose(q[real], theirs[real].float())


def test_the_head_statistics_references_are_head_statistics_on_every_probe():
    for probe in heads.ENTROPY.probes(None):
        weights, mask, query_valid = probe.args
        sums = head_statistics(weights, mask, query_valid, {})
        expected = (sums["entropy"] / sums["uniform"]).double()
        assert torch.allclose(heads.ENTROPY.reference(*probe.args).double(), expected, atol=1e-5), probe.label
    for probe in heads.PREVIOUS.probes(None):
        weights, query_valid = probe.args
        L = weights.size(-1)
        sums = head_statistics(weights, torch.ones(1, 1, L, dtype=torch.bool), query_valid, {}, max_offset=1)
        expected = (sums["offset"][:, 0] / sums["rows"]).double()  # offsets -1, 0, 1: column 0 is i - 1
        assert torch.allclose(heads.PREVIOUS.reference(*probe.args).double(), expected, atol=1e-6), probe.label


def course_em(pairs: list, V_e: int, V_f: int, iterations: int) -> torch.Tensor:
    """annotated.alignment.train_ibm_model1 after ``iterations`` steps, as a dense (V_e, V_f) table."""
    model = train_ibm_model1([([f"f{f}" for f in de.tolist()], [f"e{e}" for e in en.tolist()]) for de, en in pairs],
                             iterations=iterations)
    german = [NULL, *(f"f{f}" for f in range(1, V_f))]
    return torch.tensor([[model.prob(f"e{e}", f) for f in german] for e in range(V_e)], dtype=torch.float64)


def test_the_em_reference_takes_the_steps_of_the_courses_model_1_on_every_set_of_sizes():
    probes = heads.EM.probes(None)
    for sizes in heads.EM_SIZES:
        uniform, after_one, *_ = [p for p in probes if p.sizes == sizes]
        pairs = uniform.args[1]
        for probe, iterations in ((uniform, 1), (after_one, 2)):
            expected = course_em(pairs, sizes["V_e"], sizes["V_f"], iterations)
            assert torch.allclose(heads.EM.reference(*probe.args), expected, rtol=1e-9, atol=1e-12), probe.label


def test_the_teacher_forcing_reference_is_evaluate_loss_on_every_probe_without_dropout():
    for probe in training.TEACHER.probes(None):
        model, src, tgt, pad, loss_fn = engine._clone(probe.args)
        if any(m.p > 0 for m in model.modules() if isinstance(m, torch.nn.Dropout)) and model.training:
            continue  # dropout draws: evaluate_loss runs the model in evaluation mode
        with torch.no_grad():
            ours = training.TEACHER.reference(model, src, tgt, pad, loss_fn)
        assert abs(float(ours) - evaluate_loss(model, [Batch(src, tgt, pad)], loss_fn)) < 1e-5, probe.label
