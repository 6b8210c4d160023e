"""annotated.bpe: byte-pair encoding, proven equal to subword-nmt (Sennrich et al.'s own code)."""

import io
from collections import Counter

import pytest

from annotated.bpe import END, JOIN, BytePairEncoder, bpe_tokenizer, detokenize, learn_bpe, merge, spell
from annotated.data import load_pairs, word_splitter
from tests.test_data import needs_real_data

subword_nmt = pytest.importorskip("subword_nmt")
from subword_nmt.apply_bpe import BPE  # noqa: E402
from subword_nmt.learn_bpe import learn_bpe as reference_learn_bpe  # noqa: E402

NUM_MERGES = 8000  # the course's default (annotated.support.cli.Preset.bpe_merges)


def reference_merges(lines: list[str], num_merges: int) -> list[tuple[str, str]]:
    """subword-nmt's merges, learned from text of space-separated words."""
    codes = io.StringIO()
    reference_learn_bpe(io.StringIO("\n".join(lines) + "\n"), codes, num_merges, min_frequency=2)
    rows = codes.getvalue().splitlines()
    assert rows[0].startswith("#version")  # then one "left right" pair per line
    return [tuple(row.split(" ")) for row in rows[1:]]


def test_a_word_is_spelled_in_characters_with_the_last_marked():
    assert spell("low") == ("l", "o", "w" + END)
    assert spell("a") == ("a" + END,)


def test_merge_joins_non_overlapping_pairs_left_to_right():
    assert merge(("a", "a", "a"), ("a", "a")) == ("aa", "a")
    assert merge(("a", "a", "a", "a"), ("a", "a")) == ("aa", "aa")
    assert merge(("l", "o", "w</w>"), ("o", "x")) == ("l", "o", "w</w>")


def test_the_first_merge_is_the_most_frequent_pair_weighted_by_word_counts():
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    merges = learn_bpe(counts, 3)
    # "es" occurs in newest (6) and widest (3): 9 times; "st</w>" too, and wins the tie as the larger pair.
    assert merges[0] == ("s", "t" + END)
    assert merges[1] == ("e", "st" + END)
    assert learn_bpe(counts, 0) == []


def test_learning_stops_when_no_pair_is_frequent_enough():
    assert learn_bpe({"ab": 1, "cd": 1}, 10) == []
    assert learn_bpe({"ab": 2}, 10) == [("a", "b" + END)]


def test_the_toy_corpus_gives_subword_nmts_merges():
    lines = ["low low low low low lower lower newest newest newest newest newest newest widest widest widest"]
    counts = Counter(lines[0].split())
    assert learn_bpe(counts, 20) == reference_merges(lines, 20)


def test_segmenting_a_learned_word_gives_one_piece_and_a_new_word_several():
    bpe = BytePairEncoder(learn_bpe({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 10))
    assert bpe.segment("newest") == ["newest"]
    assert bpe.segment("lowest") == ["lo" + JOIN, "west"]  # "west</w>" was learned, "low</w>" ends a word
    assert bpe.segment("xyz") == ["x" + JOIN, "y" + JOIN, "z"]


def test_a_word_glued_to_the_one_before_starts_with_the_marker_and_detokenizes_back():
    bpe = BytePairEncoder([])
    pieces = bpe.encode(["ab", ".", "c"], [False, True, False])
    assert pieces == ["a" + JOIN, "b", JOIN + ".", "c"]
    assert detokenize(pieces) == "ab. c"


def test_detokenizing_a_models_output_leaves_no_mark():
    # A model may write pieces the encoder never would: a join marked from both sides, a mark first or last.
    assert detokenize(["a" + JOIN, JOIN + "b", "c"]) == "ab c"
    assert detokenize([JOIN + ".", "a" + JOIN]) == ". a"
    assert detokenize([]) == ""


def test_bad_input_is_named():
    bpe = BytePairEncoder([])
    with pytest.raises(ValueError, match="one flag per word"):
        bpe.encode(["a", "b"], [True])
    with pytest.raises(ValueError, match="empty word"):
        bpe.segment("")
    with pytest.raises(TypeError, match="list of pieces"):
        detokenize("a b")


@pytest.fixture(scope="module")
def multi30k():
    """The words of Multi30k's training split (both languages) and of its test sentences."""
    split = {"de": word_splitter("de"), "en": word_splitter("en")}
    train = [(split["de"](src), split["en"](tgt)) for src, tgt in load_pairs("train")]
    test = load_pairs("test_2016_flickr")
    return {"train": train, "test": test, "split": split}


@needs_real_data
def test_merges_learned_on_multi30k_equal_subword_nmts_and_so_do_the_segmentations(multi30k):
    counts = Counter()
    lines = []
    for (de_words, _), (en_words, _) in multi30k["train"]:
        counts.update(de_words)
        counts.update(en_words)
        lines += [" ".join(de_words), " ".join(en_words)]
    ours = learn_bpe(counts, NUM_MERGES)
    theirs = reference_merges(lines, NUM_MERGES)
    assert len(ours) == NUM_MERGES
    assert ours == theirs  # every merge, in order

    codes = io.StringIO("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in theirs))
    reference, bpe = BPE(codes, separator=JOIN), BytePairEncoder(ours)
    for src, tgt in multi30k["test"]:
        for lang, sentence in (("de", src), ("en", tgt)):
            words, _ = multi30k["split"][lang](sentence)
            assert [piece for word in words for piece in bpe.segment(word)] == reference.segment_tokens(words), sentence


@needs_real_data
def test_detokenizing_gives_back_every_test_sentence(multi30k):
    bpe = BytePairEncoder([])  # the marks that join pieces do not depend on the merges
    for src, tgt in multi30k["test"]:
        for lang, sentence in (("de", src), ("en", tgt)):
            tokenize = bpe_tokenizer(bpe, multi30k["split"][lang])
            assert detokenize(tokenize(sentence)) == sentence.lower()
