"""Checks of notebook 12's exercises: Shaw et al.'s clipped relative positions, Music
Transformer's skew and the rotation of RoPE, against ``annotated.relative_positions`` and
``annotated.rotary``."""

from collections.abc import Callable

import torch

from annotated.relative_positions import relative_positions, skew
from annotated.rotary import rotate
from annotated.support.grading.core import (
    ExerciseFailed, _assert_close, _call, _function, _hard_coded_hint, _run_on_all_sizes, _same, _shape, _tensor,
)

SIZE_SETS = {
    "check_relative_positions": [dict(length_q=6, length_k=9, max_distance=2),
                                 dict(length_q=11, length_k=5, max_distance=3),
                                 dict(length_q=13, length_k=12, max_distance=16)],
    "check_skew": [dict(batch=2, L=5), dict(batch=3, L=8), dict(batch=1, L=3)],
    "check_rotate": [dict(batch=2, L=7, d=6), dict(batch=3, L=12, d=16), dict(batch=1, L=30, d=10)],
}


def _hint(how: str) -> Callable:
    return lambda passed, sizes, message: _hard_coded_hint(passed, sizes, message, how)


# ------------------------------------------------------------------ relative positions


def _offsets(length_q: int, length_k: int) -> torch.Tensor:
    return torch.arange(length_k)[None, :] - torch.arange(length_q)[:, None]  # (L_q, L_k): j - i


def _check_relative_once(fn: Callable, name: str, length_q: int, length_k: int, max_distance: int) -> None:
    call = f"{name}(length_q={length_q}, length_k={length_k}, max_distance={max_distance})"
    got = _call(fn, length_q, length_k, max_distance, roles=("length_q", "length_k", "max_distance"))
    if not torch.is_tensor(got):
        raise ExerciseFailed(f"{call} returned {type(got).__name__}, not a tensor of indices")
    _shape(got, (length_q, length_k), call, " Rows are queries i, columns keys j.")
    if got.dtype != torch.long:
        raise ExerciseFailed(f"{call} is {got.dtype}; indices into an nn.Embedding must be int64 (torch.long)")
    expected = relative_positions(length_q, length_k, max_distance)
    if torch.equal(got, expected):
        return
    k, offsets = max_distance, _offsets(length_q, length_k)
    mistakes = [
        ((-offsets).clamp(-k, k) + k, "your offsets are i - j; Shaw et al. index the edge from i to j by j - i "
                                      "(key position minus query position)."),
        (offsets.clamp(-k, k), "the clipped offsets run from -k to k, but they index a table of 2k + 1 rows: "
                               "add k so that they run from 0 to 2k."),
        (offsets + k, "the offsets are not clipped: clip(j - i, -k, k) (offset.clamp(-k, k)) before adding k, "
                      "so that any offset beyond k uses the vector of k."),
        (offsets.clamp(-k + 1, k - 1) + k, "you clip at k - 1; Shaw et al. clip at k itself: clamp(-k, k)."),
        (offsets.clamp(0, 2 * k), "you clamped j - i to 0 .. 2k without adding k first: every negative "
                                  "offset became 0. Clip to -k .. k, then add k."),
    ]
    for candidate, message in mistakes:
        if got.shape == candidate.shape and torch.equal(got, candidate):
            raise ExerciseFailed(message)
    _assert_close(got.double(), expected.double(), call)


def check_relative_positions(relative_positions_fn: Callable) -> None:
    """Check ``relative_positions(length_q, length_k, max_distance)``: the (L_q, L_k) indices
    clip(j - i, -k, k) + k.

    Diagnoses: wrong shape, a dtype other than int64, i - j instead of j - i, no + k, no
    clipping, clipping at k - 1, clamping to 0 .. 2k without the shift, a size written in."""
    name = _function(relative_positions_fn, "check_relative_positions", "relative_positions")
    sets = SIZE_SETS["check_relative_positions"]
    _run_on_all_sizes(lambda s: _check_relative_once(relative_positions_fn, name, **s), sets,
                      _hint("Use the length_q, length_k and max_distance arguments."))
    print(f"check_relative_positions passed: {name} gives clip(j - i, -k, k) + k for "
          + ", ".join(f"({s['length_q']}, {s['length_k']}, k={s['max_distance']})" for s in sets) + ".")


# ------------------------------------------------------------------ the skew


def _skew_variant(qe: torch.Tensor, side: str = "left", drop: str = "first") -> torch.Tensor:
    L = qe.size(-1)
    padded = torch.nn.functional.pad(qe, (1, 0) if side == "left" else (0, 1))
    reshaped = padded.reshape(*qe.shape[:-2], L + 1, L)
    return reshaped[..., 1:, :] if drop == "first" else reshaped[..., :-1, :]


def _check_skew_once(fn: Callable, name: str, batch: int, L: int) -> None:
    g = torch.Generator().manual_seed(100 * L + batch)
    qe = torch.randn(batch, L, L, generator=g)
    call = f"{name}(qe of shape {(batch, L, L)})"
    got = _tensor(_call(fn, qe, roles=("qe",)), name, "S_rel", like=qe)
    _shape(got, (batch, L, L), call, " The skew returns one logit per (query, key): (..., L, L).")
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    expected = skew(qe)
    if _same(got[..., causal], expected[..., causal]):
        return
    mistakes = [
        (_skew_variant(qe, "right", "first"), "you padded the column on the right; Music Transformer pads it "
                                              "on the left: F.pad(qe, (1, 0))."),
        (_skew_variant(qe, "left", "last"), "you dropped the last row; the skew drops the first one: "
                                            "reshaped[..., 1:, :]."),
        (_skew_variant(qe, "right", "last"), "padded on the right and dropped the last row: pad on the left, "
                                             "F.pad(qe, (1, 0)), and drop the first row."),
        (qe, "the result is Q E^T unchanged: its column r holds offset r - (L - 1), not key j; pad a column on "
             "the left, reshape to (L + 1, L) and drop the first row."),
        (qe.transpose(-2, -1), "a transpose is not the skew: pad a column on the left, reshape to (L + 1, L), "
                               "drop the first row."),
        (qe.flip(-1), "flipping the columns puts offset 0 in column 0 for every row; the skew moves each row's "
                      "offsets by a different amount: pad, reshape, drop the first row."),
    ]
    for candidate, message in mistakes:
        if _same(got[..., causal], candidate[..., causal]):
            raise ExerciseFailed(message)
    _assert_close(got[..., causal], expected[..., causal], f"{call}, on and below the diagonal")


def check_skew(skew_fn: Callable) -> None:
    """Check ``skew(qe)``: (..., L, L) -> (..., L, L), equal to the course's skew on and below
    the diagonal (above it any leftovers are allowed: the look-ahead mask removes them).

    Diagnoses: wrong shape, padding on the right, dropping the last row, both, Q E^T
    returned unchanged, a transpose or a flip instead of the skew, a size written in."""
    name = _function(skew_fn, "check_skew", "skew")
    sets = SIZE_SETS["check_skew"]
    _run_on_all_sizes(lambda s: _check_skew_once(skew_fn, name, **s), sets,
                      _hint("Take L from qe.size(-1) and keep the leading axes: qe.shape[:-2]."))
    print(f"check_skew passed: {name} moves q_i . E_(j-i) to column j for (batch, L) = "
          + ", ".join(f"({s['batch']}, {s['L']})" for s in sets) + ".")


# ------------------------------------------------------------------ RoPE


def _rotate_variant(x: torch.Tensor, sign: float = 1.0, layout: str = "pairs", step: int = 2,
                    first: int = 0) -> torch.Tensor:
    L, d = x.shape[-2:]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) * (step / 2) / d)
    angles = torch.arange(first, first + L, dtype=torch.float64)[:, None] * theta
    cos, sin = angles.cos(), sign * angles.sin()
    if layout == "pairs":
        a, b = x[..., 0::2].double(), x[..., 1::2].double()
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    a, b = x[..., : d // 2].double(), x[..., d // 2:].double()
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


def _check_rotate_once(fn: Callable, name: str, batch: int, L: int, d: int) -> None:
    g = torch.Generator().manual_seed(10 * L + d)
    x = torch.randn(batch, L, d, generator=g)
    call = f"{name}(x of shape {(batch, L, d)})"
    got = _tensor(_call(fn, x, roles=("x",)), name, "the rotated x", like=x)
    _shape(got, (batch, L, d), call)
    expected = rotate(x)
    if _same(got, expected, atol=1e-4):
        return
    mistakes = [
        (_rotate_variant(x, sign=-1.0), "you turn each pair by -m theta_i (the sine's sign is flipped): the "
                                        "rotation is (x0 cos - x1 sin, x0 sin + x1 cos)."),
        (_rotate_variant(x, layout="halves"), "you pair dimension i with i + d/2 (the 'rotate half' layout); "
                                              "Su et al.'s eq. 34 pairs neighbours (x_2i, x_2i+1): x[..., 0::2] "
                                              "with x[..., 1::2], and the result interleaved back."),
        (_rotate_variant(x, step=1), "theta_i = 10000^(-i/d): the exponent is 2i/d, with 2i the index of the "
                                     "pair's first dimension: torch.arange(0, d, 2) / d."),
        (_rotate_variant(x, first=1), "your positions start at 1; the first position is m = 0 (no rotation)."),
        (x, "x came back unrotated: turn pair i of position m by the angle m * theta_i."),
    ]
    for candidate, message in mistakes:
        if _same(got, candidate.to(got.dtype), atol=1e-4):
            raise ExerciseFailed(message)
    if not _same(got.norm(dim=-1), x.norm(dim=-1), atol=1e-3):
        raise ExerciseFailed("your function changes the length of the vectors; a rotation keeps it: check that "
                             "each pair gets cos and sin of the same angle, (a cos - b sin, a sin + b cos).")
    _assert_close(got, expected, call, atol=1e-4)


def check_rotate(rotate_fn: Callable) -> None:
    """Check ``rotate(x)``: x (..., L, d), pair (x_2i, x_2i+1) of position m turned by
    m * 10000^(-2i/d), as in ``annotated.rotary.rotate``.

    Diagnoses: wrong shape, the angle's sign flipped, the 'rotate half' layout, the exponent
    i/d, positions from 1, no rotation, a change of norm, a size written in."""
    name = _function(rotate_fn, "check_rotate", "rotate")
    sets = SIZE_SETS["check_rotate"]
    _run_on_all_sizes(lambda s: _check_rotate_once(rotate_fn, name, **s), sets,
                      _hint("Take L and d from x.shape[-2:]."))
    print(f"check_rotate passed: {name} turns every pair by m * theta_i for (batch, L, d) = "
          + ", ".join(f"({s['batch']}, {s['L']}, {s['d']})" for s in sets) + ".")
