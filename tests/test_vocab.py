"""annotated.vocab: a torchtext-like vocabulary."""

import os

import pytest
import torch

from annotated.support.download import ENV_VAR
from annotated.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab, build_vocab_from_iterator

REAL_DATA = os.environ.get(ENV_VAR)
needs_real_data = pytest.mark.skipif(
    not REAL_DATA,
    reason=f"{ENV_VAR} is unset; point it at the Multi30k .gz files (../shared/data/multi30k)",
)

SENTENCES = [
    ["a", "dog", "runs", "."],
    ["a", "cat", "sleeps", "."],
    ["a", "dog", "sleeps", "."],
    ["the", "zebra", "."],
]


@pytest.fixture
def vocab() -> Vocab:
    v = build_vocab_from_iterator(SENTENCES)
    v.set_default_index(v[UNK])
    return v


def test_specials_come_first_with_ids_0_to_3():
    v = build_vocab_from_iterator(SENTENCES)
    assert SPECIALS == [PAD, BOS, EOS, UNK]
    assert v.get_itos()[:4] == SPECIALS
    assert [v[PAD], v[BOS], v[EOS], v[UNK]] == [0, 1, 2, 3]


def test_tokens_are_ordered_by_descending_frequency_then_alphabetically(vocab):
    # "." 4, "a" 3, "dog" 2, "sleeps" 2, then the singletons alphabetically.
    assert vocab.get_itos()[4:] == [".", "a", "dog", "sleeps", "cat", "runs", "the", "zebra"]


def test_min_freq_drops_tokens_seen_fewer_times():
    v = build_vocab_from_iterator(SENTENCES, min_freq=2)
    assert v.get_itos() == SPECIALS + [".", "a", "dog", "sleeps"]
    assert "zebra" not in v


def test_a_special_in_the_data_keeps_its_place_and_is_not_repeated():
    v = build_vocab_from_iterator([["<unk>", "x", "<unk>"], ["x"]])
    assert v.get_itos() == SPECIALS + ["x"]


def test_an_unknown_token_maps_to_the_default_index(vocab):
    assert vocab["giraffe"] == vocab[UNK] == 3
    assert vocab.lookup_indices(["a", "giraffe"]) == [vocab["a"], 3]
    assert vocab.get_default_index() == 3


def test_an_unknown_token_without_a_default_index_raises_naming_the_token_and_the_fix():
    v = build_vocab_from_iterator(SENTENCES)
    assert v.get_default_index() is None
    with pytest.raises(RuntimeError, match=r"'giraffe'.*set_default_index"):
        v["giraffe"]


def test_lookup_tokens_inverts_lookup_indices_for_known_words(vocab):
    tokens = ["a", "zebra", "sleeps", ".", "<s>"]
    indices = vocab.lookup_indices(tokens)
    assert len(set(indices)) == len(tokens)
    assert vocab.lookup_tokens(indices) == tokens


def test_unknown_words_come_back_as_unk(vocab):
    assert vocab.lookup_tokens(vocab.lookup_indices(["a", "giraffe"])) == ["a", UNK]


def test_len_contains_itos_and_stoi_agree(vocab):
    itos, stoi = vocab.get_itos(), vocab.get_stoi()
    assert len(vocab) == len(itos) == len(stoi) == 12
    assert all(stoi[token] == i and token in vocab for i, token in enumerate(itos))
    assert "giraffe" not in vocab


def test_the_returned_tables_are_copies(vocab):
    vocab.get_itos().append("extra")
    vocab.get_stoi()["extra"] = 99
    assert len(vocab) == 12 and "extra" not in vocab


def test_state_dict_holds_only_lists_and_ints_and_round_trips_through_a_weights_only_load(
    vocab, tmp_path
):
    state = vocab.state_dict()
    assert state == {"itos": vocab.get_itos(), "default_index": 3}
    torch.save({"vocab": state}, tmp_path / "checkpoint.pt")
    loaded = Vocab.from_state_dict(torch.load(tmp_path / "checkpoint.pt", weights_only=True)["vocab"])
    assert loaded.get_itos() == vocab.get_itos()
    assert loaded["giraffe"] == 3


def test_invalid_arguments_raise_errors_that_name_them(vocab):
    with pytest.raises(ValueError, match="min_freq"):
        build_vocab_from_iterator(SENTENCES, min_freq=0)
    with pytest.raises(ValueError, match=r"\['x'\]"):
        Vocab(["x", "y", "x"])
    with pytest.raises(ValueError, match="default index 12"):
        vocab.set_default_index(12)
    with pytest.raises(IndexError, match="id 12"):
        vocab.lookup_tokens([1, 12])


@needs_real_data
def test_train_vocabularies_with_min_freq_2_have_thousands_of_words_and_cover_the_test_set():
    from annotated.data import load_pairs, tokenizer

    train, test = load_pairs("train"), load_pairs("test_2016_flickr")
    for side, lang in enumerate(("de", "en")):
        tokenize = tokenizer(lang)
        v = build_vocab_from_iterator((tokenize(pair[side]) for pair in train), min_freq=2)
        v.set_default_index(v[UNK])
        # spaCy 3.8's blank pipelines give 7,853 (de) and 5,893 (en) words.
        assert 5_000 < len(v) < 10_000, (lang, len(v))
        # Built from training data only: words new in the test set become <unk>, but few.
        test_ids = [i for pair in test for i in v.lookup_indices(tokenize(pair[side]))]
        unknown = test_ids.count(v[UNK]) / len(test_ids)
        assert 0 < unknown < 0.05, (lang, unknown)


def test_a_string_where_a_list_of_tokens_is_expected_is_an_error_not_its_letters():
    with pytest.raises(TypeError, match="each item of the iterator must be a list of tokens"):
        build_vocab_from_iterator(["ein mann", "eine frau"])
    with pytest.raises(TypeError, match="itos must be a list of tokens"):
        Vocab("abc")
    vocab = build_vocab_from_iterator([["mann"]])
    with pytest.raises(TypeError, match=r"tokens must be a list of tokens, got a single string 'mann'"):
        vocab.lookup_indices("mann")
