"""Checks of notebook 01 as declarations (``engine``): the stable softmax (1.1) and the softmax with a
temperature (1.2) against ``annotated.softmax``, and the variances of q.k with and without 1/sqrt(d_k) (1.3),
drawn with the check's seeded ``sampler``."""

import math
from collections.abc import Callable

import torch

from annotated.softmax import softmax as course_softmax
from annotated.support import record as recorder
from annotated.support.grading.core import _rows
from annotated.support.grading.engine import Declaration, Mistake, Probe, Tensor, _clone, _equal, check

# Scores (batch, rows, n): every size differs, within a set and from one set to the next.
SOFTMAX_SIZES = [dict(batch=2, rows=3, n=5), dict(batch=4, rows=6, n=7)]
TEMPERATURE_SIZES = [dict(rows=3, n=5), dict(rows=6, n=2)]
# One distribution of mean 0 and variance 1 per set (uniform on [-sqrt(3), sqrt(3)]).
VARIANCE_SIZES = [dict(d_k=9, n_pairs=3000), dict(d_k=25, n_pairs=2000), dict(d_k=64, n_pairs=1000)]
DISTRIBUTIONS = ("Gaussian", "uniform", "+-1")
SIZE_SETS = {"check_stable_softmax": SOFTMAX_SIZES, "check_softmax_with_temperature": TEMPERATURE_SIZES,
             "check_score_variances": VARIANCE_SIZES}
OTHER_DEVICE: str | None = "cuda" if torch.cuda.is_available() else None  # the grader and the tests use 'meta'

_CALL_HINTS = ((r"must match the size of tensor", "\nHint: a max or a sum along a dimension without keepdim=True "
                 "drops it, and broadcasting lines up the wrong dimensions: x.amax(dim=dim, keepdim=True)."),
               (r"return_types\.max", "\nHint: x.max(dim=...) returns a pair (values, indices); use "
                "x.amax(dim=dim, keepdim=True)."))
_UNDERFLOW = ("exp of scores that far below zero is 0 everywhere, and 0 / 0 is NaN: do you subtract the maximum "
              "only when the scores are large? Always subtract it, x - x.amax(dim=dim, keepdim=True).")


def _by_hand(x: torch.Tensor, dim: int, shift=None) -> torch.Tensor:
    """exp(x - shift) normalized along ``dim`` (shift: the max along ``dim`` unless given)."""
    e = torch.exp(x - (x.amax(dim=dim, keepdim=True) if shift is None else shift))
    return e / e.sum(dim=dim, keepdim=True)


def _bad_rows(weights: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Per row along ``dim``: True where the row holds NaN or inf or does not sum to 1."""
    sums = weights.double().nan_to_num(0.0, 0.0, 0.0).sum(dim=dim)
    return ~weights.isfinite().all(dim=dim) | ((sums - 1).abs() > 1e-3)


def _found(kind: str | None, test: Callable) -> Callable:
    """A ``find`` for the probes tagged ``kind`` (every probe: None): test(learner's numbers, probe) -> message."""
    return lambda found, p: (test(found["values"], p) if (kind is None or p.tags.get(kind))
                             and found["values"] is not None else None)


def _probe(probes: list, args: tuple, call: str, sizes=None, tags=(), **options) -> None:
    probes.append(Probe(args, f"{{what}} of {{name}}({call})", sizes=sizes, hints=_CALL_HINTS, tags=dict(tags),
                        **options))


# ---------------------------------------------------------------- exercise 1.1: stable_softmax
def _stable_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(0), []

    def probe(x, dim, what="", sizes=None, tags=(), **options):
        shape = f"x of shape {tuple(x.shape)}" if x.dtype == torch.float32 else f"x of dtype {str(x.dtype)[6:]}"
        _probe(probes, (x, dim), f"{shape}{what}, dim={dim}", sizes, tags, **options)
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


def _elsewhere(kind: str) -> Callable:
    """A find: the softmax, the sum or the max along another dimension than dim ("softmax", "sum", "max")."""
    def find(found: dict, p: Probe) -> str | None:
        (x, dim), got, n = p.args, found["values"], p.args[0].dim()
        if got is None or kind == "sum" and not got.isfinite().all():
            return None
        for o in range(n):
            there, asked = (f"dimension {d % n}" + (" (the last)" if d % n == n - 1 else "") for d in (o, dim))
            if o == dim % n or kind == "softmax" and o == n - 1:
                continue
            if kind == "softmax" and _equal(got, torch.softmax(x, dim=o)):
                return (p.tags.get("prefix", "") + f"your softmax runs along {there}, but dim={dim} asks for "
                        f"{asked}: take the max and the sum along dim.")
            if kind == "sum" and _equal(got.sum(o), torch.ones_like(got.sum(o))):
                return (f"your weights sum to 1 along {there}, but the softmax runs along {asked} (dim={dim}): "
                        "divide by the sum along dim, e.sum(dim=dim, keepdim=True).")
            if kind == "max" and _equal(got, _by_hand(x, dim, x.amax(dim=o, keepdim=True))):
                return (f"you subtracted the maximum along {there}, but the softmax runs along {asked}: a shift "
                        "cancels only if it is the same along the row, the max along dim.")
        return None
    return find


def _like_rows(shift: Callable, message: Callable) -> Callable:
    """The rows of very different scale go bad as they do with ``shift`` instead of each row's max."""
    def test(got: torch.Tensor, p: Probe) -> str | None:
        x, bad = p.args[0], _bad_rows(got)
        return message(x, bad) if bad.any() and torch.equal(bad, _bad_rows(_by_hand(x, -1, shift(x)))) else None
    return _found("mixed", test)


def _underflow(scores: str) -> Callable:
    return _found("low", lambda got, p: None if not _bad_rows(got).any() else (
        f"NaN or weights that do not sum to 1 for {scores}: your rows sum to {_rows(got)}. {_UNDERFLOW}"))


STABLE_MISTAKES = (
    Mistake("your function calls {found}: the exercise is to build the softmax yourself: subtract the maximum "
            "along dim, take torch.exp, divide by its sum along dim.", "the library's softmax called",
            stage="source", source=r"(?i)(?<![\w.])(?:\w+\s*\.\s*)*(?:log_?)?softmax(?=\s*\()",
            example=lambda x, dim=-1: torch.softmax(x, dim)),
    Mistake(lambda p: (f"asked for the softmax along dim={p.args[1]}, your function took it along the last "
                       "dimension: does it ignore its dim argument (a -1 written into the code)? Use dim in the max "
                       "and the sum."), "the dim argument ignored", like=lambda x, dim=-1: _by_hand(x, -1)),
    Mistake("", "the softmax along another dimension", find=_elsewhere("softmax"),
            example=lambda x, dim=-1: _by_hand(x, 0)),
    Mistake("", "the sum of the whole tensor", find=_found(None, lambda got, p: (
        "you divided by the sum of the whole tensor, not of each row: e.sum(dim=dim, keepdim=True)."
        if got.isfinite().all() and _equal(got.sum(), torch.tensor(1.0)) else None)),
            example=lambda x, dim=-1: (lambda e: e / e.sum())(torch.exp(x - x.amax(dim, keepdim=True)))),
    Mistake("", "the sum along another dimension", find=_elsewhere("sum"),
            example=lambda x, dim=-1: (lambda e: e / e.sum(0, keepdim=True))(torch.exp(x - x.amax(dim, True)))),
    Mistake("the exponentials are not divided by their sum: return e / e.sum(dim=dim, keepdim=True).",
            "not normalized", like=lambda x, dim=-1: torch.exp(x - x.amax(dim=dim, keepdim=True))),
    Mistake("", "the max along another dimension", find=_elsewhere("max"),
            example=lambda x, dim=-1: _by_hand(x, dim, x.amax(dim=0, keepdim=True))),
    Mistake("you divided the scores by their maximum; subtract it instead: softmax(x - c) = softmax(x), but "
            "softmax(x / c) is another distribution.", "divided by the max",
            like=lambda x, dim=-1: _by_hand(x / x.amax(dim=dim, keepdim=True), dim)),
    Mistake("", "no max subtracted", example=lambda x, dim=-1: _by_hand(x, dim, 0.0), find=_found(
        "big", lambda got, p: None if got.isfinite().all() else (
            f"NaN or inf for scores around 1000: your rows sum to {_rows(got)}. exp(1000) overflows float32 "
            "(e^89 already does), and inf / inf is NaN. Subtract the maximum along dim first, "
            "x - x.amax(dim=dim, keepdim=True): every exp is then in (0, 1], and the softmax unchanged."))),
    Mistake("", "the max of the whole tensor", example=lambda x, dim=-1: _by_hand(x, dim, x.amax()),
            find=_like_rows(lambda x: x.amax(), lambda x, bad: (
                f"with rows of very different scale (about -1500, 0 and +1500) {int(bad.sum())} of the {bad.numel()} "
                "rows are NaN or do not sum to 1: you subtracted the maximum of the whole tensor. In a row far below "
                "it every exp underflows to 0, and 0 / 0 is NaN. Subtract each row's maximum: "
                "x.amax(dim=dim, keepdim=True)."))),
    Mistake("", "a shift below the row's max", example=lambda x, dim=-1: _by_hand(x, dim, x.mean(dim, keepdim=True)),
            find=_like_rows(lambda x: x.mean(-1, keepdim=True), lambda x, bad: (
                f"the row whose scores spread about +-{x[0, 1].abs().max():.0f} is NaN or does not sum to 1: you "
                "subtracted something smaller than the row's maximum (its mean, its minimum?), and exp overflows. "
                "Only the maximum makes every exponent at most 0: x.amax(dim=dim, keepdim=True)."))),
    Mistake("", "a shift only when the scores are large", find=_underflow("scores around -1000"),
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
    """Check ``stable_softmax(x, dim=-1)`` against torch.softmax, on ``SOFTMAX_SIZES`` and edge scores.

    Diagnoses: a call of the library's softmax, an input changed in place, a result of another kind, dtype, device
    or shape, a max or sum without keepdim (the broadcasting error) and ``x.max(dim)`` used as a tensor, the dim
    argument ignored, the softmax, the max or the sum along the wrong dimension, the sum of the whole tensor,
    exponentials not divided by their sum, the scores divided by their maximum instead of shifted, no max subtracted
    (inf/NaN on large scores), the maximum of the whole tensor instead of each row's (0/0 in rows far below it), a
    shift below the row's maximum (mean, minimum: overflow in a wide row), a shift only when the scores are large
    (0/0 for scores far below zero), a .squeeze() that drops a batch of one, code for 3-D scores only, a float32
    result or float32 steps for float64 scores (.float(), torch.zeros without dtype=), a result written into a
    tensor kept between calls, and sizes written into the code."""
    check(STABLE, stable_softmax, OTHER_DEVICE)


# ---------------------------------------------------------------- exercise 1.2: temperature
_RAISE = "raise ValueError(f\"temperature must be positive, got {temperature}\")."


def _temperature_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(1), []

    def probe(x, temperature, what=None, sizes=None, tags=(), **options):
        what = what or (f"x of shape {tuple(x.shape)}" if x.dtype == torch.float32 else "x of dtype float64")
        _probe(probes, (x, temperature), f"{what}, temperature={temperature}", sizes, dict(tags, what=what), **options)
    for sizes in TEMPERATURE_SIZES:
        x = torch.randn(sizes["rows"], sizes["n"], generator=g) * 2
        for temperature in (2.0, 0.5):  # above and below 1
            probe(x, temperature, sizes=sizes)
        probe(x, 0.05, "scores x", sizes, {"large": True})  # x / 0.05 reaches about 100
        probe(x + 1000, 3.0, "scores x + 1000", sizes, {"large": True})  # exp(x) overflows first
        for t in (0.0, -1.0):  # divides by zero; reverses the order: a second call must refuse it
            meaning = "divides by zero" if t == 0 else "gives the lowest score the most weight"
            probe(x, 2.0, sizes=sizes, again=(x, t), error="ValueError", no_error=lambda name, t=t, meaning=meaning: (
                f"{name}(x, temperature={t}) returned without an error, but a temperature of {t} {meaning}. Refuse "
                f"it before computing: if temperature <= 0, {_RAISE}"), on_error=lambda err, name, t=t: (
                f"{name}(x, temperature={t}) raised {err['type']}: {err['message']}; raise a ValueError instead: "
                f"{_RAISE}"))
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
    return float(-(p.double() * p.double().clamp_min(1e-300).log()).sum(-1).mean())


_FIX = " The temperature divides the scores before the exponential: softmax(x / temperature)."
TEMPERATURE_MISTAKES = tuple(Mistake(message, name, like=like, when=lambda p: 0 < p.args[1] != 1)
                             for name, like, message in (
    ("a temperature without effect", lambda x, t: _by_hand(x, -1), lambda p: (
        f"with temperature={p.args[1]} you get the same weights as with temperature 1: the temperature has no "
        "effect (subtracted, or dividing the exponentials, it cancels in the normalization)." + _FIX)),
    ("the weights divided by T", lambda x, t: _by_hand(x, -1) / t, lambda p: (
        f"you divided the weights by the temperature after the softmax, so each row sums to 1/{p.args[1]} = "
        f"{1 / p.args[1]:.4g}." + _FIX)),
    ("a power without normalizing", lambda x, t: _by_hand(x, -1) ** (1 / t),
     "you raised the weights to the power 1/temperature without normalizing again: the rows no longer sum to 1."
     + _FIX),
    ("the scores multiplied by T", lambda x, t: _by_hand(x * t, -1), lambda p: (
        f"you multiplied the scores by the temperature instead of dividing: at T = {p.args[1]} your weights have a "
        f"mean entropy of {_entropy(_by_hand(p.args[0] * p.args[1], -1)):.3f} nats, where softmax(x / T) has "
        f"{_entropy(_by_hand(p.args[0] / p.args[1], -1)):.3f}: T above 1 must flatten the weights." + _FIX)),
    ("divided by sqrt(T)", lambda x, t: _by_hand(x / math.sqrt(t), -1),
     "you divided the scores by sqrt(temperature): the temperature itself divides them (in attention, "
     "T = sqrt(d_k))." + _FIX),
)) + (
    Mistake("", "overflow", example=lambda x, temperature: _by_hand(x / temperature, -1, 0.0),
            find=_found("large", lambda got, p: None if got.isfinite().all() else (
                f"NaN or inf with {p.tags['what']} and temperature {p.args[1]}: the divided scores reach "
                f"{float((p.args[0] / p.args[1]).abs().max()):.0f}, and exp of that overflows float32. Divide by the "
                "temperature, then subtract the maximum before the exponential: stable_softmax(x / temperature) of "
                "exercise 1.1."))),
    Mistake("", "not along the last dimension", find=_found("lead", lambda got, p: next((
        f"with x of shape {tuple(p.args[0].shape)}, your softmax runs along dimension {o}; it runs along the last "
        "dimension whatever comes in front: dim=-1." for o in range(p.args[0].dim() - 1)
        if _equal(got, torch.softmax(p.args[0] / p.args[1], dim=o))), None)),
            example=lambda x, temperature: course_softmax(x, dim=min(1, x.dim() - 1), temperature=temperature)),
    Mistake("", "a shift only when the scores are large", find=_underflow("scores x - 1000 at temperature 0.5"),
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
    """Check ``softmax_with_temperature(x, temperature)``, softmax(x / temperature), on ``TEMPERATURE_SIZES``.

    Diagnoses: an input changed in place, a result of another kind, dtype, device or shape, a temperature without
    effect (subtracted, or applied to the exponentials), the weights divided by the temperature after the softmax,
    the weights raised to 1/T without normalizing, the scores multiplied by T, divided by sqrt(T), overflow when the
    divided scores are large, a temperature of 0 or below accepted or refused with another error, a softmax along
    another dimension than the last for 3-D scores, a shift only when the scores are large (0/0 far below zero), a
    .squeeze() that drops a batch of one, a float32 result or float32 steps for float64 scores, a result written
    into a tensor kept between calls, and sizes written into the code."""
    check(TEMPERATURE, softmax_with_temperature, OTHER_DEVICE)


# ---------------------------------------------------------------- exercise 1.3: score_variances
def sampler(kind: str, seed: int) -> Callable:
    """``sample(*shape)`` (or ``sample(shape)``): components of mean 0 and variance 1 of the ``kind``, seeded;
    the shapes it was called with in ``sample.calls``. Made by ``record.build``, so that it travels as data."""
    g = torch.Generator().manual_seed(seed)
    draw = {"Gaussian": lambda s: torch.randn(*s, generator=g),
            "uniform": lambda s: (torch.rand(*s, generator=g) * 2 - 1) * math.sqrt(3),
            "+-1": lambda s: torch.randint(0, 2, s, generator=g).float() * 2 - 1}[kind]

    def sample(*shape) -> torch.Tensor:
        shape = tuple(shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)) else shape)
        sample.calls.append(tuple(int(n) for n in shape))  # sample((n, d)) as well as sample(n, d)
        return draw(shape)

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


def _draws(test: Callable) -> Callable:
    """A find: test(the shapes the learner's ``sample`` was called with, (n_pairs, d_k)) -> a message or None."""
    return lambda found, p: test(found["calls"][2]["value"], (p.args[1], p.args[0])) or None


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


_SUM = "(q * k).sum(dim=-1)"
VARIANCE_MISTAKES = (
    Mistake("", "sample not called", find=_draws(lambda shapes, want: None if shapes else (
        "your function never called sample: draw q = sample(n_pairs, d_k) and k = sample(n_pairs, d_k) with the "
        "function you are given, so that the check can try components that are not Gaussian.")),
            example=_variances(draw=lambda d, n, sample: (torch.randn(n, d), torch.randn(n, d)))),
    Mistake("", "samples of the wrong shape", generic=True, find=_draws(lambda shapes, want: next((
        f"your function drew a sample of shape {s}; q and k are (n_pairs, d_k) = {want}, " + (
            "one row per pair: sample(n_pairs, d_k), not sample(d_k, n_pairs)." if s == want[::-1] else
            "sample(n_pairs, d_k).") for s in shapes if s != want), None)),
            example=_variances(draw=lambda d, n, sample: (sample(d, n).T, sample(d, n).T))),
    Mistake("", "more than two samples", find=_draws(lambda shapes, want: len(shapes) > 2 and (
        f"your function drew {len(shapes)} samples: draw q and k once and compute both numbers from the same "
        "scores.")), example=_variances(draw=lambda d, n, sample: (sample(n, d), sample(n, d), sample(n, d))[1:])),
) + tuple(Mistake(message, name, like=_variances(**wrong)) for name, wrong, message in (
    ("one sample for q and k", dict(draw=lambda d, n, sample: (sample(n, d),) * 2),
     "your function drew one sample only: q and k must be independent, two calls of sample(n_pairs, d_k) "
     "(k = q gives |q|^2, whose variance is not d_k)."),
    ("standard deviations", dict(pair=lambda s, d_k: [s.std(), (s / math.sqrt(d_k)).std()]), lambda p: (
        f"you returned standard deviations, the square roots of the variances, not variances: Var(q.k) is about d_k = "
        f"{p.args[0]}. Use .var().")),
    ("the two numbers swapped", dict(pair=lambda s, d_k: [(s / math.sqrt(d_k)).var(), s.var()]),
     "the two numbers are swapped: first Var(q.k) (about d_k), then Var(q.k / sqrt(d_k)) (about 1)."),
    ("the mean of the products", dict(dots=lambda q, k: (q * k).mean(-1)), lambda p: (
        f"you averaged the products q_i k_i instead of summing them: your first number is about 1 / d_k, where "
        f"Var(q.k) is about d_k = {p.args[0]}. The dot product is the sum, {_SUM}.")),
    ("the variance of the products", dict(dots=lambda q, k: (q * k).flatten()), lambda p: (
        f"your first number is the variance of the {p.args[0] * p.args[1]} products q_i k_i (about 1), not of the "
        f"n_pairs dot products: sum each pair's products first, {_SUM}.")),
    ("the sum over the pairs", dict(dots=lambda q, k: (q * k).sum(0)),
     f"you summed over the pairs (dim=0) instead of over the d_k components of each pair: {_SUM}."),
    ("q @ k.T", dict(dots=lambda q, k: (q @ k.T).flatten()), lambda p: (
        f"q @ k.T scores every q with every k, {p.args[1]}^2 numbers that are not independent pairs: pair row i "
        f"of q with row i of k, {_SUM}.")),
    ("no scaling", dict(pair=lambda s, d_k: [s.var(), s.var()]),
     "your second number equals the first: divide the scores by sqrt(d_k) before the second variance."),
    ("divided by d_k", dict(pair=lambda s, d_k: [s.var(), (s / d_k).var()]), lambda p: (
        f"you divided the scores by d_k = {p.args[0]} instead of sqrt(d_k) = {math.sqrt(p.args[0]):.4g}.")),
    ("the variance divided by sqrt(d_k)", dict(pair=lambda s, d_k: [s.var(), s.var() / math.sqrt(d_k)]),
     "you divided the variance by sqrt(d_k), but Var(cX) = c^2 Var(X): take the variance of q.k / sqrt(d_k)."),
)) + (
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
    """Check ``score_variances(d_k, n_pairs, sample)``, on ``VARIANCE_SIZES``, against its own samples.

    Diagnoses: an input changed in place, sample not called, samples of the wrong shape (transposed, or a size
    written into the code), one sample for both q and k, more than two samples, a result of another kind or shape,
    standard deviations instead of variances, the two numbers swapped, the mean of the products instead of their
    sum, the variance of the products, the sum over the pairs, q @ k.T, the scaling missing, by d_k, or applied to
    the variance as 1/sqrt(d_k), a d_k written into the scaling, and a result written into a tensor kept between
    calls (a later call changes an earlier result)."""
    check(VARIANCES, score_variances)


DECLARATIONS = {d.check: d for d in (STABLE, TEMPERATURE, VARIANCES)}
