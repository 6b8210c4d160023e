"""Notebook 09's declared checks (annotated.support.grading.decoding): their references agree with the
course's independent code on every probe, and the grader, judging the kernel's record in its own process,
gives every typical wrong answer and right answer of tests/test_exercises_09_decoding.py the verdict and
the diagnosis the notebook gives."""

import pytest
import torch

from annotated.decoding import greedy_decode
from annotated.masks import subsequent_mask
from annotated.support import record
from annotated.support.grading import decoding, engine
from tests.test_declarations import judged_from_record
from tests.test_exercises_09_decoding import RIGHT_ANSWERS, WRONG_ANSWERS

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models, a busy machine
DECLARED = {decl.check: decl for decl in decoding.DECLARATIONS.values()}


def test_the_cached_step_is_multi_head_attention_over_the_whole_prefix_with_the_look_ahead_mask():
    for probe in decoding.STEP.probes(None):
        attn = probe.args[0][0]
        x = torch.cat([call[1] for call in probe.args], dim=1)  # (batch, t, d_model)
        with torch.no_grad():
            full = attn(x, x, x, subsequent_mask(x.size(1)).unsqueeze(0))[:, -1:]
            out, keys, values = engine._run_on(decoding.STEP.reference, probe)
        precision = dict(atol=1e-12, rtol=1e-10) if x.dtype == torch.float64 else dict(atol=1e-5, rtol=1e-4)
        assert torch.allclose(out, full, **precision), probe.label
        assert torch.allclose(keys, attn.split_heads(attn.W_K(x)), **precision), probe.label
        assert torch.allclose(values, attn.split_heads(attn.W_V(x)), **precision), probe.label


def test_the_cached_decoding_reference_is_greedy_decode_without_the_cache_on_every_probe():
    for probe in decoding.DECODE.probes(None):
        model, src, src_mask, max_len, bos, eos, pad = probe.args
        expected = greedy_decode(model, src.long(), src_mask, max_len, bos, eos, use_cache=False, pad_idx=pad)
        assert torch.equal(engine._run_on(decoding.DECODE.reference, probe), expected), probe.label


def test_a_probe_model_keeps_how_many_positions_its_self_attention_saw():
    probe = decoding.DECODE.probes(None)[0]
    model = engine._clone(probe.args)[0]
    assert not hasattr(model, "calls")  # hidden from the notebook: the recorder keeps the list
    calls = record._KEPT[id(model)][1]
    decoding.course_cached_greedy_decode(model, *probe.args[1:])
    assert calls and set(calls) == {1}
    calls.clear()
    decoding._greedy_without_cache(model, *probe.args[1:])
    assert max(calls) > 1


def _notebook(check, fn):
    try:
        engine.run(DECLARED[check.__name__], fn, engine.GRADER_DEVICE)
    except engine.Failure as failure:
        return str(failure)
    return None


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_the_grader_names_each_typical_wrong_answer_from_the_record_as_the_notebook_does(check, wrong, message,
                                                                                      tmp_path):
    verdict = judged_from_record(DECLARED[check.__name__], wrong, tmp_path)
    expected = "not attempted" if "not done" in message else "failed"
    assert (verdict.verdict, verdict.diagnosis) == (expected, _notebook(check, wrong))


@pytest.mark.parametrize("check, fn", RIGHT_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(f, '__name__', 'lambda')}-{i}" for i, (c, f) in
                              enumerate(RIGHT_ANSWERS)])
def test_the_grader_passes_every_right_answer_from_the_record(check, fn, tmp_path):
    verdict = judged_from_record(DECLARED[check.__name__], fn, tmp_path)
    assert verdict.verdict == "passed", verdict.diagnosis
