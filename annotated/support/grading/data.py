"""Checks of notebook 10 as declarations (``engine``), on toy corpora small enough to count by hand: one byte-pair
merge (``annotated.bpe``, one probe per merge), a vocabulary from token counts (``annotated.vocab``, numbered as
torchtext does), one word segmented by learned merges; all agree with subword-nmt (tests/test_declarations_10_data)."""

from collections import Counter
from collections.abc import Callable

from annotated.bpe import END, JOIN, BytePairEncoder, learn_bpe, merge, spell
from annotated.support.grading.engine import Declaration, Items, Mistake, Probe, Value, check
from annotated.vocab import SPECIALS, build_vocab_from_iterator

# Word counts: Sennrich et al.'s example of notebook 10 (a tie at the first merge); captions with the one-letter
# word "a" (a pair across two words would win); runs of one letter ("a a a" overlaps itself) and "hahah", which holds
# the pair ("h", "a") twice apart (a merge must join both).
BPE_CORPORA = [
    {"low": 5, "lower": 2, "newest": 6, "widest": 3},
    {"the": 7, "a": 12, "dog": 4, "dogs": 3, "runs": 5, "sand": 2, "on": 6, "and": 3, "sun": 2},
    {"aaah": 3, "baaa": 2, "aha": 4, "ha": 5, "hah": 2, "haa": 1, "hahah": 2},
]
_MERGES = [learn_bpe(words, 10_000) for words in BPE_CORPORA]  # min_frequency=2, as the course

# Tokenized sentences, min_freq and the specials: ties of counts in every corpus; a special in the text itself; a
# word several times in one sentence (each occurrence counts); other specials, in another order, in the second.
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

# Words to segment with the merges of each corpus: training words, new words, a one-letter word, letters no merge
# holds, and words where the order of the merges matters.
SEGMENT_WORDS = [["newest", "lowest", "slow", "stone", "widest", "lower", "l", "newer", "west", "wider", "zest"],
                 ["dogs", "sand", "sun", "sundog", "and", "a", "ands", "thesand", "xyz", "runs"],
                 ["aaaa", "hahaha", "ah", "a", "h", "baa", "aaab", "ahah", "hahah"]]
SIZE_SETS = {
    "check_bpe_merge_step": [dict(word_types=len(w), merges=len(m)) for w, m in zip(BPE_CORPORA, _MERGES)],
    "check_build_vocab": [dict(sentences=len(s), types=len({t for line in s for t in line}), min_freq=m)
                          for s, m, _ in VOCAB_CORPORA],
    "check_segment": [dict(merges=len(m), words=len(w)) for m, w in zip(_MERGES, SEGMENT_WORDS)],
}


# ---------------------------------------------------------------- 10.1 one byte-pair merge


def _pair_counts(corpus: dict, weighted: bool = True, once_per_word: bool = False) -> Counter:
    """Neighbouring pairs, each word weighted by its count (or not), a pair a word holds twice counted once or not."""
    pairs = Counter()
    for symbols, n in corpus.items():
        found = list(zip(symbols, symbols[1:]))
        for pair in (dict.fromkeys(found) if once_per_word else found):
            pairs[pair] += n if weighted else 1
    return pairs


def _best(pairs: Counter) -> tuple[str, str]:
    return max(pairs, key=lambda pair: (pairs[pair], pair))  # ties: the larger pair, as subword-nmt


def _merge_first_only(symbols: tuple, pair: tuple) -> tuple:
    """The first occurrence joined, the later ones left ("h a h a h" -> "ha h a h")."""
    i = next((i for i in range(len(symbols) - 1) if (symbols[i], symbols[i + 1]) == pair), None)
    return symbols if i is None else symbols[:i] + (symbols[i] + symbols[i + 1],) + symbols[i + 2 :]


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
    row, pairs = [(symbol, n) for symbols, n in corpus.items() for symbol in symbols], Counter()
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


def _picked(kind: str, options: dict | None = None, message: str = "") -> Callable:
    """A ``find`` on the learner's pair: one "across" two words, a "tie" broken another way, or the best of the pairs
    "counted" with the options of ``_pair_counts`` (``message``: the message, formatted)."""
    def find(found: dict, p: Probe) -> str | None:
        pair, pairs = found["value"], _pair_counts(p.args[0])
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or tuple(pair) == (best := _best(pairs)):
            return None
        pair, at = tuple(pair), f"at merge {p.tags['step']}"
        if kind == "across" and pair[0].endswith(END):
            return (f"{at} your pair {pair} joins the end of one word ({pair[0]!r} ends in {END}) to the start of "
                    "another: count pairs inside each word only, zip(symbols, symbols[1:]) for each word of the "
                    "corpus.")
        if kind == "counted" and pair == _best(_pair_counts(p.args[0], **options)):
            return message.format(at=at, pair=pair, best=best, n=pairs[best], m=pairs.get(pair, 0))
        if kind != "tie" or pairs.get(pair) != pairs[best]:
            return None
        tied = [q for q in pairs if pairs[q] == pairs[best]]
        why = [text for text, true in (  # max keeps the first of equal counts
            ("the first one counted (what max(pairs, key=pairs.get) and Counter.most_common give)",
             pair == max(pairs, key=pairs.__getitem__)),
            ("the smallest as Python compares tuples of strings", pair == min(tied))) if true]
        return (f"{at} {', '.join(map(str, tied))} all occur {pairs[best]} times, and you took {pair}"
                f"{', ' + ' and '.join(why) if why else ''}. The course and subword-nmt take the largest pair as "
                f"Python compares tuples of strings, here {best}: max(pairs, key=lambda pair: (pairs[pair], pair)).")
    return find


def _merged(kind: str) -> Callable:
    """A ``find`` on the learner's merged corpus: keys that are not tuples, words "missing", counts "changed"."""
    def find(found: dict, p: Probe) -> str | None:
        (pair, expected), merged = _course_step(p.args[0]), found["value"]
        if not isinstance(merged, dict) or merged == expected:
            return None
        at, bad = f"at merge {p.tags['step']} ({' + '.join(pair)})", [k for k in merged if not isinstance(k, tuple)]
        if kind == "keys" and bad:
            return (f"{at} the merged corpus has the key {bad[0]!r}; keep each word as a tuple of its symbols, ('n', "
                    "'e', 'w', 'e', 'st</w>'), as in the input.")
        if kind == "missing" and len(merged) < len(expected) and all(expected.get(k) == n for k, n in merged.items()):
            left_out = next(_show(k) for k in expected if k not in merged)
            return (f"{at} words are missing from the merged corpus (such as {left_out!r}): return every word, merged "
                    "or unchanged.")
        if kind == "changed" and set(merged) == set(expected):
            word = next(k for k in expected if merged[k] != expected[k])
            return (f"{at} the word {_show(word)!r} has the count {merged[word]} instead of {expected[word]}: a merge "
                    "changes how a word is spelled, never how often it occurs.")
        return None
    return find


def _merge_mistake(wrong_merge: Callable, name: str, message: str) -> Mistake:
    def text(p: Probe) -> str:
        corpus, pair = p.args[0], _course_step(p.args[0])[0]
        word = next(k for k in corpus if wrong_merge(k, pair) != merge(k, pair))
        return (f"at merge {p.tags['step']} ({' + '.join(pair)}) {message} Here {_show(word)!r} became "
                f"{_show(wrong_merge(word, pair))!r} instead of {_show(merge(word, pair))!r}.")
    return Mistake(text, name, like=_wrong_step(merge_word=wrong_merge), items=(1,))


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


BPE_STEP = Declaration(
    check="check_bpe_merge_step", function="bpe_merge_step", roles=("corpus",), reference=_course_step,
    probes=_bpe_probes, sizes_fix="Count the pairs of the corpus you are given, all its words.", consistent=True,
    returns=Items((Value("the pair", kind="tuple", sequence=True, other=lambda found, name, what: (
        f"the pair {name} returns should be a tuple of two symbols, such as ('s', 't</w>')"
        f"{' (the two symbols apart, not joined)' if found.get('type') == 'str' else ''}; got "
        f"{found.get('value', found['type'])!r}")),
                   Value("the merged corpus", kind="dict", other=lambda found, name, what: (
                       f"the second item {name} returns is {found['type']}; return the merged corpus as a dict, "
                       "symbols (a tuple) -> count, like its input."))),
                  what="a pair (the merged pair, the merged corpus)", again_what="the merged corpus"),
    in_place="Build a new dict and return it; the caller keeps using its own.",
    mistakes=(
        Mistake("", "a pair across two words", find=_picked("across"), example=_wrong_step(pick=_across_words)),
        Mistake("", "a tie broken another way", find=_picked("tie"),
                example=_wrong_step(pick=lambda c: max(_pair_counts(c), key=_pair_counts(c).get))),
        *(Mistake("", name, find=_picked("counted", options, message),
                  example=_wrong_step(pick=lambda c, o=options: _best(_pair_counts(c, **o))))
          for name, options, message in [
            ("each word counted once", dict(weighted=False), "{at} you counted each word once: {pair} is in the most "
             "words, but {best} occurs {n} times in the text against {m}. Weight every pair by its word's count: "
             "pairs[pair] += count."),
            ("a pair counted once per word", dict(once_per_word=True), "{at} you counted a pair once per word, however "
             "often the word holds it: 'a a a h' holds ('a', 'a') twice, so {best} occurs {n} times and {pair} {m}. "
             "Count every item of zip(symbols, symbols[1:]).")]),
        Mistake("", "words as strings", find=_merged("keys"), item=1, example=_wrong_step(keys=" ".join)),
        Mistake("", "words missing", find=_merged("missing"), item=1, example=_wrong_step(only_merged=True)),
        Mistake("", "counts changed", find=_merged("changed"), item=1, example=_wrong_step(count=lambda n: 1)),
        *(_merge_mistake(*mistake) for mistake in [
            (lambda symbols, pair: tuple(  # every occurrence joined, overlapping ones too: the i += 2 forgotten
                a + b if (a, b) == pair else a for a, b, before in zip(symbols, [*symbols[1:], ""], ["", *symbols])
                if (a, b) == pair or (before, a) != pair),
             "overlapping pairs joined twice", "you joined overlapping occurrences twice: once the first two a of 'a a "
             "a' are joined, the second belongs to 'aa'. Scan left to right and skip both symbols of a merged pair (i "
             "+= 2), giving 'aa a'."),
            (lambda symbols, pair: tuple(s[::-1] for s in reversed(merge(  # the course's merge of the mirrored word
                tuple(s[::-1] for s in reversed(symbols)), (pair[1][::-1], pair[0][::-1])))),
             "merged from the right", "you merged from the right: 'a a a' must become 'aa a', the leftmost occurrence "
             "first."),
            (_merge_first_only, "the first occurrence only", "you joined only the first occurrence of the pair in each "
             "word (a loop that stops at the first match, or str.replace(..., 1)): a merge joins every occurrence, "
             "left to right."),
            (_merge_as_text, "str.replace on the text", "you replaced the pair in the text of the word, with the "
             "symbols joined by spaces: str.replace does not see where a symbol ends. Compare whole symbols: "
             "(symbols[i], symbols[i + 1]) == pair.")]),
    ),
    passed=lambda name: (
        f"check_bpe_merge_step passed: step by step, {name} learns the merges of annotated.bpe.learn_bpe "
        f"and of subword-nmt's learn_bpe, {' + '.join(str(len(m)) for m in _MERGES)} merges on "
        f"{len(BPE_CORPORA)} toy corpora (a tie, a one-letter word, runs like 'a a a', a pair twice in "
        "'h a h a h'), with the corpus after each merge."),
)


def check_bpe_merge_step(bpe_merge_step: Callable) -> None:
    """Check ``bpe_merge_step(corpus) -> (pair, merged corpus)``: step by step on ``BPE_CORPORA``, the merges of
    ``annotated.bpe.learn_bpe`` (and subword-nmt's).

    Diagnoses: the corpus changed in place, a result of another kind, a pair across two words, word counts ignored, ties
    broken another way (the first seen, the smaller pair), overlapping pairs counted once, words or counts lost in the
    merged corpus, overlapping pairs joined twice, merging from the right, only the first occurrence in a word joined,
    str.replace on the spelled word, the same dict returned (and overwritten) at every call, and code that only works on
    one corpus.
    """
    check(BPE_STEP, bpe_merge_step)


# ---------------------------------------------------------------- 10.2 the vocabulary


def _vocab(sentences: list[list[str]], min_freq: int, specials: list[str], *, count: str = "occurrences",
           ties: str = "alphabetical", order: str = "descending", threshold: str = ">=", place: str = "first",
           given: bool = True) -> list[str]:
    """The itos of ``build_vocab_from_iterator``, written out, or with one mistake switched on."""
    specials = list(specials) if given else list(SPECIALS)
    counts = Counter(token for tokens in sentences for token in (set(tokens) if count == "sentences" else tokens))
    for special in specials if place != "twice" else ():
        counts.pop(special, None)
    sign = 1 if order == "descending" else -1
    ranked = sorted(counts.items(), **{  # "first seen": a stable sort on the count alone, or Counter.most_common
        "alphabetical": dict(key=lambda item: (-sign * item[1], item[0])),
        "reversed": dict(key=lambda item: (sign * item[1], item[0]), reverse=True),
        "first seen": dict(key=lambda item: -sign * item[1])}[ties])
    keep = {">=": lambda n: n >= min_freq, ">": lambda n: n > min_freq, "none": lambda n: True}[threshold]
    words = [token for token, n in ranked if keep(n)]
    return {"last": words + specials, "missing": words}.get(place, specials + words)


_SORT = "Sort by (-count, token): the most frequent first, ties alphabetically (as torchtext)."
_VOCAB_MISTAKES = [
    (dict(ties="first seen"), "tokens with the same count are in the order they were first seen (Counter.most_common "
                              f"or a sort on the count alone): ids must not depend on the sentences' order. {_SORT}"),
    (dict(ties="reversed"), f"tokens with the same count are in reverse alphabetical order (reverse=True). {_SORT}"),
    (dict(order="ascending"), f"the rarest tokens come first: the most frequent get the smallest ids. {_SORT}"),
    (dict(order="ascending", ties="reversed"), f"the rarest tokens come first, and ties are reversed: you reversed the "
                                               f"whole order of the vocabulary. {_SORT}"),
    (dict(threshold=">"), "tokens seen exactly min_freq times are missing: keep a token when count >= min_freq."),
    (dict(threshold="none"), "min_freq is ignored: tokens seen fewer than min_freq times are left out (<unk>)."),
    (dict(count="sentences"), "you counted each token once per sentence (a set of its tokens?): 'a' twice in one "
                              "sentence counts twice."),
    (dict(place="last"), "the specials come after the words: they come first, in the order given."),
    (dict(place="missing"), "the specials are missing: the vocabulary starts with them, in the order given."),
    (dict(place="twice"), "a special that also occurs in the text is listed twice, once among the words: remove the "
                          "specials from the counts before ranking the words."),
    (dict(given=False), "the specials are the course's four, not the ones given: use the argument `specials`, in its "
                        "order."),
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
        twice = next(t for t in got if got.count(t) > 1)
        return f"a token is listed more than once ({twice!r}): each token gets one id."
    return None


def _another_order(found: dict, p: Probe) -> str | None:
    got, expected, specials = list(found["value"]), _course_vocab(*p.args), list(p.args[2])
    if got[:len(specials)] == specials and sorted(got[len(specials):]) == sorted(expected[len(specials):]):
        return (f"with min_freq={p.args[1]} and specials {specials}: the right tokens, in another order: "
                f"{got[len(specials):]}, where the order is {expected[len(specials):]}: most frequent first, ties "
                "alphabetically.")
    return None


BUILD_VOCAB = Declaration(
    check="check_build_vocab", function="build_vocab", roles=("sentences", "min_freq", "specials"),
    reference=_course_vocab, sizes_fix="Count the sentences you are given, and use the min_freq and specials given.",
    probes=lambda device: [
        Probe((sentences, min_freq, list(specials)), f"{{what}} of {{name}}({len(sentences)} sentences, "
              f"min_freq={min_freq}, specials={list(specials)})", sizes=sizes)
        for sizes, (sentences, min_freq, specials) in zip(SIZE_SETS["check_build_vocab"], VOCAB_CORPORA)],
    returns=Value("the tokens", kind="list", sequence=True, other=lambda found, name, what: (
        f"{name} returned a Vocab; return the list of tokens itself, index -> token (a Vocab's get_itos() gives it)."
        if found.get("type") == "Vocab" else
        f"{name} should return the tokens, a list of strings, the token of id i at index i; got {found['type']}")),
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
    """Check ``build_vocab(sentences, min_freq, specials) -> itos``, the tokens in the order of their ids, against
    ``annotated.vocab.build_vocab_from_iterator`` (torchtext's numbering) on ``VOCAB_CORPORA``.

    Diagnoses: the specials or the sentences changed in place (a list extended), a Vocab or another kind of result, a
    token listed twice, ties in the order first seen or in reverse, the rarest tokens first, tokens seen exactly
    min_freq times left out, min_freq ignored, a token counted once per sentence, the specials last, missing, listed
    again among the words or not the ones given, the right tokens in another order, and code that reads only part of the
    input.
    """
    check(BUILD_VOCAB, build_vocab)


# ---------------------------------------------------------------- 10.3 one word in pieces


def _segment(word: str, merges: list, *, mark: bool = True, rank: str = "first learned", once: bool = False,
             joins: str = "end", keep_end: bool = False, as_text: bool = False) -> list[str]:
    """``BytePairEncoder(merges).segment(word)`` written out, or with one mistake (named by its keyword)."""
    order = {tuple(pair): i for i, pair in reversed(list(enumerate(merges)))}
    symbols = spell(word) if mark else tuple(word)
    while len(symbols) > 1 and (pairs := [pair for pair in zip(symbols, symbols[1:]) if pair in order]):
        best = {"first learned": min(pairs, key=order.__getitem__), "last learned": max(pairs, key=order.__getitem__),
                "leftmost": pairs[0]}[rank]
        symbols = (_merge_as_text if as_text else merge)(symbols, best)
        if once:
            break
    pieces = [*symbols[:-1], symbols[-1] if keep_end else symbols[-1].removesuffix(END)]
    return {"end": [piece + JOIN for piece in pieces[:-1]] + pieces[-1:], "every piece": [p + JOIN for p in pieces],
            "start": pieces[:1] + [JOIN + piece for piece in pieces[1:]], "none": pieces}[joins]


_SEGMENT_MISTAKES = [
    (dict(mark=False), "you spelled the word without the end-of-word mark: its last letter carries </w> (spell(word)), "
                       "as when the merges were learned, so that ('s', 't</w>') applies to the end only."),
    (dict(keep_end=True), "the last piece still carries </w>: remove it, symbols[-1].removesuffix('</w>')."),
    (dict(joins="none"), "the pieces have no @@: every piece but the last ends in '@@' ('new@@ est' -> 'newest')."),
    (dict(joins="every piece"), "the last piece ends in @@ too: @@ says that the next piece continues the word."),
    (dict(joins="start"), "you put @@ at the start of the following pieces: every piece but the last ends in @@ "
                          "('new@@ est'); a @@ at the start marks a word glued to the previous one."),
    (dict(rank="last learned"), "you did not merge the pair learned first: among the learned pairs of the word you "
                                "took the one learned last, or the leftmost one in the word. Merge, each time, the "
                                "pair of the word that was learned first, as training did."),
    (dict(once=True), "you applied one merge and stopped: keep merging while the word holds a learned pair."),
    (dict(as_text=True), "you merged with str.replace on the symbols joined by spaces: it does not see where a "
                         "symbol ends. Compare whole symbols: merge(symbols, pair)."),
]


def _course_segment(word: str, merges: list) -> list[str]:
    return BytePairEncoder(merges).segment(word)


def _segment_mistake(mistake: dict, message: str) -> Mistake:
    def wrong(word, merges):
        return _segment(word, merges, **mistake)
    return Mistake(lambda p: f"segment({p.args[0]!r}, merges) gives {wrong(*p.args)}, where the course's "
                   f"BytePairEncoder gives {_course_segment(*p.args)}: {message}",
                   ", ".join(f"{k} {v}" for k, v in mistake.items()).replace("_", " "), like=wrong)


SEGMENT = Declaration(
    check="check_segment", function="segment", roles=("word", "merges"), reference=_course_segment,
    probes=lambda device: [
        Probe((word, [tuple(pair) for pair in merges]), f"{{what}} of {{name}}({word!r}, merges)", sizes=sizes)
        for sizes, merges, words in zip(SIZE_SETS["check_segment"], _MERGES, SEGMENT_WORDS) for word in words],
    sizes_fix="Use the merges you are given, all of them.",
    returns=Value("the pieces", kind="list", sequence=True, other=lambda found, name, what: (
        f"{name} returned the string {found['value']!r}; return the list of pieces, such as ['new@@', 'est']."
        if found.get("type") == "str" else f"{name} should return the pieces, a list of strings; got {found['type']}")),
    in_place="The merges are the learned model, used for every word: leave the list as it is (sorted(merges) "
             "makes a copy).",
    mistakes=tuple(_segment_mistake(mistake, message) for mistake, message in _SEGMENT_MISTAKES), consistent=True,
    passed=lambda name: (
        f"check_segment passed: {name} cuts {sum(map(len, SEGMENT_WORDS))} words into the pieces that "
        f"annotated.bpe.BytePairEncoder and subword-nmt give, with the merges learned from {len(_MERGES)} toy "
        "corpora: the learned pair learned first merged first, </w> on the last letter while merging, @@ at "
        "the end of every piece but the last."),
)


def check_segment(segment: Callable) -> None:
    """Check ``segment(word, merges) -> pieces``, one word split by learned merges, against
    ``annotated.bpe.BytePairEncoder.segment`` on the merges of ``BPE_CORPORA`` and the words of ``SEGMENT_WORDS``.

    Diagnoses: the merges changed in place, a string or another kind of result, the word spelled without </w>, </w> left
    on the last piece, @@ missing, on the last piece too or at the start of the pieces, the merge learned last (or the
    leftmost learned pair) merged first, a single merge, str.replace on the spelled word, and merges other than the ones
    given.
    """
    check(SEGMENT, segment)


DECLARATIONS = {d.check: d for d in (BPE_STEP, BUILD_VOCAB, SEGMENT)}
