"""Checks of notebook 01's exercises: the numerically stable softmax (1.1) and the softmax with a
temperature (1.2), as declarations (``annotated.support.grading.engine``) compared with
``annotated.softmax``; and the variance of a dot product with and without the 1/sqrt(d_k)
scaling (1.3), drawn with a seeded ``sample`` function the check hands it (``sampler``, sent to
the kernel as data by ``annotated.support.record.build``)."""

import math
from collections.abc import Callable

import torch

from annotated.softmax import softmax as course_softmax
from annotated.support import record as recorder
from annotated.support.grading.core import _rows
from annotated.support.grading.engine import Declaration, Mistake, Probe, Tensor, _clone, _equal, check

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
# The other device the probes try in a notebook: the GPU, where there is one (the grader and the
# tests use 'meta').
OTHER_DEVICE: str | None = "cuda" if torch.cuda.is_available() else None

_KEEPDIM_HINT = (
    "\nHint: a max or a sum along a dimension without keepdim=True drops that dimension, so "
    "(batch, rows, n).amax(dim=-1) is (batch, rows), which broadcasting lines up with the wrong "
    "dimensions of x. Keep it: x.amax(dim=dim, keepdim=True), e.sum(dim=dim, keepdim=True)."
)
_MAX_PAIR_HINT = (
    "\nHint: x.max(dim=...) returns a pair (values, indices); use x.amax(dim=dim, keepdim=True), "
    "or x.max(dim=dim, keepdim=True).values."
)
_CALL_HINTS = ((r"must match the size of tensor", _KEEPDIM_HINT), (r"return_types\.max", _MAX_PAIR_HINT))
_UNDERFLOW = (
    "exp of scores that far below zero underflows to 0 in every entry, and 0 / 0 is NaN. Does "
    "your function subtract the maximum only when the scores are large (if x.max() > ...)? The "
    "shift is needed on both sides: subtract the maximum along dim always, "
    "x - x.amax(dim=dim, keepdim=True), and the largest exponent is exactly 0 whatever the scores."
)


def _by_hand(x: torch.Tensor, dim: int, shift=None) -> torch.Tensor:
    """exp(x - shift) normalized along ``dim`` (shift: the max along ``dim`` unless given)."""
    e = torch.exp(x - (x.amax(dim=dim, keepdim=True) if shift is None else shift))
    return e / e.sum(dim=dim, keepdim=True)


def _bad_rows(weights: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Per row along ``dim``: True where the row holds NaN or inf or does not sum to 1."""
    sums = weights.double().nan_to_num(0.0, 0.0, 0.0).sum(dim=dim)
    return ~weights.isfinite().all(dim=dim) | ((sums - 1).abs() > 1e-3)


def _dimension(dim: int, ndim: int) -> str:
    return f"dimension {dim % ndim}" + (" (the last)" if dim % ndim == ndim - 1 else "")


def _found(kind: str, test: Callable) -> Callable:
    """A ``find`` for the probes tagged ``kind``: test(learner's numbers, probe) -> message."""
    return lambda found, p: test(found["values"], p) if p.tags.get(kind) and found["values"] is not None else None


# ---------------------------------------------------------------- exercise 1.1: stable_softmax


def _stable_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(0), []

    def probe(x, dim, what="", sizes=None, tags=(), **options):
        shape = f"x of shape {tuple(x.shape)}" if x.dtype == torch.float32 else f"x of dtype {str(x.dtype)[6:]}"
        probes.append(Probe((x, dim), f"{{what}} of {{name}}({shape}{what}, dim={dim})", sizes=sizes,
                            hints=_CALL_HINTS, tags=dict(tags), **options))

    for sizes in SOFTMAX_SIZES:
        x = torch.randn(sizes["batch"], sizes["rows"], sizes["n"], generator=g) * 3
        for dim in (-1, 1, 0):  # the last, a middle and the first dimension
            probe(x, dim, sizes=sizes)
        probe(x + 1000, -1, " + 1000", sizes, {"big": True})  # exp(1000) is inf in float32
        # Rows about -1500, 0 and +1500, one spread 100 times wider: only each row's own max keeps all finite.
        mixed = x + (torch.arange(x.numel() // x.size(-1)) % 3 - 1).view(*x.shape[:-1], 1) * 1500.0
        mixed[0, 1] = x[0, 1] * 100
        probe(mixed, -1, " in rows of very different scale", sizes, {"mixed": True})
    for shape, dim in [((2, 3, 4, 5), 2), ((2, 3, 4, 5), -1), ((7,), 0), ((1, 1, 6), -1)]:
        dims = f"{len(shape)} dimension" + ("s" if len(shape) != 1 else "")
        probe(torch.randn(*shape, generator=g) * 3, dim,
              tags={"prefix": f"with x of shape {shape} ({dims}; the earlier scores had 3) and dim={dim}: "})
    x = torch.randn(2, 3, 5, generator=g) * 3
    probe(x - 1000, -1, " - 1000", tags={"low": True})  # exp(x) is 0 in float32 and float64
    probe((torch.randn(3, 4, 2, generator=g) * 3).double(), 1)
    probe(x, -1, again=(x * 2 + 1, -1))
    probe(torch.randn(4, 4, generator=torch.Generator().manual_seed(5)) * 3, 0)  # two equal sizes
    if device is not None:
        probe(x.to(device), -1, f" on the device {device!r}", compare=False)
    return probes


def _other_dimension(last: bool) -> Callable:
    def find(found: dict, p: Probe) -> str | None:
        (x, dim), got = p.args, found["values"]
        ndim = x.dim()
        for other in range(ndim) if got is not None else ():
            if other != dim % ndim and (other == ndim - 1) == last and _equal(got, torch.softmax(x, dim=other)):
                if last:
                    return (f"asked for the softmax along dim={dim}, your function took it along the last "
                            "dimension: does it ignore its dim argument (a -1 written into the code)? Use dim "
                            "in the max and in the sum: x.amax(dim=dim, keepdim=True), e.sum(dim=dim, keepdim=True).")
                return (p.tags.get("prefix", "") + f"your softmax runs along {_dimension(other, ndim)}, but "
                        f"dim={dim} asks for {_dimension(dim, ndim)}: take the max and the sum along dim.")
        return None
    return find


def _sums_elsewhere(found: dict, p: Probe) -> str | None:
    (x, dim), got = p.args, found["values"]
    for other in range(x.dim()) if got is not None and got.isfinite().all() else ():
        if other != dim % x.dim() and _equal(got.sum(other), torch.ones_like(got.sum(other))):
            return (f"your weights sum to 1 along {_dimension(other, x.dim())}, but the softmax runs along "
                    f"{_dimension(dim, x.dim())} (dim={dim}): divide by the sum along dim, e.sum(dim=dim, keepdim=True).")
    return None


def _whole_sum(found: dict, p: Probe) -> str | None:
    got = found["values"]
    if got is None or not got.isfinite().all() or not _equal(got.sum(), torch.tensor(1.0)):
        return None
    return ("you divided by the sum of the whole tensor, so all the weights together sum to 1, not each "
            "row: sum along dim, e.sum(dim=dim, keepdim=True).")


def _max_elsewhere(found: dict, p: Probe) -> str | None:
    (x, dim), got = p.args, found["values"]
    for other in range(x.dim()) if got is not None else ():
        if other != dim % x.dim() and _equal(got, _by_hand(x, dim, x.amax(dim=other, keepdim=True))):
            return (f"you subtracted the maximum along {_dimension(other, x.dim())}, but the softmax runs "
                    f"along {_dimension(dim, x.dim())}: a shift changes nothing only when it is the same for "
                    "every entry of a row, so it must be the max along the softmax's own dimension: "
                    "x.amax(dim=dim, keepdim=True).")
    return None


def _overflow(got: torch.Tensor, p: Probe) -> str | None:
    if got.isfinite().all():
        return None
    return ("NaN or inf for scores around 1000 (the notebook's [1000, 1001, 1002]): your weights sum to "
            f"{_rows(got)} per row. exp(1000) overflows float32 (whose largest number is about 3.4e38, and "
            "e^89 is already past it), and inf / inf is NaN. Subtract the maximum along dim before the "
            "exponential: x - x.amax(dim=dim, keepdim=True) is at most 0 everywhere, so every exp lies in "
            "(0, 1] and the softmax is unchanged.")


def _like_rows(shift: Callable, message: Callable) -> Callable:
    """The rows of very different scale go bad as they do with ``shift`` instead of each row's max."""
    def test(got: torch.Tensor, p: Probe) -> str | None:
        x, bad = p.args[0], _bad_rows(got)
        return message(x, bad) if bad.any() and torch.equal(bad, _bad_rows(_by_hand(x, -1, shift(x)))) else None
    return test


_GLOBAL_MAX = _like_rows(lambda x: x.amax(), lambda x, bad: (
    "with rows of very different scale in one tensor (scores about -1500, 0 and +1500) "
    f"{int(bad.sum())} of the {bad.numel()} rows are NaN or do not sum to 1: you subtracted the maximum "
    "of the whole tensor. In a row 1500 below it every exp(x - max) underflows to 0, and 0 / 0 is NaN. "
    "Subtract each row's own maximum: x.amax(dim=dim, keepdim=True)."))
_BELOW_MAX = _like_rows(lambda x: x.mean(-1, keepdim=True), lambda x, bad: (
    f"the row whose scores spread about +-{x[0, 1].abs().max():.0f} comes out NaN or not summing to 1: "
    "you subtracted something smaller than the row's maximum (its mean, its minimum?), which leaves "
    "exponents far above 0, and exp overflows to inf. Only the maximum makes every exponent at most 0: "
    "x.amax(dim=dim, keepdim=True)."))


def _underflow(got: torch.Tensor, p: Probe) -> str | None:
    if not _bad_rows(got).any():
        return None
    return ("NaN or weights that do not sum to 1 for scores around -1000 (the notebook's [1000, 1001, 1002] "
            f"moved below zero): your rows sum to {_rows(got)}. {_UNDERFLOW}")


STABLE_MISTAKES = (
    Mistake("your function calls {found}: the exercise is to build the softmax yourself, from torch.exp, a "
            "max and a sum (the check compares your result with torch.softmax). Subtract the maximum along "
            "dim, take the exponential, divide by its sum along dim.", "the library's softmax called",
            stage="source", source=r"(?i)(?<![\w.])(?:\w+\s*\.\s*)*(?:log_?)?softmax(?=\s*\()",
            example=lambda x, dim=-1: torch.softmax(x, dim)),
    Mistake("", "the dim argument ignored", find=_other_dimension(last=True),
            example=lambda x, dim=-1: _by_hand(x, -1)),
    Mistake("", "the softmax along another dimension", find=_other_dimension(last=False),
            example=lambda x, dim=-1: _by_hand(x, 0)),
    Mistake("", "the sum of the whole tensor", find=_whole_sum,
            example=lambda x, dim=-1: (lambda e: e / e.sum())(torch.exp(x - x.amax(dim, keepdim=True)))),
    Mistake("", "the sum along another dimension", find=_sums_elsewhere,
            example=lambda x, dim=-1: (lambda e: e / e.sum(0, keepdim=True))(torch.exp(x - x.amax(dim, True)))),
    Mistake("the exponentials are not divided by their sum: after e = exp(x - max), return "
            "e / e.sum(dim=dim, keepdim=True), so that each row sums to 1.", "not normalized",
            like=lambda x, dim=-1: torch.exp(x - x.amax(dim=dim, keepdim=True))),
    Mistake("", "the max along another dimension", find=_max_elsewhere,
            example=lambda x, dim=-1: _by_hand(x, dim, x.amax(dim=0, keepdim=True))),
    Mistake("you divided the scores by their maximum; subtract it instead: softmax(x - c) = softmax(x) for any "
            "constant c, but softmax(x / c) is another distribution (a temperature c).", "divided by the max",
            like=lambda x, dim=-1: _by_hand(x / x.amax(dim=dim, keepdim=True), dim)),
    Mistake("", "no max subtracted", find=_found("big", _overflow), example=lambda x, dim=-1: _by_hand(x, dim, 0.0)),
    Mistake("", "the max of the whole tensor", find=_found("mixed", _GLOBAL_MAX),
            example=lambda x, dim=-1: _by_hand(x, dim, x.amax())),
    Mistake("", "a shift below the row's max", find=_found("mixed", _BELOW_MAX),
            example=lambda x, dim=-1: _by_hand(x, dim, x.mean(dim, keepdim=True))),
    Mistake("", "a shift only when the scores are large", find=_found("low", _underflow),
            example=lambda x, dim=-1: _by_hand(x, dim, x.amax(dim, keepdim=True) if x.max() > 80 else 0.0)),
)

STABLE = Declaration(
    check="check_stable_softmax", function="stable_softmax", roles=("x", "dim"), reference=course_softmax,
    probes=_stable_probes, returns=Tensor("the weights"), mistakes=STABLE_MISTAKES,
    sizes_fix="Read every size from x, and reduce along dim, not along a number.",
    passed=("check_stable_softmax passed: {name} equals torch.softmax along every dimension of scores of shapes "
            + " and ".join(f"({s['batch']}, {s['rows']}, {s['n']})" for s in SOFTMAX_SIZES)
            + ", on 4-D, 1-D and batch-of-one scores and in float64, and stays finite for scores around 1000 "
            "and -1000 and for rows of scores about -1500, 0 and +1500 in one tensor."),
)


def check_stable_softmax(stable_softmax: Callable) -> None:
    """Check ``stable_softmax(x, dim=-1)``, built from exp, max and sum, against torch.softmax
    and ``annotated.softmax.softmax``, on the sizes of ``SOFTMAX_SIZES``.

    Each set tries ordinary scores along three dimensions, the scores moved up by 1000, and
    rows of very different scale (about -1500, 0 and +1500, one row 100 times wider) in one
    tensor. Then 4-D scores (heads in front) along a middle and the last dimension, one row
    (1-D), a batch of one (1, 1, n), scores around -1000, float64 scores (float64 weights, exact
    to float64 rounding), a second call that must leave the first result unchanged, and scores
    on another device (the GPU in a notebook that has one; 'meta' for the grader).

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
    check(STABLE, stable_softmax, OTHER_DEVICE)


# ---------------------------------------------------------------- exercise 1.2: temperature


def _refused(temperature: float) -> Callable:
    def message(err: dict, name: str) -> str:
        return (f"{name}(x, temperature={temperature}) raised {err['type']}: {err['message']}; raise a "
                "ValueError instead, which says the temperature must be positive and names the value it got: "
                "raise ValueError(f\"temperature must be positive, got {temperature}\").")
    return message


def _accepted(temperature: float) -> Callable:
    meaning = ("divides by zero (x / 0 is inf or NaN)" if temperature == 0 else
               "reverses the order: the lowest score would get the most weight")
    return lambda name: (f"{name}(x, temperature={temperature}) returned without an error, but a temperature "
                         f"of {temperature} {meaning}. Refuse it before computing: if temperature <= 0, raise "
                         "ValueError(f\"temperature must be positive, got {temperature}\").")


def _temperature_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(1), []

    def probe(x, temperature, what=None, sizes=None, tags=(), **options):
        what = what or (f"x of shape {tuple(x.shape)}" if x.dtype == torch.float32 else "x of dtype float64")
        probes.append(Probe((x, temperature), f"{{what}} of {{name}}({what}, temperature={temperature})",
                            sizes=sizes, hints=_CALL_HINTS, tags=dict(tags, what=what), **options))

    for sizes in TEMPERATURE_SIZES:
        x = torch.randn(sizes["rows"], sizes["n"], generator=g) * 2
        for temperature in (2.0, 0.5):  # above and below 1
            probe(x, temperature, sizes=sizes)
        probe(x, 0.05, "scores x", sizes, {"large": True})  # x / 0.05 reaches about 100
        probe(x + 1000, 3.0, "scores x + 1000", sizes, {"large": True})  # exp(x) overflows first
        for temperature in (0.0, -1.0):  # divides by zero; reverses the order: a second call must refuse it
            probe(x, 2.0, sizes=sizes, again=(x, temperature), error="ValueError", no_error=_accepted(temperature),
                  on_error=_refused(temperature))
    for shape in [(2, 3, 5), (1, 4)]:  # a batch dimension in front; a batch of one
        probe(torch.randn(*shape, generator=g) * 2, 2.0, tags={"lead": len(shape) > 2})
    x = torch.randn(3, 5, generator=g) * 2
    probe(x - 1000, 0.5, "scores x - 1000", tags={"low": True})  # about -2000 once divided
    probe(x.double() * 1.5, 0.5)
    probe(x, 2)  # a temperature may be an int
    probe(x, 2.0, again=(x * 2 + 1, 2.0))
    probe(torch.randn(4, 4, generator=torch.Generator().manual_seed(5)) * 2, 0.5)  # two equal sizes
    if device is not None:
        probe(x.to(device), 2.0, f"x on the device {device!r}", compare=False)
    return probes


def _entropy(p: torch.Tensor) -> float:
    """The mean entropy of the rows of p, in nats."""
    p = p.double()
    return float(-(p * p.clamp_min(1e-300).log()).sum(-1).mean())


def _overflowed(got: torch.Tensor, p: Probe) -> str | None:
    if got.isfinite().all():
        return None
    (x, temperature), what = p.args, p.tags["what"]
    return (f"NaN or inf with {what} and temperature {temperature}: the scores divided by the temperature "
            f"reach {float((x / temperature).abs().max()):.0f}, and exp of that overflows float32 (e^89 is "
            "already past its largest number). Divide by the temperature first, then subtract the maximum of "
            "the divided scores before the exponential (your stable_softmax of exercise 1.1 does it: "
            "stable_softmax(x / temperature)).")


def _not_last(got: torch.Tensor, p: Probe) -> str | None:
    x, temperature = p.args
    for other in range(x.dim() - 1):
        if _equal(got, torch.softmax(x / temperature, dim=other)):
            return (f"with x of shape {tuple(x.shape)}, your softmax runs along dimension {other}; it runs "
                    "along the last dimension whatever comes in front: reduce along dim=-1, not along "
                    "dimension 1 or 0.")
    return None


def _low(got: torch.Tensor, p: Probe) -> str | None:
    if not _bad_rows(got).any():
        return None
    return ("NaN or weights that do not sum to 1 for scores x - 1000 at temperature 0.5 (about -2000 once "
            f"divided): your rows sum to {_rows(got)}. {_UNDERFLOW}")


def _positive(p: Probe) -> bool:
    return p.args[1] > 0 and p.args[1] != 1


TEMPERATURE_MISTAKES = (
    Mistake(lambda p: (f"with temperature={p.args[1]} you get the same weights as with temperature 1: the "
                       "temperature has no effect. Divide the scores by it before the exponential, "
                       "softmax(x / temperature) (subtracting it, or dividing the exponentials by it, cancels "
                       "in the normalization)."), "a temperature without effect", when=_positive,
            like=lambda x, temperature: _by_hand(x, -1)),
    Mistake(lambda p: (f"you divided the weights by the temperature after the softmax, so each row sums to "
                       f"1/{p.args[1]} = {1 / p.args[1]:.4g}. The temperature divides the scores before it: "
                       "softmax(x / temperature)."), "the weights divided by T", when=_positive,
            like=lambda x, temperature: _by_hand(x, -1) / temperature),
    Mistake("you raised the weights to the power 1/temperature without normalizing again: the rows no longer "
            "sum to 1. softmax(x / T) is that power divided by its row sum; simpler, divide the scores: "
            "softmax(x / temperature).", "a power without normalizing", when=_positive,
            like=lambda x, temperature: _by_hand(x, -1) ** (1 / temperature)),
    Mistake(lambda p: (f"you multiplied the scores by the temperature instead of dividing: at T = {p.args[1]} "
                       f"your weights have a mean entropy of {_entropy(_by_hand(p.args[0] * p.args[1], -1)):.3f} "
                       f"nats, where softmax(x / T) has {_entropy(_by_hand(p.args[0] / p.args[1], -1)):.3f}. "
                       "A temperature above 1 must flatten the weights (higher entropy), below 1 sharpen them: "
                       "softmax(x / temperature)."), "the scores multiplied by T", when=_positive,
            like=lambda x, temperature: _by_hand(x * temperature, -1)),
    Mistake("you divided the scores by sqrt(temperature): the temperature itself divides them, softmax(x / T). "
            "(Attention's 1/sqrt(d_k) is a temperature T = sqrt(d_k): there the square root is part of T.)",
            "divided by sqrt(T)", when=_positive, like=lambda x, temperature: _by_hand(x / math.sqrt(temperature), -1)),
    Mistake("", "overflow", find=_found("large", _overflowed),
            example=lambda x, temperature: _by_hand(x / temperature, -1, 0.0)),
    Mistake("", "not along the last dimension", find=_found("lead", _not_last),
            example=lambda x, temperature: course_softmax(x, dim=min(1, x.dim() - 1), temperature=temperature)),
    Mistake("", "a shift only when the scores are large", find=_found("low", _low),
            example=lambda x, t: course_softmax(x, temperature=t) if t <= 0 or (x / t).max() > 80
            else _by_hand(x / t, -1, 0.0)),
)

TEMPERATURE = Declaration(
    check="check_softmax_with_temperature", function="softmax_with_temperature", roles=("x", "temperature"),
    reference=lambda x, temperature: course_softmax(x, temperature=temperature), probes=_temperature_probes,
    returns=Tensor("the weights"), mistakes=TEMPERATURE_MISTAKES, sizes_fix="Read every size from x.",
    passed=("check_softmax_with_temperature passed: {name} equals softmax(x / T) for T = 2, 0.5, 0.05 and 3 (on "
            "scores around 1000) without overflowing, on scores around -1000, with a batch dimension in front, a "
            "batch of one, in float64 and for an int T, and refuses T = 0 and T = -1 with a ValueError."),
)


def check_softmax_with_temperature(softmax_with_temperature: Callable) -> None:
    """Check ``softmax_with_temperature(x, temperature)``, the softmax of x / temperature
    along the last dimension, against ``annotated.softmax.softmax`` and torch.softmax, on
    the sizes of ``TEMPERATURE_SIZES``.

    Each set tries the temperatures 2 and 0.5 on ordinary scores, 0.05 (scores divided by it
    reach about 100), 3 on scores around 1000, and 0 and -1, which must raise ValueError.
    Then scores (batch, rows, n) and a batch of one (1, n), scores around -1000 at T = 0.5,
    float64 scores (exact to float64 rounding), an int temperature, a second call that must
    leave the first result unchanged, and scores on another device.

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
    check(TEMPERATURE, softmax_with_temperature, OTHER_DEVICE)


# ---------------------------------------------------------------- exercise 1.3: score_variances


def sampler(kind: str, seed: int) -> Callable:
    """``sample(*shape)`` (or ``sample(shape)``): components of mean 0 and variance 1, "Gaussian",
    "uniform" on [-sqrt(3), sqrt(3)] or "+-1", from a generator seeded with ``seed``; the shapes
    it was called with are kept in ``sample.calls``. The check's argument, made by
    ``record.build``, so that the grader sends it as data and the kernel makes it again."""
    g = torch.Generator().manual_seed(seed)

    def sample(*shape) -> torch.Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])  # sample((n, d)) as well as sample(n, d)
        sample.calls.append(tuple(int(n) for n in shape))
        if kind == "Gaussian":
            return torch.randn(*shape, generator=g)
        if kind == "uniform":
            return (torch.rand(*shape, generator=g) * 2 - 1) * math.sqrt(3)
        return torch.randint(0, 2, tuple(shape), generator=g).float() * 2 - 1

    sample.calls = []
    return sample


def _sample(kind: str, seed: int) -> Callable:
    return recorder.build(f"{__name__}.sampler", kind=kind, seed=seed)


def _draw(d_k: int, n_pairs: int, sample: Callable) -> tuple:
    return sample(n_pairs, d_k), sample(n_pairs, d_k)  # q, k: (n_pairs, d_k) each


def course_variances(d_k: int, n_pairs: int, sample: Callable) -> torch.Tensor:
    q, k = _draw(d_k, n_pairs, sample)
    dots = (q * k).sum(dim=-1)                          # (n_pairs,)
    return torch.stack([dots.var(), (dots / math.sqrt(d_k)).var()])


def _variance_probes(device: str | None) -> list[Probe]:
    probes = []
    for seed, (sizes, kind) in enumerate(zip(VARIANCE_SIZES, DISTRIBUTIONS), start=2):
        d_k, n_pairs = sizes["d_k"], sizes["n_pairs"]
        q, k = (t.double() for t in _draw(d_k, n_pairs, _sample(kind, seed)))
        dots = (q * k).sum(-1)  # the population variance (correction=0) passes too
        population = torch.stack([dots.var(correction=0), (dots / math.sqrt(d_k)).var(correction=0)]).float()
        again = (d_k, n_pairs, _sample(kind, seed + 10)) if seed > 2 else None
        probes.append(Probe((d_k, n_pairs, _sample(kind, seed)), f"{{what}} of {{name}}(d_k={d_k}, "
                            f"n_pairs={n_pairs}, sample)", sizes=sizes, tags=dict(kind=kind), again=again,
                            accept=lambda got, population=population: _equal(got[0], population)))
    return probes


def _draws(test: Callable, message: str = "") -> Callable:
    """A find on the shapes the learner's ``sample`` was called with: test(shapes, (n_pairs, d_k))
    -> a message, or True for ``message``."""
    def find(found: dict, p: Probe) -> str | None:
        result = test(found["calls"][2]["value"], (p.args[1], p.args[0]))
        return (message or result) if result else None
    return find


def _implied(found: dict, p: Probe) -> str | None:
    """The second number is Var(q.k) / c for a whole c other than d_k: sqrt(c) written into the code."""
    d_k, (first, second) = p.args[0], found["values"].tolist()
    v = float(course_variances(*_clone(p.args))[0])
    implied = v / second if second > 0 else 0.0
    if math.isclose(first, v, rel_tol=1e-3) and round(implied) not in (0, d_k) and abs(implied - round(implied)) < 1e-3:
        return (f"you divided the scores by sqrt({round(implied)}), but here d_k = {d_k}: is d_k written into "
                "your code? Use the d_k argument.")
    return None


def _variances(dots=lambda q, k: (q * k).sum(-1), pair=lambda s, d_k: [s.var(), (s / math.sqrt(d_k)).var()],
               draw=_draw) -> Callable:
    """A wrong answer: another way of drawing, another dot product or another pair."""
    return lambda d_k, n_pairs, sample: torch.stack(pair(dots(*draw(d_k, n_pairs, sample)), d_k))


VARIANCE_MISTAKES = (
    Mistake("", "sample not called", find=_draws(lambda shapes, want: not shapes, (
        "your function never called sample: draw q and k with the sample function you are given, q = "
        "sample(n_pairs, d_k) and k = sample(n_pairs, d_k), so that the check can try components that are not "
        "Gaussian (uniform, +-1), as the notebook does.")),
            example=_variances(draw=lambda d, n, sample: (torch.randn(n, d), torch.randn(n, d)))),
    Mistake("", "samples of the wrong shape", generic=True, find=_draws(lambda shapes, want: next((
        f"your function drew a sample of shape {s}; q and k are (n_pairs, d_k) = {want}, " + (
            "one row per pair: sample(n_pairs, d_k), not sample(d_k, n_pairs)." if s == want[::-1] else
            "sample(n_pairs, d_k).") for s in shapes if s != want), None)),
            example=_variances(draw=lambda d, n, sample: (sample(d, n).T, sample(d, n).T))),
    Mistake("", "more than two samples", find=_draws(lambda shapes, want: len(shapes) > 2 and (
        f"your function drew {len(shapes)} samples: draw q and k once and compute both numbers from the same "
        "scores, so that the second is exactly the first divided by d_k.")),
            example=_variances(draw=lambda d, n, sample: (sample(n, d), sample(n, d), sample(n, d))[1:])),
    Mistake("your function drew one sample only: q and k must be independent, two calls of sample(n_pairs, d_k). "
            "With k = q the score is q.q = |q|^2, which is never negative and whose variance is not d_k (for +-1 "
            "components it is 0).", "one sample for q and k", like=_variances(draw=lambda d, n, sample: (
                sample(n, d),) * 2)),
    Mistake(lambda p: (f"you returned standard deviations, the square roots of the variances, not variances: "
                       f"Var(q.k) is about d_k = {p.args[0]}. Use .var(), not .std()."), "standard deviations",
            like=_variances(pair=lambda s, d_k: [s.std(), (s / math.sqrt(d_k)).std()])),
    Mistake("the two numbers are swapped: first the variance of the raw scores q.k (about d_k), then that of the "
            "scaled scores q.k / sqrt(d_k) (about 1).", "the two numbers swapped",
            like=_variances(pair=lambda s, d_k: [(s / math.sqrt(d_k)).var(), s.var()])),
    Mistake(lambda p: (f"you averaged the products q_i k_i instead of summing them (their mean is q.k / d_k): your "
                       f"first number is about 1 / d_k, where Var(q.k) is about d_k = {p.args[0]}. The dot product "
                       "is the sum, (q * k).sum(dim=-1)."), "the mean of the products",
            like=_variances(dots=lambda q, k: (q * k).mean(-1))),
    Mistake(lambda p: (f"your first number is the variance of the {p.args[0] * p.args[1]} products q_i k_i (about "
                       "1), not of the n_pairs dot products q.k: sum the products of each pair first, "
                       "(q * k).sum(dim=-1), then take the variance of those sums."), "the variance of the products",
            like=_variances(dots=lambda q, k: (q * k).flatten())),
    Mistake("you summed over the pairs (dim=0) instead of over the d_k components of each pair: a row is one pair, "
            "so the dot product is (q * k).sum(dim=-1).", "the sum over the pairs",
            like=_variances(dots=lambda q, k: (q * k).sum(0))),
    Mistake(lambda p: (f"q @ k.T scores every q with every k, {p.args[1]}^2 numbers that are not independent pairs: "
                       "pair row i of q with row i of k only, (q * k).sum(dim=-1)."), "q @ k.T",
            like=_variances(dots=lambda q, k: (q @ k.T).flatten())),
    Mistake("your second number equals the first: the scores were not divided by sqrt(d_k) before the second "
            "variance.", "no scaling", like=_variances(pair=lambda s, d_k: [s.var(), s.var()])),
    Mistake(lambda p: (f"you divided the scores by d_k = {p.args[0]} instead of sqrt(d_k) = "
                       f"{math.sqrt(p.args[0]):.4g}: "
                       "the second number should be about 1."), "divided by d_k",
            like=_variances(pair=lambda s, d_k: [s.var(), (s / d_k).var()])),
    Mistake("you divided the variance by sqrt(d_k); but dividing the scores by sqrt(d_k) divides their variance by "
            "d_k: Var(cX) = c^2 Var(X). Take the variance of q.k / sqrt(d_k), or divide the first variance by d_k.",
            "the variance divided by sqrt(d_k)",
            like=_variances(pair=lambda s, d_k: [s.var(), s.var() / math.sqrt(d_k)])),
    Mistake("", "a d_k written into the scaling", find=_implied, generic=True,
            example=_variances(pair=lambda s, d_k: [s.var(), (s / 3.0).var()])),
)


def _variances_passed(name: str) -> str:
    table = "; ".join(f"d_k = {p.args[0]} ({p.tags['kind']}): {raw:.1f} and {scaled:.2f}" for p in
                      _variance_probes(None) for raw, scaled in [course_variances(*p.args).tolist()])
    return (f"check_score_variances passed: {name} measures Var(q.k) about d_k and Var(q.k / sqrt(d_k)) about 1, "
            f"from its own samples: {table}.")


VARIANCES = Declaration(
    check="check_score_variances", function="score_variances", roles=("d_k", "n_pairs", "sample"),
    reference=course_variances, probes=_variance_probes, mistakes=VARIANCE_MISTAKES, passed=_variances_passed,
    returns=Tensor("the pair of variances", like=None), sizes_fix="Use the d_k and n_pairs arguments, never a "
    "number of the first set.")


def check_score_variances(score_variances: Callable) -> None:
    """Check ``score_variances(d_k, n_pairs, sample)``, which draws q and k with
    ``sample(n_pairs, d_k)`` and returns tensor([Var(q.k), Var(q.k / sqrt(d_k))]), on the
    sizes of ``VARIANCE_SIZES`` with Gaussian, uniform and +-1 components. The expected numbers
    are computed from the very samples the function drew (the check's ``sample`` is seeded);
    the unbiased variance (torch's default) and the population one (correction=0) both pass.

    Diagnoses: an input changed in place, sample not called, samples of the wrong shape
    (transposed, or a size written into the code), one sample for both q and k, more than
    two samples, a result of another kind or shape, standard deviations instead of
    variances, the two numbers swapped, the mean of the products instead of their sum, the
    variance of the products, the sum over the pairs, q @ k.T, the scaling missing, by d_k,
    or applied to the variance as 1/sqrt(d_k), a d_k written into the scaling, and a result
    written into a tensor kept between calls (a later call changes an earlier result).
    """
    check(VARIANCES, score_variances)


DECLARATIONS = {d.check: d for d in (STABLE, TEMPERATURE, VARIANCES)}
