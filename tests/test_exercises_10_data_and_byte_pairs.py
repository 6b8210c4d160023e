"""The checks of notebook 10's exercises pass on the course's code and name the mistake of
each typical wrong answer: one byte-pair merge, a vocabulary built from token counts, and one
word cut into pieces by learned merges."""

import re
from collections import Counter

import pytest

from annotated.bpe import END, JOIN, BytePairEncoder, merge, spell
from annotated.support.grading import (
    ExerciseFailed,
    check_bpe_merge_step,
    check_build_vocab,
    check_segment,
)
from annotated.vocab import build_vocab_from_iterator


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- 10.1 one byte-pair merge


def _merge_step(count="weighted", tie="larger", merge_word=merge, words=None, counts="kept", only_merged=False,
                in_place=False, joined_pair=False):
    """A configurable bpe_merge_step, to write each wrong answer in one line."""
    def bpe_merge_step(corpus):
        pairs = Counter()
        counted = list(corpus.items())[:words] if words else list(corpus.items())
        if count == "across words":  # every symbol of the corpus in one row, weighted by its word
            row = [(symbol, n) for symbols, n in counted for symbol in symbols]
            for (a, n), (b, _) in zip(row, row[1:]):
                pairs[a, b] += n
        else:
            for symbols, n in counted:
                found = zip(symbols, symbols[1:])
                for pair in (set(found) if count == "once per word" else found):
                    pairs[pair] += 1 if count == "once per word type" else n
        best = {"larger": max(pairs, key=lambda p: (pairs[p], p)), "first": max(pairs, key=pairs.get),
                "smaller": min(pairs, key=lambda p: (-pairs[p], p))}[tie]
        merged = {merge_word(symbols, best): (1 if counts == "ones" else n) for symbols, n in corpus.items()
                  if not only_merged or best in zip(symbols, symbols[1:])}
        if in_place:
            corpus.clear()
            corpus.update(merged)
            merged = corpus
        return ("".join(best) if joined_pair else best), merged
    return bpe_merge_step


def merge_without_skip(symbols, pair):
    out = []
    for i in range(len(symbols)):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
        elif not (i > 0 and (symbols[i - 1], symbols[i]) == pair):
            out.append(symbols[i])
    return tuple(out)


def merge_from_the_right(symbols, pair):
    out, i = [], len(symbols) - 1
    while i >= 0:
        if i > 0 and (symbols[i - 1], symbols[i]) == pair:
            out.insert(0, symbols[i - 1] + symbols[i])
            i -= 2
        else:
            out.insert(0, symbols[i])
            i -= 1
    return tuple(out)


def merge_as_text(symbols, pair):
    return tuple(" ".join(symbols).replace(" ".join(pair), "".join(pair)).split(" "))


def merge_first_only(symbols, pair):  # the loop stops at the first match
    for i in range(len(symbols) - 1):
        if (symbols[i], symbols[i + 1]) == pair:
            return symbols[:i] + (symbols[i] + symbols[i + 1],) + symbols[i + 2:]
    return symbols


def merge_replacing_once(symbols, pair):  # str.replace(..., 1), with the symbols' boundaries kept
    text = f" {' '.join(symbols)} "
    return tuple(text.replace(f" {' '.join(pair)} ", f" {''.join(pair)} ", 1).split())


_MERGED = {}


def merge_step_into_one_dict(corpus):  # the same dict returned at every call, emptied and refilled
    best, merged = course_merge_step(corpus)
    _MERGED.clear()
    _MERGED.update(merged)
    return best, _MERGED


def merge_step_by_regex(corpus):  # right: ties by sorting, the merge by a regex on whole symbols
    pairs = Counter()
    for symbols, n in corpus.items():
        for pair in zip(symbols, symbols[1:]):
            pairs[pair] += n
    best = sorted(pairs.items(), key=lambda item: (item[1], item[0]))[-1][0]
    pattern = re.compile(r"(?<!\S)" + re.escape(" ".join(best)) + r"(?!\S)")
    return best, {tuple(pattern.sub("".join(best), " ".join(s)).split(" ")): n for s, n in corpus.items()}


def course_merge_step(corpus):
    """One merge with the course's own pieces: the count of annotated.bpe.learn_bpe, its tie rule, and merge."""
    pairs = Counter()
    for symbols, n in corpus.items():
        for pair in zip(symbols, symbols[1:]):
            pairs[pair] += n
    best = max(pairs, key=lambda pair: (pairs[pair], pair))
    return best, {merge(symbols, best): n for symbols, n in corpus.items()}



# ---------------------------------------------------------------- 10.2 the vocabulary


def _vocab_answer(**mistake):
    """The check's own vocabulary with one mistake, as a learner's function."""
    from annotated.support.grading.data import _vocab

    def build_vocab(sentences, min_freq, specials):
        return _vocab(sentences, min_freq, specials, **mistake)
    return build_vocab


def vocab_by_most_common(sentences, min_freq, specials):
    counts = Counter(t for s in sentences for t in s)
    return list(specials) + [t for t, n in counts.most_common() if n >= min_freq and t not in specials]


def vocab_extending_the_specials(sentences, min_freq, specials):
    itos = specials  # the caller's list
    counts = Counter(t for s in sentences for t in s)
    itos += sorted((t for t, n in counts.items() if n >= min_freq and t not in specials), key=lambda t: (-counts[t], t))
    return itos


def vocab_as_a_vocab(sentences, min_freq, specials):
    return build_vocab_from_iterator(sentences, min_freq, specials)


def vocab_from_the_first_sentences(sentences, min_freq, specials):
    return build_vocab_from_iterator(sentences[:5], min_freq, specials).get_itos()


def vocab_with_a_set(sentences, min_freq, specials):  # a mistake without a diagnosis: the order of a set
    counts = Counter(t for s in sentences for t in s)
    kept = {t for t, n in counts.items() if n >= min_freq and t not in specials}
    return list(specials) + sorted(kept, key=lambda t: (len(t), t))


def vocab_by_two_stable_sorts(sentences, min_freq, specials):  # right: alphabetical, then a stable sort by count
    counts = Counter(t for s in sentences for t in s)
    words = sorted(t for t in counts if counts[t] >= min_freq and t not in set(specials))
    words.sort(key=counts.__getitem__, reverse=True)
    return [*specials, *words]


# ---------------------------------------------------------------- 10.3 one word in pieces


def _segment_answer(**mistake):
    """The check's own segmentation with one mistake, as a learner's function."""
    from annotated.support.grading.data import _segment

    def segment(word, merges):
        return _segment(word, merges, **mistake)
    return segment


def segment_with_the_toy_merges(word, merges):  # the first corpus's merges, whatever is given
    from annotated.support.grading.data import _MERGES

    return BytePairEncoder(_MERGES[0]).segment(word)


def segment_sorting_the_merges(word, merges):
    merges.sort()  # the caller's list
    return BytePairEncoder(merges).segment(word)


def segment_joined(word, merges):
    return " ".join(BytePairEncoder(merges).segment(word))


def segment_by_replaying_every_merge_in_order(word, merges):
    """Right: every merge once, in the order learned (a merge never creates a pair learned earlier)."""
    symbols = spell(word)
    for pair in merges:
        symbols = merge(symbols, tuple(pair))
    pieces = [*symbols[:-1], symbols[-1][: -len(END)] if symbols[-1].endswith(END) else symbols[-1]]
    return [p + JOIN for p in pieces[:-1]] + [pieces[-1]]


def segment_with_subword_nmt(word, merges):
    """Right: Sennrich et al.'s own package."""
    import io

    from subword_nmt.apply_bpe import BPE

    codes = io.StringIO("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return BPE(codes, separator=JOIN).segment_tokens([word])


WRONG_ANSWERS = [
    # 10.1
    (check_bpe_merge_step, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_bpe_merge_step, _merge_step(count="once per word type"), r"you counted each word once"),
    (check_bpe_merge_step, _merge_step(tie="first"),
     r"all occur 9 times, and you took \('e', 's'\), the first one counted .*the largest pair"),
    (check_bpe_merge_step, _merge_step(tie="smaller"),
     r"and the smallest as Python compares tuples of strings\. .*the largest pair.*\('s', 't</w>'\)"),
    (check_bpe_merge_step, _merge_step(count="across words"), r"joins the end of one word .* to the start of another"),
    (check_bpe_merge_step, _merge_step(count="once per word"), r"counted a pair once per word"),
    (check_bpe_merge_step, _merge_step(merge_word=merge_without_skip), r"joined overlapping occurrences twice"),
    (check_bpe_merge_step, _merge_step(merge_word=merge_from_the_right), r"merged from the right"),
    (check_bpe_merge_step, _merge_step(merge_word=merge_as_text), r"str\.replace does not see where a symbol ends"),
    (check_bpe_merge_step, _merge_step(in_place=True), r"changed its first argument `corpus` in place \(now .*Build a new dict"),
    (check_bpe_merge_step, _merge_step(only_merged=True), r"words are missing from the merged corpus"),
    (check_bpe_merge_step, _merge_step(counts="ones"), r"has the count 1 instead of"),
    (check_bpe_merge_step, _merge_step(joined_pair=True), r"a tuple of two symbols.*not joined.*'st</w>'"),
    (check_bpe_merge_step, _merge_step(merge_word=merge_first_only),
     r"at merge 3 \(h \+ a\) you joined only the first occurrence of the pair in each word.*Here 'h a h a h</w>' "
     r"became 'ha h a h</w>' instead of 'ha ha h</w>'"),
    (check_bpe_merge_step, _merge_step(merge_word=merge_replacing_once), r"joined only the first occurrence"),
    (check_bpe_merge_step, merge_step_into_one_dict,
     r"a second call of merge_step_into_one_dict, on other inputs, changed the merged corpus that the first call had returned"),
    (check_bpe_merge_step, _merge_step(words=4),
     r"passed with \(word_types=4, merges=13\) but not with \(word_types=9, merges=15\)"),
    # 10.2
    (check_build_vocab, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_build_vocab, vocab_by_most_common, r"with min_freq=2 and specials .*: tokens with the same count are in "
                                              r"the order they were first seen"),
    (check_build_vocab, _vocab_answer(ties="reversed"), r"same count are in reverse alphabetical order"),
    (check_build_vocab, _vocab_answer(order="ascending"), r"the rarest tokens come first: "),
    (check_build_vocab, _vocab_answer(order="ascending", ties="reversed"), r"you reversed the whole order"),
    (check_build_vocab, _vocab_answer(threshold=">"), r"tokens seen exactly min_freq times are missing"),
    (check_build_vocab, _vocab_answer(threshold="none"), r"min_freq is ignored"),
    (check_build_vocab, _vocab_answer(count="sentences"),
     r"with min_freq=3 .*: you counted each token once per sentence"),
    (check_build_vocab, _vocab_answer(place="last"), r"the specials come after the words"),
    (check_build_vocab, _vocab_answer(place="missing"), r"the specials are missing"),
    (check_build_vocab, _vocab_answer(place="twice"), r"a special that also occurs in the text is listed twice"),
    (check_build_vocab, _vocab_answer(given=False),
     r"with min_freq=1 and specials \['<blank>', '<s>', '</s>', '<unk>'\]: the specials are the course's four"),
    (check_build_vocab, vocab_extending_the_specials, r"changed its third argument `specials` in place \(now .*Build a new list"),
    (check_build_vocab, vocab_as_a_vocab, r"returned a Vocab; return the list of tokens itself"),
    (check_build_vocab, lambda s, m, sp: ",".join(_vocab_answer()(s, m, sp)), r"should return the tokens, a list"),
    (check_build_vocab, vocab_with_a_set, r"the right tokens, in another order"),
    (check_build_vocab, vocab_from_the_first_sentences,
     r"passed with \(sentences=5, types=9, min_freq=2\) but not with \(sentences=7, types=15, min_freq=1\): is a "
     r"size written into your code"),
    # 10.3
    (check_segment, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_segment, _segment_answer(mark=False),
     r"segment\('newest', merges\) gives \['ne@@', 'we@@', 's@@', 't'\].*without the end-of-word mark"),
    (check_segment, _segment_answer(keep_end=True), r"the last piece still carries </w>"),
    (check_segment, _segment_answer(joins="none"), r"the pieces have no @@"),
    (check_segment, _segment_answer(joins="every piece"), r"the last piece ends in @@ too"),
    (check_segment, _segment_answer(joins="start"), r"you put @@ at the start of the following pieces"),
    (check_segment, _segment_answer(rank="last learned"), r"you did not merge the pair learned first: .*you took "
                                                          r"the one learned last, or the leftmost one"),
    (check_segment, _segment_answer(rank="leftmost"),
     r"segment\('newest', merges\) gives \['ne@@', 'we@@', 'st'\].*you did not merge the pair learned first"),
    (check_segment, _segment_answer(once=True), r"you applied one merge and stopped"),
    (check_segment, _segment_answer(as_text=True), r"segment\('aaaa', merges\) .*merged with str\.replace"),
    (check_segment, segment_sorting_the_merges, r"changed its second argument `merges` in place \(now .*the learned model"),
    (check_segment, segment_joined, r"returned the string 'newest'; return the list of pieces"),
    (check_segment, segment_with_the_toy_merges,
     r"passed with \(merges=13, words=11\) but not with \(merges=15, words=10\): is a size written into your code\? "
     r"Use the merges you are given"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


RIGHT_ANSWERS = [
    (check_bpe_merge_step, course_merge_step),
    (check_build_vocab, lambda s, m, sp: build_vocab_from_iterator(s, m, sp).get_itos()),
    (check_segment, lambda word, merges: BytePairEncoder(merges).segment(word)),
    # Other right answers, written otherwise.
    (check_bpe_merge_step, merge_step_by_regex),
    (check_build_vocab, vocab_by_two_stable_sorts),
    (check_build_vocab, lambda s, m, sp: tuple(build_vocab_from_iterator(s, m, sp).get_itos())),  # a tuple
    (check_segment, segment_by_replaying_every_merge_in_order),
    (check_segment, segment_with_subword_nmt),
    (check_segment, lambda word, merges: tuple(BytePairEncoder(merges).segment(word))),  # a tuple
]


@pytest.mark.parametrize("check, fn", RIGHT_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(f, '__name__', 'lambda')}-{i}" for i, (c, f) in enumerate(RIGHT_ANSWERS)])
def test_check_passes_on_the_course_code_and_other_right_answers(check, fn, capsys):
    check(fn)
    assert f"{check.__name__} passed: " in capsys.readouterr().out


def test_the_toy_corpora_try_what_their_comments_say():
    from annotated.support.grading.data import (
        _MERGES, _SEGMENT_MISTAKES, _VOCAB_MISTAKES, SEGMENT_WORDS, VOCAB_CORPORA, _segment, _vocab,
    )
    # Every known mistake gives another vocabulary on some corpus, and another segmentation of some word.
    for mistake, _ in _VOCAB_MISTAKES:
        assert any(_vocab(*corpus, **mistake) != _vocab(*corpus) for corpus in VOCAB_CORPORA), mistake
    for mistake, _ in _SEGMENT_MISTAKES:
        assert any(_segment(w, m, **mistake) != _segment(w, m) for m, words in zip(_MERGES, SEGMENT_WORDS)
                   for w in words), mistake
    # Ties in every corpus; a special in the text of every corpus; a word twice in one sentence.
    for sentences, _, specials in VOCAB_CORPORA:
        counts = Counter(t for s in sentences for t in s if t not in specials)
        assert len(set(counts.values())) < len(counts)
        assert any(t in specials for s in sentences for t in s)
    assert all(any(len(set(s)) < len(s) for s in sentences) for sentences, _, _ in VOCAB_CORPORA[1:])
    # New words and training words, a one-letter word, and a letter no merge holds, per set of merges.
    for merges, words in zip(_MERGES, SEGMENT_WORDS):
        letters = {c for pair in merges for symbol in pair for c in symbol.removesuffix(END)}
        assert any(len(w) == 1 for w in words) and len(set(words)) == len(words)
        assert any(set(w) - letters for w in words) or merges is _MERGES[2]
