"""Byte-pair encoding: words split into pieces of one shared vocabulary (paper §5.1).

The paper encodes its sentences "using byte-pair encoding, which has a shared
source-target vocabulary of about 37000 tokens" (§5.1), the method of Sennrich, Haddow
and Birch (2016), "Neural Machine Translation of Rare Words with Subword Units":

* **learn**: start from every word spelled out in characters, the last one marked as
  ending the word; count every pair of neighbouring symbols, weighted by how often
  the word occurs; merge the most frequent pair into one symbol; repeat. The list of
  merges, in the order they were learned, is the whole model.
* **apply**: spell a word out the same way and keep merging the pair whose merge was
  learned first, until no learned pair is left.

Frequent words end up as one piece, rare words as a few pieces, and any word made of
characters seen in training can be written: there is no ``<unk>``. A piece that the
next piece continues ends in ``@@`` (Sennrich et al.'s convention). The course adds one
thing: a word that follows the previous one *without a space* ("." after "dog") starts
with ``@@``, so that ``detokenize`` gives the text back exactly.

This code is written for reading; ``tests/test_bpe.py`` checks that it learns exactly the
merges of ``subword-nmt`` (Sennrich et al.'s package, from the byte-pair paper) on Multi30k and segments every test
sentence as it does.

Notebook: ``10_data_and_byte_pairs.ipynb``.
"""

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable

from annotated.support import translation_guards as guards
from annotated.support import words as word_guards
from annotated.support.class_guards import check_instance
from annotated.support.translation_guards import guarded

END = "</w>"  # marks the last symbol of a word while learning and applying merges
JOIN = "@@"  # at the end of a piece: the next piece continues it; at the start: it continues the previous

Pair = tuple[str, str]


def spell(word: str) -> tuple[str, ...]:
    """A word as its characters, the last one marked as ending the word: "low" -> ("l", "o", "w</w>")."""
    return (*word[:-1], word[-1] + END)


def merge(symbols: tuple[str, ...], pair: Pair) -> tuple[str, ...]:
    """``symbols`` with every occurrence of ``pair`` joined into one symbol, left to right
    (so "a a a" becomes "aa a")."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


class Larger(tuple):
    """A pair that sorts before the pairs smaller than it, so that a heap, which pops the
    smallest entry first, gives the larger pair of two with the same count."""

    def __lt__(self, other: tuple) -> bool:
        return tuple.__gt__(self, other)


def count_pairs(words: list[tuple[str, ...]], counts: list[int]) -> tuple[Counter, defaultdict]:
    """How often each pair of neighbouring symbols occurs (each word weighted by its count), and
    which words hold it: a merge only changes those words."""
    pair_counts: Counter[Pair] = Counter()
    holders: defaultdict[Pair, set[int]] = defaultdict(set)
    for i, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += counts[i]
            holders[pair].add(i)
    return pair_counts, holders


def merge_word(i: int, best: Pair, words: list, counts: list[int], pair_counts: Counter, holders: defaultdict) -> set:
    """Merge ``best`` in word ``i`` and update the counts: the word's old pairs out, its new ones
    in. Returns the pairs whose count changed."""
    old, words[i] = words[i], merge(words[i], best)
    for pair in zip(old, old[1:]):
        pair_counts[pair] -= counts[i]
    for pair in zip(words[i], words[i][1:]):
        pair_counts[pair] += counts[i]
        holders[pair].add(i)
    return set(zip(old, old[1:])) | set(zip(words[i], words[i][1:]))


def learn_bpe(word_counts: dict[str, int], num_merges: int, min_frequency: int = 2) -> list[Pair]:
    """The merges, in the order learned: each time, the pair of neighbouring symbols that
    occurs most often in the corpus (ties: the larger pair as a string tuple, as
    ``subword-nmt`` breaks them). Stops after ``num_merges`` or when no pair occurs
    ``min_frequency`` times. ``word_counts``: each word of the training text -> its count.
    """
    words, counts = [spell(word) for word in word_counts], list(word_counts.values())
    pair_counts, holders = count_pairs(words, counts)
    # The most frequent pair comes from a heap of (-count, pair) instead of a scan of all pairs;
    # an entry whose count has changed since it was pushed is stale and skipped.
    heap = [(-n, Larger(pair)) for pair, n in pair_counts.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < num_merges and heap:
        minus_count, best = heapq.heappop(heap)
        best = tuple(best)
        if pair_counts.get(best) != -minus_count:
            continue  # stale
        if -minus_count < min_frequency:
            break
        merges.append(best)
        changed = set()
        for i in holders.pop(best):
            changed |= merge_word(i, best, words, counts, pair_counts, holders)
        for pair in changed:
            if pair_counts[pair] > 0:
                heapq.heappush(heap, (-pair_counts[pair], Larger(pair)))
            else:
                del pair_counts[pair]
    return merges


class BytePairEncoder:
    """Applies learned merges: ``segment`` splits one word, ``encode`` a sentence's words."""

    def __init__(self, merges: Iterable[Pair]):
        self.merges = [tuple(pair) for pair in merges]
        self.rank = {pair: i for i, pair in reversed(list(enumerate(self.merges)))}  # earlier merge, lower rank
        self.cache: dict[str, list[str]] = {}  # a word is segmented the same way every time

    def segment(self, word: str) -> list[str]:
        """The pieces of one word; all but the last end in ``JOIN``."""
        if word not in self.cache:
            symbols = spell(word)
            while len(symbols) > 1:
                # The learned pair that was learned first; a merge never creates a pair learned earlier.
                pairs = [pair for pair in zip(symbols, symbols[1:]) if pair in self.rank]
                if not pairs:
                    break
                symbols = merge(symbols, min(pairs, key=self.rank.__getitem__))
            pieces = [piece + JOIN for piece in symbols[:-1]] + [symbols[-1].removesuffix(END)]
            self.cache[word] = pieces
        return list(self.cache[word])

    def encode(self, words: list[str], spaces: list[bool]) -> list[str]:
        """The pieces of a sentence. ``spaces[i]`` says whether a space follows ``words[i]``;
        a word that follows its predecessor directly ("." in "dog.") starts with ``JOIN``."""
        pieces = []
        for word, space_before in zip(words, [True, *spaces]):  # no space before the first word
            word_pieces = self.segment(word)
            if not space_before:
                word_pieces[0] = JOIN + word_pieces[0]
            pieces += word_pieces
        return pieces


def detokenize(pieces: list[str]) -> str:
    """Pieces back to text: a ``JOIN`` that meets a space removes it, the pieces are otherwise
    separated by one space. ``detokenize(encode(words, spaces))`` is the original text; a model's
    output may also mark one join from both sides ("a@@ @@b"), or start or end with a mark."""
    text = " ".join(pieces).replace(f"{JOIN} {JOIN}", "").replace(JOIN + " ", "").replace(" " + JOIN, "")
    return text.removeprefix(JOIN).removesuffix(JOIN)


def bpe_tokenizer(bpe: BytePairEncoder, split_words: Callable[[str], tuple[list[str], list[bool]]]
                  ) -> Callable[[str], list[str]]:
    """Text -> pieces: ``split_words`` (e.g. ``annotated.data.word_splitter("de")``) gives the
    words and their spaces, ``bpe`` splits the words."""

    def tokenize(text: str) -> list[str]:
        return bpe.encode(*split_words(text))

    return tokenize


# The input guards (annotated/support/translation_guards.py, annotated/support/words.py), which the
# notebook's cells leave out: a negative number of merges or count, an empty word or one with a space, a
# string where a list belongs, one space flag per word, a merge bpe_codes.txt could not hold.
# And an escape: every "@" of a word is written "＠" inside the pieces (learned and segmented), and
# detokenize writes it back, so that an "@" of the text is never taken for a join mark ("x@@y" came back
# as "x@ @y"): detokenize(encode(words, spaces)) is the original text, whatever it holds.
spell = guarded(spell, word_guards.spell_inputs, by_name=False)
learn_bpe = guarded(guarded(learn_bpe, guards.learn_bpe_inputs), word_guards.learn_bpe_words)
check_instance(BytePairEncoder, word_guards.check_merges)
BytePairEncoder.segment = word_guards.escaped_segment(
    guarded(BytePairEncoder.segment, guards.segment_inputs, by_name=False))
BytePairEncoder.encode = guarded(guarded(BytePairEncoder.encode, guards.encode_inputs), word_guards.encode_words)
detokenize = word_guards.unescaped(guarded(detokenize, guards.detokenize_inputs))
