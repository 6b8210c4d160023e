"""Checks of notebook 14's exercises: Shaw et al.'s clipped relative positions, Music
Transformer's skew and the rotation of RoPE, against ``annotated.relative_positions`` and
``annotated.rotary``.

Besides the sizes of the notebook, each check tries what the signature allows and a shortcut
would miss: lengths beyond a table precomputed at 512 or 5,000 positions, a length or a batch
of one, float64 inputs and a 4-D input with heads in front; and, once every set has passed,
it calls the function again to see that the first result was not overwritten (a buffer the
function reuses)."""

from collections.abc import Callable

import torch

from annotated.relative_positions import relative_positions, skew
from annotated.rotary import rotate
from annotated.support.grading.core import (
    ExerciseFailed, _aliasing, _assert_close, _call, _function, _gradients_flow, _hard_coded_hint, _run_on_all_sizes,
    _same, _shape, _squeezed, _tensor,
)

# ``lead`` is the shape in front of the last two axes: (batch,), or (batch, heads) for a 4-D input.
SIZE_SETS = {
    "check_relative_positions": [dict(length_q=6, length_k=9, max_distance=2),
                                 dict(length_q=11, length_k=5, max_distance=3),
                                 dict(length_q=13, length_k=12, max_distance=16),
                                 dict(length_q=1, length_k=530, max_distance=0),  # one query, k = 0
                                 dict(length_q=600, length_k=7, max_distance=1)],  # beyond 512 positions
    "check_skew": [dict(lead=(2,), L=5), dict(lead=(3,), L=8), dict(lead=(1,), L=3),
                   dict(lead=(4, 2), L=6)],
    "check_rotate": [dict(lead=(2,), L=7, d=6), dict(lead=(3,), L=12, d=16), dict(lead=(1,), L=5003, d=10),
                     dict(lead=(4, 5), L=9, d=8)],
}
# The dtype of each set's input, in the order of SIZE_SETS: float64 once, with a batch of one.
DTYPES = {
    "check_skew": [torch.float32, torch.float32, torch.float64, torch.float32],
    "check_rotate": [torch.float32, torch.float32, torch.float32, torch.float64],
}


def _dtype(check: str, sizes: dict) -> torch.dtype:
    return DTYPES[check][SIZE_SETS[check].index(sizes)]


def _shape_of(sizes: dict, *last: int) -> tuple:
    return (*sizes["lead"], *last)


def _hint(how: str, check: str = "") -> Callable:
    """The hint of a failure that shows only with a later set: what that set tries that the
    earlier ones did not (a 4-D input, a size of one, float64, a length beyond a table)."""
    def describe(passed: list, sizes: dict, message: str) -> str:
        hint = _hard_coded_hint(passed, sizes, message, how)
        new = []
        if len(sizes.get("lead", ())) > 1:
            new.append(f"this input is {2 + len(sizes['lead'])}-D, with heads in front (the signature's "
                       "`...`): index from the end, x[..., 0::2], x.shape[-2:], and keep every leading axis")
        if 1 in (sizes.get("lead", (0,))[0], sizes.get("length_q"), sizes.get("length_k")):
            new.append("a size here is 1: a squeeze() drops that dimension; index or reshape by name "
                       "instead")
        if check and _dtype(check, sizes) == torch.float64:
            new.append("this input is float64: create every tensor with dtype=x.dtype (not .float() or "
                       "torch.zeros without dtype=)")
        longest = max(sizes.get(name, 0) for name in ("L", "length_q", "length_k"))
        if longest > 512:
            table = "5,000" if longest > 5000 else "512"
            new.append(f"a length here is {longest}: a table precomputed for {table} positions is too "
                       "short; compute the positions from the sizes you are given")
        return hint + "".join(f"\nNote: {line}." for line in new)
    return describe


# ------------------------------------------------------------------ relative positions


def _offsets(length_q: int, length_k: int) -> torch.Tensor:
    return torch.arange(length_k)[None, :] - torch.arange(length_q)[:, None]  # (L_q, L_k): j - i


def _check_relative_once(fn: Callable, name: str, results: list, length_q: int, length_k: int,
                         max_distance: int) -> None:
    call = f"{name}(length_q={length_q}, length_k={length_k}, max_distance={max_distance})"
    got = _call(fn, length_q, length_k, max_distance, roles=("length_q", "length_k", "max_distance"))
    if not torch.is_tensor(got):
        raise ExerciseFailed(f"{call} returned {type(got).__name__}, not a tensor of indices")
    hint = " Rows are queries i, columns keys j."
    if got.shape != (length_q, length_k) and max(length_q, length_k) > 512 and 512 in got.shape:
        hint += (" Your result stops at 512: a table precomputed for 512 positions? Compute the offsets "
                 "from length_q and length_k, which can be any size.")
    else:
        hint += _squeezed(got.shape, (length_q, length_k))
    _shape(got, (length_q, length_k), call, hint)
    results.append(got)
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

    Runs lengths of 1 and beyond 512 and max_distance = 0 besides the notebook's sizes.

    Diagnoses: wrong shape, a dtype other than int64, i - j instead of j - i, no + k, no
    clipping, clipping at k - 1, clamping to 0 .. 2k without the shift, a table precomputed
    for 512 positions, a length of one squeezed away, an earlier result overwritten by the
    next call (a reused buffer), a size written in."""
    name = _function(relative_positions_fn, "check_relative_positions", "relative_positions")
    sets = SIZE_SETS["check_relative_positions"]
    results = []
    _run_on_all_sizes(lambda s: _check_relative_once(relative_positions_fn, name, results, **s), sets,
                      _hint("Use the length_q, length_k and max_distance arguments."))
    again = dict(sets[0], max_distance=sets[0]["max_distance"] + 1)
    _aliasing(lambda: _call(relative_positions_fn, *again.values(), roles=("length_q", "length_k", "max_distance")),
              results[0], name)
    print(f"check_relative_positions passed: {name} gives clip(j - i, -k, k) + k for "
          + ", ".join(f"({s['length_q']}, {s['length_k']}, k={s['max_distance']})" for s in sets)
          + "; a second call leaves the first result as it was.")


# ------------------------------------------------------------------ the skew


def _skew_variant(qe: torch.Tensor, side: str = "left", drop: str = "first") -> torch.Tensor:
    L = qe.size(-1)
    padded = torch.nn.functional.pad(qe, (1, 0) if side == "left" else (0, 1))
    reshaped = padded.reshape(*qe.shape[:-2], L + 1, L)
    return reshaped[..., 1:, :] if drop == "first" else reshaped[..., :-1, :]


def _check_skew_once(fn: Callable, name: str, results: list, sizes: dict) -> None:
    L, dtype = sizes["L"], _dtype("check_skew", sizes)
    shape = _shape_of(sizes, L, L)
    g = torch.Generator().manual_seed(100 * L + sizes["lead"][0])
    qe = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    call = f"{name}(qe of shape {shape}, {dtype})"
    got = _tensor(_call(fn, qe, roles=("qe",)), name, "S_rel", like=qe)
    hint = " The skew returns one logit per (query, key): (..., L, L)."
    squeezed = _squeezed(got.shape, shape)
    if squeezed:
        hint += squeezed
    elif got.shape != qe.shape and got.numel() == qe.numel():
        hint += (" Your result holds the right number of values in another shape: keep every leading "
                 "axis, padded.reshape(*qe.shape[:-2], L + 1, L), not a batch size you unpack or -1 "
                 "that merges them.")
    _shape(got, shape, call, hint)
    results.append(got)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    expected = skew(qe)
    if _same(got[..., causal], expected[..., causal]):
        if dtype == torch.float64 and not torch.equal(got[..., causal], expected[..., causal]):
            raise ExerciseFailed(
                f"{call} gives the right values only to float32's precision: the skew moves numbers "
                "without computing anything, so a float64 input must come back exactly. A step goes "
                "through float32: a .float(), or a tensor created without dtype= (torch.zeros(...)); "
                "pad with F.pad, or create with dtype=qe.dtype."
            )
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

    Runs a batch of one in float64 (compared exactly: the skew only moves numbers) and a 4-D
    input, (batch, heads, L, L), besides the notebook's sizes.

    Diagnoses: wrong shape, padding on the right, dropping the last row, both, Q E^T
    returned unchanged, a transpose or a flip instead of the skew, leading axes merged or
    unpacked as one batch or squeezed away, a result of another dtype or computed in
    float32, an earlier result overwritten by the next call (a reused buffer), gradients
    cut (no_grad, .detach()), a size written in."""
    name = _function(skew_fn, "check_skew", "skew")
    sets = SIZE_SETS["check_skew"]
    results = []
    _run_on_all_sizes(lambda s: _check_skew_once(skew_fn, name, results, s), sets,
                      _hint("Take L from qe.size(-1) and keep the leading axes: qe.shape[:-2].", "check_skew"))
    # A second call, on an input that requires grad: the first result must stay as it was, and the
    # skew sits in the training path of relative attention, so gradients must reach qe.
    qe = torch.randn(_shape_of(sets[0], sets[0]["L"], sets[0]["L"]), generator=torch.Generator().manual_seed(1),
                     requires_grad=True)
    again = _aliasing(lambda: _call(skew_fn, qe, roles=("qe",)), results[0], name, "S_rel")
    _gradients_flow(again, {"qe": qe}, name, "S_rel")
    print(f"check_skew passed: {name} moves q_i . E_(j-i) to column j for qe of shapes "
          + ", ".join(str(_shape_of(s, s["L"], s["L"])) for s in sets)
          + " (float64 for the batch of one, exactly); a second call leaves the first result as it was and "
          "lets gradients through.")


# ------------------------------------------------------------------ RoPE


def _rotate_variant(x: torch.Tensor, sign: float = 1.0, layout: str = "pairs", step: int = 2,
                    first: int = 0, out: str = "pairs", positions: int = -2) -> torch.Tensor:
    """RoPE with float64 angles, or with one mistake switched on; ``positions`` is the axis
    whose index is taken as the position."""
    L, d = x.size(positions), x.size(-1)
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) * (step / 2) / d)
    angles = torch.arange(first, first + L, dtype=torch.float64)[:, None] * theta
    if positions != -2:  # (L, 1, ..., d/2): broadcast along that axis
        angles = angles.reshape(L, *[1] * (-2 - positions), d // 2)
    cos, sin = angles.cos(), sign * angles.sin()
    if layout == "pairs":
        a, b = x[..., 0::2].double(), x[..., 1::2].double()
        if out == "halves":
            return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    a, b = x[..., : d // 2].double(), x[..., d // 2:].double()
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


def _rotation_close(got: torch.Tensor, candidate: torch.Tensor, x: torch.Tensor) -> bool:
    """``got`` equals ``candidate`` up to the rounding of the angles: float32 angles m * theta_i
    are off by about m * 1e-7 radians, which far positions (5,000) turn into errors near 1e-3."""
    if got.shape != candidate.shape:
        return False
    m = torch.arange(got.size(-2), dtype=torch.float64)[:, None]
    tolerance = 1e-4 + 3e-7 * m * x.detach().abs().max().double()
    return bool(((got.double() - candidate.double()).abs() <= tolerance).all())


def _check_rotate_once(fn: Callable, name: str, results: list, sizes: dict) -> None:
    L, d, dtype = sizes["L"], sizes["d"], _dtype("check_rotate", sizes)
    shape = _shape_of(sizes, L, d)
    g = torch.Generator().manual_seed(10 * L + d)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    call = f"{name}(x of shape {shape}, {dtype})"
    got = _tensor(_call(fn, x, roles=("x",)), name, "the rotated x", like=x)
    hint = _squeezed(got.shape, shape)
    if not hint and got.shape != x.shape and got.numel() == x.numel():
        hint = (" Your result holds the right number of values in another shape: keep every leading axis "
                "of x (x.shape[:-2]); the pairs are x[..., 0::2] and x[..., 1::2].")
    _shape(got, shape, call, hint)
    results.append(got)
    expected = _rotate_variant(x)  # the angles in float64
    if not _rotation_close(rotate(x), expected, x):
        raise RuntimeError("annotated.rotary.rotate and the check's float64 rotation disagree")
    if _rotation_close(got, expected, x):
        return
    if len(sizes["lead"]) > 1 and _rotation_close(got, _rotate_variant(x, positions=-3), x):
        raise ExerciseFailed(
            f"{call}: your positions run along dimension 1, here the heads; the positions are the "
            "second-to-last axis of x, whatever comes in front: L = x.size(-2), and the angles (L, d/2) "
            "broadcast over the leading axes."
        )
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
        (_rotate_variant(x, out="halves"), "your rotated pairs come back as two halves, every first "
                                           "coordinate then every second one (torch.cat): put each pair back "
                                           "in its place, torch.stack([first, second], dim=-1).flatten(-2)."),
    ]
    for candidate, message in mistakes:
        if _rotation_close(got, candidate, x):
            raise ExerciseFailed(message)
    if L > 5000 and _rotation_close(got[..., :5000, :], expected[..., :5000, :], x):
        raise ExerciseFailed(
            f"{call} is right for the first 5,000 positions and wrong after them: a table precomputed "
            "for 5,000 positions? Compute the angles for the length you are given, torch.arange(x.size(-2))."
        )
    if not _same(got.norm(dim=-1), x.norm(dim=-1), atol=1e-3):
        raise ExerciseFailed("your function changes the length of the vectors; a rotation keeps it: check that "
                             "each pair gets cos and sin of the same angle, (a cos - b sin, a sin + b cos).")
    _assert_close(got, expected, call, atol=1e-4)


def check_rotate(rotate_fn: Callable) -> None:
    """Check ``rotate(x)``: x (..., L, d), pair (x_2i, x_2i+1) of position m turned by
    m * 10000^(-2i/d), as in ``annotated.rotary.rotate``.

    Runs 5,003 positions (compared with float64 angles, within the rounding of float32
    ones), a batch of one and a 4-D float64 input, (batch, heads, L, d), besides the
    notebook's sizes.

    Diagnoses: wrong shape, the angle's sign flipped, the 'rotate half' layout, the exponent
    i/d, positions from 1, no rotation, pairs put back as two halves, positions read along
    the heads of a 4-D input, leading axes lost, a table precomputed for 5,000 positions, a
    result of another dtype, a change of norm, an earlier result overwritten by the next
    call (a reused buffer), gradients cut (no_grad, .detach()), a size written in."""
    name = _function(rotate_fn, "check_rotate", "rotate")
    sets = SIZE_SETS["check_rotate"]
    results = []
    _run_on_all_sizes(lambda s: _check_rotate_once(rotate_fn, name, results, s), sets,
                      _hint("Take L and d from x.shape[-2:].", "check_rotate"))
    # A second call, on an input that requires grad: the first result must stay as it was, and
    # queries and keys are rotated in the training path, so gradients must reach x.
    x = torch.randn(_shape_of(sets[0], sets[0]["L"], sets[0]["d"]), generator=torch.Generator().manual_seed(1),
                    requires_grad=True)
    again = _aliasing(lambda: _call(rotate_fn, x, roles=("x",)), results[0], name, "the rotated x")
    _gradients_flow(again, {"x": x}, name, "the rotated x")
    print(f"check_rotate passed: {name} turns every pair by m * theta_i for x of shapes "
          + ", ".join(str(_shape_of(s, s["L"], s["d"])) for s in sets)
          + " (the last in float64); a second call leaves the first result as it was and lets gradients "
          "through.")
