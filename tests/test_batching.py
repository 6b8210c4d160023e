"""annotated.batching: batching by token count with length buckets, and collate."""

import os
import random

import pytest
import torch

from annotated.batching import Batch, batch_by_tokens, collate
from annotated.support import guarded_training as guarded
from annotated.support.download import ENV_VAR

REAL_DATA = os.environ.get(ENV_VAR)
needs_real_data = pytest.mark.skipif(
    not REAL_DATA,
    reason=f"{ENV_VAR} is unset; point it at the Multi30k .gz files (../shared/data/multi30k)",
)


def caption_like_lengths(n: int, seed: int = 0) -> list[int]:
    """Lengths shaped like Multi30k's tokenized captions: mostly 8-25 tokens, a few up to 45."""
    rng = random.Random(seed)
    return [min(45, max(4, round(rng.lognormvariate(2.65, 0.35)))) for _ in range(n)]


def padded_size(batch: list[int], lengths: list[int]) -> int:
    return len(batch) * max(lengths[i] for i in batch)


def padding_fraction(batches: list[list[int]], lengths: list[int]) -> float:
    padded = sum(padded_size(batch, lengths) for batch in batches)
    return 1 - sum(lengths) / padded


def random_batches(lengths: list[int], max_tokens: int, seed: int = 0) -> list[list[int]]:
    """The same token budget, filled in random order: what batching without buckets gives."""
    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    batches, batch = [], []
    for i in order:
        longest = max([lengths[j] for j in batch] + [lengths[i]])
        if batch and (len(batch) + 1) * longest > max_tokens:
            batches.append(batch)
            batch = []
        batch.append(i)
    return batches + [batch]


@pytest.mark.parametrize("max_tokens", [1, 50, 3000])
def test_every_index_appears_in_exactly_one_batch(max_tokens):
    lengths = caption_like_lengths(2000)
    batches = batch_by_tokens(lengths, max_tokens)
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(batches), "no empty batch"


def test_no_batch_exceeds_max_tokens_once_padded():
    lengths = caption_like_lengths(2000)
    batches = batch_by_tokens(lengths, 500)
    assert max(padded_size(batch, lengths) for batch in batches) <= 500
    # Batches are filled: most could not take one more example of their longest length.
    full = [b for b in batches if (len(b) + 1) * max(lengths[i] for i in b) > 500]
    assert len(full) >= len(batches) - 5


def test_an_example_longer_than_max_tokens_gets_a_batch_of_its_own():
    lengths = [5, 60, 6, 5, 7]
    batches = batch_by_tokens(lengths, max_tokens=20, shuffle=False)
    assert [1] in batches
    assert all(padded_size(b, lengths) <= 20 for b in batches if b != [1])


def test_without_shuffle_batches_follow_increasing_length():
    lengths = [9, 3, 7, 3, 5]
    assert batch_by_tokens(lengths, max_tokens=10, shuffle=False) == [[1, 3], [4], [2], [0]]


def test_the_same_seed_gives_the_same_batches_and_another_seed_other_ones():
    lengths = caption_like_lengths(2000)
    assert batch_by_tokens(lengths, 1000, seed=3) == batch_by_tokens(lengths, 1000, seed=3)
    assert batch_by_tokens(lengths, 1000, seed=3) != batch_by_tokens(lengths, 1000, seed=4)


def test_a_non_positive_budget_is_refused():
    with pytest.raises(ValueError, match="max_tokens"):
        guarded.batch_by_tokens([3, 4], 0)  # batch_by_tokens behind its checks
    assert guarded.batch_by_tokens([5, 3, 9, 3], 12, seed=1) == batch_by_tokens([5, 3, 9, 3], 12, seed=1)


def test_length_buckets_pad_far_less_than_random_batches():
    lengths = caption_like_lengths(29_000)
    bucketed = padding_fraction(batch_by_tokens(lengths, 3000), lengths)
    unsorted = padding_fraction(random_batches(lengths, 3000), lengths)
    assert bucketed < 0.02 and unsorted > 0.3, (bucketed, unsorted)


@needs_real_data
def test_on_multi30k_length_buckets_pad_both_sides_far_less_than_random_batches():
    from annotated.data import load_pairs

    # Whitespace words + <s> and </s>: close to the tokenized lengths, and quick to count.
    pairs = load_pairs("train")
    src = [len(de.split()) + 2 for de, _ in pairs]
    tgt = [len(en.split()) + 2 for _, en in pairs]
    longer = [max(s, t) for s, t in zip(src, tgt)]
    for lengths in (src, tgt):
        bucketed = padding_fraction(batch_by_tokens(longer, 3000), lengths)
        unsorted = padding_fraction(random_batches(longer, 3000), lengths)
        assert bucketed < 0.15 and unsorted > 0.35 and bucketed < unsorted / 4, (bucketed, unsorted)


def test_collate_pads_each_side_to_its_longest_and_builds_masks():
    examples = [([1, 5, 6, 2], [1, 7, 2]), ([1, 5, 2], [1, 7, 8, 9, 2])]
    batch = collate(examples, pad_idx=0)
    assert isinstance(batch, Batch)
    assert batch.src.dtype == torch.long
    assert batch.src.tolist() == [[1, 5, 6, 2], [1, 5, 2, 0]]
    assert batch.tgt_in.tolist() == [[1, 7, 2, 0], [1, 7, 8, 9]]
    assert batch.tgt_y.tolist() == [[7, 2, 0, 0], [7, 8, 9, 2]]
    assert batch.src_mask.tolist() == [[[True, True, True, True]], [[True, True, True, False]]]
    assert batch.tgt_mask.shape == (2, 4, 4)
    # The first sentence's decoder sees no padding key, and no position sees the future.
    assert batch.tgt_mask[0].tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
        [True, True, True, False],
    ]
    assert batch.ntokens == 2 + 4


def test_collate_uses_the_given_pad_index():
    batch = collate([([1, 2], [1, 2]), ([1, 4, 2], [1, 4, 4, 2])], pad_idx=9)
    assert batch.src[0].tolist() == [1, 2, 9]
    assert batch.src_mask[0].tolist() == [[True, True, False]]


def test_collate_refuses_no_examples_and_targets_without_bos_and_eos():
    with pytest.raises(ValueError, match="at least one"):
        guarded.collate([], pad_idx=0)  # collate behind its checks
    with pytest.raises(ValueError, match="<s> and </s>"):
        guarded.collate([([1, 2], [1])], pad_idx=0)
    checked, taught = guarded.collate([([1, 2], [1, 2])], pad_idx=0), collate([([1, 2], [1, 2])], pad_idx=0)
    assert torch.equal(checked.tgt_mask, taught.tgt_mask) and checked.ntokens == taught.ntokens
