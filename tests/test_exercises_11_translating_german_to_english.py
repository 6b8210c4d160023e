"""The checks of notebook 11's exercises pass on the course's code and name the mistake of
each typical wrong answer: corpus BLEU, the tokens of a decoded row, and the length-penalized
score s(Y) of decoded rows under teacher forcing."""

import math
import re
from collections import Counter

import pytest
import torch
from sacrebleu.metrics import BLEU

from annotated.beam_search import lp
from annotated.evaluation import corpus_bleu, ids_to_tokens
from annotated.support.grading import (
    ExerciseFailed,
    check_bleu,
    check_ids_to_tokens,
    check_sequence_scores,
)
from annotated.support.grading.translation import _bleu
from annotated.vocab import BOS, EOS, PAD


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- 11.1 BLEU


def _bleu_answer(sentences=None, **mistake):
    """The check's own BLEU with one mistake, as a learner's function; ``sentences``: only the first few."""
    def bleu(hypotheses, references):
        if sentences:
            hypotheses, references = hypotheses[:sentences], references[:sentences]
        return _bleu(hypotheses, references, **mistake)
    return bleu


def clipped_counts(hypotheses, references, split=str.split):
    """Clipped n-gram matches and totals (n = 1..4) and the two lengths, counted by hand."""
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for hyp, ref in zip(hypotheses, references):
        hyp, ref = split(hyp), split(ref)
        c, r = c + len(hyp), r + len(ref)
        for n in range(1, 5):
            h = Counter(tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1))
            g = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += sum(min(k, g[x]) for x, k in h.items())
            totals[n - 1] += sum(h.values())
    return matches, totals, c, r


def bleu_taking_log_of_zero(hypotheses, references):
    matches, totals, c, r = clipped_counts(hypotheses, references)
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)  # log(0) fails


def course_bleu(hypotheses, references):
    return corpus_bleu(hypotheses, references).score  # sacrebleu, as notebook 09 scores the test set


def sacrebleu_unsmoothed(hypotheses, references):
    return BLEU(tokenize="none", smooth_method="none").corpus_score(hypotheses, [references]).score


def bleu_from_sacrebleu_counts(hypotheses, references):
    # The counts by hand, the formula left to sacrebleu: still not the exercise.
    return BLEU.compute_bleu(*clipped_counts(hypotheses, references), smooth_method="none").score


def _bleu_of_counts(matches, totals, c, r):
    if min(matches) == 0:
        return 0.0
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)


def bleu_split_at_single_spaces(hypotheses, references):
    return _bleu_of_counts(*clipped_counts(hypotheses, references, split=lambda text: text.split(" ")))


def bleu_lowercased(hypotheses, references):  # "to be safe"
    return _bleu_of_counts(*clipped_counts([h.lower() for h in hypotheses], [r.lower() for r in references]))


def bleu_skipping_short_outputs(hypotheses, references):
    kept = [(h, r) for h, r in zip(hypotheses, references) if len(h.split()) >= 4]
    return _bleu_of_counts(*clipped_counts([h for h, _ in kept], [r for _, r in kept]))


def bleu_counting_len_minus_n_plus_1(hypotheses, references):
    matches, _, c, r = clipped_counts(hypotheses, references)
    totals = [sum(len(h.split()) - n + 1 for h in hypotheses) for n in range(1, 5)]
    return _bleu_of_counts(matches, totals, c, r)


def bleu_dividing_before_testing(hypotheses, references):
    matches, totals, c, r = clipped_counts(hypotheses, references)
    precisions = [m / t for m, t in zip(matches, totals)]  # 0 / 0 where no output has n words
    return 0.0 if min(precisions) == 0 else _bleu_of_counts(matches, totals, c, r)


def bleu_of_lowercase_letter_runs(hypotheses, references):  # a mistake without a diagnosis: "A" is dropped
    return _bleu_of_counts(*clipped_counts(hypotheses, references, split=lambda text: re.findall(r"[a-z]+", text)))



def bleu_by_regex_words(hypotheses, references):  # right: words as runs of non-spaces
    return _bleu_of_counts(*clipped_counts(hypotheses, references, split=lambda text: re.findall(r"\S+", text)))


class BLEUScoreLike:
    """A result with a .score, as sacrebleu returns, computed without sacrebleu."""

    def __init__(self, score):
        self.score = score


# ---------------------------------------------------------------- 11.2 from ids to tokens


def _tokens_answer(**mistake):
    """The check's own ids_to_tokens with one mistake, as a learner's function."""
    from annotated.support.grading.translation import _row_tokens

    def ids_to_tokens(ids, vocab):
        return _row_tokens(ids, vocab, **mistake)
    return ids_to_tokens


def tokens_removing_in_place(ids, vocab):
    while vocab[PAD] in ids:
        ids.remove(vocab[PAD])  # the caller's row
    return ids_to_tokens(ids, vocab)


def tokens_with_the_course_ids(ids, vocab):
    if 2 in ids:
        ids = ids[: ids.index(2)]
    return [vocab.itos[i] for i in ids if i not in (0, 1)]


def tokens_by_stripping_specials(ids, vocab):  # every special but </s> stripped from the words
    words = vocab.lookup_tokens(ids)
    words = words[: words.index(EOS)] if EOS in words else words
    return [w for w in words if not (w.startswith("<") and w.endswith(">"))]


_FIRST_VOCABULARY = []


def tokens_with_the_first_vocabulary(ids, vocab):  # the vocabulary kept from the first call
    if not _FIRST_VOCABULARY:
        _FIRST_VOCABULARY.append(vocab)
    return ids_to_tokens(ids, _FIRST_VOCABULARY[0])


def tokens_by_a_loop(ids, vocab):  # right: a loop that stops at </s>
    out = []
    for i in ids:
        if i == vocab[EOS]:
            break
        if i not in (vocab[BOS], vocab[PAD]):
            out.append(vocab.lookup_tokens([i])[0])
    return out


# ---------------------------------------------------------------- 11.3 s(Y) under teacher forcing


def _scores_answer(**mistake):
    """The check's own s(Y) with one mistake, as a learner's function."""
    from annotated.support.grading.translation import _scores

    def sequence_scores(logits, ys, alpha, pad_idx):
        return _scores(logits, ys, alpha, pad_idx, **mistake)
    return sequence_scores


def scores_by_cross_entropy(logits, ys, alpha, pad_idx):
    """Right: minus the summed cross-entropy, ignore_index for the padding."""
    labels = ys[:, 1:]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, ignore_index=pad_idx, reduction="none")
    n = (labels != pad_idx).sum(-1)
    return -nll.sum(-1) / ((5 + n) / 6) ** alpha


def scores_row_by_row(logits, ys, alpha, pad_idx):
    """Right: notebook 11's s_of, one row at a time, with Python floats for the lengths."""
    out = []
    for b in range(ys.size(0)):
        row = ys[b][ys[b] != pad_idx]
        log_p = logits[b, : len(row) - 1].log_softmax(-1).gather(-1, row[1:, None]).sum()
        out.append(log_p / lp(len(row) - 1.0, alpha))
    return torch.stack(out)


def scores_with_pad_zero(logits, ys, alpha, pad_idx):
    return _scores_answer()(logits, ys, alpha, 0)


def scores_squeezed(logits, ys, alpha, pad_idx):
    return _scores_answer()(logits, ys, alpha, pad_idx).squeeze()


def scores_normalizing_in_place(logits, ys, alpha, pad_idx):
    logits -= logits.logsumexp(-1, keepdim=True)  # the caller's logits
    return _scores_answer(normalize="none")(logits, ys, alpha, pad_idx)


def scores_in_float64(logits, ys, alpha, pad_idx):
    return _scores_answer()(logits.double(), ys, alpha, pad_idx)


def scores_as_floats(logits, ys, alpha, pad_idx):
    return _scores_answer()(logits, ys, alpha, pad_idx).tolist()


WRONG_ANSWERS = [
    # 11.1
    (check_bleu, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_bleu, _bleu_answer(percent=False), r"your score is a fraction; BLEU is reported in percent"),
    (check_bleu, _bleu_answer(bp="inverted"), r"brevity penalty is inverted: .*c = 14 .* r = 15"),
    (check_bleu, _bleu_answer(bp="inverted min"), r"brevity penalty is missing, or inverted and capped at 1"),
    (check_bleu, _bleu_answer(bp="no min"), r"rewards long outputs: with c = 26 > r = 22"),
    (check_bleu, _bleu_answer(bp="none"), r"brevity penalty is missing"),
    (check_bleu, _bleu_answer(clip=False), r"matches are not clipped"),
    (check_bleu, _bleu_answer(mean="arithmetic"), r"arithmetic mean of the four precisions"),
    (check_bleu, _bleu_answer(level="sentence"), r"averaged the BLEU of each sentence"),
    (check_bleu, _bleu_answer(level="macro"), r"averaged the precisions of the sentences"),
    (check_bleu, _bleu_answer(max_n=3), r"1- to 3-gram precisions"),
    (check_bleu, _bleu_answer(denominator="reference"), r"divided the matches by the reference's n-grams"),
    (check_bleu, bleu_taking_log_of_zero, r"(?s)math domain error.*\nHint: a precision p_n is 0 here[^\n]*$"),
    (check_bleu, bleu_lowercased, r"you lowercased the sentences: BLEU compares the words as they are written"),
    (check_bleu, bleu_split_at_single_spaces, r"you split at single spaces, str\.split\(' '\)"),
    (check_bleu, bleu_skipping_short_outputs, r"you left out the outputs shorter than 4 words"),
    (check_bleu, bleu_counting_len_minus_n_plus_1, r"you counted len\(words\) - n \+ 1 n-grams"),
    (check_bleu, _bleu_answer(short="truncated"), r"counted an output shorter than n words as one n-gram"),
    (check_bleu, bleu_dividing_before_testing,
     r"(?s)\(\['a dog'\], \['a dog runs'\]\) raised ZeroDivisionError.*\nHint: the outputs here are shorter "
     r"than 4 words.*p_n = 0 / 0[^\n]*$"),
    (check_bleu, bleu_of_lowercase_letter_runs,
     r"(?s)mismatch in BLEU of .* on 5 sentences .*instead of 23\.0313.*Note: these sentences hold capitals"),
    (check_bleu, _bleu_answer(sentences=2),
     r"passed with \(sentences=2, hyp_words=14, ref_words=15\) but not with \(sentences=3, "),
    (check_bleu, lambda h, r: BLEU().corpus_score(h, [r]), r"calls sacrebleu \(corpus_score\).*compute BLEU yourself"),
    (check_bleu, course_bleu, r"calls sacrebleu \(corpus_score\), directly or through the course's corpus_bleu"),
    (check_bleu, sacrebleu_unsmoothed, r"calls sacrebleu \(corpus_score\)"),
    (check_bleu, bleu_from_sacrebleu_counts, r"calls sacrebleu \(compute_bleu\)"),
    (check_bleu, lambda h, r: BLEUScoreLike(_bleu(h, r)), r"should return BLEU as a float, got a BLEUScoreLike"),
    (check_bleu, lambda h, r: f"{_bleu(h, r):.2f}", r"should return BLEU as a float, got a string, '\d+\.\d\d'"),
    # 11.2
    (check_ids_to_tokens, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_ids_to_tokens, _tokens_answer(keep_eos=True), r"the output keeps its </s>"),
    (check_ids_to_tokens, _tokens_answer(cut="last"), r"you cut at the last </s>, not the first"),
    (check_ids_to_tokens, _tokens_answer(cut="last", keep_eos=True), r"you cut after the last </s>"),
    (check_ids_to_tokens, _tokens_answer(cut="none"), r"you dropped the </s> tokens but did not cut"),
    (check_ids_to_tokens, _tokens_answer(cut="pad"), r"you stopped at the first <pad> as well as at </s>"),
    (check_ids_to_tokens, _tokens_answer(drop=(PAD,)),
     r"^ids_to_tokens\(\[1, 4, 5, 6, 2, 8, 2\], vocab\) .* gives \['<s>', 'a', 'dog', 'runs'\], .*the output keeps "
     r"its <s>"),
    (check_ids_to_tokens, _tokens_answer(drop=(BOS,)), r"the output keeps <pad> tokens"),
    (check_ids_to_tokens, _tokens_answer(drop=()), r"the output keeps <s> and <pad>"),
    (check_ids_to_tokens, tokens_by_stripping_specials, r"you dropped <unk> too"),
    (check_ids_to_tokens, tokens_with_the_course_ids,
     r"with the vocabulary \['<unk>', '<pad>', '</s>', '<s>', .*the ids of the specials are written into your code"),
    (check_ids_to_tokens, tokens_removing_in_place, r"changed its first argument `ids` in place \(now \[1, 7, 8, 2\]\)"),
    (check_ids_to_tokens, lambda ids, vocab: " ".join(ids_to_tokens(ids, vocab)),
     r"returned the string 'a dog runs'; return the list of tokens"),
    (check_ids_to_tokens, lambda ids, vocab: ids[1 : ids.index(vocab[EOS])] if vocab[EOS] in ids else ids[1:],
     r"returned ids, \[4, 5, 6\]; return the tokens themselves"),
    (check_ids_to_tokens, tokens_with_the_first_vocabulary,
     r"passed with \(rows=4, vocab=9\) but not with \(rows=5, vocab=12\): is a size written into your code\?.*"
     r"\nNote: in this vocabulary <s> is 3, </s> is 2 and <pad> is 1"),
    # 11.3
    (check_sequence_scores, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_sequence_scores, _scores_answer(normalize="none"), r"you summed the raw logits"),
    (check_sequence_scores, _scores_answer(normalize="softmax"), r"you summed probabilities, softmax\(-1\)"),
    (check_sequence_scores, _scores_answer(normalize="positions"), r"you normalized over the positions"),
    (check_sequence_scores, _scores_answer(shift=False), r"you scored the tokens the decoder reads, ys\[:, :-1\]"),
    (check_sequence_scores, _scores_answer(mask=False), r"the padding was scored too"),
    (check_sequence_scores, _scores_answer(length="with <s>"), r"\|Y\| counted <s>"),
    (check_sequence_scores, _scores_answer(length="without </s>"), r"\|Y\| left out </s>"),
    (check_sequence_scores, _scores_answer(length="padded"), r"every row got the same \|Y\|, the padded length"),
    (check_sequence_scores, _scores_answer(penalty="none"), r"the length penalty is missing: .*alpha = 0\.6 here"),
    (check_sequence_scores, _scores_answer(penalty="multiply"), r"you multiplied log P by lp\(\|Y\|\)"),
    (check_sequence_scores, _scores_answer(penalty="mean"), r"you divided by \|Y\|, the mean log-probability"),
    (check_sequence_scores, _scores_answer(penalty="factor"), r"as \(\(5 \+ \|Y\|\) / 6\) \* alpha"),
    (check_sequence_scores, scores_normalizing_in_place, r"changed its first argument `logits` in place"),
    (check_sequence_scores, scores_in_float64, r"the scores as torch\.float64 for torch\.float32 inputs"),
    (check_sequence_scores, scores_as_floats, r"should return the scores as a tensor, got a list of 3 numbers"),
    (check_sequence_scores, scores_squeezed,
     r"(?s)expected \(1,\), got \(\)\. Your result lost dimensions of size 1.*Note: the batch here is one row"),
    (check_sequence_scores, scores_with_pad_zero,
     r"(?s)passed with \(batch=3, L=7, vocab=11\) but not with \(batch=4, L=9, vocab=13\): is a size written into "
     r"your code\?.*Note: here <pad> is 1 and alpha is 1\.0"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


RIGHT_ANSWERS = [
    (check_bleu, _bleu_answer()),
    (check_ids_to_tokens, ids_to_tokens),
    (check_sequence_scores, _scores_answer()),
    # Other right answers, written otherwise.
    (check_bleu, bleu_by_regex_words),
    (check_bleu, lambda h, r: _bleu_of_counts(*clipped_counts(h, r))),  # the solution's order: 0 before dividing
    (check_ids_to_tokens, tokens_by_a_loop),
    (check_ids_to_tokens, lambda ids, vocab: tuple(ids_to_tokens(ids, vocab))),  # a tuple
    (check_sequence_scores, scores_by_cross_entropy),
    (check_sequence_scores, scores_row_by_row),
]


@pytest.mark.parametrize("check, fn", RIGHT_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(f, '__name__', 'lambda')}-{i}" for i, (c, f) in enumerate(RIGHT_ANSWERS)])
def test_check_passes_on_the_course_code_and_other_right_answers(check, fn, capsys):
    check(fn)
    assert f"{check.__name__} passed: " in capsys.readouterr().out


def test_a_check_leaves_the_global_random_state_as_it_was(capsys):
    before = torch.random.get_rng_state()
    for check, fn in RIGHT_ANSWERS[:3]:
        check(fn)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_the_toy_corpora_are_what_their_comments_say():
    from annotated.support.grading.translation import BLEU_CORPORA, _bleu_sizes

    sizes = [_bleu_sizes(*corpus) for corpus in BLEU_CORPORA]
    assert sizes[0]["hyp_words"] < sizes[0]["ref_words"] and sizes[1]["hyp_words"] > sizes[1]["ref_words"]
    scores = [BLEU(tokenize="none", smooth_method="none").corpus_score(h, [r]) for h, r in BLEU_CORPORA]
    assert all(min(s.counts) > 0 for s in scores[:2]) and scores[2].counts[3] == 0 and scores[2].score == 0
    assert corpus_bleu(*BLEU_CORPORA[2]).score > 0  # the course's corpus_bleu smooths
    hypotheses, references = BLEU_CORPORA[3]  # capitals, stray spaces, a one-word and an empty output
    assert min(scores[3].counts) > 0 and "" in hypotheses and min(len(h.split()) for h in hypotheses if h) == 1
    assert any("  " in h for h in hypotheses) and any(h != h.strip() for h in hypotheses)
    assert BLEU(tokenize="none", smooth_method="none", lowercase=True).corpus_score(
        hypotheses, [references]).score > scores[3].score  # lowercasing changes it
    assert scores[4].totals[2:] == [0, 0] and scores[4].score == 0  # no 3-gram at all


def test_the_rows_and_batches_try_what_their_comments_say():
    from annotated.support.grading.core import _same
    from annotated.support.grading.translation import (
        _SCORE_MISTAKES, _SCORE_SETTINGS, _TOKEN_MISTAKES, SCORE_SIZES, TOKEN_CASES, _row_tokens, _score_inputs,
        _scores,
    )
    from annotated.vocab import Vocab

    # Every known mistake gives other tokens for some row, and other scores for some batch.
    vocabs = [(Vocab(itos), rows) for itos, rows in TOKEN_CASES]
    for mistake, _ in _TOKEN_MISTAKES:
        assert any(_row_tokens(r, v, **mistake) != _row_tokens(r, v) for v, rows in vocabs for r in rows), mistake
    inputs = [(_score_inputs(sizes, settings), settings) for sizes, settings in zip(SCORE_SIZES, _SCORE_SETTINGS)]
    for _, mistake, _ in _SCORE_MISTAKES:
        assert any(not _same(_scores(logits, ys, s["alpha"], s["pad"], **mistake),
                             _scores(logits, ys, s["alpha"], s["pad"])) for (logits, ys), s in inputs), mistake
    # The specials move from vocabulary to vocabulary; a row without </s>, tokens after a first </s>, <unk>.
    assert len({(itos.index(BOS), itos.index(PAD)) for itos, _ in TOKEN_CASES}) == len(TOKEN_CASES)
    assert any(Vocab(itos)[EOS] not in row for itos, rows in TOKEN_CASES for row in rows)
    assert any(row.count(Vocab(itos)[EOS]) > 1 for itos, rows in TOKEN_CASES for row in rows)
    # Rows of several lengths, one that fills the batch, and 0 as a token where <pad> is not 0.
    (logits, ys), settings = inputs[1]
    lengths = (ys != settings["pad"]).sum(-1)
    assert len(set(lengths.tolist())) == ys.size(0) and int(lengths.max()) == ys.size(1) and (ys == 0).any()
