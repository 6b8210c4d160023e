"""Notebook 08's functions behind their input checks: the same names, arguments and results.

The taught modules (``annotated.synthetic``, ``annotated.batching``, ``annotated.schedule``,
``annotated.training``, ``annotated.decoding``) hold the code of the notebook's cells and nothing
else, so they trust their arguments: a size of 0, a padding id outside the vocabulary or a source
without its batch axis fails somewhere inside PyTorch, or quietly gives nonsense. The command lines
and anyone calling the package with values of their own use the functions below instead. Each checks
its arguments first, raising an error of one line that names the bad value
(``annotated.support.checks``), and then calls the taught function. ``annotated.label_smoothing``,
which notebooks 09, 11 and 15 import directly, checks its own arguments (its module attaches the
checks at its end, as ``annotated.multi_head`` does); its names are re-exported here unchanged.

    from annotated.support.guarded_training import greedy_decode   # instead of annotated.decoding
"""

import torch

from annotated import batching, decoding, schedule, synthetic, training
from annotated.batching import Batch  # noqa: F401  (re-exported: the one batch type)
from annotated.label_smoothing import LabelSmoothingLoss, smoothed_targets  # noqa: F401  (they check their input)
from annotated.support.checks import check_budget, check_decoding_inputs, check_lengths, check_positive, check_sizes
from annotated.synthetic import BOS_IDX, EOS_IDX, FIRST_SYMBOL, Pairs  # noqa: F401  (re-exported)
from annotated.training import choose_device, evaluate_loss, train_step  # noqa: F401  (nothing to check)


# ---------------------------------------------------------------------------------------------
# The synthetic tasks


def _check_seed(seed: int) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")


def _check_flag(name: str, value: bool) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def _check_clip(clip: float | None) -> None:
    if clip is not None:
        check_positive("clip", clip)  # clip=0 would scale every gradient to zero: no learning, no error


def _check_task(num_examples: int, length: int, vocab_size: int, seed: int = 0) -> None:
    check_sizes(vocab_size=vocab_size)
    if vocab_size <= FIRST_SYMBOL:
        raise ValueError(f"vocab_size={vocab_size} leaves no symbols: ids 0-3 are the specials, use at least 5")
    check_sizes(allow_zero=True, num_examples=num_examples)
    check_sizes(length=length)
    _check_seed(seed)


def random_sequences(num_examples: int, length: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """``annotated.synthetic.random_sequences``, after checking the sizes."""
    _check_task(num_examples, length, vocab_size, seed)
    return synthetic.random_sequences(num_examples, length, vocab_size, seed)


def copy_task(num_examples: int, length: int, vocab_size: int, seed: int = 0) -> Pairs:
    """``annotated.synthetic.copy_task``, after checking the sizes."""
    _check_task(num_examples, length, vocab_size, seed)
    return synthetic.copy_task(num_examples, length, vocab_size, seed)


def reverse_task(num_examples: int, length: int, vocab_size: int, seed: int = 0) -> Pairs:
    """``annotated.synthetic.reverse_task``, after checking the sizes."""
    _check_task(num_examples, length, vocab_size, seed)
    return synthetic.reverse_task(num_examples, length, vocab_size, seed)


# ---------------------------------------------------------------------------------------------
# Batches


def batch_by_tokens(lengths: list[int], max_tokens: int, shuffle: bool = True, seed: int = 0) -> list[list[int]]:
    """``annotated.batching.batch_by_tokens``, after checking that ``lengths`` is a list of
    integers >= 0 and ``max_tokens`` is positive."""
    check_lengths(lengths)  # a list of integers >= 0, or a clear error
    check_sizes(max_tokens=max_tokens)
    _check_flag("shuffle", shuffle)
    _check_seed(seed)
    return batching.batch_by_tokens(lengths, max_tokens, shuffle, seed)


def collate(examples: list[tuple[list[int], list[int]]], pad_idx: int) -> Batch:
    """``annotated.batching.collate``, after checking that there is an example and that every
    target holds at least ``<s>`` and ``</s>``."""
    if not examples:
        raise ValueError("collate needs at least one (source, target) example")
    check_sizes(allow_zero=True, pad_idx=pad_idx)
    if any(len(tgt) < 2 for _, tgt in examples):
        raise ValueError("every target needs at least <s> and </s> (two ids) for teacher forcing")
    return batching.collate(examples, pad_idx)


# ---------------------------------------------------------------------------------------------
# The schedule and the training loop


def rate(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """``annotated.schedule.rate``, after checking that ``step`` is an integer >= 0 (a negative one was
    read as 1), ``d_model`` and ``warmup`` positive integers and ``factor`` a finite number > 0."""
    check_sizes(allow_zero=True, step=step)
    check_sizes(d_model=d_model, warmup=warmup)
    check_positive("factor", factor)
    return schedule.rate(step, d_model, warmup, factor)


def make_optimizer(model: torch.nn.Module, d_model: int, warmup: int = 4000,
                   factor: float = 1.0) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """``annotated.schedule.make_optimizer``, after checking ``d_model`` and ``warmup`` (before the
    schedule's first call, which would otherwise divide by zero) and ``factor``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_sizes(d_model=d_model, warmup=warmup)
    check_positive("factor", factor)
    return schedule.make_optimizer(model, d_model, warmup, factor)


def train_epoch(model, batches, loss_fn, optimizer, scheduler, accum_steps: int = 1, clip: float | None = None,
                device=None, progress: bool = True, stop=None, step_losses: list[float] | None = None) -> float:
    """``annotated.training.train_epoch``, after checking that ``accum_steps`` is a positive integer and
    ``clip`` None or a finite number > 0."""
    check_sizes(accum_steps=accum_steps)
    _check_clip(clip)
    return training.train_epoch(model, batches, loss_fn, optimizer, scheduler, accum_steps, clip, device, progress,
                                stop, step_losses)


def fit(model, train_batches, val_batches, loss_fn, optimizer, scheduler, epochs: int = 10,
        max_steps: int | None = None, max_minutes: float | None = None, accum_steps: int = 1,
        clip: float | None = None, device=None, progress: bool = True, seed: int = 0) -> dict:
    """``annotated.training.fit``, after checking that the budget allows at least one update, ``clip``
    and ``seed``."""
    check_budget(epochs, max_steps, max_minutes, accum_steps)  # at least one update, or a ValueError
    _check_clip(clip)
    _check_seed(seed)
    return training.fit(model, train_batches, val_batches, loss_fn, optimizer, scheduler, epochs, max_steps,
                        max_minutes, accum_steps, clip, device, progress, seed)


# ---------------------------------------------------------------------------------------------
# Decoding


@torch.no_grad()
def greedy_decode(model, src: torch.Tensor, src_mask: torch.Tensor | None, max_len: int, bos_idx: int = 1,
                  eos_idx: int | None = 2, use_cache: bool = True, pad_idx: int = 0) -> torch.Tensor:
    """``annotated.decoding.greedy_decode``, after checking the source and its mask, ``max_len``, the
    special ids and the weights (finite), and warning about a model left in training mode."""
    # Under no_grad, as the taught function: the warning's stack level points at the caller either way.
    check_decoding_inputs(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx, endless=True)
    return decoding.greedy_decode(model, src, src_mask, max_len, bos_idx, eos_idx, use_cache, pad_idx)
