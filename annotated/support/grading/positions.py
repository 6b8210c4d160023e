"""Checks of notebook 14's exercises, as declarations (``engine``): Shaw et al.'s clipped relative positions, Music
Transformer's skew and the rotation of RoPE, against ``annotated.relative_positions`` and ``annotated.rotary``."""

import math
from collections.abc import Callable

import torch

from annotated.relative_positions import relative_positions, skew
from annotated.support.grading.core import _hard_coded_hint, _squeezed
from annotated.support.grading.engine import (
    Declaration, Mistake, Probe, Tensor, _default_mismatch, _equal, _float32_precision, check,
)

# What a shortcut would miss: lengths beyond a table of 512 or 5,000 positions, a length or a batch of one, a 4-D
# input. ``lead`` is the shape in front of the last two axes: (batch,), or (batch, heads).
SIZE_SETS = {
    "check_relative_positions": [dict(length_q=6, length_k=9, max_distance=2),
                                 dict(length_q=11, length_k=5, max_distance=3),
                                 dict(length_q=13, length_k=12, max_distance=16),
                                 dict(length_q=1, length_k=530, max_distance=0),  # one query, k = 0
                                 dict(length_q=600, length_k=7, max_distance=1)],  # beyond 512 positions
    "check_skew": [dict(lead=(2,), L=5), dict(lead=(3,), L=8), dict(lead=(1,), L=3), dict(lead=(4, 2), L=6)],
    "check_rotate": [dict(lead=(2,), L=7, d=6), dict(lead=(3,), L=12, d=16), dict(lead=(1,), L=5003, d=10),
                     dict(lead=(4, 5), L=9, d=8)],
}
# The dtype of each set's input, in the order of SIZE_SETS: float64 once.
DTYPES = {"check_skew": [torch.float32, torch.float32, torch.float64, torch.float32],
          "check_rotate": [torch.float32, torch.float32, torch.float32, torch.float64]}


def _hint(how: str, check: str = "") -> Callable:
    """The hint of a failure that shows only with a later set: what that set tries that the earlier ones did not."""
    def describe(passed: list, sizes: dict, message: str) -> str:
        lead, longest = sizes.get("lead", (0,)), max(sizes.get(n, 0) for n in ("L", "length_q", "length_k"))
        notes = ((len(lead) > 1, f"this input is {2 + len(lead)}-D, with heads in front (the signature's `...`): index "
                  "from the end, x[..., 0::2], x.shape[-2:], and keep every leading axis"),
                 (1 in (lead[0], sizes.get("length_q"), sizes.get("length_k")), "a size here is 1: a squeeze() drops "
                  "that dimension; index or reshape by name instead"),
                 (check and DTYPES[check][SIZE_SETS[check].index(sizes)] == torch.float64, "this input is float64: "
                  "create every tensor with dtype=x.dtype (not .float() or torch.zeros)"),
                 (longest > 512, f"a length here is {longest}: a table precomputed for "
                  f"{'5,000' if longest > 5000 else '512'} positions is too short; compute the positions from the "
                  "sizes you are given"))
        hint = _hard_coded_hint(passed, sizes, message, how)
        return hint + "".join(f"\nNote: {note}." for applies, note in notes if applies)
    return describe


# ------------------------------------------------------------------ relative positions


def _offsets(length_q: int, length_k: int) -> torch.Tensor:
    return torch.arange(length_k)[None, :] - torch.arange(length_q)[:, None]  # (L_q, L_k): j - i


def _relative_probes(device: str | None) -> list[Probe]:
    probes = [Probe((s["length_q"], s["length_k"], s["max_distance"]), f"{{what}} of {{name}}(length_q="
                    f"{s['length_q']}, length_k={s['length_k']}, max_distance={s['max_distance']})", sizes=s)
              for s in SIZE_SETS["check_relative_positions"]]
    lq, lk, k = probes[0].args
    probes[0].again, probes[0].again_what = (lq, lk, k + 1), "the result"  # a reused buffer
    return probes


def _relative_is(wrong: Callable, message: str, name: str) -> Mistake:
    return Mistake(message, name, like=lambda lq, lk, k: wrong(_offsets(lq, lk), k))


RELATIVE = Declaration(
    check="check_relative_positions", function="relative_positions", roles=("length_q", "length_k", "max_distance"),
    reference=relative_positions, probes=_relative_probes,
    returns=Tensor("the indices", dtype="ids", like=None, dtypes=("int64",), kind="an int64"),
    sizes_fix=_hint("Use the length_q, length_k and max_distance arguments."),
    mistakes=(
        Mistake("", "a table of 512 positions", stage="shape", find=lambda found, p: (
            "Your result stops at 512: a table precomputed for 512 positions? Compute the offsets from length_q and "
            "length_k, which can be any size.") if max(p.args[:2]) > 512 and 512 in found["shape"] else None,
                example=lambda lq, lk, k: _offsets(512, 512)[:lq, :lk].clamp(-k, k) + k),
        _relative_is(lambda o, k: (-o).clamp(-k, k) + k, "your offsets are i - j; Shaw et al. index the edge from i "
                     "to j by j - i (key position minus query position).", "i - j"),
        _relative_is(lambda o, k: o.clamp(-k, k), "the clipped offsets run from -k to k, but they index a table of "
                     "2k + 1 rows: add k so that they run from 0 to 2k.", "no + k"),
        _relative_is(lambda o, k: o + k, "the offsets are not clipped: clip(j - i, -k, k) (offset.clamp(-k, k)) "
                     "before adding k, so that any offset beyond k uses the vector of k.", "not clipped"),
        _relative_is(lambda o, k: o.clamp(-k + 1, k - 1) + k, "you clip at k - 1; Shaw et al. clip at k itself: "
                     "clamp(-k, k).", "clipped at k - 1"),
        _relative_is(lambda o, k: o.clamp(0, 2 * k), "you clamped j - i to 0 .. 2k without adding k first: every "
                     "negative offset became 0. Clip to -k .. k, then add k.", "clamped to 0 .. 2k"),
    ),
    passed=lambda name: (
        f"check_relative_positions passed: {name} gives clip(j - i, -k, k) + k for "
        + ", ".join(f"({s['length_q']}, {s['length_k']}, k={s['max_distance']})"
                    for s in SIZE_SETS["check_relative_positions"])
        + "; a second call leaves the first result as it was."),
)


def check_relative_positions(relative_positions_fn: Callable) -> None:
    """Check ``relative_positions(length_q, length_k, max_distance)``: the (L_q, L_k) indices clip(j - i, -k, k) + k,
    with lengths of 1 and beyond 512 and max_distance = 0.

    Diagnoses: wrong shape, a dtype other than int64, i - j instead of j - i, no + k, no clipping, clipping at k - 1,
    clamping to 0 .. 2k without the shift, a table precomputed for 512 positions, a length of one squeezed away, an
    earlier result overwritten by the next call (a reused buffer), a size written in."""
    check(RELATIVE, relative_positions_fn)


# ------------------------------------------------------------------ the skew


def _below(got: torch.Tensor, expected: torch.Tensor, precision="float32") -> bool:
    """``got`` equals ``expected`` on and below the diagonal (the look-ahead mask removes any leftovers above it)."""
    causal = torch.ones(expected.shape[-2:], dtype=torch.bool).tril()
    return _equal(got[..., causal], expected[..., causal], precision)


def _skew_variant(qe: torch.Tensor, side: str = "left", drop: str = "first") -> torch.Tensor:
    L = qe.size(-1)
    reshaped = torch.nn.functional.pad(qe, (1, 0) if side == "left" else (0, 1)).reshape(*qe.shape[:-2], L + 1, L)
    return reshaped[..., 1:, :] if drop == "first" else reshaped[..., :-1, :]


def _skew_probes(device: str | None) -> list[Probe]:
    probes = []
    for sizes, dtype in zip(SIZE_SETS["check_skew"], DTYPES["check_skew"]):
        shape = (*sizes["lead"], sizes["L"], sizes["L"])
        g = torch.Generator().manual_seed(100 * sizes["L"] + sizes["lead"][0])
        qe = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        precision = "float64" if dtype == torch.float64 else "float32"
        probes.append(Probe((qe,), f"{{what}} of {{name}}(qe of shape {shape}, {dtype})", sizes=sizes,
                            accept=lambda got, qe=qe, p=precision: _below(got[0], skew(qe), p)))
    g = torch.Generator().manual_seed(1)
    qe = torch.randn(2, 5, 5, generator=g)
    probes.append(Probe((qe,), "{what}", again=(torch.randn(2, 5, 5, generator=g),),
                        accept=lambda got, qe=qe: _below(got[0], skew(qe))))
    # Gradients must reach qe (the skew is in the training path); at L = 1 no leftovers above the diagonal take one.
    qe = torch.randn(3, 1, 1, generator=g)
    probes.append(Probe((qe,), "{what} of {name}(qe of shape (3, 1, 1) that requires grad)", grad=(0,)))
    return probes


def _skew_mismatch(got: torch.Tensor, expected: torch.Tensor, label: str) -> str:
    causal, label = torch.ones(expected.shape[-2:], dtype=torch.bool).tril(), f"{label}, on and below the diagonal"
    if expected.dtype == torch.float64 and _below(got, expected):  # the skew moves numbers: float64 comes back exact
        return _float32_precision(got[..., causal], expected[..., causal], label)
    return _default_mismatch(got[..., causal], expected[..., causal], label)


def _skew_is(variant: Callable, message: str) -> Mistake:
    """A known mistake: the learner's S_rel equals ``variant(qe)`` on and below the diagonal."""
    def find(found: dict, p: Probe) -> str | None:
        return message if found["values"] is not None and _below(found["values"], variant(*p.args)) else None
    return Mistake(message, message.split(";")[0].split(":")[0], find=find, example=lambda qe: variant(qe).clone())


def _leading_axes(found: dict, p: Probe) -> str | None:
    want, got = tuple(p.args[0].shape), tuple(found["shape"])
    return ("Your result holds the right number of values in another shape: keep every leading axis, padded.reshape("
            "*qe.shape[:-2], L + 1, L), not a batch size you unpack or -1 that merges them.") if (
        got != want and math.prod(got) == math.prod(want) and not _squeezed(got, want)) else None


SKEW = Declaration(
    check="check_skew", function="skew", roles=("qe",), reference=skew, probes=_skew_probes,
    returns=Tensor("S_rel", mismatch=_skew_mismatch),
    sizes_fix=_hint("Take L from qe.size(-1) and keep the leading axes: qe.shape[:-2].", "check_skew"),
    mistakes=(
        Mistake("", "leading axes merged", stage="shape", find=_leading_axes,
                example=lambda qe: skew(qe.reshape(-1, *qe.shape[-2:]))),
        _skew_is(lambda qe: _skew_variant(qe, "right", "first"),
                 "you padded the column on the right; Music Transformer pads it on the left: F.pad(qe, (1, 0))."),
        _skew_is(lambda qe: _skew_variant(qe, "left", "last"),
                 "you dropped the last row; the skew drops the first one: reshaped[..., 1:, :]."),
        _skew_is(lambda qe: _skew_variant(qe, "right", "last"), "padded on the right and dropped the last row: pad "
                 "on the left, F.pad(qe, (1, 0)), and drop the first row."),
        _skew_is(lambda qe: qe, "the result is Q E^T unchanged: its column r holds offset r - (L - 1), not key j; pad "
                 "a column on the left, reshape to (L + 1, L) and drop the first row."),
        _skew_is(lambda qe: qe.transpose(-2, -1), "a transpose is not the skew: pad a column on the left, reshape to "
                 "(L + 1, L), drop the first row."),
        _skew_is(lambda qe: qe.flip(-1), "flipping the columns puts offset 0 in column 0 for every row; the skew moves "
                 "each row's offsets by a different amount: pad, reshape, drop the first row."),
    ),
    passed=lambda name: (f"check_skew passed: {name} moves q_i . E_(j-i) to column j for qe of shapes "
                         + ", ".join(str((*s["lead"], s["L"], s["L"])) for s in SIZE_SETS["check_skew"])
                         + " (float64 for the batch of one, exactly); a second call leaves the first result as it "
                         "was and lets gradients through."),
)


def check_skew(skew_fn: Callable) -> None:
    """Check ``skew(qe)``: (..., L, L) -> (..., L, L), equal to the course's skew on and below the diagonal, with a
    batch of one in float64 (exactly) and a 4-D input.

    Diagnoses: wrong shape, padding on the right, dropping the last row, both, Q E^T returned unchanged, a transpose or
    a flip instead of the skew, leading axes merged or unpacked as one batch or squeezed away, a result of another dtype
    or computed in float32, an earlier result overwritten by the next call (a reused buffer), gradients cut (no_grad,
    .detach()), a size written in."""
    check(SKEW, skew_fn)


# ------------------------------------------------------------------ RoPE


def _rotate_variant(x: torch.Tensor, sign: float = 1.0, layout: str = "pairs", step: int = 2,
                    first: int = 0, out: str = "pairs", positions: int = -2, last: int | None = None) -> torch.Tensor:
    """RoPE with float64 angles, in x's dtype, or with one mistake: ``positions`` is the axis whose index is taken as
    the position, ``last`` the last position a table holds."""
    L, d = x.size(positions), x.size(-1)
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) * (step / 2) / d)
    m = torch.arange(first, first + L, dtype=torch.float64)
    angles = (m if last is None else m.clamp(max=last))[:, None] * theta
    angles = angles.reshape(L, *[1] * (-2 - positions), d // 2)  # (L, 1, ..., d/2) along that axis
    cos, sin = angles.cos(), sign * angles.sin()
    halves = layout == "halves"
    a, b = (x[..., : d // 2], x[..., d // 2:]) if halves else (x[..., 0::2], x[..., 1::2])
    turned = (a.double() * cos - b.double() * sin, a.double() * sin + b.double() * cos)
    return (torch.cat(turned, -1) if halves or out == "halves" else torch.stack(turned, -1).flatten(-2)).to(x.dtype)


def course_rotate(x: torch.Tensor) -> torch.Tensor:
    """``annotated.rotary.rotate`` with its angles in float64, in x's dtype."""
    return _rotate_variant(x)


def _rotation_tolerance(x: torch.Tensor) -> float:
    """float32 angles m * theta_i are off by about m * 1e-7 radians: the tolerance grows with the last position."""
    return 1e-4 + 3e-7 * x.size(-2) * float(x.abs().max())


def _rotate_probes(device: str | None) -> list[Probe]:
    probes = []
    for sizes, dtype in zip(SIZE_SETS["check_rotate"], DTYPES["check_rotate"]):
        shape = (*sizes["lead"], sizes["L"], sizes["d"])
        x = torch.randn(shape, generator=torch.Generator().manual_seed(10 * sizes["L"] + sizes["d"]),
                        dtype=torch.float64).to(dtype)
        probes.append(Probe((x,), f"{{what}} of {{name}}(x of shape {shape}, {dtype})", sizes=sizes,
                            precision=_rotation_tolerance(x), tags=dict(heads=x.dim() > 3)))
    # A second call, on an input that requires grad: queries and keys are rotated in the training path.
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*SIZE_SETS["check_rotate"][0]["lead"], 7, 6, generator=g)
    probes.append(Probe((x,), "{what}", grad=(0,), again=(torch.randn(x.shape, generator=g),),
                        precision=_rotation_tolerance(x)))
    return probes


def _past_the_table(found: dict, p: Probe) -> str | None:
    x, got, first = p.args[0], found["values"], (..., slice(0, 5000), slice(None))
    if x.size(-2) > 5000 and got is not None and _equal(got[first], course_rotate(x)[first], p.precision):
        return (f"your function is right for the first 5,000 positions and wrong after them (x has {x.size(-2)}): a "
                "table precomputed for 5,000 positions? Compute the angles for the length you are given.")
    return None


def _norm_changed(found: dict, p: Probe) -> str | None:
    got, x = found["values"], p.args[0]
    return ("your function changes the length of the vectors; a rotation keeps it: each pair gets cos and sin of the "
            "same angle, (a cos - b sin, a sin + b cos).") if got is not None and not _equal(
        got.double().norm(dim=-1), x.double().norm(dim=-1), 1e-3) else None


ROTATE = Declaration(
    check="check_rotate", function="rotate", roles=("x",), reference=course_rotate, probes=_rotate_probes,
    returns=Tensor("the rotated x"), sizes_fix=_hint("Take L and d from x.shape[-2:].", "check_rotate"),
    mistakes=(
        Mistake("your positions run along dimension 1, here the heads; the positions are the second-to-last axis "
                "of x, whatever comes in front: L = x.size(-2), and the angles (L, d/2) broadcast over the leading "
                "axes.", "positions along the heads", when=lambda p: p.tags.get("heads"),
                like=lambda x: _rotate_variant(x, positions=1 - x.dim())),  # dimension 1
        Mistake("you turn each pair by -m theta_i (the sine's sign is flipped): the rotation is (x0 cos - x1 sin, "
                "x0 sin + x1 cos).", "the sine's sign flipped", like=lambda x: _rotate_variant(x, sign=-1.0)),
        Mistake("you pair dimension i with i + d/2 (the 'rotate half' layout); Su et al.'s eq. 34 pairs neighbours "
                "(x_2i, x_2i+1): x[..., 0::2] with x[..., 1::2], and the result interleaved back.",
                "the rotate-half layout", like=lambda x: _rotate_variant(x, layout="halves")),
        Mistake("theta_i = 10000^(-i/d): the exponent is 2i/d, with 2i the index of the pair's first dimension: "
                "torch.arange(0, d, 2) / d.", "the exponent i/d", like=lambda x: _rotate_variant(x, step=1)),
        Mistake("your positions start at 1; the first position is m = 0 (no rotation).", "positions from 1",
                like=lambda x: _rotate_variant(x, first=1)),
        Mistake("x came back unrotated: turn pair i of position m by the angle m * theta_i.", "no rotation",
                like=lambda x: x.clone()),
        Mistake("your rotated pairs come back as two halves, every first coordinate then every second one "
                "(torch.cat): put each pair back in its place, torch.stack([first, second], dim=-1).flatten(-2).",
                "pairs put back as halves", like=lambda x: _rotate_variant(x, out="halves")),
        Mistake("", "a table of 5,000 positions", find=_past_the_table,
                example=lambda x: _rotate_variant(x, last=4999)),
        Mistake("", "the norm changed", find=_norm_changed, example=lambda x: 1.5 * course_rotate(x)),
    ),
    passed=lambda name: (f"check_rotate passed: {name} turns every pair by m * theta_i for x of shapes "
                         + ", ".join(str((*s["lead"], s["L"], s["d"])) for s in SIZE_SETS["check_rotate"])
                         + " (the last in float64); a second call leaves the first result as it was and lets "
                         "gradients through."),
)


def check_rotate(rotate_fn: Callable) -> None:
    """Check ``rotate(x)``: x (..., L, d), pair (x_2i, x_2i+1) of position m turned by m * 10000^(-2i/d), as in
    ``annotated.rotary.rotate``, with 5,003 positions, a batch of one and a 4-D float64 input.

    Diagnoses: wrong shape, the angle's sign flipped, the 'rotate half' layout, the exponent i/d, positions from 1, no
    rotation, pairs put back as two halves, positions read along the heads of a 4-D input, leading axes lost, a table
    precomputed for 5,000 positions, a result of another dtype, a change of norm, an earlier result overwritten by the
    next call (a reused buffer), gradients cut (no_grad, .detach()), a size written in."""
    check(ROTATE, rotate_fn)


DECLARATIONS = {d.check: d for d in (RELATIVE, SKEW, ROTATE)}
