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


AT_TEXTS = ["x@@y", "max@@web.de", "Schreib an max@web.de!", "a @ b", "x@ y", "x @y", "@@", "a@@ b", "@", "x@@",
            "@@y", "a@@@b", "#@@#", "(@)", "E-Mail: a@b.de, bitte."]


@pytest.mark.parametrize("text", AT_TEXTS)
def test_text_with_at_signs_and_join_marks_comes_back_exactly(text):
    # Before the escape, an "@" of the text next to a join mark was taken for one: "x@@y" -> "x@ @y",
    # "max@web.de" -> "max@ web.de". Now every "@" is "＠" inside the pieces, and "@" again in the text.
    split = word_splitter("de")
    for merges in ([], learn_bpe(Counter({"max@web.de": 3, "x@@y": 2, "@@": 2, "web": 4}), 30)):
        pieces = BytePairEncoder(merges).encode(*split(text))
        assert all(JOIN not in piece.strip("@") for piece in pieces if piece.strip("@")), pieces  # marks at the ends
        assert detokenize(pieces) == text.lower()


def test_a_word_holding_the_escape_itself_is_refused_not_changed():
    with pytest.raises(ValueError, match="holds U\\+FF20 FULLWIDTH COMMERCIAL AT, which stands for '@'"):
        BytePairEncoder([]).segment("a\uff20b")


def test_merges_learned_from_any_words_are_written_to_bpe_codes_and_read_back(tmp_path):
    from annotated.support.pretrained import CODES_HEADER, read_merges

    merges = learn_bpe(Counter({"max@web.de": 3, "x@@y": 2, "ab@": 2, "straße": 5}), 50)
    codes = tmp_path / "bpe_codes.txt"
    codes.write_text("\n".join([CODES_HEADER, *(" ".join(pair) for pair in merges)]) + "\n", encoding="utf-8")
    assert [tuple(pair) for pair in read_merges(codes)] == merges


@pytest.mark.parametrize("call, message", [
    # before the check, ("a", " ") became the line "a  " in bpe_codes.txt, which read_merges refuses
    (lambda: learn_bpe({"new york": 3, "a ": 2}, 5), "a word of word_counts 'new york' holds whitespace"),
    (lambda: learn_bpe({"ab": -3, "cd": 5}, 5), r"word_counts\['ab'\] = -3: a count is how often the word occurs"),
    (lambda: learn_bpe({"ab": 2.5}, 5), r"word_counts\['ab'\] = 2.5: a count .* an integer >= 0"),
    (lambda: learn_bpe(["ab", "cd"], 5), "word_counts must be a dict word -> count"),
    (lambda: learn_bpe({"": 2}, 5), "a word of word_counts is empty"),
    (lambda: learn_bpe({"ab": 2}, 5, min_frequency=0), "min_frequency must be a positive integer, got 0"),
    (lambda: BytePairEncoder([("a b", "c")]), r"merge 0 \('a b', 'c'\) is not a pair of two pieces without whitespace"),
    (lambda: BytePairEncoder([("a", "b", "c")]), r"merge 0 .* is not a pair of two pieces"),
    (lambda: BytePairEncoder([]).encode(["new york"], [False]), r"words\[0\] 'new york' holds whitespace"),
    (lambda: BytePairEncoder([]).encode(["a", 3], [True, False]), r"words\[1\] is a int, not a str"),
    (lambda: BytePairEncoder([]).encode(["a"], ["no"]), r"spaces\[0\] is 'no': give True where a space follows"),
])
def test_words_counts_and_merges_that_bpe_codes_could_not_hold_are_named(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_words_given_as_iterators_are_encoded():
    assert BytePairEncoder([]).encode(iter(["ab", "."]), iter([False, False])) == ["a" + JOIN, "b", JOIN + "."]


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


def test_spelling_an_empty_word_or_pieces_that_are_not_text_are_named():
    with pytest.raises(ValueError, match="word is empty"):
        spell("")  # before: IndexError from word[-1]
    with pytest.raises(TypeError, match=r"pieces\[1\] is a int, not a str"):
        detokenize(["a", 3])


def test_word_tokens_that_are_not_text_are_named():
    from annotated.support.words import detokenize_words

    with pytest.raises(TypeError, match=r"tokens\[1\] is a int, not a str"):
        detokenize_words(["a", 7, "."])  # before: AttributeError 'int' object has no attribute 'startswith'
    assert detokenize_words(iter(["a", "dog", "."])) == "a dog."
