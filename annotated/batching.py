"""Batches with their masks, and batching by token count with length buckets (paper §5.1).

Notebook: ``08_training.ipynb``. With its arguments checked first: ``annotated.support.guarded_training``.
"""

import random

import torch
from torch.nn.utils.rnn import pad_sequence

from annotated.masks import padding_mask, target_mask


class Batch:
    """A batch of source and target token ids, shifted for teacher forcing, with masks.

    ``tgt`` holds ``<s> y_1 ... y_n </s>`` (padded). The decoder reads ``tgt_in`` (all but
    the last token) and learns to predict ``tgt_y`` (all but the first): at each position,
    the next token.

    Attributes:
        src (batch, L_src), src_mask (batch, 1, L_src);
        tgt_in, tgt_y (batch, L_tgt - 1), tgt_mask (batch, L_tgt - 1, L_tgt - 1);
        ntokens: the number of real (non-padding) tokens in ``tgt_y``, the loss's divisor.
    """

    def __init__(self, src: torch.Tensor, tgt: torch.Tensor, pad_idx: int):
        self.src = src
        self.src_mask = padding_mask(src, pad_idx)
        self.tgt_in = tgt[:, :-1]
        self.tgt_y = tgt[:, 1:]
        self.tgt_mask = target_mask(self.tgt_in, pad_idx)
        self.ntokens = int((self.tgt_y != pad_idx).sum())

    def to(self, device: torch.device | str) -> "Batch":
        """Move every tensor to ``device``; returns self."""
        for name in ("src", "src_mask", "tgt_in", "tgt_y", "tgt_mask"):
            setattr(self, name, getattr(self, name).to(device))
        return self


def batch_by_tokens(
    lengths: list[int], max_tokens: int, shuffle: bool = True, seed: int = 0
) -> list[list[int]]:
    """Group example indices into batches of similar length, each of <= ``max_tokens`` tokens.

    The paper batches sentence pairs "by approximate sequence length" with a budget of
    tokens, not of sentences (§5.1). Sorting by length before cutting puts sentences of
    similar length together, so little of a batch is padding. A batch's padded size is
    ``len(batch) * max(lengths in batch)``; for sentence pairs, pass the longer side of
    each pair. An example longer than ``max_tokens`` is not dropped: it gets a batch of
    its own. With ``shuffle``, ties in length are broken at random and the batch order is
    shuffled (both by ``seed``), so training does not see the lengths in order.
    """
    order = list(range(len(lengths)))
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(order)  # random order among equal lengths (the sort below is stable)
    order.sort(key=lambda i: lengths[i])
    batches, batch = [], []
    for i in order:
        # Sorted ascending, so example i is the longest of the batch it would join.
        if batch and (len(batch) + 1) * lengths[i] > max_tokens:
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    if shuffle:
        rng.shuffle(batches)
    return batches


def collate(examples: list[tuple[list[int], list[int]]], pad_idx: int) -> Batch:
    """Pad (source ids, target ids) pairs to the longest of each side and build a :class:`Batch`.

    Each target already holds ``<s> ... </s>``, so it has at least two ids.
    """
    sources = [torch.tensor(src, dtype=torch.long) for src, _ in examples]
    targets = [torch.tensor(tgt, dtype=torch.long) for _, tgt in examples]
    src = pad_sequence(sources, batch_first=True, padding_value=pad_idx)  # (batch, L_src)
    tgt = pad_sequence(targets, batch_first=True, padding_value=pad_idx)  # (batch, L_tgt)
    return Batch(src, tgt, pad_idx)
