"""Checks of notebook 10's exercises: one merge of byte-pair encoding (``annotated.bpe``,
compared with ``subword-nmt``), a vocabulary built from token counts (``annotated.vocab``,
which numbers tokens as torchtext does) and one word segmented by learned merges
(``annotated.bpe.BytePairEncoder``, compared with ``subword-nmt``'s ``BPE``).

Every check runs toy corpora small enough to count by hand. ``check_build_vocab`` is a declaration
(``annotated.support.grading.engine``), judged by the grader in its own process; the recorder
describes a list argument after the call, so the specials extended in place are named there.
``check_segment`` (one probe per word) and ``check_bpe_merge_step`` (one probe per merge, the
course's corpus before it, a second call on the next) too; the merged corpus, a dict keyed by tuples of
symbols, travels as data.
"""

import contextlib
import io
from collections import Counter
from collections.abc import Callable

from annotated.bpe import END, JOIN, BytePairEncoder, learn_bpe, merge, spell
from annotated.support.grading.core import _hard_coded_hint
from annotated.support.grading.engine import Declaration, Items, Mistake, Probe, Value, check
from annotated.vocab import SPECIALS, build_vocab_from_iterator

# ---------------------------------------------------------------- the toy corpora

# Word counts: Sennrich et al.'s example of notebook 10 (a tie at the first merge); captions
# with the one-letter word "a" (a pair across two words would win); runs of one letter (a
# pair that overlaps itself, "a a a") and "hahah", which holds the pair ("h", "a") twice apart
# (a merge must join both).
BPE_CORPORA = [
    {"low": 5, "lower": 2, "newest": 6, "widest": 3},
    {"the": 7, "a": 12, "dog": 4, "dogs": 3, "runs": 5, "sand": 2, "on": 6, "and": 3, "sun": 2},
    {"aaah": 3, "baaa": 2, "aha": 4, "ha": 5, "hah": 2, "haa": 1, "hahah": 2},
]
_MERGES = [learn_bpe(words, 10_000) for words in BPE_CORPORA]  # min_frequency=2, as the course

# Tokenized sentences, min_freq and the specials. Ties of counts in every corpus; a special that
# occurs in the text itself (a corpus that already wrote <unk>, </s>); a word several times in one
# sentence (each occurrence counts); other specials, in another order, in the second corpus.
VOCAB_CORPORA = [
    ([["a", "dog", "runs", "."], ["a", "cat", "sits", "."], ["the", "dog", "sits", "<unk>", "."],
      ["a", "<unk>", "runs", "!"], ["the", "cat", "runs", "."]],
     2, SPECIALS),
    ([["ein", "hund", "läuft"], ["ein", "Hund", "und", "ein", "Ball"], ["zwei", "hunde", "laufen"],
      ["ein", "ball"], ["der", "ball", "rollt", "."], ["<s>", "ein", "ball", "</s>"], ["und", "ein", "hund"]],
     1, ["<blank>", "<s>", "</s>", "<unk>"]),
    ([["a", "man", "and", "a", "dog"], ["a", "man", "</s>"], ["the", "man", "and", "the", "dog", "and", "a", "cat"],
      ["a", "dog", "and", "a", "dog"], ["the", "cat"], ["a", "man", "and", "a", "woman"],
      ["</s>", "the", "end"], ["a", "big", "dog", "a", "cat"]],
     3, SPECIALS),
]

# Merges learned from BPE_CORPORA, each with words to segment: training words, new words, a
# one-letter word, letters no merge holds, and words where the order of the merges matters.
SEGMENT_WORDS = [
    ["newest", "lowest", "slow", "stone", "widest", "lower", "l", "newer", "west", "wider", "zest"],
    ["dogs", "sand", "sun", "sundog", "and", "a", "ands", "thesand", "xyz", "runs"],
    ["aaaa", "hahaha", "ah", "a", "h", "baa", "aaab", "ahah", "hahah"],
]


SIZE_SETS = {
    "check_bpe_merge_step": [dict(word_types=len(w), merges=len(m)) for w, m in zip(BPE_CORPORA, _MERGES)],
    "check_build_vocab": [dict(sentences=len(s), types=len({t for line in s for t in line}), min_freq=m)
                          for s, m, _ in VOCAB_CORPORA],
    "check_segment": [dict(merges=len(m), words=len(w)) for m, w in zip(_MERGES, SEGMENT_WORDS)],
}


# ---------------------------------------------------------------- 10.1 one byte-pair merge


def _pair_counts(corpus: dict, weighted: bool = True, once_per_word: bool = False) -> Counter:
    """Neighbouring pairs, each word weighted by its count (or counted once); with
    ``once_per_word`` a pair a word holds twice ("a a a h" holds ("a", "a") twice) counts once."""
    pairs = Counter()
    for symbols, n in corpus.items():
        found = list(zip(symbols, symbols[1:]))
        for pair in (dict.fromkeys(found) if once_per_word else found):
            pairs[pair] += n if weighted else 1
    return pairs


def _best(pairs: Counter) -> tuple[str, str]:
    return max(pairs, key=lambda pair: (pairs[pair], pair))  # ties: the larger pair, as subword-nmt


def _merge_without_skip(symbols: tuple, pair: tuple) -> tuple:
    """Every occurrence joined, overlapping ones too ("a a a" -> "aa aa"): the i += 2 forgotten."""
    out = []
    for i, symbol in enumerate(symbols):
        if i + 1 < len(symbols) and (symbol, symbols[i + 1]) == pair:
            out.append(symbol + symbols[i + 1])
        elif not (i > 0 and (symbols[i - 1], symbol) == pair):
            out.append(symbol)
    return tuple(out)


def _merge_from_the_right(symbols: tuple, pair: tuple) -> tuple:
    """The pair joined scanning from the right ("a a a" -> "a aa")."""
    out, i = [], len(symbols) - 1
    while i >= 0:
        if i > 0 and (symbols[i - 1], symbols[i]) == pair:
            out.append(symbols[i - 1] + symbols[i])
            i -= 2
        else:
            out.append(symbols[i])
            i -= 1
    return tuple(reversed(out))


def _merge_first_only(symbols: tuple, pair: tuple) -> tuple:
    """The first occurrence joined, the later ones left ("h a h a h" -> "ha h a h")."""
    for i in range(len(symbols) - 1):
        if (symbols[i], symbols[i + 1]) == pair:
            return symbols[:i] + (symbols[i] + symbols[i + 1],) + symbols[i + 2 :]
    return symbols


def _merge_as_text(symbols: tuple, pair: tuple) -> tuple:
    """str.replace on the symbols joined by spaces: blind to where a symbol begins and ends."""
    return tuple(" ".join(symbols).replace(" ".join(pair), "".join(pair)).split(" "))


def _show(symbols) -> str:
    return " ".join(symbols) if isinstance(symbols, tuple) else repr(symbols)


def _course_step(corpus: dict) -> tuple:
    """One merge as the course learns it: the most frequent pair (ties: the larger), merged in every word."""
    pair = _best(_pair_counts(corpus))
    return pair, {merge(symbols, pair): n for symbols, n in corpus.items()}


def _across_words(corpus: dict) -> tuple[str, str]:
    """The most frequent pair of the corpus's symbols in one row, across the words."""
    row = [(symbol, n) for symbols, n in corpus.items() for symbol in symbols]
    pairs = Counter()
    for (a, n), (b, _) in zip(row, row[1:]):
        pairs[a, b] += n
    return _best(pairs)


def _wrong_step(pick: Callable = lambda c: _best(_pair_counts(c)), merge_word: Callable = merge,
                keys: Callable = lambda symbols: symbols, count: Callable = lambda n: n,
                only_merged: bool = False) -> Callable:
    """A bpe_merge_step with one mistake: the pair picked, a word merged, its key or its count."""
    def bpe_merge_step(corpus):
        pair = pick(corpus)
        return pair, {keys(merge_word(symbols, pair)): count(n) for symbols, n in corpus.items()
                      if not only_merged or pair in zip(symbols, symbols[1:])}
    return bpe_merge_step


def _at(p: Probe) -> str:
    return f"at merge {p.tags['step']}"


def _picked(test: Callable) -> Callable:
    """A ``find`` on the learner's pair: ``test`` (pair, corpus, pair counts, best, probe) -> message or None."""
    def find(found: dict, p: Probe) -> str | None:
        pair, corpus = found["value"], p.args[0]
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            return None
        pairs = _pair_counts(corpus)
        best = _best(pairs)
        return None if tuple(pair) == best else test(tuple(pair), corpus, pairs, best, p)
    return find


def _tie(pair, corpus, pairs, best, p) -> str | None:
    if pairs.get(pair) != pairs[best]:
        return None
    tied = [q for q in pairs if pairs[q] == pairs[best]]
    why = []
    if pair == max(pairs, key=pairs.__getitem__):  # max keeps the first of equal counts
        why.append("the first one counted (what max(pairs, key=pairs.get) and Counter.most_common give)")
    if pair == min(tied):
        why.append("the smallest as Python compares tuples of strings")
    return (f"{_at(p)} {', '.join(map(str, tied))} all occur {pairs[best]} times, and you took {pair}"
            f"{', ' + ' and '.join(why) if why else ''}. The course and subword-nmt break a tie by taking "
            f"the largest pair as Python compares tuples of strings, here {best}: "
            "max(pairs, key=lambda pair: (pairs[pair], pair)).")


def _per_word(pair, corpus, pairs, best, p) -> str | None:
    if pair != _best(_pair_counts(corpus, weighted=False)):
        return None
    return (f"{_at(p)} you counted each word once: {pair} is in the most words, but {best} occurs "
            f"{pairs[best]} times in the text against {pairs[pair]}. Weight every pair by the count of its "
            "word: pairs[pair] += count.")


def _once_per_word(pair, corpus, pairs, best, p) -> str | None:
    if pair != _best(_pair_counts(corpus, once_per_word=True)):
        return None
    return (f"{_at(p)} you counted a pair once per word, however often the word holds it (a set of its "
            "pairs?); 'a a a h' holds ('a', 'a') twice, and the course and subword-nmt count both, "
            f"so {best} occurs {pairs[best]} times and {pair} {pairs.get(pair, 0)}. Count every item of "
            "zip(symbols, symbols[1:]).")


def _merged_find(test: Callable) -> Callable:
    """A ``find`` on the learner's merged corpus: ``test`` (merged, expected, pair, probe) -> message or None."""
    def find(found: dict, p: Probe) -> str | None:
        pair, expected = _course_step(p.args[0])
        merged = found["value"]
        return None if not isinstance(merged, dict) or merged == expected else test(merged, expected, pair, p)
    return find


def _where(p: Probe, pair: tuple) -> str:
    return f"{_at(p)} ({' + '.join(pair)})"


def _keys(merged, expected, pair, p) -> str | None:
    bad = [key for key in merged if not isinstance(key, tuple)]
    return (f"{_where(p, pair)} the merged corpus has the key {bad[0]!r}; keep each word as a tuple of its "
            "symbols, ('n', 'e', 'w', 'e', 'st</w>'), as in the input.") if bad else None


def _missing(merged, expected, pair, p) -> str | None:
    if len(merged) < len(expected) and all(expected.get(k) == n for k, n in merged.items()):
        left_out = next(_show(k) for k in expected if k not in merged)
        return (f"{_where(p, pair)} words are missing from the merged corpus (such as {left_out!r}): return every "
                "word, merged or unchanged.")
    return None


def _recounted(merged, expected, pair, p) -> str | None:
    if set(merged) != set(expected):
        return None
    word = next(k for k in expected if merged[k] != expected[k])
    return (f"{_where(p, pair)} the word {_show(word)!r} has the count {merged[word]} instead of {expected[word]}: "
            "a merge changes how a word is spelled, never how often it occurs.")


_MERGE_MISTAKES = [
    (_merge_without_skip, "overlapping pairs joined twice",
     "you joined overlapping occurrences twice: in 'a a a' the pair ('a', 'a') occurs at positions 0 and 1, but "
     "once the first two are joined the second a belongs to 'aa'. Scan left to right and skip both symbols of a "
     "merged pair (i += 2), giving 'aa a'."),
    (_merge_from_the_right, "merged from the right",
     "you merged from the right: 'a a a' must become 'aa a', the leftmost occurrence first, as the course's merge "
     "and subword-nmt do."),
    (_merge_first_only, "the first occurrence only",
     "you joined only the first occurrence of the pair in each word (a loop that stops at the first match, or "
     "str.replace(..., 1)): a merge joins every occurrence, scanning the whole word left to right (skipping the "
     "two symbols of each pair it joins)."),
    (_merge_as_text, "str.replace on the text",
     "you replaced the pair in the text of the word, with the symbols joined by spaces: str.replace does not see "
     "where a symbol ends, so the text of the pair also matches the start of a longer symbol. Compare whole "
     "symbols: (symbols[i], symbols[i + 1]) == pair."),
]


def _merge_mistake(wrong_merge: Callable, name: str, message: str) -> Mistake:
    def text(p: Probe) -> str:
        corpus, pair = p.args[0], _course_step(p.args[0])[0]
        word = next(k for k in corpus if wrong_merge(k, pair) != merge(k, pair))
        return (f"{_where(p, pair)} {message} Here {_show(word)!r} became {_show(wrong_merge(word, pair))!r} "
                f"instead of {_show(merge(word, pair))!r}.")
    return Mistake(text, name, like=_wrong_step(merge_word=wrong_merge), items=(1,))


def _not_a_pair(found: dict, name: str, what: str) -> str:
    hint = " (the two symbols apart, not joined)" if found.get("type") == "str" else ""
    return (f"the pair {name} returns should be a tuple of two symbols, such as ('s', 't</w>'){hint}; got "
            f"{found.get('value', found['type'])!r}")


def _not_a_corpus(found: dict, name: str, what: str) -> str:
    return (f"the second item {name} returns is {found['type']}; return the merged corpus as a dict, symbols (a "
            "tuple) -> count, like its input.")


def _bpe_probes(device: str | None) -> list[Probe]:
    probes = []
    for sizes, words, merges in zip(SIZE_SETS["check_bpe_merge_step"], BPE_CORPORA, _MERGES):
        corpora = [{spell(word): n for word, n in words.items()}]
        for pair in merges:
            corpora.append({merge(symbols, pair): n for symbols, n in corpora[-1].items()})
        probes += [Probe((corpora[k],), f"{{what}} of {{name}} at merge {k + 1} of {len(merges)} on the words "
                         f"{list(words)}", sizes=sizes, tags=dict(step=k + 1),
                         again=(corpora[k + 1] if k + 1 < len(merges) else corpora[0],),  # one with pairs left
                         again_what="the merged corpus")
                   for k in range(len(merges))]
    return probes


def _bpe_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Count the pairs of the corpus you are given, all its words.")


BPE_STEP = Declaration(
    check="check_bpe_merge_step", function="bpe_merge_step", roles=("corpus",), reference=_course_step,
    probes=_bpe_probes, sizes_fix=_bpe_hint, consistent=True,
    returns=Items((Value("the pair", kind="tuple", sequence=True, other=_not_a_pair),
                   Value("the merged corpus", kind="dict", other=_not_a_corpus)),
                  what="a pair (the merged pair, the merged corpus)", again_what="the merged corpus"),
    in_place="Build a new dict and return it; the caller keeps using its own.",
    mistakes=(
        Mistake("", "a pair across two words", find=_picked(lambda pair, c, pairs, best, p: (
            f"{_at(p)} your pair {pair} joins the end of one word ({pair[0]!r} ends in {END}) to the start of "
            "another: pairs are counted inside each word only, zip(symbols, symbols[1:]) for each word of the corpus, "
            "never across the words. (Merges never cross a word: a piece is part of one word.)")
            if pair[0].endswith(END) else None), example=_wrong_step(pick=_across_words)),
        Mistake("", "a tie broken another way", find=_picked(_tie),
                example=_wrong_step(pick=lambda c: max(_pair_counts(c), key=_pair_counts(c).get))),
        Mistake("", "each word counted once", find=_picked(_per_word),
                example=_wrong_step(pick=lambda c: _best(_pair_counts(c, weighted=False)))),
        Mistake("", "a pair counted once per word", find=_picked(_once_per_word),
                example=_wrong_step(pick=lambda c: _best(_pair_counts(c, once_per_word=True)))),
        Mistake("", "words as strings", find=_merged_find(_keys), item=1, example=_wrong_step(keys=" ".join)),
        Mistake("", "words missing", find=_merged_find(_missing), item=1, example=_wrong_step(only_merged=True)),
        Mistake("", "counts changed", find=_merged_find(_recounted), item=1, example=_wrong_step(count=lambda n: 1)),
        *(_merge_mistake(*mistake) for mistake in _MERGE_MISTAKES),
    ),
    passed=lambda name: (
        f"check_bpe_merge_step passed: step by step, {name} learns the merges of annotated.bpe.learn_bpe "
        f"and of subword-nmt's learn_bpe, {' + '.join(str(len(m)) for m in _MERGES)} merges on "
        f"{len(BPE_CORPORA)} toy corpora (a tie, a one-letter word, runs like 'a a a', a pair twice in "
        "'h a h a h'), with the corpus after each merge."),
)


def subword_nmt_merges(word_counts: dict) -> list[tuple[str, str]]:
    """subword-nmt's merges of ``word_counts`` (tests/test_declarations_10_data.py compares them with the probes')."""
    from subword_nmt.learn_bpe import learn_bpe as reference_learn_bpe

    codes = io.StringIO()
    lines = io.StringIO("".join(f"{word} {n}\n" for word, n in word_counts.items()))
    with contextlib.redirect_stderr(io.StringIO()):  # its progress bar
        reference_learn_bpe(lines, codes, 10_000, min_frequency=2, is_dict=True)
    return [tuple(line.split(" ")) for line in codes.getvalue().splitlines()[1:]]  # after "#version: 0.2"


def check_bpe_merge_step(bpe_merge_step: Callable) -> None:
    """Check ``bpe_merge_step(corpus) -> (pair, merged corpus)``: learning byte-pair merges
    by calling it until no pair occurs twice, on the toy corpora of ``BPE_CORPORA``, must give
    the merges of ``annotated.bpe.learn_bpe`` and of ``subword-nmt``'s ``learn_bpe``.

    Diagnoses: the corpus changed in place, a result of another kind, a pair across two
    words, word counts ignored, ties broken another way (the first seen, the smaller pair),
    overlapping pairs counted once, words or counts lost in the merged corpus, overlapping
    pairs joined twice, merging from the right, only the first occurrence in a word joined,
    str.replace on the spelled word, the same dict returned (and overwritten) at every call,
    and code that only works on one corpus.
    """
    check(BPE_STEP, bpe_merge_step)


# ---------------------------------------------------------------- 10.2 the vocabulary


def _vocab(sentences: list[list[str]], min_freq: int, specials: list[str], *, count: str = "occurrences",
           ties: str = "alphabetical", order: str = "descending", threshold: str = ">=", place: str = "first",
           given: bool = True) -> list[str]:
    """The itos of ``build_vocab_from_iterator``, written out, or with one mistake switched on."""
    specials = list(specials) if given else list(SPECIALS)
    if count == "sentences":  # each token once per sentence
        counts = Counter(token for tokens in sentences for token in set(tokens))
    else:
        counts = Counter(token for tokens in sentences for token in tokens)
    if place != "twice":
        for special in specials:
            counts.pop(special, None)
    sign = 1 if order == "descending" else -1
    if ties == "alphabetical":
        ranked = sorted(counts.items(), key=lambda item: (-sign * item[1], item[0]))
    elif ties == "reversed":
        ranked = sorted(counts.items(), key=lambda item: (sign * item[1], item[0]), reverse=True)
    else:  # "first seen": a stable sort on the count alone, or Counter.most_common
        ranked = sorted(counts.items(), key=lambda item: -sign * item[1])
    keep = {">=": lambda n: n >= min_freq, ">": lambda n: n > min_freq, "none": lambda n: True}[threshold]
    words = [token for token, n in ranked if keep(n)]
    if place == "last":
        return words + specials
    if place == "missing":
        return words
    return specials + words


_VOCAB_MISTAKES = [
    (dict(ties="first seen"), "tokens with the same count are in the order they were first seen (what "
                              "Counter.most_common and a sort on the count alone give): ties are broken "
                              "alphabetically, as torchtext does, so that the ids do not depend on the order of "
                              "the sentences. Sort by (-count, token)."),
    (dict(ties="reversed"), "tokens with the same count are in reverse alphabetical order: sorting by (count, "
                            "token) with reverse=True reverses the ties too. Sort by (-count, token), without "
                            "reverse."),
    (dict(order="ascending"), "the rarest tokens come first: the most frequent tokens get the smallest ids, "
                              "sort by descending count, key=lambda item: (-item[1], item[0])."),
    (dict(order="ascending", ties="reversed"), "the rarest tokens come first, and ties are reversed: you "
                                               "reversed the whole order of the vocabulary. Sort by "
                                               "(-count, token): most frequent first, ties alphabetically."),
    (dict(threshold=">"), "tokens seen exactly min_freq times are missing: a token is kept when it is seen at "
                          "least min_freq times, count >= min_freq."),
    (dict(threshold="none"), "min_freq is ignored: tokens seen fewer than min_freq times must be left out (they "
                             "become <unk> when the vocabulary is used)."),
    (dict(count="sentences"), "you counted each token once per sentence (a set of its tokens?): a token counts "
                              "every time it occurs, so 'a' twice in one sentence counts twice."),
    (dict(place="last"), "the specials come after the words: they come first, in the order given, so that "
                         "<pad> is 0, <s> 1, </s> 2 and <unk> 3 whatever the text."),
    (dict(place="missing"), "the specials are missing: the vocabulary starts with them, in the order given, "
                            "then come the words."),
    (dict(place="twice"), "a special that also occurs in the text is listed twice, once among the words: "
                          "remove the specials from the counts before ranking the words, so that each keeps its "
                          "fixed place at the front."),
    (dict(given=False), "the specials are the course's four, not the ones given: use the argument "
                        "`specials`, in its order (another vocabulary may have other specials)."),
]


def _vocab_mistake(mistake: dict, message: str) -> Mistake:
    return Mistake(lambda p: f"with min_freq={p.args[1]} and specials {list(p.args[2])}: {message}",
                   ", ".join(f"{k} {v}" for k, v in mistake.items()),
                   like=lambda sentences, min_freq, specials: _vocab(sentences, min_freq, specials, **mistake))


def _course_vocab(sentences: list, min_freq: int, specials: list) -> list[str]:
    return build_vocab_from_iterator(sentences, min_freq, specials).get_itos()


def _listed_twice(found: dict, p: Probe) -> str | None:
    got, expected = list(found["value"]), _course_vocab(*p.args)
    if len(set(got)) != len(got) and set(got) == set(expected) and got != _vocab(*p.args, place="twice"):
        return f"a token is listed more than once ({next(t for t in got if got.count(t) > 1)!r}): each token gets one id."
    return None


def _another_order(found: dict, p: Probe) -> str | None:
    got, expected, specials = list(found["value"]), _course_vocab(*p.args), list(p.args[2])
    n = len(specials)
    if got[:n] == specials and sorted(got[n:]) == sorted(expected[n:]):
        return (f"with min_freq={p.args[1]} and specials {specials}: the right tokens, in another order: {got[n:]}, "
                f"where the order is {expected[n:]}: most frequent first, ties alphabetically.")
    return None


def _not_tokens(found: dict, name: str, what: str) -> str:
    if found.get("type") == "Vocab":
        return (f"{name} returned a Vocab; return the list of tokens itself, index -> token (a Vocab's get_itos() "
                "gives it).")
    return f"{name} should return the tokens, a list of strings, the token of id i at index i; got {found['type']}"


def _vocab_probes(device: str | None) -> list[Probe]:
    return [Probe((sentences, min_freq, list(specials)),
                  f"{{what}} of {{name}}({len(sentences)} sentences, min_freq={min_freq}, specials={list(specials)})",
                  sizes=sizes)
            for sizes, (sentences, min_freq, specials) in zip(SIZE_SETS["check_build_vocab"], VOCAB_CORPORA)]


def _vocab_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Count the sentences you are given, and use the min_freq and specials given.")


BUILD_VOCAB = Declaration(
    check="check_build_vocab", function="build_vocab", roles=("sentences", "min_freq", "specials"),
    reference=_course_vocab, probes=_vocab_probes, sizes_fix=_vocab_hint,
    returns=Value("the tokens", kind="list", sequence=True, other=_not_tokens),
    in_place=("itos = specials, then itos += ... or .extend(...), grows the caller's list (and a default argument "
              "such as SPECIALS, for every later call). Build a new list: itos = list(specials) + words."),
    mistakes=(
        Mistake("", "a token listed twice", find=_listed_twice,
                example=lambda s, m, sp: _course_vocab(s, m, sp) + [_course_vocab(s, m, sp)[-1]]),
        *(_vocab_mistake(mistake, message) for mistake, message in _VOCAB_MISTAKES),
        Mistake("", "another order", find=_another_order, generic=True,
                example=lambda s, m, sp: list(sp) + sorted(_course_vocab(s, m, sp)[len(sp):])),
    ),
    passed=lambda name: (
        f"check_build_vocab passed: {name} numbers the tokens as annotated.vocab.build_vocab_from_iterator "
        f"(and torchtext) do, on {len(VOCAB_CORPORA)} toy corpora: the specials first, in the order given, then "
        "every token seen at least min_freq times, the most frequent first, ties alphabetically."),
)


def check_build_vocab(build_vocab: Callable) -> None:
    """Check ``build_vocab(sentences, min_freq, specials) -> itos``, the tokens of a vocabulary in
    the order of their ids, against ``annotated.vocab.build_vocab_from_iterator`` (torchtext's
    numbering) on the toy corpora of ``VOCAB_CORPORA``: ties of counts, a special that occurs in
    the text, a word twice in one sentence, min_freq 1 to 3, and other specials in another order.

    Diagnoses: the specials or the sentences changed in place (a list extended), a Vocab or
    another kind of result, a token listed twice, ties in the order first seen or in reverse, the
    rarest tokens first, tokens seen exactly min_freq times left out, min_freq ignored, a
    token counted once per sentence, the specials last, missing, listed again among the words
    or not the ones given, the right tokens in another order, and code that reads only part of
    the input.
    """
    check(BUILD_VOCAB, build_vocab)


# ---------------------------------------------------------------- 10.3 one word in pieces


def _segment(word: str, merges: list, *, mark: bool = True, rank: str = "first learned", once: bool = False,
             joins: str = "end", keep_end: bool = False, as_text: bool = False) -> list[str]:
    """``BytePairEncoder(merges).segment(word)``, written out, or with one mistake switched on:
    ``mark`` False spells without </w>; ``rank`` "last learned" or "leftmost" picks another pair;
    ``once`` stops after one merge; ``joins`` "none", "every piece" or "start" places @@ elsewhere;
    ``keep_end`` leaves </w> on the last piece; ``as_text`` merges with str.replace."""
    order = {tuple(pair): i for i, pair in reversed(list(enumerate(merges)))}
    symbols = spell(word) if mark else tuple(word)
    while len(symbols) > 1:
        pairs = [pair for pair in zip(symbols, symbols[1:]) if pair in order]
        if not pairs:
            break
        best = {"first learned": min(pairs, key=order.__getitem__), "last learned": max(pairs, key=order.__getitem__),
                "leftmost": pairs[0]}[rank]
        if as_text:
            symbols = tuple(" ".join(symbols).replace(" ".join(best), "".join(best)).split(" "))
        else:
            symbols = merge(symbols, best)
        if once:
            break
    last = symbols[-1] if keep_end else symbols[-1].removesuffix(END)
    pieces = [*symbols[:-1], last]
    if joins == "end":
        return [piece + JOIN for piece in pieces[:-1]] + [pieces[-1]]
    if joins == "every piece":
        return [piece + JOIN for piece in pieces]
    if joins == "start":
        return [pieces[0]] + [JOIN + piece for piece in pieces[1:]]
    return pieces


_SEGMENT_MISTAKES = [
    (dict(mark=False), "you spelled the word without the end-of-word mark: its last letter is written with "
                       "</w> (spell(word)), as it was when the merges were learned, so that a merge of a word's "
                       "end, such as ('s', 't</w>'), applies to the end only."),
    (dict(keep_end=True), "the last piece still carries </w>: the mark serves the merges only, and is removed "
                          "from the last piece, symbols[-1].removesuffix('</w>')."),
    (dict(joins="none"), "the pieces have no @@: every piece but the last ends in '@@', so that the text can "
                         "be put back together ('new@@ est' -> 'newest')."),
    (dict(joins="every piece"), "the last piece ends in @@ too: @@ says that the next piece continues the word, "
                                "and after the last piece nothing does."),
    (dict(joins="start"), "you put @@ at the start of the following pieces: Sennrich et al.'s mark, and the "
                          "course's for pieces of one word, ends every piece but the last ('new@@ est'); a @@ "
                          "at the start is the course's mark for a word glued to the previous one."),
    (dict(rank="last learned"), "you did not merge the pair learned first: among the learned pairs of the word "
                                "you took the one learned last, or the leftmost one in the word (on these merges "
                                "both give the same pieces). Training merged in the order of the merges, and a "
                                "word gets its training pieces only when it is merged in that order: each time, "
                                "the pair of the word that was learned first."),
    (dict(once=True), "you applied one merge and stopped: keep merging while the word holds a learned pair."),
    (dict(as_text=True), "you merged with str.replace on the symbols joined by spaces: it does not see where a "
                         "symbol ends, so the text of a pair also matches inside longer symbols. Compare whole "
                         "symbols: merge(symbols, pair)."),
]


def _segment_mistake(mistake: dict, message: str) -> Mistake:
    def wrong(word, merges):
        return _segment(word, merges, **mistake)

    def text(p: Probe) -> str:
        word, merges = p.args
        return (f"segment({word!r}, merges) gives {wrong(word, merges)}, where the course's BytePairEncoder gives "
                f"{BytePairEncoder(merges).segment(word)}: {message}")
    return Mistake(text, ", ".join(f"{k} {v}" for k, v in mistake.items()).replace("_", " "), like=wrong)


def _course_segment(word: str, merges: list) -> list[str]:
    return BytePairEncoder(merges).segment(word)


def _segment_probes(device: str | None) -> list[Probe]:
    return [Probe((word, [tuple(pair) for pair in merges]), f"{{what}} of {{name}}({word!r}, merges)", sizes=sizes)
            for sizes, merges, words in zip(SIZE_SETS["check_segment"], _MERGES, SEGMENT_WORDS) for word in words]


def _not_pieces(found: dict, name: str, what: str) -> str:
    if found.get("type") == "str":
        return f"{name} returned the string {found['value']!r}; return the list of pieces, such as ['new@@', 'est']."
    return f"{name} should return the pieces, a list of strings; got {found['type']}"


def _segment_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message, "Use the merges you are given, all of them.")


SEGMENT = Declaration(
    check="check_segment", function="segment", roles=("word", "merges"), reference=_course_segment,
    probes=_segment_probes, sizes_fix=_segment_hint,
    returns=Value("the pieces", kind="list", sequence=True, other=_not_pieces),
    in_place="The merges are the learned model, used for every word: leave the list as it is (sorted(merges) "
             "makes a copy).",
    mistakes=tuple(_segment_mistake(mistake, message) for mistake, message in _SEGMENT_MISTAKES), consistent=True,
    passed=lambda name: (
        f"check_segment passed: {name} cuts {sum(map(len, SEGMENT_WORDS))} words into the pieces that "
        f"annotated.bpe.BytePairEncoder and subword-nmt give, with the merges learned from {len(_MERGES)} toy "
        "corpora: the learned pair learned first merged first, </w> on the last letter while merging, @@ at "
        "the end of every piece but the last."),
)


def subword_nmt_segments(merges: list, words: list) -> list[list[str]]:
    """subword-nmt's BPE on ``words`` (tests/test_declarations_10_data.py compares it with the reference)."""
    from subword_nmt.apply_bpe import BPE

    reference = BPE(io.StringIO("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)), separator=JOIN)
    return [reference.segment_tokens([word]) for word in words]


def check_segment(segment: Callable) -> None:
    """Check ``segment(word, merges) -> pieces``, one word split by learned byte-pair merges,
    against ``annotated.bpe.BytePairEncoder.segment`` and ``subword-nmt``'s ``BPE`` on the merges
    learned from the toy corpora of ``BPE_CORPORA`` and the words of ``SEGMENT_WORDS``: training
    words, new words, one-letter words, letters no merge holds, runs such as 'aaaa'.

    Diagnoses: the merges changed in place, a string or another kind of result, the word spelled
    without </w>, </w> left on the last piece, @@ missing, on the last piece too or at the start
    of the pieces, the merge learned last (or the leftmost learned pair) merged first, a single
    merge, str.replace on the spelled word, and merges other than the ones given.
    """
    check(SEGMENT, segment)


DECLARATIONS = {d.check: d for d in (BPE_STEP, BUILD_VOCAB, SEGMENT)}
