"""Checks of notebook 08's exercises (``engine``): label smoothing's targets and loss, the warm-up schedule and the
loss per token of a batch under teacher forcing (its model and loss function travel as data, ``record.build``). A rate's
mistakes show only on the whole curve, so each setting's steps are one ``Probe.each`` probe, and step 0 another."""

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from annotated.batching import Batch
from annotated.label_smoothing import LabelSmoothingLoss, smoothed_targets
from annotated.masks import padding_mask, target_mask
from annotated.model import EncoderDecoder, TransformerConfig, make_model
from annotated.schedule import rate
from annotated.support import record as recorder
from annotated.support.grading import engine
from annotated.support.grading.core import _hard_coded_hint
from annotated.support.grading.engine import Declaration, Mistake, Probe, Tensor, Value, _equal, check

# Every size, the padding id and epsilon change from one set to the next, so that one written in fails.
TARGET_SIZES = [dict(N=9, vocab_size=8, pad_idx=0, smoothing=0.1), dict(N=6, vocab_size=11, pad_idx=3, smoothing=0.2),
                dict(N=5, vocab_size=7, pad_idx=6, smoothing=0.3)]
LOSS_SIZES = [dict(N=10, vocab_size=9, pad_idx=0, smoothing=0.1), dict(N=7, vocab_size=12, pad_idx=4, smoothing=0.25)]
# The paper's base model first: d_model = 512 or warmup = 4000 written into the code fails on the second set.
RATE_SIZES = [dict(d_model=512, warmup=4000), dict(d_model=64, warmup=100), dict(d_model=256, warmup=30)]
TEACHER_SIZES = [dict(batch=3, L_src=7, L_tgt=6, vocab=13, pad_idx=0), dict(batch=5, L_src=4, L_tgt=9, vocab=10,
                 pad_idx=2), dict(batch=1, L_src=5, L_tgt=8, vocab=11, pad_idx=3)]  # one sentence: .squeeze() drops it
TEACHER_DROPOUT = 0.3  # the dropout of the model on which the check tries training and evaluation modes
SIZE_SETS = {"check_smoothed_targets": TARGET_SIZES, "check_label_smoothing_loss": LOSS_SIZES, "check_rate": RATE_SIZES,
             "check_teacher_forcing_loss": TEACHER_SIZES}
# Label smoothing's edge cases, after the sets: smoothing = 0 (`smoothing or 0.1` replaces it), one position (squeezed).
NO_SMOOTHING = dict(N=7, vocab_size=10, pad_idx=2, smoothing=0.0)
ONE_POSITION = dict(N=1, vocab_size=6, pad_idx=5, smoothing=0.15)

_COURSE_CONVENTION = ("The course's convention (the Annotated Transformer's): the reference token keeps 1 - eps, the "
                      "V - 2 tokens that are neither the reference nor padding get eps / (V - 2) each, the padding "
                      "token 0, and a row whose label is padding is all zeros.")
_near = functools.partial(math.isclose, rel_tol=1e-6)  # learning rates are small numbers


def _labels(sizes: dict, g: torch.Generator) -> torch.Tensor:
    """(N,) labels with two padding labels (N >= 3), and 0 among the real ones where it is not padding."""
    N, V, pad = sizes["N"], sizes["vocab_size"], sizes["pad_idx"]
    target = torch.randint(0, V, (N,), generator=g)
    target[0] = 0 if pad != 0 else 1
    if N >= 3:
        target[1] = target[N - 2] = pad
    return target


def _other_eps(eps: float, used: float, what: str) -> str:
    """The message of an epsilon written into the code, or (at smoothing = 0) of 0 turned into a default."""
    if eps != 0:
        return (f"your {what} of smoothing = {used:.4g}, but this call has smoothing = {eps}: is epsilon written "
                "into your code? Use the smoothing argument.")
    return (f"at smoothing = {eps:g} your {what} of smoothing = {used:g}: is 0 turned into a default (`smoothing or "
            f"{used:g}`, or `if not smoothing:`)? 0 is a valid epsilon, no smoothing at all: test for a missing value "
            "with `is None`.")


def _edge_hint(how: str) -> Callable:
    """The hint of a failure no known mistake explains: the edge case it is on, else a size written in."""
    return lambda passed, sizes, message: (
        "\nHint: this call has a single position (N = 1), which the sets of sizes before it did not try: does a "
        ".squeeze() drop the dimension of size 1? Squeeze only a dimension you added." if sizes == ONE_POSITION else
        "\nHint: this call has smoothing = 0, which the sets of sizes before it did not try." if sizes == NO_SMOOTHING
        else _hard_coded_hint(passed, sizes, message, how))


def _q(reference: Callable = lambda eps, V: 1 - eps, other: Callable = lambda eps, V: eps / (V - 2), add: bool = False,
       pad_column: bool = True, pad_rows: bool = True, dtype: torch.dtype = torch.float32, pad: int | None = None,
       eps: float | None = None) -> Callable:
    """smoothed_targets as a mistake builds it: ``other`` everywhere, ``reference`` written (or added) at the label."""
    def smoothed_targets(target, vocab_size, pad_idx, smoothing):
        pad_idx, smoothing = (pad_idx if pad is None else pad), (smoothing if eps is None else eps)
        q = torch.full((target.size(0), vocab_size), other(smoothing, vocab_size), dtype=dtype)
        at = torch.arange(target.size(0))
        q[at, target] = q[at, target] * add + reference(smoothing, vocab_size)
        if pad_column:
            q[:, pad_idx] = 0.0
        if pad_rows:
            q[target == pad_idx] = 0.0
        return q
    return smoothed_targets


def _pad_written(fn: Callable, at: int, words: str, others: Callable) -> Callable:
    """A ``find``: the learner's result is ``fn``'s with a padding id of ``others(probe)`` in argument ``at``."""
    def find(found: dict, p: Probe) -> str | None:
        for other in others(p):
            args = [*engine._clone(p.args[:at]), other, *engine._clone(p.args[at + 1:])]
            with torch.no_grad():
                if found["values"] is not None and _equal(found["values"], fn(*args), 1e-4):
                    return (f"your {words} token {other} as padding, but this call has pad_idx={p.args[at]}: is "
                            "the padding id written into your code? Use the pad_idx argument.")
        return None
    return find


def _targets_probes(device: str | None) -> list[Probe]:
    g = torch.Generator().manual_seed(0)

    def probe(sizes: dict) -> Probe:
        N, V, pad, eps = sizes["N"], sizes["vocab_size"], sizes["pad_idx"], sizes["smoothing"]
        label = f"{{what}} of {{name}}(target of shape ({N},), vocab_size={V}, pad_idx={pad}, smoothing={eps})"
        return Probe((_labels(sizes, g), V, pad, eps), label, sizes=sizes)

    probes = [probe(sizes) for sizes in TARGET_SIZES]
    first = probe(TARGET_SIZES[0])  # a second call with the same sizes and other labels leaves the first alone
    first.again, first.sizes = (_labels(TARGET_SIZES[0], g), *first.args[1:]), None
    return probes + [first, probe(NO_SMOOTHING), probe(ONE_POSITION)]


def _fitted_eps(found: dict, p: Probe) -> str | None:
    """A ``find``: ``found`` holds the course's targets of another epsilon than the probe's."""
    target, V, pad, eps = p.args
    real = (target != pad).nonzero()
    if found["values"] is None or len(real) == 0:
        return None
    s = 1 - float(found["values"][real[0, 0], target[real[0, 0]]])
    if abs(s - eps) > 1e-6 and 0 <= s < 1 and _equal(found["values"], smoothed_targets(target, V, pad, s)):
        return _other_eps(eps, float(f"{s:.4g}"), "targets are those")
    return None


def _padding(rows: bool) -> Callable:
    """A ``find``: mass in the rows whose label is padding (``rows``), or on the padding column of the others."""
    def find(found: dict, p: Probe) -> str | None:
        target, V, pad, eps = p.args
        got = found["values"][target == pad] if rows else found["values"][target != pad][:, pad]
        if not got.numel() or float(got.abs().max()) <= 1e-6:
            return None
        if not rows:
            return (f"the padding token gets probability {float(got.abs().max()):.4f} in the rows of real labels: "
                    "the target must never teach the model to output padding. Set q[:, pad_idx] = 0 (column "
                    f"{pad} here).")
        sums = ", ".join(f"{s:.4f}" for s in got.sum(-1).tolist())
        return (f"the rows whose label is padding (rows {(target == pad).nonzero().flatten().tolist()}) must be all "
                f"zeros, so that they add nothing to the loss; yours sum to {sums}. Last: q[target == pad_idx] = 0.")
    return find


def _eps_v(message: Callable) -> Callable:
    return lambda p: message(p.args[3], p.args[1])


TARGETS_MISTAKES = (
    Mistake("Rows are positions, columns tokens.", "transposed", stage="shape",
            shape=lambda p: (p.args[1], p.args[0].size(0)), example=lambda *a: smoothed_targets(*a).T),
    Mistake("", "a padding id written into the code", example=_q(pad=0), find=_pad_written(
        smoothed_targets, 2, "targets treat", lambda p: [o for o in range(p.args[1]) if o != p.args[2]])),
    Mistake(_eps_v(lambda eps, V: f"no smoothing: the reference token gets 1 and every other token 0 (one-hot), but "
                   f"smoothing = {eps}. Give the reference 1 - eps = {1 - eps:.4g}. {_COURSE_CONVENTION}"),
            "no smoothing", like=_q(lambda eps, V: 1.0, lambda eps, V: 0.0)),
    Mistake(_eps_v(lambda eps, V: f"the reference token gets eps = {eps} instead of 1 - eps = {1 - eps:.4g}: eps is "
                   f"the mass taken from the reference and spread over the other tokens. {_COURSE_CONVENTION}"),
            "eps and 1 - eps swapped", like=_q(lambda eps, V: eps, lambda eps, V: (1 - eps) / (V - 2))),
    Mistake(_eps_v(lambda eps, V: (
        "this is Szegedy et al.'s uniform smoothing, the target of PyTorch's F.cross_entropy(label_smoothing=eps): "
        f"eps / V on every token, padding included, so the reference gets {1 - eps + eps / V:.4f}. "
        f"{_COURSE_CONVENTION} Here: {1 - eps:.4g} and {eps / (V - 2):.4f} (V = {V}).")), "PyTorch's uniform smoothing",
            like=_q(lambda eps, V: 1 - eps + eps / V, lambda eps, V: eps / V, pad_column=False)),
    Mistake(_eps_v(lambda eps, V: f"you spread eps over V = {V} tokens (eps / V = {eps / V:.4f} each), but only the "
                   f"V - 2 that are neither the reference nor padding share it: eps / (V - 2) = {eps / (V - 2):.4f}."),
            "eps over V tokens", like=_q(other=lambda eps, V: eps / V)),
    Mistake(_eps_v(lambda eps, V: f"you spread eps over the V - 1 = {V - 1} tokens other than the reference, padding "
                   f"included; padding gets 0, the V - 2 others eps / (V - 2) = {eps / (V - 2):.4f} each."),
            "eps over V - 1 tokens, padding included", like=_q(other=lambda eps, V: eps / (V - 1), pad_column=False)),
    Mistake(_eps_v(lambda eps, V: f"you divided eps by V - 1 = {V - 1}; the V - 2 tokens that are neither the "
                   f"reference nor padding share it: eps / (V - 2) = {eps / (V - 2):.4f} each."),
            "eps over V - 1 tokens", like=_q(other=lambda eps, V: eps / (V - 1))),
    Mistake(_eps_v(lambda eps, V: f"the reference token gets 1 - eps + eps / (V - 2) = {1 - eps + eps / (V - 2):.4f}: "
                   "you added 1 - eps to the fill (+=, scatter_add_) instead of writing it (q.scatter_(...))."),
            "1 - eps added", like=_q(add=True)),
    Mistake("", "epsilon written into the code", when=lambda p: p.args[3] != 0, example=_q(eps=0.1), find=_fitted_eps),
    Mistake("", "smoothing = 0 replaced by a default", when=lambda p: p.args[3] == 0, find=_fitted_eps,
            example=lambda target, V, pad, eps: smoothed_targets(target, V, pad, eps or 0.1)),
    Mistake("", "mass on the padding column", find=_padding(False), example=_q(pad_column=False)),
    Mistake("", "padding rows not zeroed", find=_padding(True), example=_q(pad_rows=False)),
)

TARGETS = Declaration(
    check="check_smoothed_targets", function="smoothed_targets", roles=("target", "vocab_size", "pad_idx", "smoothing"),
    reference=smoothed_targets, probes=_targets_probes, mistakes=TARGETS_MISTAKES,
    returns=Tensor("the targets", like=None, dtype_message=lambda found, name, what, args: (
        f"{name}(target of shape ({args[0].size(0)},), vocab_size={args[1]}, pad_idx={args[2]}, smoothing={args[3]}) "
        f"returned torch.{found['dtype']} targets; build them in float32 (torch.full(..., dtype=torch.float32)), the "
        "dtype of the model's log-probabilities, or the loss changes dtype too.")),
    sizes_fix=_edge_hint("Read N from target.size(0) and use the vocab_size, pad_idx and smoothing arguments."),
    passed=("check_smoothed_targets passed: {name} gives 1 - eps to the reference, eps / (V - 2) to every other "
            "token but padding, 0 to padding and an empty row to a padding label, as annotated.label_smoothing "
            f"does, for {len(TARGET_SIZES)} sets of sizes, padding ids and epsilons, for smoothing = 0 and for a "
            "single position, and each call returns a tensor of its own."),
)


def check_smoothed_targets(smoothed_targets_fn: Callable) -> None:
    """Check ``smoothed_targets(target, vocab_size, pad_idx, smoothing) -> (N, vocab_size)`` against
    ``annotated.label_smoothing.smoothed_targets``.

    Diagnoses: an input changed in place, a result that is not a float32 cpu tensor, a wrong shape (a single position
    squeezed away), no smoothing (one-hot), the reference given eps instead of 1 - eps, Szegedy et al.'s (PyTorch's)
    uniform target, eps spread over V or V - 1 tokens, 1 - eps added to the fill instead of written, mass on the padding
    column, padding rows not zeroed, a padding id, an epsilon or a size written into the code, smoothing = 0 replaced by
    a default, and a result kept in a buffer that the next call overwrites."""
    check(TARGETS, smoothed_targets_fn)


def course_loss(logits: torch.Tensor, target: torch.Tensor, pad_idx: int, smoothing: float) -> torch.Tensor:
    """The course's loss: LabelSmoothingLoss, summed over the positions."""
    return LabelSmoothingLoss(logits.size(-1), pad_idx, smoothing)(logits, target)


def _loss_probes(device: str | None) -> list[Probe]:
    """Per set of sizes (then the edge cases): ordinary logits, whose gradient is compared too, logits hundreds apart
    and logits far below zero; and float64 logits about 1e5."""
    g = torch.Generator().manual_seed(1)

    def probe(logits: torch.Tensor, target: torch.Tensor, sizes: dict, kind: str, **options) -> Probe:
        N, V = logits.shape
        what = f"{'float64 ' * (kind == 'float64')}logits of shape ({N}, {V}){', each about 1e5' * (kind == 'float64')}"
        label = f"{{what}} of {{name}}({what}, target of shape ({N},), pad_idx={sizes['pad_idx']}, " \
                f"smoothing={sizes['smoothing']})"
        return Probe((logits, target, sizes["pad_idx"], sizes["smoothing"]), label, tags=dict(kind=kind),
                     sizes=sizes if kind != "float64" else None, **options)

    def three(sizes: dict) -> list[Probe]:
        N, V, target = sizes["N"], sizes["vocab_size"], _labels(sizes, g)
        return [probe(torch.randn(N, V, generator=g) * 2, target, sizes, "ordinary", grad=(0,), precision=1e-4),
                probe(torch.randn(N, V, generator=g) * 150, target, sizes, "wide"),
                probe(torch.randn(N, V, generator=g) * 2 - 200, target, sizes, "low")]

    probes, sizes = [p for sizes in LOSS_SIZES for p in three(sizes)], LOSS_SIZES[0]
    target = _labels(sizes, g)
    logits = torch.randn(sizes["N"], sizes["vocab_size"], generator=g, dtype=torch.float64) * 2 + 1e5
    probes.append(probe(logits, target, sizes, "float64", precision="float32"))  # q may be built in float32
    return probes + three(NO_SMOOTHING) + three(ONE_POSITION)


def _wrong_q(q: Callable, divide: Callable = lambda target, V, pad: 1) -> Callable:
    """A label_smoothing_loss with the targets ``q`` and the sum divided by ``divide(target, V, pad)``."""
    def label_smoothing_loss(logits, target, pad_idx, smoothing):
        V = logits.size(-1)
        loss = -(q(target, V, pad_idx, smoothing).double() * logits.double().log_softmax(-1)).sum()
        return (loss / divide(target, V, pad_idx)).to(logits.dtype)
    return label_smoothing_loss


def _uniform(eps_of: Callable = lambda eps, V: eps, pad_rows: bool = True) -> Callable:
    """Szegedy et al.'s target (PyTorch's label_smoothing), eps_of(eps, V) spread over every token."""
    def targets(target, V, pad, eps):
        s = eps_of(eps, V)
        return _q(lambda e, V: 1 - s + s / V, lambda e, V: s / V, pad_column=False, pad_rows=pad_rows,
                  dtype=torch.float64)(target, V, pad, eps)
    return targets


_S = lambda eps, V: eps * V / (V - 2)  # noqa: E731 - PyTorch's smoothing that matches the course's eps
# The targets a wrong loss may use, each with what it does wrong (in words of the probe: eps, V).
_LOSS_TARGETS = [
    ("the course's targets", smoothed_targets, lambda eps, V: ""),
    ("mass on padding", _q(pad_column=False), lambda eps, V: (
        "your target gives the padding token eps / (V - 2) (q[:, pad_idx] = 0 is missing)")),
    ("padding rows counted", _q(pad_rows=False), lambda eps, V: (
        "the positions whose label is padding count in your loss (q[target == pad_idx] = 0 is missing)")),
    ("mass on padding, padding rows counted", _q(pad_column=False, pad_rows=False), lambda eps, V: (
        "your target gives padding eps / (V - 2), and positions whose label is padding count (q[:, pad_idx] = 0 "
        "and q[target == pad_idx] = 0 are missing)")),
    ("PyTorch's label smoothing", _uniform(), lambda eps, V: (
        f"this is PyTorch's F.cross_entropy(label_smoothing={eps}, ignore_index=pad_idx): Szegedy et al.'s target, "
        "eps / V on every token, padding and reference included; the course spreads eps over V - 2 tokens (it equals "
        f"label_smoothing = eps V / (V - 2) = {_S(eps, V):.4f} plus a padding correction: notebook 08, section 5). "
        "Build q yourself (exercise 8.1) and take -(q * log_softmax(logits)).sum()")),
    ("PyTorch's label smoothing without ignore_index", _uniform(pad_rows=False), lambda eps, V: (
        f"this is PyTorch's F.cross_entropy(label_smoothing={eps}) without ignore_index: Szegedy et al.'s target "
        "(eps / V on every token) and the padding positions counted")),
    ("PyTorch's without the correction", _uniform(_S), lambda eps, V: (
        f"this is F.cross_entropy(label_smoothing={_S(eps, V):.4f}, ignore_index=pad_idx), with the right s = eps V "
        "/ (V - 2) but without the correction eps / (V - 2) * sum of (logit of padding - logit of the label): its "
        "target still gives padding some mass")),
    ("eps over V tokens", _q(other=lambda eps, V: eps / V), lambda eps, V: (
        f"you spread eps over V = {V} tokens; only the V - 2 that are neither the reference nor padding share it")),
    ("eps over V - 1 tokens", _q(other=lambda eps, V: eps / (V - 1), pad_column=False), lambda eps, V: (
        "you spread eps over the V - 1 tokens other than the reference, padding included; padding gets 0")),
    ("eps and 1 - eps swapped", _q(lambda eps, V: eps, lambda eps, V: (1 - eps) / (V - 2)), lambda eps, V: (
        f"the reference gets eps = {eps} and the others share 1 - eps: swapped, the reference keeps 1 - eps")),
    ("1 - eps added", _q(add=True), lambda eps, V: (
        "the reference gets 1 - eps + eps / (V - 2): 1 - eps was added to the fill instead of written over it")),
    ("no smoothing", _q(lambda eps, V: 1.0, lambda eps, V: 0.0), lambda eps, V: (
        f"no smoothing: your loss is the plain cross-entropy, but smoothing = {eps}")),
]
# How a wrong loss may reduce the sum: (name, divisor (target, V, pad), what it does wrong in words).
_REDUCTIONS = [
    ("the sum", lambda target, V, pad: 1, lambda p: ""),
    ("a mean over the real positions", lambda target, V, pad: int((target != pad).sum()), lambda p: (
        f"you divided by the {int((p.args[1] != p.args[2]).sum())} real positions: return the sum (the training loop "
        "divides by the tokens of the whole batch, Batch.ntokens)")),
    ("a mean over the positions", lambda target, V, pad: target.size(0), lambda p: (
        f"you took the mean over all {p.args[1].size(0)} positions, padding included: return the sum")),
    ("a mean over the entries", lambda target, V, pad: target.size(0) * V, lambda p: (
        f"you took the mean over all {p.args[1].size(0)} x {p.args[0].size(-1)} entries (.mean(), or F.kl_div's "
        "default): return the sum")),
]


def _entropy_of_q(eps: float, V: int) -> float:
    """H(q) of a row of smoothed targets, in nats."""
    return -(1 - eps) * math.log(1 - eps) - (eps * math.log(eps / (V - 2)) if eps else 0.0)


def _loss_of(log_p: Callable, sign: float = 1.0) -> Callable:
    """-(q * log_p(logits)).sum() with a wrong log-probability (a known mistake)."""
    def label_smoothing_loss(logits, target, pad_idx, smoothing):
        q = smoothed_targets(target, logits.size(-1), pad_idx, smoothing, logits.dtype)
        return -sign * (q * log_p(logits)).sum()
    return label_smoothing_loss


def _loss_eps(found: dict, p: Probe) -> str | None:
    """A ``find``: the course's loss with another (likely) epsilon than the probe's."""
    logits, target, pad, eps = p.args
    for other in (e for e in (0.1, 0.2, 0.25, 0.3, 0.05, 0.01) if not math.isclose(e, eps)):
        if found["values"] is not None and _equal(found["values"], course_loss(logits.double(), target, pad, other),
                                                  1e-4):
            return _other_eps(eps, other, "loss is that")
    return None


def _unstable(found: dict, p: Probe) -> str | None:
    """Logits hundreds apart or far below zero, that a log of a softmax (or an exp) cannot take; float64's precision."""
    got, kind, expected = found["values"], p.tags["kind"], course_loss(*p.args)
    shown = f"{float(got):.4g}" if got.isfinite() else str(float(got))
    if kind == "wide" and (not got.isfinite() or not _equal(got, expected, 1e-3)):
        return (f"with logits hundreds apart (as a confident model's are) your loss is {shown}, the course's loss is "
                f"{float(expected):.4f}: log(softmax(logits)) underflows (a probability below 1.4e-45 is 0 in float32, "
                "its log -inf). Use F.log_softmax(logits, dim=-1), which never takes the log of an exponential.")
    if kind == "low" and not got.isfinite():
        return (f"with every logit far below zero (about -200) your loss is {shown}, the course's loss is "
                f"{float(expected):.4f}: e^-200 underflows to 0 in float32, and the log of the sum is -inf. A shift "
                "by the row's maximum only when the logits are large misses this: subtract the maximum always, or use "
                "F.log_softmax(logits, dim=-1).")
    if kind == "float64" and got.isfinite() and abs(float(got) - float(expected)) < 0.5:
        return (f"with float64 logits of shape {tuple(p.args[0].shape)}, each about 1e5, your loss is "
                f"{float(got):.6f}, the course's is {float(expected):.6f}: your loss of float64 logits has float32's "
                "precision. A step computes in float32 (a .float(), a tensor created without dtype=): keep the logits' "
                "dtype throughout (q may be float32: q.to(logits.dtype)).")
    return None


def _max_shift_when_large(logits, target, pad_idx, smoothing):  # a known mistake's example
    if logits.max() > 80:  # "only where exp could overflow"
        logits = logits - logits.max(-1, keepdim=True).values
    return _loss_of(lambda z: z - z.exp().sum(-1, keepdim=True).log())(logits, target, pad_idx, smoothing)


def _terms(z, t, pad, eps):  # q * log p, position by position
    return -(smoothed_targets(t, z.size(-1), pad, eps, z.dtype) * z.log_softmax(-1))


LOSS_MISTAKES = (
    Mistake("You return one loss per position: sum them too (.sum() of everything).", "a loss per position",
            stage="shape", shape=lambda p: (p.args[0].size(0),), example=lambda *a: _terms(*a).sum(-1)),
    Mistake("You return q * log p itself: the loss is minus its sum over positions and tokens.", "q * log p itself",
            stage="shape", shape=lambda p: tuple(p.args[0].shape), example=_terms),
    Mistake("Return a 0-dimensional tensor (.sum() gives one), not a tensor of one element.", "a tensor of one element",
            stage="shape", shape=lambda p: (1,), example=lambda *a: course_loss(*a).reshape(1)),
    *(Mistake(lambda p, m=targets_message, r=reduction_message: "; and ".join(
        filter(None, (m(p.args[3], p.args[0].size(-1)), r(p)))) + ".", f"{targets_name}, {reduction_name}",
              like=_wrong_q(q, divide))
      for targets_name, q, targets_message in _LOSS_TARGETS for reduction_name, divide, reduction_message in _REDUCTIONS
      if (targets_name, reduction_name) != ("the course's targets", "the sum")),
    Mistake(lambda p: ("this is the KL divergence KL(q || p) = H(q, p) - H(q): below the course's loss by H(q) = "
                       f"{_entropy_of_q(p.args[3], p.args[0].size(-1)):.4f} per real position. Same gradients, but the "
                       "course's loss is the cross-entropy H(q, p) = -(q * log_softmax(logits)).sum() (notebook 08, "
                       "section 5); F.kl_div(log_p, q) is the KL."), "KL instead of cross-entropy",
            like=lambda z, t, pad, eps: course_loss(z, t, pad, eps) - int((t != pad).sum()) * _entropy_of_q(
                eps, z.size(-1))),
    Mistake("the sign is flipped: the loss is -(q * log p).sum(), a positive number.", "the sign",
            like=_loss_of(lambda z: z.log_softmax(-1), -1.0)),
    Mistake("log_softmax over the positions (dim=0): each position's distribution is over the tokens, the last "
            "dimension: log_softmax(logits, dim=-1).", "log_softmax over the positions",
            like=_loss_of(lambda z: z.log_softmax(0))),
    Mistake("you multiplied q by the probabilities, not by their log: the loss is -(q * log_softmax(logits, "
            "dim=-1)).sum().", "no log", like=_loss_of(lambda z: z.softmax(-1))),
    Mistake("you multiplied q by the logits themselves: logits are not log-probabilities; take log_softmax(logits, "
            "dim=-1) first.", "raw logits", like=_loss_of(lambda z: z)),
    Mistake("", "a padding id written into the code", example=lambda z, t, pad, eps: course_loss(z, t, 0, eps),
            find=_pad_written(lambda z, t, pad, eps: course_loss(z.double(), t, pad, eps), 2, "loss treats",
                              lambda p: [o for o in range(p.args[0].size(-1)) if o != p.args[2]])),
    Mistake("", "epsilon written into the code", find=_loss_eps,
            when=lambda p: p.args[3] != 0, example=lambda z, t, pad, eps: course_loss(z, t, pad, 0.1)),
    Mistake("", "smoothing = 0 replaced by a default", find=_loss_eps,
            when=lambda p: p.args[3] == 0, example=lambda z, t, pad, eps: course_loss(z, t, pad, eps or 0.1)),
    Mistake("", "log(softmax) that underflows", find=_unstable, when=lambda p: p.tags["kind"] == "wide",
            example=_loss_of(lambda z: z.softmax(-1).log())),
    Mistake("", "a max shift applied only to large logits", find=_unstable, when=lambda p: p.tags["kind"] == "low",
            example=_max_shift_when_large),
    Mistake("", "float64 logits computed in float32", find=_unstable, when=lambda p: p.tags["kind"] == "float64",
            example=lambda z, t, pad, eps: course_loss(z.float(), t, pad, eps).to(z.dtype)),
)

LOSS = Declaration(
    check="check_label_smoothing_loss", function="label_smoothing_loss",
    roles=("logits", "target", "pad_idx", "smoothing"),
    reference=course_loss, probes=_loss_probes, mistakes=LOSS_MISTAKES, returns=Tensor("the loss"),
    sizes_fix=_edge_hint("Read N and V from logits.shape and use the pad_idx and smoothing arguments."),
    passed=("check_label_smoothing_loss passed: {name} sums -q log p over the positions as "
            "annotated.label_smoothing.LabelSmoothingLoss does (which equals F.cross_entropy with label_smoothing = "
            "eps V / (V - 2) plus the padding correction), with its gradient, and stays finite for logits hundreds "
            f"apart and far below zero, for {len(LOSS_SIZES)} sets of sizes, for smoothing = 0 and for a single "
            "position; float64 logits give a float64 loss."),
)


def check_label_smoothing_loss(label_smoothing_loss: Callable) -> None:
    """Check ``label_smoothing_loss(logits, target, pad_idx, smoothing)``, the label-smoothed cross-entropy summed
    over positions, against ``annotated.label_smoothing.LabelSmoothingLoss``.

    Diagnoses: an input changed in place, a result that is not a 0-d tensor of the logits' dtype (a loss per position, q
    * log p itself), the mistakes of exercise 8.1 seen through the loss, PyTorch's ``label_smoothing`` convention (with
    or without ``ignore_index``, with eps or with eps V / (V - 2) without the correction), no smoothing, a mean instead
    of the sum, KL instead of cross-entropy, the sign, log_softmax over the wrong dimension, no log, raw logits, a
    padding id or epsilon written into the code, no gradient, log(softmax) that underflows, a max shift applied only to
    large logits, float64 logits turned into a float32 loss or computed in float32, and smoothing = 0 replaced by a
    default."""
    check(LOSS, label_smoothing_loss)


def _formulas(d: int, w: int) -> list:
    """(the rate by a wrong formula, its short name, what is wrong) for d_model = d, warmup = w."""
    peak, meet = (d * w) ** -0.5, {-0.5: "1/3", -1: "2/3"}
    return [
        (lambda s: min(s**-0.5, s * w**-1.5), "no d_model factor",
         f"the factor d_model^-0.5 is missing: your rates are sqrt(d_model) = {d**0.5:.4g} times too large (peak "
         f"{w**-0.5:.6f} instead of (d_model * warmup)^-0.5 = {peak:.6f}). Multiply by d_model ** -0.5."),
        *((lambda s, e=e: d**e * min(s**-0.5, s * w**-1.5), f"d_model^{e:g}",
           f"you multiplied by d_model^{e:g} instead of d_model^-0.5: the peak is {d**e * w**-0.5:.4g} instead of "
           f"{peak:.6f}.") for e in (0.5, -1)),
        *((lambda s, e=e: d**-0.5 * min(s**-0.5, s * w**e), f"warmup^{e:g}",
           f"the warm-up branch has warmup^{e:g} where the paper has warmup^-1.5: the two branches then meet at step "
           f"warmup^({meet[e]}) = {w ** (-e / 1.5):.1f}, not at step {w}.") for e in (-0.5, -1)),
        (lambda s: d**-0.5 * max(s**-0.5, s * w**-1.5), "max instead of min",
         "max instead of min: your rate starts at its largest, falls until step = warmup and then grows without "
         "bound. The paper takes the smaller of the two branches: the rise before the peak, the decay after it."),
        (lambda s: d**-0.5 * s**-0.5, "no warm-up",
         f"there is no warm-up: your rate is d_model^-0.5 * step^-0.5, its largest ({d**-0.5:.4f}) at the first "
         "update. The min with step * warmup^-1.5 makes it rise for the first warmup steps (with warmup^1.5 instead "
         "of warmup^-1.5 the min never takes that branch)."),
        (lambda s: d**-0.5 * s * w**-1.5, "linear forever",
         "your rate rises linearly forever: the decay step^-0.5 never takes over (is it missing, or written "
         "step^0.5?). The min of the two branches makes the rate fall as 1/sqrt(step) after step = warmup."),
        (lambda s: d**-0.5 * min((s + 1) ** -0.5, (s + 1) * w**-1.5), "one step ahead",
         "your rates are one step ahead: rate(step) gives the paper's value for step + 1. The paper counts steps "
         "from 1, and so does the course's rate (make_optimizer passes LambdaLR's k + 1): use step itself."),
        (lambda s: d**-0.5 * min(max(s - 1, 1) ** -0.5, max(s - 1, 1) * w**-1.5), "one step behind",
         "your rates are one step behind: rate(step) gives the paper's value for step - 1. Steps count from 1, and "
         "make_optimizer already passes LambdaLR's k + 1: use step itself."),
    ]


def _curve(found: dict, p: Probe) -> list | None:
    """The learner's rates on a curve probe, or None (step 0's probe, or not all numbers)."""
    got = found["value"]
    numbers_only = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in got)
    return got if "zero" not in p.tags and numbers_only else None


def _written_in(what: str) -> Callable:
    """A ``find``: the learner's curve is rate's with ``what`` (d_model or warmup) fitted from it, another value."""
    def find(found: dict, p: Probe) -> str | None:
        got, (_, d, w), steps = _curve(found, p), p.args[0], [s for s, _, _ in p.args]
        if not got or got[-1 if what == "d_model" else 0] <= 0:
            return None
        value = (got[-1] * steps[-1] ** 0.5) ** -2 if what == "d_model" else (got[0] * d**0.5) ** (-2 / 3)
        d_try, w_try, actual = (value, w, d) if what == "d_model" else (d, value, w)
        if (value >= 2 and abs(value - round(value)) < 1e-3 * value and round(value) != actual
                and all(_near(x, rate(s, round(d_try), round(w_try))) for x, s in zip(got, steps))):
            return (f"your rates are those of {what} = {round(value)}, but this call has {what} = {actual}: is {what} "
                    "written into your code? Use the argument.")
        return None
    return find


def _other_rates(found: dict, p: Probe) -> str | None:
    got = _curve(found, p)
    if got is None:
        return None
    (_, d, w), steps = p.args[0], [s for s, _, _ in p.args]
    expected = [rate(s, d, w) for s in steps]
    bad = [i for i, (x, e) in enumerate(zip(got, expected)) if not _near(x, e)]
    i = bad[0]
    return (f"{{name}}({steps[i]}, d_model={d}, warmup={w}) returned {got[i]:.6g}, the paper's formula gives "
            f"{expected[i]:.6g} (wrong at {len(bad)} of the {len(steps)} steps tried, "
            f"{', '.join(str(steps[j]) for j in bad[:5])}{', ...' if len(bad) > 5 else ''}).")


_STEP_ONE = "The paper counts steps from 1; the course's rate treats step 0 as step 1 (step = max(step, 1))."


def _step_zero(found: dict, p: Probe) -> str | None:
    got = found["value"]
    if "zero" not in p.tags or not got or not isinstance(got[0], (int, float)) or isinstance(got[0], bool):
        return None
    (_, d, w), zero = p.args[0], got[0]
    call = f"{{name}}(0, d_model={d}, warmup={w})"
    if not math.isfinite(zero):
        return f"{call} returned {float(zero)}: at step 0 the formula's step^-0.5 divides by zero. {_STEP_ONE}"
    return (f"{call} returned {zero:.6g}; the course treats step 0 as step 1 (step = max(step, 1)), so it should be "
            f"rate(1) = {rate(1, d, w):.6g}: a rate of 0 would waste the first update (LambdaLR asks for step 0).")


def _not_rates(found: dict, name: str, what: str) -> str:
    items = found.get("items", [])
    if any(f["kind"] == "tensor" for f in items):
        return (f"{name} returned a tensor; return a Python float (LambdaLR multiplies the base rate by it): compute "
                "with ** and min, or math.sqrt, on the integers you are given, not with torch.")
    other = next((f for f in items if f["kind"] != "value"), {"type": found["type"]})
    return f"{name} should return the learning rate as a float, got {other['type']}"


def _rate_probes(device: str | None) -> list[Probe]:
    """Per setting, steps from 1 on (the first updates, around the peak, far into the decay), then step 0."""
    probes = []
    for sizes in RATE_SIZES:
        d, w = sizes["d_model"], sizes["warmup"]
        steps = sorted({1, 2, 3, w // 2, w - 1, w, w + 1, 2 * w, 4 * w, 10 * w, 37 * w + 5})
        probes += [Probe(tuple((s, d, w) for s in steps), f"{{what}} of {{name}}(step, d_model={d}, warmup={w}) "
                         f"at the steps {', '.join(map(str, steps))}", sizes=sizes, each=True),
                   Probe(((0, d, w),), f"{{what}} of {{name}}(0, d_model={d}, warmup={w})", sizes=sizes, each=True,
                         tags=dict(zero=True), on_error=lambda err, name, d=d, w=w: (
                             f"{name}(0, d_model={d}, warmup={w}) raised {err['type']}: {err['message']}: at step 0 "
                             f"the formula's step^-0.5 divides by zero. {_STEP_ONE}"))]
    return probes


RATE = Declaration(
    check="check_rate", function="rate", roles=("step", "d_model", "warmup"), reference=rate, probes=_rate_probes,
    returns=Value("the learning rates", kind="list", precision=(0.0, 1e-6), other=_not_rates),
    sizes_fix="Use the d_model and warmup arguments.",
    mistakes=(
        *(Mistake(lambda p, k=k: _formulas(*p.args[0][1:])[k][2], _formulas(512, 4000)[k][1],
                  like=lambda step, d_model, warmup, k=k: _formulas(d_model, warmup)[k][0](max(step, 1)))
          for k in range(10)),
        Mistake("", "d_model written in", find=_written_in("d_model"),
                example=lambda step, d_model, warmup: rate(step, 512, warmup)),
        Mistake("", "warmup written in", find=_written_in("warmup"),
                example=lambda step, d_model, warmup: rate(step, d_model, 4000)),
        Mistake("", "step 0", find=_step_zero, example=lambda step, d_model, warmup: rate(step, d_model, warmup) * (
            step > 0)),
        Mistake("", "other rates", find=_other_rates, generic=True,
                example=lambda step, d_model, warmup: rate(step, d_model, warmup) * 1.01),
    ),
    passed=lambda name: (
        f"check_rate passed: {name} rises linearly to (d_model * warmup)^-0.5 at step = warmup "
        f"and decays as step^-0.5 after it, as annotated.schedule.rate does, for (d_model, warmup) "
        f"= {', '.join(f'({d}, {w})' for d, w in (s.values() for s in RATE_SIZES))}, and treats step 0 as step 1."),
)


def check_rate(rate_fn: Callable) -> None:
    """Check ``rate(step, d_model, warmup) -> float`` against ``annotated.schedule.rate`` (§5.3).

    Diagnoses: a result that is not a finite Python number (a tensor named), the factor d_model^-0.5 missing, or with
    the exponent 0.5 or -1, warmup^-0.5, ^-1 or ^1.5 in the warm-up branch, max instead of min, only one of the two
    branches, step^0.5 in the decay, steps counted one ahead or one behind, a d_model or warmup written into the code,
    and step 0 dividing by zero or giving another rate than step 1."""
    check(RATE, rate_fn)


class _SmallModel(EncoderDecoder):
    """The check's model, named in one line where a message shows the arguments of a call."""

    def __repr__(self) -> str:
        return "model"


def _teacher_model(sizes: dict, dropout: float = 0.0) -> EncoderDecoder:
    """A small model, tied as make_model's (the recorder ties it again); the caller's random state kept."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = make_model(TransformerConfig(sizes["vocab"], sizes["vocab"], N=1, d_model=16, d_ff=24, h=2,
                                             dropout=dropout))
    model.__class__ = _SmallModel
    return model


def course_teacher_forcing_loss(model, src, tgt, pad_idx: int, loss_fn) -> torch.Tensor:
    """The course's loss per token of the batch: Batch, the model, the summed loss / ntokens."""
    b = Batch(src, tgt, pad_idx)
    return loss_fn(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask).flatten(0, 1), b.tgt_y.flatten()) / b.ntokens


def _teacher_probes(device: str | None) -> list[Probe]:
    """``TEACHER_SIZES`` in training mode (gradients compared); then, on the first sizes, evaluation mode, dropout in
    training mode (its loss must not be the loss without dropout) and in evaluation mode, and a float64 model."""
    g = torch.Generator().manual_seed(2)

    def sentences(sizes: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """src and tgt = <s> y_1 .. y_n </s>, right-padded, every sentence of another length, sentence 0 the longest."""
        batch, L_src, L_tgt, V, pad = (sizes[k] for k in ("batch", "L_src", "L_tgt", "vocab", "pad_idx"))
        bos, eos = (pad + 1) % V, (pad + 2) % V
        symbols = torch.tensor([t for t in range(V) if t not in (pad, bos, eos)])
        src, tgt = torch.full((batch, L_src), pad), torch.full((batch, L_tgt), pad)
        for i in range(batch):
            n_src, n_tgt = max(2, L_src - i), max(1, L_tgt - 2 - 2 * i)  # n_tgt: symbols between <s> and </s>
            src[i, :n_src] = symbols[torch.randint(len(symbols), (n_src,), generator=g)]
            middle = symbols[torch.randint(len(symbols), (n_tgt,), generator=g)]
            tgt[i, : n_tgt + 2] = torch.cat([torch.tensor([bos]), middle, torch.tensor([eos])])
        return src, tgt

    def built(sizes: dict, dropout: float = 0.0, training: bool = True) -> EncoderDecoder:  # sent as data
        return recorder.build("annotated.support.grading.training._teacher_model", sizes={"vocab": sizes["vocab"]},
                              dropout=dropout).train(training)

    def probe(sizes: dict, model, setting: str = "", probe_sizes: dict | None = None, **options) -> Probe:
        src, tgt = sentences(sizes)
        V, pad = sizes["vocab"], sizes["pad_idx"]
        loss_fn = recorder.build("annotated.label_smoothing.LabelSmoothingLoss", vocab_size=V, pad_idx=pad,
                                 smoothing=0.1)
        label = (f"{{what}} of {{name}}(model, src of shape {tuple(src.shape)}, tgt of shape {tuple(tgt.shape)}, "
                 f"pad_idx={pad}, loss_fn){setting}")
        return Probe((model, src, tgt, pad, loss_fn), label, sizes=probe_sizes, **options, hints=((
            r"does not fit logits", "\nHint: the decoder reads tgt[:, :-1] and its labels are tgt[:, 1:]: both have "
            "L_tgt - 1 positions, so the logits and the labels fit."),))

    probes = [probe(sizes, built(sizes), probe_sizes=sizes, grad=(0,)) for sizes in TEACHER_SIZES]
    sizes, drop = TEACHER_SIZES[0], f" on a model with dropout {TEACHER_DROPOUT}, in"
    probes.append(probe(sizes, built(sizes, training=False), " in evaluation mode"))
    dropout = probe(sizes, built(sizes, TEACHER_DROPOUT), f"{drop} training mode", tags=dict(dropout=True))
    with torch.no_grad():
        model, *rest = engine._clone(dropout.args)
        without = float(course_teacher_forcing_loss(model.eval(), *rest))
    dropout.tags["without"] = without
    dropout.accept = lambda values: bool(values[0].isfinite().all()) and not _equal(
        values[0], torch.tensor(without), 1e-4)  # dropout acts: any other finite loss
    probes += [dropout, probe(sizes, built(sizes, TEACHER_DROPOUT, training=False), f"{drop} evaluation mode")]
    return probes + [probe(sizes, built(sizes).double(), " with a float64 model (model.double())",
                           {"_float64": True}, precision="float64")]


def _teacher(shift: str = "right", tgt_mask: str = "target", src_mask: bool = True, divide: str | None = "own"):
    """A teacher_forcing_loss that shifts the decoder's input and labels, masks and divides as told."""
    def teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn):
        tgt_in, tgt_y = {"right": (tgt[:, :-1], tgt[:, 1:]), "none": (tgt[:, :-1], tgt[:, :-1]),
                         "reversed": (tgt[:, 1:], tgt[:, :-1]), "labels": (tgt[:, 1:], tgt[:, 1:]),
                         "nothing": (tgt, tgt)}[shift]
        masks = {"target": lambda: target_mask(tgt_in, pad_idx), "padding": lambda: padding_mask(tgt_in, pad_idx),
                 None: lambda: None}
        logits = model(src, tgt_in, padding_mask(src, pad_idx) if src_mask else None, masks[tgt_mask]())
        summed = loss_fn(logits.flatten(0, 1), tgt_y.flatten())
        divisor = {"own": (tgt_y != pad_idx).sum(), "ntokens": (tgt[:, 1:] != pad_idx).sum(),
                   "positions": tgt.size(0) * (tgt.size(1) - 1), "sentences": tgt.size(0),
                   "target": (tgt != pad_idx).sum(), "inputs": (tgt[:, :-1] != pad_idx).sum(), None: 1}[divide]
        return summed / divisor
    return teacher_forcing_loss


def _counts(p: Probe) -> dict:
    tgt, pad = p.args[2], p.args[3]
    return dict(ntokens=int((tgt[:, 1:] != pad).sum()), positions=tgt.size(0) * (tgt.size(1) - 1), batch=tgt.size(0),
                target=int((tgt != pad).sum()), inputs=int((tgt[:, :-1] != pad).sum()))


_FIX = "The decoder reads tgt_in = tgt[:, :-1] (from <s>) and predicts tgt_y = tgt[:, 1:], the next token"
# The wrong shifts and masks: a short name, the arguments of _teacher, what it does wrong, and which count the real
# tokens of its own labels are (dividing by them is no further mistake).
_STRUCTURES = [
    ("the right shift", dict(), "", "ntokens"),
    ("labels not shifted", dict(shift="none"), "the labels are not shifted: your decoder reads tgt[:, :-1] and "
     f"predicts the same tokens, so position t sees its own answer. {_FIX}", "inputs"),
    ("nothing shifted", dict(shift="nothing"), "nothing is shifted: the decoder reads the whole target and predicts "
     f"each position's own token, which it sees. {_FIX}", "target"),
    ("the decoder reading its labels", dict(shift="labels"), "the decoder reads its own labels, tgt[:, 1:]: position "
     f"t sees the token it must predict. {_FIX}", "ntokens"),
    ("the shift the wrong way", dict(shift="reversed"), "the shift goes the wrong way: the decoder reads tgt[:, 1:] "
     f"and predicts tgt[:, :-1], the token before. {_FIX}", "inputs"),
    ("no look-ahead mask", dict(tgt_mask="padding"), "the target mask has no look-ahead part: position t attends to "
     "the later tokens, its own label among them. Use target_mask(tgt_in, pad_idx)", "ntokens"),
    ("no source mask", dict(src_mask=False), "the source mask is missing: the decoder's cross-attention (and the "
     "encoder) reads the source's padding. Pass src_mask = padding_mask(src, pad_idx)", "ntokens"),
    ("no masks", dict(src_mask=False, tgt_mask=None), "no masks at all: the decoder sees the tokens it must predict "
     "and the source's padding. Pass padding_mask(src, pad_idx) and target_mask(tgt_in, pad_idx)", "ntokens"),
]
# The wrong divisors, each with what it does wrong (in the words of the probe's counts).
_LABELS = "the real label tokens, (tgt_y != pad_idx).sum() = {ntokens} here"
_DIVISORS = [
    (None, "you returned the summed loss: divide it by " + _LABELS),
    ("positions", "you divided by all {positions} label positions, padding included: divide by " + _LABELS),
    ("sentences", "you divided by the {batch} sentences: divide by " + _LABELS),
    ("target", "you divided by the real tokens of the whole target ({target}); <s> is never a label: divide by "
     + _LABELS),
    ("inputs", "you counted the decoder's input tokens ((tgt_in != pad_idx).sum() = {inputs}): divide by " + _LABELS),
]


def _dropout_off(found: dict, p: Probe) -> str | None:
    if found["values"] is None or not _equal(found["values"], torch.tensor(p.tags["without"]), 1e-4):
        return None
    return (f"on a model with dropout {TEACHER_DROPOUT} in training mode (model.train()), your function returned "
            f"{float(found['values']):.4f}, the loss without dropout: your function turns dropout off (model.eval() or "
            "torch.no_grad(), even if undone before returning). Call the model in the mode the caller left it in.")


def _in_eval_then_back(model, src, tgt, pad_idx, loss_fn):  # a known mistake's example
    was = model.training
    loss = course_teacher_forcing_loss(model.eval(), src, tgt, pad_idx, loss_fn)
    model.train(was)
    return loss


def _teacher_hint(passed: list, sizes: dict, message: str) -> str:
    if "_float64" in sizes:
        return "\nThis is with a float64 model (model.double()); every float32 model passed before it."
    if sizes["batch"] == 1:
        return (f"\nHint: the same function passed with batches of several sentences but not with a batch of one "
                f"({', '.join(f'{k}={v}' for k, v in sizes.items())}): does a .squeeze() drop the batch dimension? "
                "Squeeze only a dimension you added yourself, .squeeze(dim).")
    return _hard_coded_hint(passed, sizes, message, "Read the lengths from the tensors' shapes and use the pad_idx "
                            "argument.")


TEACHER_MISTAKES = (
    Mistake("", "not a scalar", stage="shape", example=lambda *args: course_teacher_forcing_loss(*args).reshape(1),
            find=lambda found, p: "Return one number for the batch: the summed loss divided by the label tokens."
            if found["shape"] else None),
    Mistake("", "dropout turned off in training", when=lambda p: p.tags.get("dropout", False), find=_dropout_off,
            example=_in_eval_then_back),
    *(Mistake(lambda p, what=what, how=how: "; and ".join(filter(None, (what, how and how.format(**_counts(p))))) + ".",
              f"{name}, divided by {divide or 'nothing'}", like=_teacher(**structure, divide=divide))
      for name, structure, what, natural in _STRUCTURES
      for divide, how in [("own", None), ("ntokens", None), *((d, h) for d, h in _DIVISORS if d != natural)]
      if (what or how) and not (divide == "ntokens" and natural == "ntokens")),
    Mistake("you averaged the sentences' losses per token: a token of a short sentence then weighs more than one of a "
            "long one. Sum the loss over every label token of the batch and divide once, by (tgt_y != pad_idx).sum().",
            "the mean of sentence means", like=lambda model, src, tgt, pad, loss_fn: sum(course_teacher_forcing_loss(
                model, src[i: i + 1], tgt[i: i + 1], pad, loss_fn) for i in range(src.size(0))) / src.size(0)),
    *(Mistake(f"this is F.cross_entropy(logits, labels, ignore_index=pad_idx, label_smoothing={smoothing}), not the "
              "loss you were given: call loss_fn(logits, labels), the course's LabelSmoothingLoss, and divide its sum "
              "by the number of label tokens.", f"F.cross_entropy with label_smoothing={smoothing}",
              like=lambda model, src, tgt, pad, loss_fn, s=smoothing: course_teacher_forcing_loss(
                  model, src, tgt, pad, lambda z, y: F.cross_entropy(z, y, ignore_index=pad, label_smoothing=s,
                                                                     reduction="sum"))) for smoothing in (0.0, 0.1)),
    Mistake("", "a padding id written into the code", find=_pad_written(  # the course's special ids: likely ones
        course_teacher_forcing_loss, 3, "masks and token count treat",
        lambda p: [o for o in (0, 1, 2, 3) if o != p.args[3] and o < p.args[4].vocab_size]),
            example=lambda model, src, tgt, pad, loss_fn: course_teacher_forcing_loss(model, src, tgt, 0, loss_fn)),
)

TEACHER = Declaration(
    check="check_teacher_forcing_loss", function="teacher_forcing_loss",
    roles=("model", "src", "tgt", "pad_idx", "loss_fn"), reference=course_teacher_forcing_loss,
    probes=_teacher_probes, mistakes=TEACHER_MISTAKES, sizes_fix=_teacher_hint,
    returns=Tensor("the loss", like=None, dtypes=("float32", "float64"), precision=1e-4),  # a loss of about 3
    passed=("check_teacher_forcing_loss passed: {name} feeds the decoder tgt[:, :-1] under the target mask, scores "
            "tgt[:, 1:] and divides the summed loss by the real label tokens, as Batch and evaluate_loss do, for "
            f"{len(TEACHER_SIZES)} batches (padding on both sides, and one single sentence); with dropout in the "
            "model it keeps dropout in training mode and none in evaluation mode, leaves the model's mode alone "
            "and lets gradients reach the model; a float64 model gives a float64 loss."),
)


def check_teacher_forcing_loss(teacher_forcing_loss: Callable) -> None:
    """Check ``teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn)``, the loss per target token of one batch,
    against ``annotated.batching.Batch`` with the summed loss over its ``ntokens``.

    Diagnoses: an input changed in place, a result that is not a scalar float tensor, labels not shifted, nothing
    shifted, the decoder reading its labels, the shift the wrong way, no look-ahead mask, no source mask, no masks, the
    sum or a division by the positions, the sentences, the target's or the input's tokens, the mean of per-sentence
    means, ``F.cross_entropy`` instead of the given loss, a padding id written into the code, a loss without gradient, a
    batch of one sentence squeezed away, the model's mode changed (model.eval() left behind, or model.train()), dropout
    turned off in training (model.eval() inside, even if undone), and a float64 model's loss turned into float32."""
    check(TEACHER, teacher_forcing_loss)


DECLARATIONS = {d.check: d for d in (TARGETS, LOSS, RATE, TEACHER)}
