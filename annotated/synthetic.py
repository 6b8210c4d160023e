"""Synthetic tasks for a first training run: copy a random sequence, or reverse it.

Before real translation, a task whose answer we know checks the pipeline (batches, masks,
loss, schedule, decoding) in a few hundred updates: a Transformer that works learns to copy
perfectly. It catches some bugs, not all: notebook 08 (section 10) trains with one bug at a
time; a missing look-ahead mask, unshifted labels or missing positions fail, while a missing
1/sqrt(d_k), a missing label smoothing or dropout in another place do not show, and sequences
of one length have no padding to get wrong. Reversing is harder to fake; it needs attention to look at the mirrored
position.

Ids 0-3 are kept for ``<pad>``, ``<s>``, ``</s>``, ``<unk>``, as in ``annotated.vocab``;
the symbols are drawn from ids 4 .. vocab_size - 1.

Notebook: ``08_training.ipynb``. With its arguments checked first: ``annotated.support.guarded_training``.
"""

import random

BOS_IDX, EOS_IDX = 1, 2
FIRST_SYMBOL = 4
Pairs = list[tuple[list[int], list[int]]]  # (source ids, target ids)


def random_sequences(
    num_examples: int, length: int, vocab_size: int, seed: int = 0
) -> list[list[int]]:
    """``num_examples`` lists of ``length`` symbols drawn uniformly from ids 4 .. vocab_size - 1."""
    rng = random.Random(seed)
    symbols = range(FIRST_SYMBOL, vocab_size)
    return [rng.choices(symbols, k=length) for _ in range(num_examples)]


def copy_task(num_examples: int, length: int, vocab_size: int, seed: int = 0) -> Pairs:
    """(source, target) pairs where the target is the source: ``<s> x_1 .. x_n </s>`` both."""
    pairs = []
    for symbols in random_sequences(num_examples, length, vocab_size, seed):
        sequence = [BOS_IDX, *symbols, EOS_IDX]
        pairs.append((sequence, list(sequence)))
    return pairs


def reverse_task(num_examples: int, length: int, vocab_size: int, seed: int = 0) -> Pairs:
    """(source, target) pairs ``<s> x_1 .. x_n </s>`` -> ``<s> x_n .. x_1 </s>``."""
    pairs = []
    for symbols in random_sequences(num_examples, length, vocab_size, seed):
        pairs.append(([BOS_IDX, *symbols, EOS_IDX], [BOS_IDX, *reversed(symbols), EOS_IDX]))
    return pairs
