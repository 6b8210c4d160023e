"""Checks of notebook 11's exercises: the band-of-blocks mask of local attention, Linformer's
attention over projected keys and values, and the rank that keeps a share of a matrix's energy,
each against the course's ``annotated.local_attention`` and ``annotated.linformer``."""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from annotated.linformer import linformer_attention, rank_for_energy
from annotated.local_attention import block_band_mask
from annotated.support.grading.core import (
    ExerciseFailed, _assert_close, _call, _function, _generic, _hard_coded_hint, _run_on_all_sizes, _same,
    _shape, _tensor,
)

BAND_SIZES = [dict(n=10, b=3), dict(n=16, b=5), dict(n=9, b=2)]
LINFORMER_SIZES = [dict(batch=2, n=9, k=3, d_k=5, d_v=6), dict(batch=3, n=12, k=4, d_k=8, d_v=7),
                   dict(batch=1, n=7, k=2, d_k=6, d_v=3)]
# Shares the identity reaches exactly (9/10, 6/8, 3/5): a <= in place of < shows.
RANK_SIZES = [dict(batch=3, L=10, energy=0.9), dict(batch=2, L=8, energy=0.75), dict(batch=4, L=5, energy=0.6)]
SIZE_SETS = {"check_block_band_mask": BAND_SIZES, "check_linformer_attention": LINFORMER_SIZES,
             "check_rank_for_energy": RANK_SIZES}


def _hint(how: str) -> Callable:
    def hint(passed: list, sizes: dict, message: str) -> str:
        return _hard_coded_hint(passed, sizes, message, how)
    return hint


# ---------------------------------------------------------------- exercise 11.1: the band mask


def _band(n: int, b: int, offsets: tuple) -> torch.Tensor:
    block = torch.arange(n) // b
    offset = block.unsqueeze(1) - block.unsqueeze(0)
    return torch.isin(offset, torch.tensor(offsets))


def _check_band_once(fn: Callable, name: str, sizes: dict) -> None:
    n, b = sizes["n"], sizes["b"]
    call = f"{name}(n={n}, b={b})"
    got = _call(fn, n, b, roles=("n", "b"))
    if not isinstance(got, torch.Tensor):
        raise ExerciseFailed(f"{call} returned {type(got).__name__}, not a tensor: return the (n, n) bool mask.")
    if got.dtype != torch.bool:
        raise ExerciseFailed(f"{call} is a {got.dtype} tensor; the course's masks are bool, True = may "
                             "attend (notebook 03): compare, e.g. (offset == 0) | (offset == 1).")
    _shape(got, (n, n), call)
    expected = block_band_mask(n, b)
    if torch.equal(got, expected):
        return
    i = torch.arange(n)
    mistakes = [
        (_band(n, b, (0,)), "each query sees its own block only; Image Transformer's memory block adds the "
                            "block before it: query block - key block in {0, 1}."),
        (_band(n, b, (0, -1)), "each query sees its block and the block after it; the memory block is the one "
                               "before: key block = query block - 1, not + 1 (rows are queries, columns keys)."),
        (_band(n, b, (-1, 0, 1)), "each query sees the blocks on both sides; the memory block is only the "
                                  "one before."),
        (expected.tril(), "your mask hides the future inside the memory block: that is causal=True; the "
                          "exercise asks for the plain band, every key of both blocks."),
        ((i[:, None] - i[None, :]).abs() < b, "your band is a window of positions |i - j| < b around each "
                                              "query; blocks are fixed groups of b positions, block = position // b."),
        ((i[:, None] - i[None, :]).abs() <= b, "your band is a window of positions |i - j| <= b around each "
                                               "query; blocks are fixed groups of b positions, block = position // b."),
        (_band(n, b + 1, (0, 1)), f"your blocks hold b + 1 = {b + 1} positions: block = position // b."),
    ]
    for candidate, message in mistakes:
        if torch.equal(got, candidate):
            raise ExerciseFailed(message)
    wrong = got != expected
    first = tuple(wrong.nonzero()[0].tolist())
    raise _generic(f"mismatch in {call}: {int(wrong.sum())} of {n * n} entries differ from the course's, the "
                   f"first at (query, key) = {first}: yours {bool(got[first])}, expected {bool(expected[first])}."
                   f"\nexpected:\n{expected.int()}\nyours:\n{got.int()}")


def check_block_band_mask(block_band_mask_fn: Callable) -> None:
    """Check ``block_band_mask(n, b)``: (n, n) bool, True where key j's block is query i's or the one
    before, on ``BAND_SIZES`` (b dividing n and not).

    Diagnoses: not a bool tensor, the wrong shape, its own block only, the block after, blocks on
    both sides, the causal mask, a window of positions instead of blocks, blocks of b + 1, sizes
    written into the code."""
    name = _function(block_band_mask_fn, "check_block_band_mask", "block_band_mask")
    _run_on_all_sizes(lambda sizes: _check_band_once(block_band_mask_fn, name, sizes), BAND_SIZES,
                      _hint("Read n and b from the arguments."))
    shown = ", ".join(f"(n={s['n']}, b={s['b']})" for s in BAND_SIZES)
    print(f"check_block_band_mask passed: {name} equals the course's band of blocks for {shown}.")


# ---------------------------------------------------------------- exercise 11.2: Linformer


def _linformer(q, k, v, E, F_, scale=None, dim=-1):
    scores = q @ (E @ k).transpose(-2, -1) / (scale if scale is not None else math.sqrt(q.size(-1)))
    weights = scores.softmax(dim=dim)
    return weights @ (F_ @ v), weights


def _check_linformer_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    batch, n, k, d_k, d_v = (sizes[s] for s in ("batch", "n", "k", "d_k", "d_v"))
    q, key = torch.randn(batch, n, d_k, generator=g), torch.randn(batch, n, d_k, generator=g)
    v = torch.randn(batch, n, d_v, generator=g)
    E, F_ = torch.randn(k, n, generator=g), torch.randn(k, n, generator=g)
    call = f"{name}(query {tuple(q.shape)}, key {tuple(key.shape)}, value {tuple(v.shape)}, E, F of ({k}, {n}))"
    result = _call(fn, q, key, v, E, F_, roles=("query", "key", "value", "E", "F"))
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ExerciseFailed(f"{call} must return a pair (output, weights), as scaled_dot_product_attention does.")
    out = _tensor(result[0], name, "the output", like=q)
    weights = _tensor(result[1], name, "the weights", like=q)
    hint = " The weights are n x k: each query against the k projected keys." if weights.shape[-1] == n else ""
    _shape(weights, (batch, n, k), f"the weights of {call}", hint)
    _shape(out, (batch, n, d_v), f"the output of {call}")
    expected_out, expected_w = linformer_attention(q, key, v, E, F_)
    if _same(out, expected_out, 1e-4) and _same(weights, expected_w, 1e-4):
        return
    mistakes = [
        (_linformer(q, key, v, F_, E), "E and F are swapped: E projects the keys, F the values."),
        (_linformer(q, key, v, E, F_, scale=1.0), "the scores are not divided by sqrt(d_k) (§3.2.1)."),
        (_linformer(q, key, v, E, F_, scale=math.sqrt(k)),
         f"the scores are divided by sqrt(k) = {math.sqrt(k):.3f}; the scale is sqrt(d_k) = {math.sqrt(d_k):.3f}, "
         "the width of a query, whatever the number of projected rows."),
        (_linformer(q, key, v, E, F_, dim=-2), "the softmax runs over the queries (dim=-2); each query's weights "
                                               "over the k projected keys must sum to 1: softmax(dim=-1)."),
        (_linformer(q, key, v, E, E), "the values are projected with E; Linformer gives them their own F."),
    ]
    for (cand_out, cand_w), message in mistakes:
        if _same(out, cand_out, 1e-4):
            raise ExerciseFailed(message)
    if _same(out, expected_out, 1e-4):
        raise _generic(f"the output of {call} is right but the weights are not: return the softmax weights, "
                       "(batch, n, k), whose rows sum to 1.")
    _assert_close(out, expected_out, f"the output of {call}", atol=1e-4)


def check_linformer_attention(linformer_attention_fn: Callable) -> None:
    """Check ``linformer_attention(query, key, value, E, F)``: softmax(Q (EK)^T / sqrt(d_k)) (FV) and
    its (batch, n, k) weights, on ``LINFORMER_SIZES``, and that k = n with E = F = I is attention.

    Diagnoses: not a pair, wrong shapes, E and F swapped, no scaling, scaling by sqrt(k), the softmax
    over the queries, the values projected with E, weights not returned, sizes written into the code."""
    name = _function(linformer_attention_fn, "check_linformer_attention", "linformer_attention")
    g = torch.Generator().manual_seed(11)
    _run_on_all_sizes(lambda sizes: _check_linformer_once(linformer_attention_fn, name, sizes, g), LINFORMER_SIZES,
                      _hint("Read the sizes from the tensors' shapes."))
    q = torch.randn(2, 6, 8, generator=g)
    eye = torch.eye(6)
    out = _tensor(_call(linformer_attention_fn, q, q, q, eye, eye, roles=("query", "key", "value", "E", "F"))[0],
                  name, "the output", like=q)
    _assert_close(out, F.scaled_dot_product_attention(q, q, q), "the output with k = n and E = F = I", atol=1e-4)
    print(f"check_linformer_attention passed: {name} equals the course's linformer_attention on "
          f"{len(LINFORMER_SIZES)} sizes, and attention itself (F.scaled_dot_product_attention) with E = F = I.")


# ---------------------------------------------------------------- exercise 11.3: rank for energy


def _rank(weights, energy, square=True, plus_one=True, strict=True):
    s = torch.linalg.svdvals(weights.double())
    s = s**2 if square else s
    kept = s.cumsum(-1) / s.sum(-1, keepdim=True)
    short = (kept < energy - 1e-9) if strict else (kept <= energy + 1e-9)
    return short.sum(-1) + (1 if plus_one else 0)


def _check_rank_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    batch, L, energy = sizes["batch"], sizes["L"], sizes["energy"]
    weights = (3 * torch.randn(batch, L, L, generator=g)).softmax(-1)
    weights[0] = torch.eye(L)  # the identity: every direction holds 1/L of the energy
    weights[-1] = torch.full((L, L), 1.0 / L) if batch > 1 else weights[-1]  # uniform: rank 1
    call = f"{name}(weights {tuple(weights.shape)}, energy={energy})"
    got = _call(fn, weights, energy, roles=("weights", "energy"))
    if not isinstance(got, torch.Tensor):
        raise ExerciseFailed(f"{call} returned {type(got).__name__}: return a tensor of ranks, one per matrix.")
    _shape(got, (batch,), call, " One rank per matrix: reduce over the singular values (dim=-1).")
    if got.is_floating_point() or got.is_complex() or got.dtype == torch.bool:
        raise ExerciseFailed(f"{call} is a {got.dtype} tensor; a rank is an integer: count with .sum(-1).")
    expected = rank_for_energy(weights, energy)
    if torch.equal(got.long(), expected):
        return
    mistakes = [
        (_rank(weights, energy, square=False), "you accumulated the singular values themselves; the energy "
                                               "is the sum of their squares: square them first."),
        (_rank(weights, energy, plus_one=False), "your rank is one too small: the count of ranks still short "
                                                 "of the goal, plus one, is the first rank that reaches it."),
        (_rank(weights, energy, strict=False), "a rank whose share equals the goal already reaches it: count "
                                               "the shares < energy, not <= energy."),
        (torch.full_like(expected, L), "every rank is the full L: the share kept must be compared with energy."),
    ]
    for candidate, message in mistakes:
        if torch.equal(got.long(), candidate):
            raise ExerciseFailed(message)
    raise _generic(f"{call} gives ranks {got.tolist()}, the course's rank_for_energy {expected.tolist()}; the "
                   f"identity (matrix 0) needs ceil(energy * L) = {math.ceil(energy * L - 1e-9)}.")


def check_rank_for_energy(rank_for_energy_fn: Callable) -> None:
    """Check ``rank_for_energy(weights, energy)``: the smallest rank keeping ``energy`` of the squared
    singular values, per matrix, on ``RANK_SIZES`` (the identity, uniform and random softmax matrices).

    Diagnoses: not a tensor, one rank for all, floats, singular values not squared, off by one, <= for <,
    the full rank whatever the energy, sizes written into the code."""
    name = _function(rank_for_energy_fn, "check_rank_for_energy", "rank_for_energy")
    g = torch.Generator().manual_seed(12)
    _run_on_all_sizes(lambda sizes: _check_rank_once(rank_for_energy_fn, name, sizes, g), RANK_SIZES,
                      _hint("Read the sizes from weights.shape and use the energy you are given."))
    print(f"check_rank_for_energy passed: {name} equals the course's rank_for_energy on {len(RANK_SIZES)} "
          "batches of attention matrices, the identity and uniform attention among them.")
