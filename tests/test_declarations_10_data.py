"""The references of the declared checks of notebook 10 (and 11.2, ids_to_tokens) agree, on every probe, with what they stand
for: build_vocab's with the check's own written-out numbering (whose switches make the known
mistakes), and the grader, judging a kernel's record, finds each known mistake as the notebook does
(tests/test_declarations.py runs every known mistake; here, those that need the record's
description of an argument changed in place)."""

import contextlib
import io

import pytest

from annotated.bpe import JOIN
from annotated.support.grading import data
from tests.test_declarations import judged_from_record


def subword_nmt_merges(word_counts: dict) -> list[tuple[str, str]]:
    """subword-nmt's merges of ``word_counts``, at min_frequency 2 as the course's."""
    from subword_nmt.learn_bpe import learn_bpe as reference_learn_bpe

    codes = io.StringIO()
    lines = io.StringIO("".join(f"{word} {n}\n" for word, n in word_counts.items()))
    with contextlib.redirect_stderr(io.StringIO()):  # its progress bar
        reference_learn_bpe(lines, codes, 10_000, min_frequency=2, is_dict=True)
    return [tuple(line.split(" ")) for line in codes.getvalue().splitlines()[1:]]  # after "#version: 0.2"


def subword_nmt_segments(merges: list, words: list) -> list[list[str]]:
    """subword-nmt's BPE on ``words``."""
    from subword_nmt.apply_bpe import BPE

    reference = BPE(io.StringIO("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)), separator=JOIN)
    return [reference.segment_tokens([word]) for word in words]


def test_the_vocabulary_reference_is_the_checks_written_out_numbering_on_every_probe():
    for probe in data.BUILD_VOCAB.probes(None):
        assert data.BUILD_VOCAB.reference(*probe.args) == data._vocab(*probe.args), probe.label


def _extend_specials(sentences, min_freq, specials):
    itos = specials
    itos += data._course_vocab(sentences, min_freq, specials)[len(specials):]
    return itos


@pytest.mark.parametrize("decl, fn, message", [
    (data.BUILD_VOCAB, _extend_specials, r"changed its third argument `specials` in place \(now \['<pad>'"),
])
def test_the_grader_names_an_argument_changed_in_place_from_the_kernels_record(decl, fn, message, tmp_path):
    verdict = judged_from_record(decl, fn, tmp_path)
    assert verdict.verdict == "failed" and verdict.mistake == "an input changed in place", verdict
    assert pytest.importorskip("re").search(message, verdict.diagnosis), verdict.diagnosis


def test_the_segment_reference_is_subword_nmts_on_every_word():
    probes = data.SEGMENT.probes(None)
    for merges, words in zip(data._MERGES, data.SEGMENT_WORDS):
        theirs = subword_nmt_segments(merges, words)
        ours = [data.SEGMENT.reference(p.args[0], p.args[1]) for p in probes if p.args[0] in words
                and p.args[1] == [tuple(m) for m in merges]]
        assert ours == theirs == [data._segment(w, merges) for w in words]


def _sort_merges(word, merges):
    merges.sort()
    return data._course_segment(word, merges)


def test_the_grader_names_the_merges_sorted_in_place():
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        verdict = judged_from_record(data.SEGMENT, _sort_merges, Path(tmp))
    assert verdict.mistake == "an input changed in place" and "changed its second argument `merges` in place (now [(" \
        in verdict.diagnosis, verdict


def test_the_ids_to_tokens_reference_is_the_checks_written_out_cut_on_every_row():
    from annotated.support.grading import translation

    for probe in translation.TOKENS.probes(None):
        ids, vocab = probe.args
        assert translation.TOKENS.reference(ids, vocab) == translation._row_tokens(ids, vocab), probe.label


def _remove_pads(ids, vocab):
    from annotated.evaluation import ids_to_tokens

    while vocab["<pad>"] in ids:
        ids.remove(vocab["<pad>"])
    return ids_to_tokens(ids, vocab)


def test_the_grader_names_a_row_of_ids_emptied_in_place_and_the_vocabulary_travels_as_data(tmp_path):
    from annotated.support.grading import translation

    assert judged_from_record(translation.TOKENS, translation.TOKENS.reference, tmp_path).verdict == "passed"
    verdict = judged_from_record(translation.TOKENS, _remove_pads, tmp_path)
    assert "changed its first argument `ids` in place (now [1, 7, 8, 2])" in verdict.diagnosis, verdict


def test_the_merge_steps_probes_follow_subword_nmts_merges_and_the_reference_makes_them():
    probes = data.BPE_STEP.probes(None)
    for words, merges in zip(data.BPE_CORPORA, data._MERGES):
        assert subword_nmt_merges(words) == merges
        steps = [p for p in probes if p.sizes == data.SIZE_SETS["check_bpe_merge_step"][data._MERGES.index(merges)]]
        assert [data.BPE_STEP.reference(p.args[0])[0] for p in steps] == merges
        for before, after in zip(steps, steps[1:]):  # each probe's corpus is the reference's merge of the one before
            assert data.BPE_STEP.reference(before.args[0])[1] == after.args[0]


def test_the_grader_judges_the_merge_step_from_the_kernels_record(tmp_path):
    assert judged_from_record(data.BPE_STEP, data._course_step, tmp_path).verdict == "passed"
    verdict = judged_from_record(data.BPE_STEP, data._wrong_step(merge_word=data._merge_first_only), tmp_path)
    assert verdict.mistake == "the first occurrence only", verdict
