"""Input checks of the variants the later notebooks teach: the attention variants of notebooks 13 and 14
(local attention, Linformer, BigBird, learned, relative and rotary positions), notebook 15's model
variations and its decision rule, and notebook 08's label smoothing.

The taught functions call one of these in a single line, or their module wraps them with one at its end
(``annotated.support.class_guards``), so that the lesson shows the algorithm and a learner who passes the
wrong shape, a NaN or a value out of range still gets a message that names it and says what to change.
"""

import math
import numbers
from collections.abc import Mapping

import numpy as np
import torch

from annotated.support.checks import (check_budget, check_features, check_label_smoothing, check_mask_shape,
                                      check_sizes, check_targets)

INDEX_DTYPES = (torch.int64, torch.int32)  # what scatter_ and embedding lookups take as token ids


def check_local_attention(query: torch.Tensor, key: torch.Tensor, b: int) -> None:
    """Raise a ValueError unless ``b`` is a positive block size and query and key are one sequence
    (local attention is self-attention: the same n positions on both sides)."""
    check_sizes(b=b)
    if key.shape[-2] != query.shape[-2]:
        raise ValueError(
            f"local attention is self-attention: query has {query.shape[-2]} positions and key "
            f"{key.shape[-2]}; give both the same sequence"
        )


def check_projections(key: torch.Tensor, E: torch.Tensor, F: torch.Tensor) -> None:
    """Raise a ValueError unless Linformer's E and F are (k, n) matrices for the n positions of ``key``."""
    if not isinstance(key, torch.Tensor) or key.dim() < 2:
        shape = tuple(key.shape) if isinstance(key, torch.Tensor) else type(key).__name__
        raise ValueError(f"key of shape {shape} must be (..., n, d_k): one key vector per position")
    n = key.size(-2)
    for name, P in (("E", E), ("F", F)):
        if not isinstance(P, torch.Tensor):
            raise TypeError(f"{name} must be a (k, {n}) tensor, got {type(P).__name__}")
        if P.dim() != 2 or P.size(1) != n:
            raise ValueError(
                f"{name} of shape {tuple(P.shape)} must be (k, n) = (k, {n}): it mixes the n "
                f"positions of the keys and values into k rows; build it for this length n"
            )


def check_energy(energy: float) -> None:
    """Raise a ValueError unless ``energy`` is a share of the spectrum, in (0, 1]."""
    if not _is_number(energy) or not 0 < energy <= 1:
        raise ValueError(f"energy={energy!r} is a share of the spectrum: give a number in (0, 1], e.g. 0.9")


def check_attention_matrices(weights: torch.Tensor, name: str = "weights") -> None:
    """Raise a ValueError unless ``weights`` is a tensor of matrices (..., L_q, L_k), none of them empty,
    with finite entries: a singular value decomposition of NaN fails to converge."""
    if not isinstance(weights, torch.Tensor) or weights.dim() < 2 or weights.size(-1) == 0 or weights.size(-2) == 0:
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"{name} of shape {shape} must be matrices (..., L_q, L_k) with L_q, L_k >= 1: one "
                         f"attention map, or a stack of them")
    if weights.is_complex() or not bool(torch.isfinite(weights).all()):
        raise ValueError(f"{name} holds NaN or infinite values (or complex ones): attention weights are finite "
                         f"probabilities; check the model or the mask that produced them")


def check_rank_inputs(weights: torch.Tensor, energy: float = 0.9) -> None:
    """``rank_for_energy``'s arguments: finite matrices, none all zeros (no energy to keep), a share in (0, 1]."""
    check_energy(energy)
    check_attention_matrices(weights)
    if bool((weights.flatten(-2).abs().amax(-1) == 0).any()):
        raise ValueError("weights holds a matrix of zeros: it has no energy to keep, so no rank keeps a share "
                         "of it; leave out the maps of fully masked queries")


def check_bigbird_arguments(n: int, window: int, n_random: int, n_global: int) -> None:
    """Raise a ValueError unless BigBird's mask can be drawn: n and an odd window positive, as many random
    and global keys as the n positions hold at most."""
    check_sizes(allow_zero=True, n_random=n_random, n_global=n_global)
    check_sizes(n=n, window=window)
    if window % 2 == 0:
        raise ValueError(f"window={window} must be odd: the query in the middle, window // 2 keys each side")
    if n_random > n or n_global > n:
        raise ValueError(f"n_random={n_random} and n_global={n_global} cannot exceed the n={n} positions")


def check_square_mask(mask: torch.Tensor) -> None:
    """Raise a ValueError unless ``mask`` is (n, n): one self-attention mask."""
    if mask.dim() != 2 or mask.size(0) != mask.size(1):
        raise ValueError(f"mask of shape {tuple(mask.shape)} must be (n, n): one self-attention mask")


def check_learned_positions_input(x: torch.Tensor, start: int, table: torch.nn.Embedding) -> None:
    """Raise a ValueError unless ``x`` is (batch, L, d_model) for the table's d_model, ``start`` >= 0, and
    positions start .. start + L - 1 all have a row in the table."""
    check_features(x, table.embedding_dim, "LearnedPositionalEncoding")
    check_sizes(allow_zero=True, start=start)
    if start + x.size(1) > table.num_embeddings:
        raise ValueError(
            f"sequence of length {start + x.size(1)} is longer than the learned table "
            f"(max_len={table.num_embeddings}): a learned table has no vector for later positions; "
            f"build it with a larger max_len or truncate the input"
        )


def check_relative_vectors(query: torch.Tensor, key: torch.Tensor, a_k: torch.Tensor, a_v: torch.Tensor) -> None:
    """Raise a ValueError unless Shaw et al.'s a_k and a_v are both (L_q, L_k, d_k): one vector per pair."""
    if a_k.shape != (query.size(-2), key.size(-2), query.size(-1)) or a_v.shape != a_k.shape:
        raise ValueError(f"a_k {tuple(a_k.shape)} and a_v {tuple(a_v.shape)} must both be (L_q, L_k, d_k) = "
                         f"{(query.size(-2), key.size(-2), query.size(-1))}: one vector per (query, key) pair")


def check_relative_attention_inputs(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, a_k: torch.Tensor,
                                    a_v: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """``relative_attention``'s inputs: query, key and value tensors (..., L, d) with one value per key, and a
    bool mask (..., L_q or 1, L_k) that fits the scores (the vectors a_k, a_v are checked by the function)."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, torch.Tensor) or x.dim() < 2:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} of shape {shape} must be (..., L, d_k): one vector per position")
    if value.size(-2) != key.size(-2):
        raise ValueError(f"value has {value.size(-2)} positions and key {key.size(-2)}: one value per key")
    if mask is not None:
        check_mask_shape(mask, torch.Size([*query.shape[:-1], key.size(-2)]))


def check_offset_table(q: torch.Tensor, E: torch.Tensor) -> None:
    """Raise a ValueError unless Music Transformer's E is (L, D) for q (..., L, D): one row per offset
    -(L-1) .. 0."""
    if q.dim() < 2:
        raise ValueError(f"q of shape {tuple(q.shape)} must be (..., L, D): one query vector per position")
    if E.shape != (q.size(-2), q.size(-1)):
        raise ValueError(f"E {tuple(E.shape)} must be (L, D) = {(q.size(-2), q.size(-1))}: one row per offset "
                         f"-(L-1) .. 0")


def check_skew_input(qe: torch.Tensor) -> None:
    """Raise a ValueError unless ``qe`` is (..., L, L): the skew turns the L columns of offsets into the L
    columns of keys, so it needs as many positions as offsets."""
    if not isinstance(qe, torch.Tensor) or qe.dim() < 2 or qe.size(-1) != qe.size(-2):
        shape = tuple(qe.shape) if isinstance(qe, torch.Tensor) else type(qe).__name__
        raise ValueError(f"qe of shape {shape} must be square, (..., L, L): Q E^T of L queries and the L offsets "
                         f"-(L-1) .. 0 (give E one row per position)")


def check_rotary_sizes(length: int, d: int, start: int) -> None:
    """Raise a ValueError unless length and start are >= 0 and d is a positive even number of features."""
    check_sizes(allow_zero=True, length=length, start=start)
    check_sizes(d=d)
    if d % 2 != 0:
        raise ValueError(f"d={d} must be even: rotary embeddings turn the features in pairs; use an even d_k")


# ---------------------------------------------------------------------------------------------
# Label smoothing (notebook 08)


def check_smoothed_targets_arguments(target: torch.Tensor, vocab_size: int, pad_idx: int, smoothing: float,
                                     dtype: torch.dtype) -> None:
    """``smoothed_targets``'s arguments: a usable vocabulary, padding id and smoothing in [0, 1)
    (``check_label_smoothing``), target (N,) token ids inside the vocabulary, a floating ``dtype``."""
    check_label_smoothing(vocab_size, pad_idx, smoothing)
    if not isinstance(target, torch.Tensor) or target.dim() != 1 or target.dtype not in INDEX_DTYPES:
        got = (f"a {target.dtype} tensor of shape {tuple(target.shape)}" if isinstance(target, torch.Tensor)
               else type(target).__name__)
        raise ValueError(f"target must be a 1-D tensor of token ids (N,), torch.long, got {got}; flatten a batch "
                         f"with target.reshape(-1)")
    outside = (target < 0) | (target >= vocab_size)
    if bool(outside.any()):
        bad = target[outside].unique()[:5].tolist()
        raise ValueError(f"target ids {bad} are outside the vocabulary of {vocab_size} (0..{vocab_size - 1})")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype={dtype!r} cannot hold probabilities such as {smoothing / (vocab_size - 2):.3g}: "
                         f"give a floating dtype, e.g. torch.float32")


def check_smoothing_arguments(vocab_size: int, pad_idx: int, smoothing: float = 0.1) -> None:
    """``LabelSmoothingLoss``'s arguments (``check_label_smoothing``)."""
    check_label_smoothing(vocab_size, pad_idx, smoothing)


def check_label_smoothing_call(loss, logits: torch.Tensor, target: torch.Tensor) -> None:
    """``LabelSmoothingLoss``'s inputs: floating logits as wide as its vocabulary, one integer target per
    row of them (the ids themselves are checked by ``smoothed_targets``)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() == 0 or not logits.is_floating_point():
        got = f"{logits.dtype} {tuple(logits.shape)}" if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits must be a floating tensor (..., vocab_size), got {got}")
    if logits.size(-1) != loss.vocab_size:
        raise ValueError(f"logits have {logits.size(-1)} columns but vocab_size={loss.vocab_size}; build the loss "
                         f"with the target vocabulary's size")
    if not isinstance(target, torch.Tensor) or target.dtype not in INDEX_DTYPES:
        got = f"{target.dtype}" if isinstance(target, torch.Tensor) else type(target).__name__
        raise ValueError(f"target must be a tensor of token ids (torch.long), got {got}")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        check_targets(logits, target)  # names both shapes


# ---------------------------------------------------------------------------------------------
# Model variations and their decision rule (notebook 15)


def _is_number(value) -> bool:
    """A real number (NumPy's and pandas' included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _check_finite(value, name: str, what: str = "a score") -> None:
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name} = {value!r}: {what} must be a finite number; a NaN or infinite score comes from "
                         f"a run that diverged or was not evaluated: leave that run out")


def _check_share(value, name: str, example: str) -> None:
    if not _is_number(value) or not 0 < value < 1:
        raise ValueError(f"{name}={value!r} must be a probability in (0, 1), e.g. {example}")


def check_make_variant_arguments(config, d_k: int | None = None, learned_positions: bool = False,
                                 max_len: int = 256) -> None:
    """``make_variant``'s arguments: a TransformerConfig, d_k None or a positive integer, a positive max_len."""
    from annotated.model import TransformerConfig  # here: annotated.model imports the checks this module uses

    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    if d_k is not None:
        check_sizes(d_k=d_k)
    if not isinstance(learned_positions, bool):
        raise ValueError(f"learned_positions must be True or False, got {learned_positions!r}")
    check_sizes(max_len=max_len)


def check_table3_parameters_arguments(vocab_size: int, d_k: int | None = None, learned_positions: bool = False,
                                      max_len: int = 256, **_) -> None:
    """``table3_parameters``'s arguments (the sizes are checked by TransformerConfig)."""
    check_sizes(vocab_size=vocab_size)
    if d_k is not None:
        check_sizes(d_k=d_k)
    check_sizes(max_len=max_len)


def check_narrow_key_arguments(d_model: int, h: int, d_k: int, dropout: float = 0.0, fast: bool = True) -> None:
    """``NarrowKeyAttention``'s d_k (MultiHeadAttention checks the rest)."""
    if not _is_int(d_k) or d_k < 1:
        raise ValueError(f"d_k={d_k!r} must be a positive number of columns per head, e.g. d_model // h // 2")


def _check_scores(scores, name: str) -> None:
    if not isinstance(scores, Mapping):
        raise TypeError(f"{name} must be a dict seed -> score, got {type(scores).__name__}")
    for seed, score in scores.items():
        if not _is_int(seed):
            raise ValueError(f"{name} has the seed {seed!r}: seeds are integers")
        _check_finite(score, f"{name}[{seed}]")


def check_paired_differences_arguments(base: Mapping, row: Mapping) -> None:
    """Two dicts seed -> finite score, every seed of the row also run for the base: a difference pairs two
    runs of one seed, and a run without its partner would be dropped without a word."""
    _check_scores(base, "base")
    _check_scores(row, "row")
    unpaired = sorted(row.keys() - base.keys())
    if unpaired:
        raise ValueError(f"row has seed(s) {unpaired} that base lacks: a paired difference needs the base's run of "
                         f"the same seed; run the base with that seed, or leave those runs out of row")
    if not row:
        raise ValueError("row holds no run: give its scores by seed, {seed: score}")


def check_unstable_runs_arguments(differences: Mapping, cutoff: float) -> None:
    """A dict row -> {seed: finite difference}, and a positive cutoff."""
    if not isinstance(differences, Mapping):
        raise TypeError(f"differences must be a dict row -> {{seed: difference}}, got {type(differences).__name__}")
    for row, ds in differences.items():
        _check_scores(ds, f"differences[{row!r}]")
    if not _is_number(cutoff) or not math.isfinite(cutoff) or cutoff <= 0:
        raise ValueError(f"cutoff={cutoff!r} must be a finite number > 0 of robust standard deviations, e.g. 5")


def _check_differences(ds, name: str) -> None:
    if isinstance(ds, Mapping) or isinstance(ds, (str, bytes)) or not hasattr(ds, "__len__"):
        fix = ": give list(ds.values())" if isinstance(ds, Mapping) else ""
        raise TypeError(f"{name} must be a list of paired differences, got {type(ds).__name__}{fix}")
    for i, d in enumerate(ds):
        _check_finite(d, f"{name}[{i}]", "a paired difference")


def check_paired_spread_arguments(differences: Mapping) -> None:
    """A dict row -> list of finite paired differences (a dict of seeds would be summed by its keys)."""
    if not isinstance(differences, Mapping):
        raise TypeError(f"differences must be a dict row -> list of differences, got {type(differences).__name__}")
    for row, ds in differences.items():
        _check_differences(ds, f"differences[{row!r}]")


def _check_spread(spread, freedom) -> None:
    if not _is_number(spread) or not math.isfinite(spread) or spread <= 0:
        raise ValueError(f"spread={spread!r}: a pooled spread of paired differences is a finite number > 0; take it "
                         f"from paired_spread")
    check_sizes(freedom=freedom)


def check_paired_test_arguments(ds, spread: float, freedom: int) -> None:
    """At least two finite paired differences, a finite positive spread, positive degrees of freedom."""
    _check_differences(ds, "ds")
    if len(ds) < 2:
        raise ValueError(f"ds holds {len(ds)} paired difference(s): the rule tests a row of two seeds or more "
                         f"(fewer: 'cannot tell: too few stable runs')")
    _check_spread(spread, freedom)


def check_holm_arguments(p_values: Mapping, alpha: float) -> None:
    """A dict name -> p-value in [0, 1] (a NaN p-value is a failed test, not 'no change'), alpha in (0, 1)."""
    if not isinstance(p_values, Mapping):
        raise TypeError(f"p_values must be a dict comparison -> p-value, got {type(p_values).__name__}")
    for name, p in p_values.items():
        if not _is_number(p) or not 0 <= p <= 1:
            raise ValueError(f"p_values[{name!r}] = {p!r} is not a p-value in [0, 1]; a NaN comes from a test of NaN "
                             f"scores: find that run")
    _check_share(alpha, "alpha", "0.05")


def check_smallest_detectable_arguments(spread: float, freedom: int, seeds: int, comparisons: int, alpha: float,
                                        power: float) -> None:
    _check_spread(spread, freedom)
    check_sizes(seeds=seeds, comparisons=comparisons)
    _check_share(alpha, "alpha", "0.05")
    _check_share(power, "power", "0.8")


def check_verdict_arguments(effect: float, rejected: bool, paper_change: float | None) -> None:
    """A finite effect (the sign of NaN is no direction), rejected True or False, a finite paper change or None."""
    _check_finite(effect, "effect", "an effect")
    if not isinstance(rejected, (bool, np.bool_)):
        raise ValueError(f"rejected must be True or False (whether Holm's correction rejects no change), "
                         f"got {rejected!r}")
    if paper_change is not None:
        _check_finite(paper_change, "paper_change", "the paper's change")


def check_rate_arguments(step: int, d_model: int, warmup: int, factor: float) -> None:
    """``annotated.schedule.rate``'s input: a step >= 0 (a negative one was read as 1), a positive
    integer d_model and warmup (0 divided by zero, a negative one gave a complex rate) and a finite
    factor > 0 (NaN, inf or a negative one turned every update into NaN or a step uphill)."""
    _check_integer("step", step, 0)
    check_make_optimizer_arguments(d_model, warmup, factor)


def _check_integer(name: str, value: object, least: int) -> None:
    """An integer (NumPy's too, as np.arange gives them; not a bool) of at least ``least``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < least:
        kind = "an integer >= 0" if least == 0 else "a positive integer"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def check_make_optimizer_arguments(d_model: int, warmup: int, factor: float, model: object = None) -> None:
    """``annotated.schedule.make_optimizer``'s input, checked before the schedule's first rate."""
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (its parameters are what Adam updates), "
                        f"got {type(model).__name__}")
    _check_integer("d_model", d_model, 1)
    _check_integer("warmup", warmup, 1)
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"factor must be a finite number > 0 (1 is the paper's schedule), got {factor!r}")


def check_train_epoch_arguments(batches, accum_steps: int, clip: float | None, name: str = "batches", **_) -> None:
    """``annotated.training.train_epoch``'s input: at least one batch (none gave a NaN loss and no
    update), ``accum_steps`` a positive integer, ``clip`` None or a finite number > 0 (0 scaled every
    gradient to zero: no learning, no error)."""
    check_sizes(accum_steps=accum_steps)
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, numbers.Real)
                             or not math.isfinite(clip) or clip <= 0):
        raise ValueError(f"clip must be None (no clipping) or a finite number > 0, got {clip!r}")
    _check_batches(name, batches)


def check_fit_arguments(train_batches, val_batches, epochs: int, max_steps: int | None,
                        max_minutes: float | None, accum_steps: int, clip: float | None, **_) -> None:
    """``annotated.training.fit``'s input: a budget that allows an update (epochs=0 or -1 returned
    an empty history, max_minutes=NaN was no limit), batches to train on and to validate with."""
    check_budget(epochs, max_steps, max_minutes, accum_steps)
    check_train_epoch_arguments(train_batches, accum_steps, clip, name="train_batches")
    _check_batches("val_batches", val_batches)


def _check_batches(name: str, batches) -> None:
    if isinstance(batches, (str, bytes)) or not hasattr(batches, "__len__"):
        raise TypeError(f"{name} must be a list of batches (annotated.batching.collate), got "
                        f"{type(batches).__name__}")
    if len(batches) == 0:
        raise ValueError(f"{name} is empty: its loss would be NaN; give at least one batch "
                         f"(annotated.batching.collate)")
