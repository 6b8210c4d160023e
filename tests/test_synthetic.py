"""annotated.synthetic: the copy and reverse tasks."""

import pytest

from annotated.support import guarded_training as guarded
from annotated.synthetic import BOS_IDX, EOS_IDX, copy_task, random_sequences, reverse_task
from annotated.vocab import BOS, EOS, SPECIALS


def test_bos_and_eos_ids_match_the_vocabulary_specials():
    assert (SPECIALS[BOS_IDX], SPECIALS[EOS_IDX]) == (BOS, EOS)


@pytest.mark.parametrize("task", [copy_task, reverse_task])
def test_every_sequence_is_wrapped_in_bos_and_eos_around_length_symbols(task):
    pairs = task(50, length=7, vocab_size=11, seed=0)
    assert len(pairs) == 50
    for src, tgt in pairs:
        for sequence in (src, tgt):
            assert len(sequence) == 7 + 2
            assert sequence[0] == BOS_IDX and sequence[-1] == EOS_IDX
            assert all(4 <= symbol < 11 for symbol in sequence[1:-1])


def test_symbols_cover_every_id_from_4_to_vocab_size_minus_1():
    symbols = {s for sequence in random_sequences(200, 10, vocab_size=11, seed=0) for s in sequence}
    assert symbols == set(range(4, 11))


def test_the_copy_target_is_the_source():
    assert all(src == tgt for src, tgt in copy_task(20, 5, 10, seed=1))


def test_the_reverse_target_is_the_source_symbols_backwards():
    for src, tgt in reverse_task(20, 5, 10, seed=1):
        assert tgt[1:-1] == src[1:-1][::-1]
        assert src != tgt or src[1:-1] == src[-2:0:-1]  # only palindromes read the same


def test_the_same_seed_gives_the_same_data_and_another_seed_other_data():
    assert copy_task(10, 6, 20, seed=5) == copy_task(10, 6, 20, seed=5)
    assert copy_task(10, 6, 20, seed=5) != copy_task(10, 6, 20, seed=6)
    # Both tasks draw the same sources for a seed, so they can be compared example by example.
    assert [s for s, _ in copy_task(10, 6, 20, seed=5)] == [s for s, _ in reverse_task(10, 6, 20, seed=5)]


def test_a_vocabulary_with_no_room_for_symbols_or_an_empty_length_is_refused():
    # The taught functions trust their arguments; the guarded ones check them first.
    with pytest.raises(ValueError, match="vocab_size=4"):
        guarded.copy_task(3, 5, vocab_size=4)
    with pytest.raises(ValueError, match="length"):
        guarded.reverse_task(3, 0, vocab_size=10)
    with pytest.raises(ValueError, match="num_examples must be an integer >= 0"):
        guarded.random_sequences(-1, 5, vocab_size=10)
    assert guarded.copy_task(10, 6, 20, seed=5) == copy_task(10, 6, 20, seed=5)  # and then change nothing
    assert guarded.reverse_task(10, 6, 20, seed=5) == reverse_task(10, 6, 20, seed=5)
