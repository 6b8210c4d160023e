"""annotated.alignment (notebook 12): IBM Model 1, checked against a plain dense EM."""

import numpy as np
import pytest

from annotated.alignment import NULL, train_ibm_model1

TOY = [(["das", "haus"], ["the", "house"]), (["das", "buch"], ["the", "book"]), (["ein", "buch"], ["a", "book"]),
       (["ein", "haus", "ist", "klein"], ["a", "house", "is", "small"]), (["das", "buch", "ist", "klein"], ["the", "book", "is", "small"])]


def dense_em(pairs, iterations):
    """IBM Model 1 the textbook way: a full |E| x |F| table, loops over every sentence."""
    german = [NULL, *sorted({f for de, _ in pairs for f in de})]
    english = sorted({e for _, en in pairs for e in en})
    t = np.full((len(english), len(german)), 1.0 / len(english))
    for _ in range(iterations):
        count = np.zeros_like(t)
        for de, en in pairs:
            fs = [0] + [german.index(f) for f in de]
            for e in en:
                ei = english.index(e)
                z = sum(t[ei, f] for f in fs)
                for f in fs:
                    count[ei, f] += t[ei, f] / z
        t = count / count.sum(0, keepdims=True)
    return german, english, t


@pytest.mark.parametrize("iterations", [1, 3, 10])
def test_equals_the_dense_textbook_em(iterations):
    model = train_ibm_model1(TOY, iterations)
    german, english, t = dense_em(TOY, iterations)
    for i, e in enumerate(english):
        for j, f in enumerate(german):
            assert model.prob(e, f) == pytest.approx(t[i, j], abs=1e-12)


def test_learns_the_toy_dictionary_and_aligns_with_it():
    model = train_ibm_model1(TOY, 20)
    for f, e in [("haus", "house"), ("buch", "book"), ("das", "the"), ("ein", "a")]:
        assert max(model.english, key=lambda w: model.prob(w, f)) == e
    assert model.align(["das", "kleine", "haus"], ["the", "house", "xyz"]) == [0, 2, None]  # unseen: None
    assert model.align(["ein", "buch"], ["a", "book"]) == [0, 1]
    for f in model.german:  # each column is a distribution over English words
        assert sum(model.prob(e, f) for e in model.english) == pytest.approx(1.0)
    assert model.prob("house", "unknown") == 0.0 and model.prob("unknown", "haus") == 0.0


@pytest.mark.parametrize("pairs, iterations, message", [
    ([], 5, "at least one"),
    ([("das haus", "the house")], 5, "list of German words"),
    ([(["das"], ["the"], ["x"])], 5, "pair 0"),
    (TOY, 0, "iterations"),
])
def test_bad_input_is_a_clear_error(pairs, iterations, message):
    with pytest.raises(ValueError, match=message):
        train_ibm_model1(pairs, iterations)


def test_pairs_without_a_single_english_word_are_a_clear_error_not_a_division_by_zero():
    for pairs in ([([], [])], [(["ein", "hund"], [])], [([], []), (["das"], [])]):
        with pytest.raises(ValueError, match="has an English word, so there is nothing to align"):
            train_ibm_model1(pairs)
    model = train_ibm_model1([(["das", "haus"], ["the", "house"]), (["leer"], [])])  # one empty side is fine
    assert model.prob("house", "haus") > 0
