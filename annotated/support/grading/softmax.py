"""Checks of notebook 01's exercises: the numerically stable softmax, the softmax with a
temperature, and the variance of a dot product with and without the 1/sqrt(d_k) scaling,
compared with ``annotated.softmax`` and ``torch.softmax``."""

import math
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from unittest import mock

import torch

from annotated.softmax import softmax as course_softmax
from annotated.support.grading.core import (
    ExerciseFailed, _aliasing, _assert_close, _assert_close64, _call, _function, _generic,
    _hard_coded_hint, _rows, _run_on_all_sizes, _same, _shape, _squeezed, _tensor,
)

# Scores (batch, rows, n): every size differs, so a softmax, a max or a sum along the wrong
# dimension shows, and every size changes from one set to the next.
SOFTMAX_SIZES = [dict(batch=2, rows=3, n=5), dict(batch=4, rows=6, n=7)]
TEMPERATURE_SIZES = [dict(rows=3, n=5), dict(rows=6, n=2)]
# One distribution of the components per set, each with mean 0 and variance 1: Gaussian,
# uniform on [-sqrt(3), sqrt(3)] and +-1 with equal chances.
VARIANCE_SIZES = [dict(d_k=9, n_pairs=3000), dict(d_k=25, n_pairs=2000), dict(d_k=64, n_pairs=1000)]
DISTRIBUTIONS = ("Gaussian", "uniform", "+-1")
SIZE_SETS = {
    "check_stable_softmax": SOFTMAX_SIZES,
    "check_softmax_with_temperature": TEMPERATURE_SIZES,
    "check_score_variances": VARIANCE_SIZES,
}

# The library's softmax, in every spelling: exercise 1.1 builds it from exp, max and sum.
# (F.softmax and nn.Softmax call Tensor.softmax.)
_LIBRARY_SOFTMAX = [
    (torch, "softmax", "torch.softmax"), (torch.Tensor, "softmax", "Tensor.softmax"),
    (torch.special, "softmax", "torch.special.softmax"),
    (torch, "log_softmax", "torch.log_softmax"),
    (torch.Tensor, "log_softmax", "Tensor.log_softmax"),
    (torch.special, "log_softmax", "torch.special.log_softmax"),
]
_KEEPDIM_HINT = (
    "\nHint: a max or a sum along a dimension without keepdim=True drops that dimension, so "
    "(batch, rows, n).amax(dim=-1) is (batch, rows), which broadcasting lines up with the wrong "
    "dimensions of x. Keep it: x.amax(dim=dim, keepdim=True), e.sum(dim=dim, keepdim=True)."
)
_MAX_PAIR_HINT = (
    "\nHint: x.max(dim=...) returns a pair (values, indices); use x.amax(dim=dim, keepdim=True), "
    "or x.max(dim=dim, keepdim=True).values."
)
_CALL_HINTS = ((r"must match the size of tensor", _KEEPDIM_HINT),
               (r"return_types\.max", _MAX_PAIR_HINT))


@contextmanager
def _spy_on_library_softmax():
    """Record every call of the library's softmax while the block runs (the calls still work)."""
    used: list[str] = []
    with ExitStack() as stack:
        for owner, attr, spelled in _LIBRARY_SOFTMAX:
            original = getattr(owner, attr)

            def spy(*args, _original=original, _spelled=spelled, **kwargs):
                used.append(_spelled)
                return _original(*args, **kwargs)

            stack.enter_context(mock.patch.object(owner, attr, spy))
        yield used


def _plain(x: torch.Tensor, dim: int, shift: torch.Tensor | float = 0.0) -> torch.Tensor:
    """exp(x - shift) normalized along ``dim``: the softmax with a given shift, right or wrong."""
    e = torch.exp(x - shift)
    return e / e.sum(dim=dim, keepdim=True)


def _bad_rows(weights: torch.Tensor, dim: int) -> torch.Tensor:
    """Per row along ``dim``: True where the row holds NaN or inf or does not sum to 1."""
    finite = weights.isfinite().all(dim=dim)
    sums = weights.double().nan_to_num(0.0, 0.0, 0.0).sum(dim=dim)
    return ~finite | ((sums - 1).abs() > 1e-3)


def _dimension(dim: int, ndim: int) -> str:
    return f"dimension {dim % ndim}" + (" (the last)" if dim % ndim == ndim - 1 else "")


# ---------------------------------------------------------------- exercise 1.1: stable_softmax


def _call_softmax(fn: Callable, name: str, x: torch.Tensor, dim: int) -> torch.Tensor:
    with _spy_on_library_softmax() as used:
        result = _call(fn, x, dim, hints=_CALL_HINTS, roles=("x", "dim"))
    if used:
        raise ExerciseFailed(
            f"{name} calls {used[0]}: the exercise is to build the softmax yourself, from "
            "torch.exp, a max and a sum (the check compares your result with torch.softmax). "
            "Subtract the maximum along dim, take the exponential, divide by its sum along dim."
        )
    got = _tensor(result, name, "the weights", like=x)
    _shape(got, x.shape, f"{name}(x of shape {tuple(x.shape)}, dim={dim})",
           " The softmax keeps the shape of its input." + _squeezed(got.shape, x.shape))
    return got


def _reference_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    expected = torch.softmax(x, dim=dim)
    # The course's code agrees (compared with _same: torch.testing imports seconds of modules).
    assert _same(course_softmax(x, dim=dim), expected), "annotated.softmax differs from torch"
    return expected


def _diagnose_ordinary(got: torch.Tensor, x: torch.Tensor, dim: int,
                       expected: torch.Tensor) -> None:
    """Name the mistake of a softmax that differs from torch.softmax on ordinary scores."""
    ndim = x.dim()
    here = _dimension(dim, ndim)
    if got.isfinite().all() and not _same(got.sum(dim), torch.ones_like(got.sum(dim))):
        for other in range(ndim):
            if other != dim % ndim and _same(got, torch.softmax(x, dim=other)):
                if other == ndim - 1:
                    raise ExerciseFailed(
                        f"asked for the softmax along dim={dim}, your function took it along the "
                        "last dimension: does it ignore its dim argument (a -1 written into the "
                        "code)? Use dim in the max and in the sum: x.amax(dim=dim, keepdim=True), "
                        "e.sum(dim=dim, keepdim=True)."
                    )
                raise ExerciseFailed(
                    f"your softmax runs along {_dimension(other, ndim)}, but dim={dim} asks for "
                    f"{here}: take the max and the sum along dim."
                )
        if _same(got.sum(), torch.tensor(1.0)):
            raise ExerciseFailed(
                "you divided by the sum of the whole tensor, so all the weights together sum to 1, "
                "not each row: sum along dim, e.sum(dim=dim, keepdim=True)."
            )
        for other in range(ndim):
            if other != dim % ndim and _same(got.sum(other), torch.ones_like(got.sum(other))):
                raise ExerciseFailed(
                    f"your weights sum to 1 along {_dimension(other, ndim)}, but the softmax runs "
                    f"along {here} (dim={dim}): divide by the sum along dim, "
                    "e.sum(dim=dim, keepdim=True)."
                )
        if _same(got, torch.exp(x - x.amax(dim=dim, keepdim=True))):
            raise ExerciseFailed(
                "the exponentials are not divided by their sum: after e = exp(x - max), return "
                "e / e.sum(dim=dim, keepdim=True), so that each row sums to 1."
            )
        raise ExerciseFailed(
            f"the weights along {here} should sum to 1 for every row; yours sum to "
            f"{_rows(got.movedim(dim, -1))}"
        )
    for other in range(ndim):
        if other != dim % ndim and _same(got, _plain(x, dim, x.amax(dim=other, keepdim=True))):
            raise ExerciseFailed(
                f"you subtracted the maximum along {_dimension(other, ndim)}, but the softmax runs "
                f"along {here}: a shift changes nothing only when it is the same for every entry "
                "of a row, so it must be the max along the softmax's own dimension: "
                "x.amax(dim=dim, keepdim=True)."
            )
    if _same(got, _plain(x / x.amax(dim=dim, keepdim=True), dim)):
        raise ExerciseFailed(
            "you divided the scores by their maximum; subtract it instead: softmax(x - c) = "
            "softmax(x) for any constant c, but softmax(x / c) is another distribution (a "
            "temperature c)."
        )
    _assert_close(got, expected, f"softmax(x, dim={dim})")


def _check_stable_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    batch, rows, n = sizes["batch"], sizes["rows"], sizes["n"]
    x = torch.randn(batch, rows, n, generator=g) * 3

    # 1. Ordinary scores, along the last, a middle and the first dimension.
    for dim in (-1, 1, 0):
        expected = _reference_softmax(x, dim)
        got = _call_softmax(fn, name, x, dim)
        if not _same(got, expected):
            _diagnose_ordinary(got, x, dim, expected)

    # 2. The same scores moved up by 1000, as in the notebook: exp(1000) is inf in float32.
    big = x + 1000
    got = _call_softmax(fn, name, big, -1)
    if not got.isfinite().all():
        raise ExerciseFailed(
            f"NaN or inf for scores around 1000 (the notebook's [1000, 1001, 1002]): your weights "
            f"sum to {_rows(got)} per row. exp(1000) overflows float32 (whose largest number is "
            "about 3.4e38, and e^89 is already past it), and inf / inf is NaN. Subtract the "
            "maximum along dim before the exponential: x - x.amax(dim=dim, keepdim=True) is at "
            "most 0 everywhere, so every exp lies in (0, 1] and the softmax is unchanged."
        )
    expected = _reference_softmax(big, -1)
    if not _same(got, expected):
        _assert_close(got, expected, "softmax(x + 1000, dim=-1)")

    # 3. Rows of very different scale in one tensor: offsets -1500, 0, +1500, and one row spread
    # 100 times wider. Only each row's own maximum keeps every row finite.
    offsets = (torch.arange(batch * rows) % 3 - 1).view(batch, rows, 1) * 1500.0
    mixed = x + offsets
    mixed[0, 1] = x[0, 1] * 100  # a row of offset 0 and spread about +-300
    expected = _reference_softmax(mixed, -1)
    got = _call_softmax(fn, name, mixed, -1)
    bad = _bad_rows(got, -1)
    if bad.any():
        if torch.equal(bad, _bad_rows(_plain(mixed, -1, mixed.amax()), -1)):
            raise ExerciseFailed(
                "with rows of very different scale in one tensor (scores about -1500, 0 and "
                f"+1500) {int(bad.sum())} of the {bad.numel()} rows are NaN or do not sum to 1: "
                "you subtracted the maximum of the whole tensor. In a row 1500 below it every "
                "exp(x - max) underflows to 0, and 0 / 0 is NaN. Subtract each row's own maximum: "
                "x.amax(dim=dim, keepdim=True)."
            )
        if torch.equal(bad, _bad_rows(_plain(mixed, -1, mixed.mean(-1, keepdim=True)), -1)):
            raise ExerciseFailed(
                f"the row whose scores spread about +-{mixed[0, 1].abs().max():.0f} comes out NaN "
                "or not summing to 1: you subtracted something smaller than the row's maximum "
                "(its mean, its minimum?), which leaves exponents far above 0, and exp overflows "
                "to inf. Only the maximum makes every exponent at most 0: "
                "x.amax(dim=dim, keepdim=True)."
            )
        raise ExerciseFailed(
            f"with rows of very different scale in one tensor (scores about -1500, 0 and +1500, "
            f"one row spread about +-{mixed[0, 1].abs().max():.0f}) {int(bad.sum())} of the "
            f"{bad.numel()} rows are NaN or do not sum to 1: subtract each row's own maximum "
            "before the exponential, x.amax(dim=dim, keepdim=True)."
        )
    if not _same(got, expected):
        _assert_close(got, expected, "softmax of rows of very different scale")


_UNDERFLOW = (
    "exp of scores that far below zero underflows to 0 in every entry, and 0 / 0 is NaN. Does "
    "your function subtract the maximum only when the scores are large (if x.max() > ...)? The "
    "shift is needed on both sides: subtract the maximum along dim always, "
    "x - x.amax(dim=dim, keepdim=True), and the largest exponent is exactly 0 whatever the scores."
)


def _check_stable_extras(fn: Callable, name: str, g: torch.Generator) -> None:
    """What every set of sizes leaves out: other numbers of dimensions, a batch of one, scores
    far below zero, float64, and a second call that must leave the first result alone."""
    # 4. Heads in front (4-D) along a middle and the last dimension, one row (1-D), a batch of one.
    for shape, dim in [((2, 3, 4, 5), 2), ((2, 3, 4, 5), -1), ((7,), 0), ((1, 1, 6), -1)]:
        x = torch.randn(*shape, generator=g) * 3
        expected = _reference_softmax(x, dim)
        got = _call_softmax(fn, name, x, dim)
        if not _same(got, expected):
            try:
                _diagnose_ordinary(got, x, dim, expected)
            except ExerciseFailed as err:
                dims = f"{len(shape)} dimension" + ("s" if len(shape) != 1 else "")
                raise type(err)(f"with x of shape {shape} ({dims}; the earlier scores had 3) "
                                f"and dim={dim}: {err}") from None

    # 5. Scores far below zero: around -1000, where exp(x) is 0 in float32 and float64.
    x = torch.randn(2, 3, 5, generator=g) * 3
    low = x - 1000
    got = _call_softmax(fn, name, low, -1)
    if _bad_rows(got, -1).any():
        raise ExerciseFailed(
            f"NaN or weights that do not sum to 1 for scores around -1000 (the notebook's "
            f"[1000, 1001, 1002] moved below zero): your rows sum to {_rows(got)}. {_UNDERFLOW}"
        )
    expected = _reference_softmax(low, -1)
    if not _same(got, expected):
        _assert_close(got, expected, "softmax(x - 1000, dim=-1)")

    # 6. float64 scores, along a middle dimension: float64 weights, exact to float64 rounding.
    x64 = (torch.randn(3, 4, 2, generator=g) * 3).double()
    got = _call_softmax(fn, name, x64, 1)
    _assert_close64(got, torch.softmax(x64, dim=1), "softmax(x of dtype float64, dim=1)")

    # 7. A second call, on other scores of the same shape, must leave the first result alone.
    first = _call_softmax(fn, name, x, -1)
    _aliasing(lambda: _call_softmax(fn, name, x * 2 + 1, -1), first, name, "the weights")


def _softmax_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Read every size from x, and reduce along dim, not along a number.")


def check_stable_softmax(stable_softmax: Callable) -> None:
    """Check ``stable_softmax(x, dim=-1)``, built from exp, max and sum, against torch.softmax
    and ``annotated.softmax.softmax``, on the sizes of ``SOFTMAX_SIZES``.

    Each set tries ordinary scores along three dimensions, the scores moved up by 1000, and
    rows of very different scale (about -1500, 0 and +1500, one row 100 times wider) in one
    tensor. Then 4-D scores (heads in front) along a middle and the last dimension, one row
    (1-D), a batch of one (1, 1, n), scores around -1000, float64 scores (float64 weights, exact
    to float64 rounding), and a second call that must leave the first result unchanged.

    Diagnoses: a call of the library's softmax, an input changed in place, a result of another
    kind, dtype, device or shape, a max or sum without keepdim (the broadcasting error) and
    ``x.max(dim)`` used as a tensor, the dim argument ignored, the softmax, the max or the sum
    along the wrong dimension, exponentials not divided by their sum, the scores divided by
    their maximum instead of shifted, no max subtracted (inf/NaN on large scores), the maximum
    of the whole tensor instead of each row's (0/0 in rows far below it), a shift below the
    row's maximum (mean, minimum: overflow in a wide row), a shift only when the scores are
    large (0/0 for scores far below zero), a .squeeze() that drops a batch of one, code for
    3-D scores only, a float32 result or float32 steps for float64 scores (.float(), torch.zeros
    without dtype=), a result written into a tensor kept between calls, and sizes written
    into the code.
    """
    name = _function(stable_softmax, "check_stable_softmax", "stable_softmax")
    g = torch.Generator().manual_seed(0)
    _run_on_all_sizes(lambda sizes: _check_stable_once(stable_softmax, name, sizes, g),
                      SOFTMAX_SIZES, _softmax_hint)
    _check_stable_extras(stable_softmax, name, g)
    shapes = " and ".join(f"({s['batch']}, {s['rows']}, {s['n']})" for s in SOFTMAX_SIZES)
    print(
        f"check_stable_softmax passed: {name} equals torch.softmax along every dimension of "
        f"scores of shapes {shapes}, on 4-D, 1-D and batch-of-one scores and in float64, and "
        "stays finite for scores around 1000 and -1000 and for rows of scores about -1500, 0 "
        "and +1500 in one tensor."
    )


# ---------------------------------------------------------------- exercise 1.2: temperature


def _entropy(p: torch.Tensor) -> float:
    """The mean entropy of the rows of p, in nats."""
    p = p.double()
    return float(-(p * p.clamp_min(1e-300).log()).sum(-1).mean())


def _check_temperature_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    rows, n = sizes["rows"], sizes["n"]
    x = torch.randn(rows, n, generator=g) * 2

    # 1. Ordinary scores at temperatures above and below 1.
    for temperature in (2.0, 0.5):
        expected = torch.softmax(x / temperature, dim=-1)
        assert _same(course_softmax(x, temperature=temperature), expected), "annotated.softmax differs"
        call = f"{name}(x of shape {tuple(x.shape)}, temperature={temperature})"
        result = _call(fn, x, temperature, hints=_CALL_HINTS, roles=("x", "temperature"))
        got = _tensor(result, name, "the weights", like=x)
        _shape(got, x.shape, call, " The softmax keeps the shape of its input.")
        if _same(got, expected):
            continue
        plain = torch.softmax(x, dim=-1)
        if _same(got, plain):
            raise ExerciseFailed(
                f"{call} gives the same weights as temperature 1: the temperature has no effect. "
                "Divide the scores by it before the exponential, softmax(x / temperature) "
                "(subtracting it, or dividing the exponentials by it, cancels in the "
                "normalization)."
            )
        if _same(got, plain / temperature):
            raise ExerciseFailed(
                f"you divided the weights by the temperature after the softmax, so each row sums "
                f"to 1/{temperature} = {1 / temperature:.4g} (yours: {_rows(got)}). The "
                "temperature divides the scores before it: softmax(x / temperature)."
            )
        if _same(got, plain ** (1 / temperature)):
            raise ExerciseFailed(
                "you raised the weights to the power 1/temperature without normalizing again: "
                f"the rows sum to {_rows(got)}. softmax(x / T) is that power divided by its row "
                "sum; simpler, divide the scores: softmax(x / temperature)."
            )
        if _same(got, torch.softmax(x * temperature, dim=-1)):
            raise ExerciseFailed(
                f"you multiplied the scores by the temperature instead of dividing: at T = "
                f"{temperature} your weights have a mean entropy of {_entropy(got):.3f} nats, "
                f"where softmax(x / T) has {_entropy(expected):.3f}. A temperature above 1 must "
                "flatten the weights (higher entropy), below 1 sharpen them: "
                "softmax(x / temperature)."
            )
        if _same(got, torch.softmax(x / math.sqrt(temperature), dim=-1)):
            raise ExerciseFailed(
                "you divided the scores by sqrt(temperature): the temperature itself divides them, "
                "softmax(x / T). (Attention's 1/sqrt(d_k) is a temperature T = sqrt(d_k): "
                "there the square root is part of T.)"
            )
        _assert_close(got, expected, call)

    # 2. A small temperature makes large scores of ordinary ones: x / 0.05 reaches about 100.
    # 3. Large scores and a temperature above 1: exp(x) first overflows.
    for scores, temperature, what in [(x, 0.05, "scores x"), (x + 1000, 3.0, "scores x + 1000")]:
        expected = torch.softmax(scores / temperature, dim=-1)
        result = _call(fn, scores, temperature, hints=_CALL_HINTS, roles=("x", "temperature"))
        got = _tensor(result, name, "the weights", like=x)
        _shape(got, x.shape, f"{name}({what}, temperature={temperature})")
        if not got.isfinite().all():
            largest = float((scores / temperature).abs().max())
            raise ExerciseFailed(
                f"NaN or inf with {what} and temperature {temperature}: the scores divided by the "
                f"temperature reach {largest:.0f}, and exp of that overflows float32 (e^89 is "
                "already past its largest number). Divide by the temperature first, then subtract "
                "the maximum of the divided scores before the exponential (your stable_softmax of "
                "exercise 1.1 does it: stable_softmax(x / temperature))."
            )
        if not _same(got, expected):
            _assert_close(got, expected, f"{name}({what}, temperature={temperature})")

    # 4. A temperature of 0 divides by zero, a negative one reverses the order of the weights.
    for temperature in (0.0, -1.0):
        try:
            fn(x, temperature)
        except ValueError:
            continue
        except Exception as err:  # noqa: BLE001 - any other error is named
            raise ExerciseFailed(
                f"{name}(x, temperature={temperature}) raised {type(err).__name__}: {err}; raise a "
                f"ValueError instead, which says the temperature must be positive and names the "
                f"value it got: raise ValueError(f\"temperature must be positive, got "
                f"{{temperature}}\")."
            ) from None
        meaning = ("divides by zero (x / 0 is inf or NaN)" if temperature == 0 else
                   "reverses the order: the lowest score would get the most weight")
        raise ExerciseFailed(
            f"{name}(x, temperature={temperature}) returned without an error, but a temperature "
            f"of {temperature} {meaning}. Refuse it before computing: if temperature <= 0, raise "
            "ValueError(f\"temperature must be positive, got {temperature}\")."
        )


def _call_temperature(fn: Callable, name: str, x: torch.Tensor, temperature: float) -> torch.Tensor:
    result = _call(fn, x, temperature, hints=_CALL_HINTS, roles=("x", "temperature"))
    got = _tensor(result, name, "the weights", like=x)
    _shape(got, x.shape, f"{name}(x of shape {tuple(x.shape)}, temperature={temperature})",
           " The softmax keeps the shape of its input." + _squeezed(got.shape, x.shape))
    return got


def _check_temperature_extras(fn: Callable, name: str, g: torch.Generator) -> None:
    """What every set of sizes leaves out: scores with a batch dimension in front, a batch of
    one, scores far below zero, float64, and a second call that must leave the first result
    alone."""
    # 5. Scores (batch, rows, n): the softmax still runs along the last dimension; a batch of one.
    for shape in [(2, 3, 5), (1, 4)]:
        x = torch.randn(*shape, generator=g) * 2
        expected = torch.softmax(x / 2.0, dim=-1)
        got = _call_temperature(fn, name, x, 2.0)
        if not _same(got, expected):
            for other in range(x.dim() - 1):
                if _same(got, torch.softmax(x / 2.0, dim=other)):
                    raise ExerciseFailed(
                        f"with x of shape {shape}, your softmax runs along dimension {other}; it "
                        "runs along the last dimension whatever comes in front: reduce along "
                        "dim=-1, not along dimension 1 or 0."
                    )
            _assert_close(got, expected, f"{name}(x of shape {shape}, temperature=2.0)")

    # 6. Scores far below zero: x - 1000 at T = 0.5 reaches about -2000.
    x = torch.randn(3, 5, generator=g) * 2
    low = x - 1000
    got = _call_temperature(fn, name, low, 0.5)
    if _bad_rows(got, -1).any():
        raise ExerciseFailed(
            "NaN or weights that do not sum to 1 for scores x - 1000 at temperature 0.5 (about "
            f"-2000 once divided): your rows sum to {_rows(got)}. {_UNDERFLOW}"
        )
    expected = torch.softmax(low / 0.5, dim=-1)
    if not _same(got, expected):
        _assert_close(got, expected, f"{name}(x - 1000, temperature=0.5)")

    # 7. float64 scores: float64 weights, exact to float64 rounding.
    x64 = x.double() * 1.5
    got = _call_temperature(fn, name, x64, 0.5)
    _assert_close64(got, torch.softmax(x64 / 0.5, dim=-1),
                    f"{name}(x of dtype float64, temperature=0.5)")

    # 8. A second call, on other scores of the same shape, must leave the first result alone.
    first = _call_temperature(fn, name, x, 2.0)
    _aliasing(lambda: _call_temperature(fn, name, x * 2 + 1, 2.0), first, name, "the weights")


def _temperature_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message, "Read every size from x.")


def check_softmax_with_temperature(softmax_with_temperature: Callable) -> None:
    """Check ``softmax_with_temperature(x, temperature)``, the softmax of x / temperature
    along the last dimension, against ``annotated.softmax.softmax`` and torch.softmax, on
    the sizes of ``TEMPERATURE_SIZES``.

    Each set tries the temperatures 2 and 0.5 on ordinary scores, 0.05 (scores divided by it
    reach about 100), 3 on scores around 1000, and 0 and -1, which must raise ValueError.
    Then scores (batch, rows, n) and a batch of one (1, n), scores around -1000 at T = 0.5,
    float64 scores (exact to float64 rounding), and a second call that must leave the first
    result unchanged.

    Diagnoses: an input changed in place, a result of another kind, dtype, device or shape,
    a temperature without effect (subtracted, or applied to the exponentials), the weights
    divided by the temperature after the softmax, the weights raised to 1/T without
    normalizing, the scores multiplied by T, divided by sqrt(T), overflow when the divided
    scores are large, a temperature of 0 or below accepted or refused with another error,
    a softmax along another dimension than the last for 3-D scores, a shift only when the
    scores are large (0/0 far below zero), a .squeeze() that drops a batch of one, a float32
    result or float32 steps for float64 scores, a result written into a tensor kept between
    calls, and sizes written into the code.
    """
    name = _function(softmax_with_temperature, "check_softmax_with_temperature",
                     "softmax_with_temperature")
    g = torch.Generator().manual_seed(1)
    _run_on_all_sizes(
        lambda sizes: _check_temperature_once(softmax_with_temperature, name, sizes, g),
        TEMPERATURE_SIZES, _temperature_hint)
    _check_temperature_extras(softmax_with_temperature, name, g)
    print(
        f"check_softmax_with_temperature passed: {name} equals softmax(x / T) for T = 2, 0.5, "
        "0.05 and 3 (on scores around 1000) without overflowing, on scores around -1000, with "
        "a batch dimension in front, a batch of one and in float64, and refuses T = 0 and "
        "T = -1 with a ValueError."
    )


# ---------------------------------------------------------------- exercise 1.3: score_variances


def _sampler(kind: str, g: torch.Generator) -> tuple[Callable, list]:
    """``sample(*shape)``, components of mean 0 and variance 1, and the list of what it drew
    (a copy of each tensor, so that a change in place does not change the reference)."""
    drawn: list[torch.Tensor] = []

    def sample(*shape) -> torch.Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])  # sample((n, d)) as well as sample(n, d)
        if kind == "Gaussian":
            t = torch.randn(*shape, generator=g)
        elif kind == "uniform":
            t = (torch.rand(*shape, generator=g) * 2 - 1) * math.sqrt(3)
        else:
            t = torch.randint(0, 2, tuple(shape), generator=g).float() * 2 - 1
        drawn.append(t.clone())
        return t

    return sample, drawn


def _variance_mistake(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor, d_k: int) -> str | None:
    """Name the mistake that turns the samples q, k into ``got``, if it is a known one."""
    q, k = q.double(), k.double()
    dots = (q * k).sum(-1)
    v = float(dots.var())
    first, second = float(got[0]), float(got[1])

    def close(a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-6)

    if close(first, math.sqrt(v)) and close(second, math.sqrt(v / d_k)):
        return (f"you returned standard deviations, {first:.4g} and {second:.4g}, not variances: "
                f"Var(q.k) is {v:.4g} here, about d_k = {d_k}. Use .var(), not .std().")
    if close(first, v / d_k) and close(second, v):
        return ("the two numbers are swapped: first the variance of the raw scores q.k (about "
                "d_k), then that of the scaled scores q.k / sqrt(d_k) (about 1).")
    if close(first, v / d_k**2) and close(second, v / d_k**3):
        return (f"you averaged the products q_i k_i instead of summing them (their mean is q.k / "
                f"d_k): your first number is {first:.4g}, about 1 / d_k, where Var(q.k) is about "
                f"d_k = {d_k}. The dot product is the sum, (q * k).sum(dim=-1).")
    products = float((q * k).var())
    if close(first, products):
        return (f"your first number, {first:.4g}, is the variance of the {q.numel()} products "
                "q_i k_i (about 1), not of the n_pairs dot products q.k: sum the products of "
                "each pair first, (q * k).sum(dim=-1), then take the variance of those sums.")
    if close(first, float((q * k).sum(0).var())):
        return ("you summed over the pairs (dim=0) instead of over the d_k components of each "
                "pair: a row is one pair, so the dot product is (q * k).sum(dim=-1).")
    if close(first, float((q @ k.T).var())):
        return (f"q @ k.T scores every q with every k, {q.size(0)}^2 numbers that are not "
                "independent pairs: pair row i of q with row i of k only, (q * k).sum(dim=-1).")
    if close(first, v):
        if close(second, v):
            return ("your second number equals the first: the scores were not divided by "
                    "sqrt(d_k) before the second variance.")
        if close(second, v / d_k**2):
            return (f"you divided the scores by d_k = {d_k} instead of sqrt(d_k) = "
                    f"{math.sqrt(d_k):.4g}: the second number should be about 1, yours is "
                    f"{second:.4g}.")
        if close(second, v / math.sqrt(d_k)):
            return ("you divided the variance by sqrt(d_k); but dividing the scores by sqrt(d_k) "
                    "divides their variance by d_k: Var(cX) = c^2 Var(X). Take the variance of "
                    "q.k / sqrt(d_k), or divide the first variance by d_k.")
        implied = v / second if second > 0 else 0.0
        if implied > 0 and abs(implied - round(implied)) < 1e-3 and round(implied) != d_k:
            return (f"you divided the scores by sqrt({round(implied)}), but here d_k = {d_k}: is "
                    "d_k written into your code? Use the d_k argument.")
    return None


def _check_variances_once(fn: Callable, name: str, sizes: dict, kind: str,
                          g: torch.Generator) -> tuple[dict, torch.Tensor]:
    d_k, n_pairs = sizes["d_k"], sizes["n_pairs"]
    sample, drawn = _sampler(kind, g)
    call = f"{name}(d_k={d_k}, n_pairs={n_pairs}, sample)"
    result = _call(fn, d_k, n_pairs, sample, roles=("d_k", "n_pairs", "sample"))
    if not drawn:
        raise ExerciseFailed(
            f"{call} never called sample: draw q and k with the sample function you are given, "
            "q = sample(n_pairs, d_k) and k = sample(n_pairs, d_k), so that the check can try "
            "components that are not Gaussian (uniform, +-1), as the notebook does."
        )
    shapes = [tuple(t.shape) for t in drawn]
    wrong = [s for s in shapes if s != (n_pairs, d_k)]
    if wrong:
        fix = ("one row per pair: sample(n_pairs, d_k), not sample(d_k, n_pairs)"
               if wrong[0] == (d_k, n_pairs) else "sample(n_pairs, d_k)")
        raise _generic(
            f"{call} drew a sample of shape {wrong[0]}; q and k are (n_pairs, d_k) = "
            f"({n_pairs}, {d_k}), {fix}."
        )
    if len(drawn) == 1:
        raise ExerciseFailed(
            f"{call} drew one sample only: q and k must be independent, two calls of "
            "sample(n_pairs, d_k). With k = q the score is q.q = |q|^2, which is never negative "
            "and whose variance is not d_k (for +-1 components it is 0)."
        )
    if len(drawn) > 2:
        raise ExerciseFailed(
            f"{call} drew {len(drawn)} samples: draw q and k once and compute both numbers from "
            "the same scores, so that the second is exactly the first divided by d_k."
        )
    if isinstance(result, (tuple, list)) and len(result) == 2:
        raise ExerciseFailed(
            f"{name} returned a {type(result).__name__} of two numbers; return them as one "
            "tensor of shape (2,): torch.stack([variance, scaled_variance]) (keep them tensors, "
            "without .item())."
        )
    got = _tensor(result, name, "the two variances", like=drawn[0])
    _shape(got, (2,), f"{call}, the pair (Var(q.k), Var(q.k / sqrt(d_k)))",
           " Return torch.stack([variance, scaled_variance]).")
    q, k = drawn
    dots = (q.double() * k.double()).sum(-1)
    expected = torch.stack([dots.var(), (dots / math.sqrt(d_k)).var()])
    population = torch.stack([dots.var(correction=0), (dots / math.sqrt(d_k)).var(correction=0)])
    if not (_same(got, expected.float()) or _same(got, population.float())):
        if not got.isfinite().all():
            _assert_close(got, expected, call)
        message = _variance_mistake(got, q, k, d_k)
        if message:
            raise _generic(message)
        _assert_close(got, expected, f"{call}, (Var(q.k), Var(q.k / sqrt(d_k)))")
    return dict(d_k=d_k, kind=kind, raw=float(expected[0]), scaled=float(expected[1])), got


def _variances_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Use the d_k and n_pairs arguments, never a number of the first set.")


def check_score_variances(score_variances: Callable) -> None:
    """Check ``score_variances(d_k, n_pairs, sample)``, which draws q and k with
    ``sample(n_pairs, d_k)`` and returns tensor([Var(q.k), Var(q.k / sqrt(d_k))]), on the
    sizes of ``VARIANCE_SIZES`` with Gaussian, uniform and +-1 components. The expected numbers
    are computed from the very samples the function drew; the unbiased variance (torch's
    default) and the population one (correction=0) both pass.

    Diagnoses: an input changed in place, sample not called, samples of the wrong shape
    (transposed, or a size written into the code), one sample for both q and k, more than
    two samples, a result of another kind or shape, standard deviations instead of
    variances, the two numbers swapped, the mean of the products instead of their sum, the
    variance of the products, the sum over the pairs, q @ k.T, the scaling missing, by d_k,
    or applied to the variance as 1/sqrt(d_k), a d_k written into the scaling, and a result
    written into a tensor kept between calls (a later call changes an earlier result).
    """
    name = _function(score_variances, "check_score_variances", "score_variances")
    g = torch.Generator().manual_seed(2)
    measured, results = [], []

    def once(sizes: dict) -> None:
        kind = DISTRIBUTIONS[VARIANCE_SIZES.index(sizes)]
        run = lambda: _check_variances_once(score_variances, name, sizes, kind, g)  # noqa: E731
        # Each later call must leave the pair an earlier call returned alone.
        summary, got = _aliasing(run, results[-1], name, "the pair of variances") if results else run()
        measured.append(summary)
        results.append(got)

    _run_on_all_sizes(once, VARIANCE_SIZES, _variances_hint)
    table = "; ".join(f"d_k = {m['d_k']} ({m['kind']}): {m['raw']:.1f} and {m['scaled']:.2f}"
                      for m in measured)
    print(f"check_score_variances passed: {name} measures Var(q.k) about d_k and "
          f"Var(q.k / sqrt(d_k)) about 1, from its own samples: {table}.")
