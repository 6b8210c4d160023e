"""The references of the declared checks of notebook 11 agree, on every probe, with what they stand
for: the check's BLEU with sacrebleu's corpus BLEU (no smoothing, split at whitespace,
case-sensitive) and, where that is above 0, with the course's corpus_bleu; s(Y) computed in one
batch with notebook 11's score of one output at a time. That the grader, judging a kernel's record,
finds each known mistake as the notebook does is tested for every declaration in test_declarations.py."""

import math

from sacrebleu.metrics import BLEU

from annotated.beam_search import lp
from annotated.evaluation import corpus_bleu
from annotated.support import record
from annotated.support.grading import engine, translation


def test_the_bleu_reference_is_sacrebleus_corpus_bleu_on_every_probe():
    probes = translation.BLEU_CHECK.probes(None)
    assert len(probes) == len(translation.BLEU_CORPORA)
    for probe in probes:
        hypotheses, references = probe.args
        theirs = BLEU(tokenize="none", smooth_method="none").corpus_score(hypotheses, [references]).score
        ours = translation.BLEU_CHECK.reference(hypotheses, references)
        assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-9), probe.label
        # The course's corpus_bleu: 13a tokenization (the same words here) and sacrebleu's default smoothing,
        # which changes the score only where some p_n is 0; there the probe accepts the smoothed score too.
        smoothed = corpus_bleu(hypotheses, references, lowercase=False).score
        if ours > 0:
            assert math.isclose(smoothed, ours, rel_tol=1e-9), probe.label
            assert probe.accept is None
        else:
            assert probe.accept([smoothed]) and not probe.accept([smoothed + 0.01]), probe.label


def test_the_scores_reference_is_notebook_11s_score_of_one_output_at_a_time_on_every_probe():
    for probe in translation.SCORES.probes(None):
        logits, ys, alpha, pad = probe.args
        batched = translation.SCORES.reference(logits, ys, alpha, pad)
        for b in range(ys.size(0)):
            row = ys[b][ys[b] != pad]
            one = logits[b, : row.numel() - 1].log_softmax(-1).gather(-1, row[1:, None]).sum() / lp(
                row.numel() - 1.0, alpha)
            assert math.isclose(float(one), float(batched[b]), rel_tol=1e-5, abs_tol=1e-5), probe.label


def test_a_right_bleu_of_another_form_and_the_smoothed_course_bleu_pass_where_bleu_is_zero():
    """The course's corpus_bleu (smoothed) is right only where BLEU is 0; elsewhere it is refused by its
    code (a source mistake), so here it is a wrapper the source check does not see, on the zero corpora."""
    zero = [p for p in translation.BLEU_CHECK.probes(None) if p.accept is not None]
    assert len(zero) == 2
    for probe in zero:
        smoothed = corpus_bleu(*probe.args, lowercase=False).score
        done = record.call(lambda h, r, s=smoothed: s, probe.args)
        engine.judge(translation.BLEU_CHECK, probe, done, "bleu", ["hypotheses", "references"])
