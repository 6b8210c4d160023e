"""Checks of notebook 08's exercises: label smoothing's targets and loss
(``annotated.label_smoothing``, compared with ``F.cross_entropy``), the warm-up schedule
(``annotated.schedule.rate``) and the loss per token of a batch under teacher forcing
(``annotated.batching.Batch`` and ``annotated.training.evaluate_loss``)."""

import math
import numbers
from collections.abc import Callable

import torch
import torch.nn.functional as F

from annotated.batching import Batch
from annotated.label_smoothing import LabelSmoothingLoss, smoothed_targets
from annotated.masks import padding_mask, subsequent_mask, target_mask
from annotated.model import EncoderDecoder, TransformerConfig, make_model
from annotated.schedule import rate
from annotated.support import guarded_training
from annotated.support.grading.core import (
    ExerciseFailed, _assert_close, _call, _function, _generic, _hard_coded_hint, _run_on_all_sizes,
    _same, _shape, _tensor,
)
from annotated.training import evaluate_loss

# Every size changes from one set to the next; the padding id and epsilon too, so that a
# pad_idx = 0 or a smoothing = 0.1 written into the code fails.
TARGET_SIZES = [
    dict(N=9, vocab_size=8, pad_idx=0, smoothing=0.1),
    dict(N=6, vocab_size=11, pad_idx=3, smoothing=0.2),
    dict(N=5, vocab_size=7, pad_idx=6, smoothing=0.3),
]
LOSS_SIZES = [
    dict(N=10, vocab_size=9, pad_idx=0, smoothing=0.1),
    dict(N=7, vocab_size=12, pad_idx=4, smoothing=0.25),
]
# The paper's base model first, then two small ones: d_model = 512 or warmup = 4000 written
# into the code fails on the second set.
RATE_SIZES = [
    dict(d_model=512, warmup=4000),
    dict(d_model=64, warmup=100),
    dict(d_model=256, warmup=30),
]
TEACHER_SIZES = [
    dict(batch=3, L_src=7, L_tgt=6, vocab=13, pad_idx=0),
    dict(batch=5, L_src=4, L_tgt=9, vocab=10, pad_idx=2),
]
SIZE_SETS = {
    "check_smoothed_targets": TARGET_SIZES,
    "check_label_smoothing_loss": LOSS_SIZES,
    "check_rate": RATE_SIZES,
    "check_teacher_forcing_loss": TEACHER_SIZES,
}

_COURSE_CONVENTION = (
    "The course's convention (the Annotated Transformer's): the reference token keeps 1 - eps, "
    "the V - 2 tokens that are neither the reference nor padding get eps / (V - 2) each, the "
    "padding token gets 0, and a row whose label is padding is all zeros."
)


def _close(a: float, b: float, tol: float = 1e-5) -> bool:
    """Equal up to float32 rounding, for probabilities (at most 1)."""
    return abs(a - b) <= tol * max(1.0, abs(b))


def _near(a: float, b: float) -> bool:
    """Equal up to rounding, relatively: learning rates are small numbers."""
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0)


def _labels(sizes: dict, g: torch.Generator) -> torch.Tensor:
    """(N,) labels in 0 .. V-1 with two padding labels, and the label 0 among the real ones
    when 0 is not the padding id (so that a padding id of 0 written into the code shows)."""
    N, V, pad = sizes["N"], sizes["vocab_size"], sizes["pad_idx"]
    target = torch.randint(0, V, (N,), generator=g)
    target[0] = 0 if pad != 0 else 1
    target[1] = target[N - 2] = pad
    return target


# ---------------------------------------------------------------- 8.1 smoothed_targets


def _targets_mistake(got: torch.Tensor, target: torch.Tensor, sizes: dict) -> str | None:
    """Name what is wrong in the rows of real labels, outside the padding column, when the
    reference token gets one value and every other token another."""
    V, pad, eps = sizes["vocab_size"], sizes["pad_idx"], sizes["smoothing"]
    real = target != pad
    rows = got[real].double()  # (n, V)
    n = rows.size(0)
    labels = target[real]
    reference = rows[torch.arange(n), labels]
    others_mask = torch.ones(n, V, dtype=torch.bool)
    others_mask[torch.arange(n), labels] = False
    others_mask[:, pad] = False
    others = rows[others_mask]
    if float(reference.max() - reference.min()) > 1e-6 or float(others.max() - others.min()) > 1e-6:
        return None
    r, o, p = float(reference[0]), float(others[0]), float(rows[:, pad].abs().max())
    if _close(r, 1 - eps) and _close(o, eps / (V - 2)):
        return None  # right outside the padding column
    if _close(r, 1.0) and _close(o, 0.0):
        return (f"no smoothing: the reference token gets 1 and every other token 0 (a one-hot "
                f"target), but smoothing = {eps}. Give the reference 1 - eps = {1 - eps:.4g} and "
                f"share eps over the other tokens. {_COURSE_CONVENTION}")
    if _close(r, eps):
        return (f"the reference token gets eps = {eps} instead of 1 - eps = {1 - eps:.4g}: "
                "epsilon is the mass taken away from the reference and spread over the other "
                f"tokens, so the reference keeps 1 - eps (the paper's eps_ls = 0.1 leaves it 0.9). "
                f"{_COURSE_CONVENTION}")
    if _close(o, eps / V):
        if _close(r, 1 - eps + eps / V):
            return (f"this is Szegedy et al.'s uniform smoothing, the target of PyTorch's "
                    f"F.cross_entropy(label_smoothing=eps): (1 - eps) onehot + eps / V on every "
                    f"token, so the reference gets {r:.4f} and padding {p:.4f}. "
                    f"{_COURSE_CONVENTION} Here: {1 - eps:.4g} and {eps / (V - 2):.4f} (V = {V}).")
        return (f"you spread eps over V = {V} tokens (eps / V = {eps / V:.4f} each), but only the "
                f"V - 2 = {V - 2} tokens that are neither the reference nor padding receive it, so "
                f"each gets eps / (V - 2) = {eps / (V - 2):.4f} and the row sums to 1.")
    if _close(o, eps / (V - 1)):
        if _close(p, eps / (V - 1)):
            return (f"you spread eps over the V - 1 = {V - 1} tokens other than the reference, "
                    f"padding included (eps / (V - 1) = {eps / (V - 1):.4f} each); the padding "
                    f"token must get 0, so eps goes to the V - 2 = {V - 2} others: eps / (V - 2) = "
                    f"{eps / (V - 2):.4f} each. {_COURSE_CONVENTION}")
        return (f"you divided eps by V - 1 = {V - 1}, but the tokens that share it are the V - 2 = "
                f"{V - 2} that are neither the reference nor padding: eps / (V - 2) = "
                f"{eps / (V - 2):.4f} each, so that the row sums to 1.")
    if _close(r, 1 - eps + eps / (V - 2)) and _close(o, eps / (V - 2)):
        return (f"the reference token gets 1 - eps + eps / (V - 2) = {r:.4f}: you filled every "
                "token with eps / (V - 2) and then added 1 - eps at the reference (+=, "
                "scatter_add_, index_add_) instead of writing it. The reference holds 1 - eps "
                "exactly: q.scatter_(1, target.unsqueeze(1), 1 - smoothing) overwrites.")
    s = 1 - r
    if _close(o, s / (V - 2)) and not _close(s, eps):
        return (f"your targets are those of smoothing = {s:.4g}, but this call has smoothing = "
                f"{eps}: is epsilon written into your code? Use the smoothing argument.")
    return None


def _check_targets_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    N, V, pad, eps = sizes["N"], sizes["vocab_size"], sizes["pad_idx"], sizes["smoothing"]
    target = _labels(sizes, g)
    expected = smoothed_targets(target, V, pad, eps)  # the course's, float32
    call = f"{name}(target of shape ({N},), vocab_size={V}, pad_idx={pad}, smoothing={eps})"
    roles = ("target", "vocab_size", "pad_idx", "smoothing")
    got = _tensor(_call(fn, target, V, pad, eps, roles=roles), name, "the targets")
    hint = " Rows are positions, columns tokens." if tuple(got.shape) == (V, N) else ""
    _shape(got, (N, V), call, hint)
    if got.dtype != torch.float32:
        raise ExerciseFailed(
            f"{call} returned {got.dtype} targets; the model's log-probabilities are float32, and "
            f"{got.dtype} targets would turn the loss into {got.dtype}. Build them in float32 "
            "(torch.full(..., dtype=torch.float32), the default for a float fill value)."
        )
    if _same(got, expected):
        return
    # A padding id written into the code: the course's targets for another padding id.
    for other in range(V):
        if other != pad and _same(got, smoothed_targets(target, V, other, eps)):
            raise ExerciseFailed(
                f"your targets treat token {other} as padding, but this call has pad_idx={pad}: is "
                f"the padding id written into your code? Use the pad_idx argument (the check "
                "runs several)."
            )
    message = _targets_mistake(got, target, sizes)
    if message:
        raise ExerciseFailed(message)
    real = target != pad
    pad_column = got[real][:, pad]
    if not _same(pad_column, torch.zeros_like(pad_column)):
        raise ExerciseFailed(
            f"the padding token gets probability {pad_column.abs().max():.4f} in the rows of real "
            "labels: the target must never teach the model to output padding. Set "
            f"q[:, pad_idx] = 0 (column {pad} here); the eps is then shared by the V - 2 other "
            "tokens that are not the reference."
        )
    pad_rows = got[~real]
    if not _same(pad_rows, torch.zeros_like(pad_rows)):
        sums = ", ".join(f"{s:.4f}" for s in pad_rows.sum(-1).tolist())
        rows = (~real).nonzero().flatten().tolist()
        raise ExerciseFailed(
            f"the rows whose label is padding (rows {rows}) must be all zeros, so that those "
            f"positions add nothing to the loss; yours sum to {sums}. As a last step: "
            "q[target == pad_idx] = 0."
        )
    _assert_close(got, expected, call)


def _targets_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Read N from target.size(0) and use the vocab_size, pad_idx and "
                            "smoothing arguments.")


def check_smoothed_targets(smoothed_targets_fn: Callable) -> None:
    """Check ``smoothed_targets(target, vocab_size, pad_idx, smoothing) -> (N, vocab_size)``
    against ``annotated.label_smoothing.smoothed_targets``, on the sets of ``TARGET_SIZES``
    (each with two padding labels).

    Diagnoses: an input changed in place, a result that is not a float32 cpu tensor, a wrong
    shape, no smoothing (one-hot), the reference given eps instead of 1 - eps, Szegedy et al.'s
    (PyTorch's) uniform target, eps spread over V or V - 1 tokens, 1 - eps added to the fill
    instead of written, mass on the padding column, padding rows not zeroed, and a padding id,
    an epsilon or a size written into the code.
    """
    name = _function(smoothed_targets_fn, "check_smoothed_targets", "smoothed_targets")
    g = torch.Generator().manual_seed(0)
    _run_on_all_sizes(lambda sizes: _check_targets_once(smoothed_targets_fn, name, sizes, g),
                      TARGET_SIZES, _targets_hint)
    print(
        f"check_smoothed_targets passed: {name} gives 1 - eps to the reference, eps / (V - 2) to "
        "every other token but padding, 0 to padding and an empty row to a padding label, as "
        f"annotated.label_smoothing does, for {len(TARGET_SIZES)} sets of sizes, padding ids and "
        "epsilons."
    )


# ---------------------------------------------------------------- 8.2 label_smoothing_loss


def _q(target: torch.Tensor, V: int, pad: int, reference: float, other: float, add: bool = False,
       pad_column: bool = True, pad_rows: bool = True) -> torch.Tensor:
    """A target distribution, float64, built as a mistake might build it: ``other`` on every
    token, ``reference`` written (or added) at the label, padding column and rows zeroed or not."""
    q = torch.full((target.size(0), V), other, dtype=torch.float64)
    if add:
        q[torch.arange(target.size(0)), target] += reference
    else:
        q[torch.arange(target.size(0)), target] = reference
    if pad_column:
        q[:, pad] = 0.0
    if pad_rows:
        q[target == pad] = 0.0
    return q


def _loss_candidates(z: torch.Tensor, target: torch.Tensor, sizes: dict):
    """(value, message) of the usual wrong losses, in float64, most specific first."""
    V, pad, eps = sizes["vocab_size"], sizes["pad_idx"], sizes["smoothing"]
    N = target.size(0)
    real = target != pad
    n_real = int(real.sum())
    log_p = z.log_softmax(-1)
    q = smoothed_targets(target, V, pad, eps, torch.float64)
    right = -(q * log_p).sum()
    H_row = -(1 - eps) * math.log(1 - eps) - eps * math.log(eps / (V - 2))  # H(q) of a real row
    s = eps * V / (V - 2)

    targets = [
        (q, ""),
        (_q(target, V, pad, 1 - eps, eps / (V - 2), pad_column=False),
         "your target gives the padding token eps / (V - 2) (q[:, pad_idx] = 0 is missing)"),
        (_q(target, V, pad, 1 - eps, eps / (V - 2), pad_rows=False),
         "the positions whose label is padding count in your loss (their rows of q must be zero: "
         "q[target == pad_idx] = 0)"),
        (_q(target, V, pad, 1 - eps, eps / (V - 2), pad_column=False, pad_rows=False),
         "your target gives padding eps / (V - 2), and positions whose label is padding count "
         "(q[:, pad_idx] = 0 and q[target == pad_idx] = 0 are missing)"),
        (_q(target, V, pad, 1 - eps, eps / V, add=True, pad_column=False),
         f"this is PyTorch's F.cross_entropy(label_smoothing={eps}, ignore_index=pad_idx): "
         "Szegedy et al.'s target, eps / V on every token, padding and reference included. The "
         "course spreads eps over V - 2 tokens; the exact relation is LabelSmoothingLoss(eps) = "
         f"F.cross_entropy(label_smoothing=eps V / (V - 2) = {s:.4f}) + eps / (V - 2) times the "
         "sum over real positions of (logit of padding - logit of the label) (notebook 08, "
         "section 5). Build q yourself (exercise 8.1) and take -(q * log_softmax(logits)).sum()"),
        (_q(target, V, pad, 1 - eps, eps / V, add=True, pad_column=False, pad_rows=False),
         f"this is PyTorch's F.cross_entropy(label_smoothing={eps}) without ignore_index: "
         "Szegedy et al.'s target (eps / V on every token) and the padding positions counted"),
        (_q(target, V, pad, 1 - s, s / V, add=True, pad_column=False),
         f"this is F.cross_entropy(label_smoothing={s:.4f}, ignore_index=pad_idx), with the "
         "right s = eps V / (V - 2) but without the correction eps / (V - 2) * sum of (logit of "
         "padding - logit of the label) over the real positions: its target still gives padding "
         "some mass and the reference less than 1 - eps"),
        (_q(target, V, pad, 1 - eps, eps / V),
         f"you spread eps over V = {V} tokens; only the V - 2 that are neither the reference "
         "nor padding share it (eps / (V - 2) each)"),
        (_q(target, V, pad, 1 - eps, eps / (V - 1), pad_column=False),
         "you spread eps over the V - 1 tokens other than the reference, padding included; "
         "padding gets 0 and the V - 2 others eps / (V - 2) each"),
        (_q(target, V, pad, eps, (1 - eps) / (V - 2)),
         f"the reference gets eps = {eps} and the others share 1 - eps: swapped, the reference "
         "keeps 1 - eps"),
        (_q(target, V, pad, 1 - eps, eps / (V - 2), add=True),
         "the reference gets 1 - eps + eps / (V - 2): 1 - eps was added to the fill instead of "
         "written over it"),
        (_q(target, V, pad, 1.0, 0.0), f"no smoothing: your loss is the plain cross-entropy, "
         f"but smoothing = {eps}"),
    ]
    reductions = [
        (1, ""),
        (n_real, f"you divided by the {n_real} real positions: return the sum; the training loop "
                 "divides by the tokens of the whole batch (or group of accumulated batches), "
                 "Batch.ntokens"),
        (N, f"you took the mean over all {N} positions, padding included: return the sum"),
        (N * V, f"you took the mean over all {N} x {V} entries (.mean() of q * log p, or "
                "F.kl_div's default): return the sum"),
    ]
    for q_wrong, what in targets:
        loss = -(q_wrong * log_p).sum()
        for divisor, how in reductions:
            if what or how:
                yield loss / divisor, "; and ".join(m for m in (what, how) if m) + "."
    yield right - n_real * H_row, (
        f"this is the KL divergence KL(q || p) = H(q, p) - H(q): it is below the course's loss by "
        f"H(q) = {H_row:.4f} per real position ({n_real} here). It has the same gradients, but the "
        "course's loss is the cross-entropy H(q, p) = -(q * log_softmax(logits)).sum(), whose "
        "floor is H(q) (notebook 08, section 5); F.kl_div(log_p, q) is the KL.")
    yield -right, "the sign is flipped: the loss is -(q * log p).sum(), a positive number."
    yield -(q * z.log_softmax(0)).sum(), (
        "log_softmax over the positions (dim=0): each position's distribution is over the "
        "tokens, the last dimension: log_softmax(logits, dim=-1).")
    yield -(q * z.softmax(-1)).sum(), (
        "you multiplied q by the probabilities, not by their log: the loss is "
        "-(q * log_softmax(logits, dim=-1)).sum().")
    yield -(q * z).sum(), (
        "you multiplied q by the logits themselves: logits are not log-probabilities; take "
        "log_softmax(logits, dim=-1) first.")
    for other in range(V):
        if other != pad:
            wrong = -(smoothed_targets(target, V, other, eps, torch.float64) * log_p).sum()
            yield wrong, (f"your loss treats token {other} as padding, but this call has "
                          f"pad_idx={pad}: is the padding id written into your code? Use the "
                          "pad_idx argument.")
    for wrong_eps in (0.1, 0.2, 0.25, 0.3, 0.05, 0.01):
        if not math.isclose(wrong_eps, eps):
            wrong = -(smoothed_targets(target, V, pad, wrong_eps, torch.float64) * log_p).sum()
            yield wrong, (f"your loss is that of smoothing = {wrong_eps}, but this call has "
                          f"smoothing = {eps}: is epsilon written into your code? Use the "
                          "smoothing argument.")


def _course_loss(z: torch.Tensor, target: torch.Tensor, sizes: dict) -> torch.Tensor:
    """The course's loss; in float64, checked against PyTorch's two ways of writing it."""
    V, pad, eps = sizes["vocab_size"], sizes["pad_idx"], sizes["smoothing"]
    ours = LabelSmoothingLoss(V, pad, eps)(z, target)
    if z.dtype == torch.float64:
        soft = F.cross_entropy(z, smoothed_targets(target, V, pad, eps, z.dtype), reduction="sum")
        builtin = F.cross_entropy(z, target, label_smoothing=eps * V / (V - 2), ignore_index=pad,
                                  reduction="sum")
        real = target != pad
        correction = eps / (V - 2) * (z[real, pad] - z[real, target[real]]).sum()
        # A plain comparison: torch.testing's first call imports sympy, a second or more.
        if not (_same(ours, soft, atol=1e-9) and _same(ours, builtin + correction, atol=1e-9)):
            raise RuntimeError(f"LabelSmoothingLoss gives {ours.item()}, F.cross_entropy with the "
                               f"soft target {soft.item()} and with the exact relation "
                               f"{(builtin + correction).item()}: the course's loss has changed")
    return ours


def _call_loss(fn: Callable, name: str, call: str, logits: torch.Tensor, target: torch.Tensor,
               sizes: dict) -> torch.Tensor:
    result = _call(fn, logits, target, sizes["pad_idx"], sizes["smoothing"],
                   roles=("logits", "target", "pad_idx", "smoothing"))
    got = _tensor(result, name, "the loss", like=logits)
    N, V = logits.shape
    hints = {
        (N,): " You return one loss per position: sum them too (.sum() of everything).",
        (N, V): " You return q * log p itself: the loss is minus its sum over positions and "
                "tokens.",
        (1,): " Return a 0-dimensional tensor (.sum() gives one), not a tensor of one element.",
    }
    _shape(got, (), f"{call}, a scalar", hints.get(tuple(got.shape), ""))
    return got


def _check_loss_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    N, V, pad, eps = sizes["N"], sizes["vocab_size"], sizes["pad_idx"], sizes["smoothing"]
    target = _labels(sizes, g)
    call = (f"{name}(logits of shape ({N}, {V}), target of shape ({N},), pad_idx={pad}, "
            f"smoothing={eps})")

    # 1. Ordinary logits, which carry gradients as the model's do.
    logits = (torch.randn(N, V, generator=g) * 2).requires_grad_()
    expected = _course_loss(logits.detach(), target, sizes)
    _course_loss(logits.detach().double(), target, sizes)  # the course equals PyTorch's, exactly
    got = _call_loss(fn, name, call, logits, target, sizes)
    if not _same(got.detach(), expected, atol=1e-4):
        for candidate, message in _loss_candidates(logits.detach().double(), target, sizes):
            if _same(got.detach(), candidate, atol=1e-4):
                raise ExerciseFailed(f"{name} returned {got.item():.4f}, the course's loss is "
                                     f"{expected.item():.4f}: {message}")
        _assert_close(got.detach(), expected, call, atol=1e-4)
    if not got.requires_grad or got.grad_fn is None:
        raise ExerciseFailed(
            f"{name}'s loss has the right value but carries no gradient: training calls "
            "loss.backward(), which needs the loss computed from the logits by torch operations. "
            "Look for .item(), .tolist(), .detach(), torch.tensor(...) of a number, or a "
            "torch.no_grad() block."
        )
    (grad,) = torch.autograd.grad(got, logits)
    reference = logits.detach().clone().requires_grad_()
    (expected_grad,) = torch.autograd.grad(_course_loss(reference, target, sizes), reference)
    if not _same(grad, expected_grad):  # only then: _assert_close's torch.testing is slow to import
        _assert_close(grad, expected_grad, f"the gradient of {name}'s loss for the logits")

    # 2. Logits hundreds apart: exp underflows to 0 for most tokens, so log(softmax) is -inf.
    wide = torch.randn(N, V, generator=g) * 150
    expected = _course_loss(wide, target, sizes)
    got = _call_loss(fn, name, call, wide, target, sizes).detach()
    if not got.isfinite() or not _same(got, expected, atol=1e-3):
        shown = f"{got.item():.4g}" if got.isfinite() else str(got.item())
        raise ExerciseFailed(
            f"with logits hundreds apart (as a confident model's are) {name} returned {shown}, the "
            f"course's loss is {expected.item():.4f}: log(softmax(logits)) underflows. A "
            "probability below about 1.4e-45 (e^-103.3, the smallest float32) is 0, so its log "
            "is -inf (or, with a small number added, far too small), and 0 * -inf is NaN. Use "
            "F.log_softmax(logits, dim=-1) (or logits - logits.logsumexp(-1, keepdim=True)), "
            "which never takes the log of an exponential."
        )


def _loss_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Read N and V from logits.shape and use the pad_idx and smoothing "
                            "arguments.")


def check_label_smoothing_loss(label_smoothing_loss: Callable) -> None:
    """Check ``label_smoothing_loss(logits, target, pad_idx, smoothing)``, the label-smoothed
    cross-entropy summed over positions, against ``annotated.label_smoothing.LabelSmoothingLoss``
    (itself checked, in float64, against ``F.cross_entropy`` with the soft target q, and with
    ``label_smoothing = eps V / (V - 2)`` plus the padding correction), on ``LOSS_SIZES``:
    ordinary logits, whose gradient is compared too, and logits hundreds apart.

    Diagnoses: an input changed in place, a result that is not a 0-d tensor of the logits'
    dtype (a loss per position, q * log p itself), the mistakes of exercise 8.1 seen through
    the loss, PyTorch's ``label_smoothing`` convention (with or without ``ignore_index``, with
    eps or with eps V / (V - 2) without the correction), no smoothing, a mean instead of the
    sum, KL instead of cross-entropy, the sign, log_softmax over the wrong dimension, no log,
    raw logits, a padding id or epsilon written into the code, no gradient, and log(softmax)
    that underflows.
    """
    name = _function(label_smoothing_loss, "check_label_smoothing_loss", "label_smoothing_loss")
    g = torch.Generator().manual_seed(1)
    _run_on_all_sizes(lambda sizes: _check_loss_once(label_smoothing_loss, name, sizes, g),
                      LOSS_SIZES, _loss_hint)
    print(
        f"check_label_smoothing_loss passed: {name} sums -q log p over the positions as "
        "annotated.label_smoothing.LabelSmoothingLoss does (which equals F.cross_entropy with "
        "label_smoothing = eps V / (V - 2) plus the padding correction), with its gradient, and "
        f"stays finite for logits hundreds apart, for {len(LOSS_SIZES)} sets of sizes."
    )


# ---------------------------------------------------------------- 8.3 rate


def _steps(warmup: int) -> list[int]:
    """Steps from 1 on: the first updates, around the peak, and far into the decay."""
    return sorted({1, 2, 3, warmup // 2, warmup - 1, warmup, warmup + 1, 2 * warmup, 4 * warmup,
                   10 * warmup, 37 * warmup + 5})


def _number(result, name: str, call: str) -> float:
    """A learning rate must be a finite real Python number, as LambdaLR expects."""
    if torch.is_tensor(result):
        raise ExerciseFailed(
            f"{call} returned a tensor; return a Python float (LambdaLR multiplies the base rate "
            "by it, and Adam keeps it as its lr): compute with ** and min, or math.sqrt, on the "
            "integers you are given, not with torch."
        )
    if result is None:
        raise ExerciseFailed(f"{call} returned None: did you forget the `return`?")
    if isinstance(result, bool) or not isinstance(result, numbers.Real):
        raise ExerciseFailed(f"{call} should return the learning rate as a float, got "
                             f"{type(result).__name__}")
    value = float(result)
    if not math.isfinite(value):
        raise ExerciseFailed(f"{call} returned {value}: a learning rate must be a finite number.")
    return value


def _rate_mistake(got: list[float], steps: list[int], d: int, w: int) -> str | None:
    peak = (d * w) ** -0.5
    formulas = [
        (lambda s: min(s**-0.5, s * w**-1.5),
         f"the factor d_model^-0.5 is missing: your rates are sqrt(d_model) = {d**0.5:.4g} times "
         f"too large (peak {w**-0.5:.6f} instead of (d_model * warmup)^-0.5 = {peak:.6f}). "
         "Multiply by d_model ** -0.5: wider models take smaller steps."),
        (lambda s: d**0.5 * min(s**-0.5, s * w**-1.5),
         f"you multiplied by d_model^0.5 instead of d_model^-0.5: the peak is "
         f"{d**0.5 * w**-0.5:.4f} instead of {peak:.6f}. The exponent is negative: "
         "d_model ** -0.5."),
        (lambda s: d**-1 * min(s**-0.5, s * w**-1.5),
         f"you multiplied by d_model^-1 instead of d_model^-0.5: the peak is {w**-0.5 / d:.3g} "
         f"instead of {peak:.6f}."),
        (lambda s: d**-0.5 * min(s**-0.5, s * w**-0.5),
         f"the warm-up branch has warmup^-0.5 where the paper has warmup^-1.5: your rate rises as "
         f"step / sqrt(warmup), meets the decay at step warmup^(1/3) = {w ** (1 / 3):.1f} instead "
         f"of step {w}, and peaks at {d**-0.5 * w ** (-1 / 6):.6f} instead of {peak:.6f}."),
        (lambda s: d**-0.5 * min(s**-0.5, s * w**-1),
         f"the warm-up branch has warmup^-1 where the paper has warmup^-1.5: the two branches "
         f"then meet at step warmup^(2/3) = {w ** (2 / 3):.1f}, not at step {w}."),
        (lambda s: d**-0.5 * max(s**-0.5, s * w**-1.5),
         "max instead of min: your rate starts at its largest, falls until step = warmup and then "
         "grows without bound (the linear branch). The paper takes the min: the smaller of the "
         "two branches, the rise before the peak, the decay after it."),
        (lambda s: d**-0.5 * s**-0.5,
         "there is no warm-up: your rate is d_model^-0.5 * step^-0.5 from step 1, its largest "
         f"({d**-0.5:.4f}) at the very first update. The min with step * warmup^-1.5 makes it "
         "rise linearly for the first warmup steps (with warmup^1.5 instead of warmup^-1.5 that "
         "branch is huge and the min never takes it)."),
        (lambda s: d**-0.5 * s * w**-1.5,
         "your rate rises linearly forever: the decay step^-0.5 never takes over (is it missing, "
         "or written step^0.5?). The min of the two branches makes the rate fall as "
         "1/sqrt(step) after the peak at step = warmup."),
        (lambda s: d**-0.5 * min((s + 1) ** -0.5, (s + 1) * w**-1.5),
         "your rates are one step ahead: rate(step) gives the paper's value for step + 1. The "
         "paper counts steps from 1, and so does the course's rate: make_optimizer passes k + 1 "
         "to it for LambdaLR's count k, which starts at 0. Compute the formula at step itself."),
        (lambda s: d**-0.5 * min(max(s - 1, 1) ** -0.5, max(s - 1, 1) * w**-1.5),
         "your rates are one step behind: rate(step) gives the paper's value for step - 1. The "
         "course's rate takes the update number counted from 1, as the paper does; make_optimizer "
         "already passes k + 1 for LambdaLR's count k."),
    ]
    for formula, message in formulas:
        if all(_near(x, formula(s)) for x, s in zip(got, steps)):
            return message
    # A d_model or warmup written into the code: fit it, then test the whole curve with it.
    late = steps[-1]
    d_fit = (got[-1] * late**0.5) ** -2  # past the peak: d^-0.5 step^-0.5
    w_fit = (got[0] * d**0.5) ** (-2 / 3)  # step 1 (warmup > 1): d^-0.5 w^-1.5
    fits = [(d_fit, w, "d_model", d_fit, d), (d, w_fit, "warmup", w_fit, w)]
    for d_try, w_try, what, value, actual in fits:
        if (value >= 2 and abs(value - round(value)) < 1e-3 * value and round(value) != actual
                and all(_near(x, rate(s, round(d_try), round(w_try))) for x, s in zip(got, steps))):
            return (f"your rates are those of {what} = {round(value)}, but this call has {what} = "
                    f"{actual}: is {what} written into your code? Use the argument.")
    return None


def _check_rate_once(fn: Callable, name: str, sizes: dict) -> None:
    d, w = sizes["d_model"], sizes["warmup"]
    steps = _steps(w)
    roles = ("step", "d_model", "warmup")
    got = [_number(_call(fn, s, d, w, roles=roles), name, f"{name}({s}, d_model={d}, warmup={w})")
           for s in steps]
    expected = [rate(s, d, w) for s in steps]
    bad = [i for i, (x, e) in enumerate(zip(got, expected)) if not _near(x, e)]
    if bad:
        message = _rate_mistake(got, steps, d, w)
        if message:
            raise ExerciseFailed(message)
        i = bad[0]
        raise _generic(
            f"{name}({steps[i]}, d_model={d}, warmup={w}) returned {got[i]:.6g}, the paper's "
            f"formula gives {expected[i]:.6g} (wrong at {len(bad)} of the {len(steps)} steps "
            f"tried, {', '.join(str(steps[j]) for j in bad[:5])}{', ...' if len(bad) > 5 else ''})."
        )
    # Step 0: LambdaLR's first call, before any update; the course treats it as step 1.
    call = f"{name}(0, d_model={d}, warmup={w})"
    try:
        result = _call(fn, 0, d, w, roles=roles)
    except ExerciseFailed as err:
        if isinstance(err.__cause__, (ZeroDivisionError, ValueError, OverflowError)):
            raise ExerciseFailed(
                f"{call} raised {type(err.__cause__).__name__}: {err.__cause__}: at step 0 the "
                "formula's step^-0.5 divides by zero. The paper counts steps from 1; the course's "
                "rate treats step 0 as step 1 (step = max(step, 1)), so that a scheduler which "
                "asks for step 0 gets a usable rate."
            ) from None
        raise
    if isinstance(result, numbers.Real) and not math.isfinite(result):
        raise ExerciseFailed(
            f"{call} returned {float(result)}: at step 0 the formula's step^-0.5 divides by zero. "
            "The paper counts steps from 1; the course's rate treats step 0 as step 1 "
            "(step = max(step, 1))."
        )
    zero = _number(result, name, call)
    if not _near(zero, expected[0]):
        raise ExerciseFailed(
            f"{call} returned {zero:.6g}; the course treats step 0 as step 1 "
            f"(step = max(step, 1)), so it should be rate(1) = {expected[0]:.6g}. A rate of 0 "
            "there would waste the first update (LambdaLR asks for step 0 before it), and "
            "step^-0.5 at 0 divides by zero."
        )


def _rate_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message, "Use the d_model and warmup arguments.")


def check_rate(rate_fn: Callable) -> None:
    """Check ``rate(step, d_model, warmup) -> float`` against ``annotated.schedule.rate`` (the
    formula of §5.3) at steps from 1 to far past the peak, and at step 0, for the settings of
    ``RATE_SIZES``.

    Diagnoses: a result that is not a finite Python number (a tensor named), the factor
    d_model^-0.5 missing, or with the exponent 0.5 or -1, warmup^-0.5, ^-1 or ^1.5 in the
    warm-up branch, max instead of min, only one of the two branches, step^0.5 in the decay,
    steps counted one ahead or one behind, a d_model or warmup written into the code, and
    step 0 dividing by zero or giving another rate than step 1.
    """
    name = _function(rate_fn, "check_rate", "rate")
    _run_on_all_sizes(lambda sizes: _check_rate_once(rate_fn, name, sizes), RATE_SIZES, _rate_hint)
    settings = ", ".join(f"({s['d_model']}, {s['warmup']})" for s in RATE_SIZES)
    print(
        f"check_rate passed: {name} rises linearly to (d_model * warmup)^-0.5 at step = warmup "
        f"and decays as step^-0.5 after it, as annotated.schedule.rate does, for (d_model, warmup) "
        f"= {settings}, and treats step 0 as step 1."
    )


# ---------------------------------------------------------------- 8.4 teacher_forcing_loss


def _teacher_batch(sizes: dict, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """src (batch, L_src) and tgt (batch, L_tgt) = <s> y_1 .. y_n </s>, right-padded; sentence 0
    is the longest on both sides, the others shorter (every sentence length differs)."""
    batch, L_src, L_tgt, V, pad = (sizes[k] for k in ("batch", "L_src", "L_tgt", "vocab",
                                                      "pad_idx"))
    bos, eos = (pad + 1) % V, (pad + 2) % V
    symbols = torch.tensor([t for t in range(V) if t not in (pad, bos, eos)])
    src = torch.full((batch, L_src), pad)
    tgt = torch.full((batch, L_tgt), pad)
    for i in range(batch):
        n_src = max(2, L_src - i)
        n_tgt = max(1, L_tgt - 2 - 2 * i)  # symbols between <s> and </s>
        src[i, :n_src] = symbols[torch.randint(len(symbols), (n_src,), generator=g)]
        middle = symbols[torch.randint(len(symbols), (n_tgt,), generator=g)]
        tgt[i, : n_tgt + 2] = torch.cat([torch.tensor([bos]), middle, torch.tensor([eos])])
    return src, tgt


class _SmallModel(EncoderDecoder):
    """The check's model, named in one line where a message shows the arguments of a call."""

    def __repr__(self) -> str:
        return "model"


def _teacher_model(sizes: dict) -> EncoderDecoder:
    """A small model without dropout, built without touching the caller's random state."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        config = TransformerConfig(sizes["vocab"], sizes["vocab"], N=1, d_model=16, d_ff=24, h=2,
                                   dropout=0.0)
        model = make_model(config)
    model.__class__ = _SmallModel
    return model


def _teacher_candidates(model, src, tgt, pad, loss_fn):
    """(value, message) of the usual wrong losses per token."""
    batch = tgt.size(0)
    src_mask = padding_mask(src, pad)

    def summed(tgt_in, tgt_y, src_mask, tgt_mask, src=src):
        logits = model(src, tgt_in, src_mask, tgt_mask)
        return loss_fn(logits.flatten(0, 1), tgt_y.flatten())

    tgt_in, tgt_y = tgt[:, :-1], tgt[:, 1:]
    L = tgt_in.size(1)
    ntokens = int((tgt_y != pad).sum())
    structures = [
        (tgt_y, lambda: summed(tgt_in, tgt_y, src_mask, target_mask(tgt_in, pad)), ""),
        (tgt_in, lambda: summed(tgt_in, tgt_in, src_mask, target_mask(tgt_in, pad)),
         "the labels are not shifted: your decoder reads tgt[:, :-1] and is asked to predict the "
         "same tokens, so position t sees its own answer. The labels are the target shifted left, "
         "tgt_y = tgt[:, 1:]: at each position, the next token"),
        (tgt, lambda: summed(tgt, tgt, src_mask, target_mask(tgt, pad)),
         "nothing is shifted: the decoder reads the whole target and must predict it, each "
         "position its own token, which it sees. Read tgt_in = tgt[:, :-1], predict "
         "tgt_y = tgt[:, 1:]"),
        (tgt_y, lambda: summed(tgt_y, tgt_y, src_mask, target_mask(tgt_y, pad)),
         "the decoder reads its own labels, tgt[:, 1:]: position t sees the token it must predict. "
         "The decoder reads tgt_in = tgt[:, :-1] (from <s>) and predicts tgt_y = tgt[:, 1:]"),
        (tgt_in, lambda: summed(tgt_y, tgt_in, src_mask, target_mask(tgt_y, pad)),
         "the shift goes the wrong way: the decoder reads tgt[:, 1:] and predicts tgt[:, :-1], the "
         "token before. It reads tgt_in = tgt[:, :-1] (from <s>) and predicts the next one, "
         "tgt_y = tgt[:, 1:]"),
        (tgt_y, lambda: summed(tgt_in, tgt_y, src_mask, padding_mask(tgt_in, pad)),
         "the target mask has no look-ahead part: with the padding mask alone, position t attends "
         "to the later tokens, among them its own label. Use target_mask(tgt_in, pad_idx), the "
         "padding mask and subsequent_mask together"),
        (tgt_y, lambda: summed(tgt_in, tgt_y, None, target_mask(tgt_in, pad)),
         "the source mask is missing: the decoder's cross-attention reads the source's padding "
         "(and so does the encoder). Pass src_mask = padding_mask(src, pad_idx)"),
        (tgt_y, lambda: summed(tgt_in, tgt_y, src_mask, subsequent_mask(L).unsqueeze(0)),
         ""),  # without the target padding mask: the same loss (padding only ever follows)
        (tgt_y, lambda: summed(tgt_in, tgt_y, None, None),
         "no masks at all: the decoder sees the tokens it must predict and the source's padding. "
         "Pass src_mask = padding_mask(src, pad_idx) and tgt_mask = target_mask(tgt_in, pad_idx)"),
    ]
    divisors = [
        (ntokens, ""),
        (1, "you returned the summed loss: divide it by the number of real label tokens, "
            f"(tgt_y != pad_idx).sum() = {ntokens} here, to get the loss per token"),
        (batch * L, f"you divided by all {batch * L} label positions, padding included: divide by "
                    f"the real label tokens, (tgt_y != pad_idx).sum() = {ntokens} here (a batch "
                    "with more padding would otherwise get a smaller loss)"),
        (batch, f"you divided by the {batch} sentences: divide by the real label tokens, "
                f"(tgt_y != pad_idx).sum() = {ntokens} here, so that long and short sentences "
                "count per token"),
        (int((tgt != pad).sum()), "you divided by the real tokens of the whole target, <s> "
         f"included ({int((tgt != pad).sum())}); <s> is never a label: count the labels, "
         f"(tgt_y != pad_idx).sum() = {ntokens}"),
        (int((tgt_in != pad).sum()), "you counted the decoder's input tokens "
         f"((tgt_in != pad_idx).sum() = {int((tgt_in != pad).sum())}) instead of the labels; the "
         f"loss is summed over the labels: (tgt_y != pad_idx).sum() = {ntokens}"),
    ]
    for labels, summed_loss, what in structures:  # each computed only if those before did not fit
        value = summed_loss()
        # Dividing by the real tokens of its own labels is no further mistake.
        natural = int((labels != pad).sum())
        for divisor, how in [(natural, "")] + [(d, m) for d, m in divisors if d != natural]:
            if what or how:
                yield value / divisor, "; and ".join(m for m in (what, how) if m) + "."
    # The mean of per-sentence means (the gradient-accumulation mistake, inside one batch).
    per_sentence = [summed(tgt_in[i : i + 1], tgt_y[i : i + 1], src_mask[i : i + 1],
                           target_mask(tgt_in[i : i + 1], pad), src[i : i + 1])
                    / int((tgt_y[i] != pad).sum())
                    for i in range(batch)]
    yield sum(per_sentence) / batch, (
        "you averaged the sentences' losses per token: a token of a short sentence then weighs "
        "more than one of a long sentence. Sum the loss over every label token of the batch and "
        "divide once, by their number (tgt_y != pad_idx).sum(), as notebook 08's accumulation "
        "check shows.")
    logits = model(src, tgt_in, src_mask, target_mask(tgt_in, pad)).flatten(0, 1)
    for smoothing in (0.0, 0.1):
        builtin = F.cross_entropy(logits, tgt_y.flatten(), ignore_index=pad,
                                  label_smoothing=smoothing)
        yield builtin, (
            f"this is F.cross_entropy(logits, labels, ignore_index=pad_idx, label_smoothing="
            f"{smoothing}), not the loss you were given: call loss_fn(logits, labels), the "
            "course's LabelSmoothingLoss (its smoothing spreads eps over V - 2 tokens, PyTorch's "
            "over V), and divide its sum by the number of label tokens.")


def _check_teacher_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    batch, L_src, L_tgt, V, pad = (sizes[k] for k in ("batch", "L_src", "L_tgt", "vocab",
                                                      "pad_idx"))
    src, tgt = _teacher_batch(sizes, g)
    model = _teacher_model(sizes)
    # The loss behind its checks: a student's wrong shapes get its one-line error, not PyTorch's.
    loss_fn = guarded_training.LabelSmoothingLoss(V, pad, 0.1)
    # The course's: Batch does the shift and the masks; the summed loss over its ntokens.
    b = Batch(src, tgt, pad)
    with torch.no_grad():
        expected = loss_fn(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask).flatten(0, 1),
                           b.tgt_y.flatten()) / b.ntokens
        course = evaluate_loss(model, [b], loss_fn)
        if not math.isclose(expected.item(), course, rel_tol=1e-5):
            raise RuntimeError(f"Batch and the summed loss give {expected.item()}, evaluate_loss "
                               f"{course}: the course's training code has changed")
    model.train()
    call = (f"{name}(model, src of shape ({batch}, {L_src}), tgt of shape ({batch}, {L_tgt}), "
            f"pad_idx={pad}, loss_fn)")
    roles = ("model", "src", "tgt", "pad_idx", "loss_fn")
    result = _call(fn, model, src, tgt, pad, loss_fn, roles=roles,
                   hints=((r"does not fit logits",
                           "\nHint: the decoder reads tgt[:, :-1] and its labels are tgt[:, 1:]: "
                           "both have L_tgt - 1 positions, so the logits and the labels fit."),))
    got = _tensor(result, name, "the loss")
    hint = (" Return one number for the batch: the summed loss divided by the label tokens."
            if got.dim() else "")
    _shape(got, (), f"{call}, a scalar", hint)
    if not _same(got.detach(), expected, atol=1e-4):
        with torch.no_grad():
            for candidate, message in _teacher_candidates(model, src, tgt, pad, loss_fn):
                if _same(got.detach(), candidate, atol=1e-4):
                    raise ExerciseFailed(f"{name} returned {got.item():.4f}, the course's loss per "
                                         f"token is {expected.item():.4f}: {message}")
            # The course's special ids, <pad> <s> </s> <unk>, are the likely ones written in.
            for other in sorted({0, 1, 2, 3} - {pad}):
                if other < V:
                    wrong = Batch(src, tgt, other)
                    value = loss_fn(model(wrong.src, wrong.tgt_in, wrong.src_mask, wrong.tgt_mask)
                                    .flatten(0, 1), wrong.tgt_y.flatten()) / max(wrong.ntokens, 1)
                    if _same(got.detach(), value, atol=1e-4):
                        raise ExerciseFailed(
                            f"your masks and token count treat token {other} as padding, but this "
                            f"call has pad_idx={pad}: is the padding id written into your code? "
                            "Use the pad_idx argument.")
        _assert_close(got.detach(), expected, call, atol=1e-4)
    if not got.requires_grad or got.grad_fn is None:
        raise ExerciseFailed(
            f"{name}'s loss has the right value but carries no gradient: training calls "
            "backward() on it. Look for .item(), .detach(), torch.tensor(...) of a number or a "
            "torch.no_grad() block."
        )


def _teacher_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message,
                            "Read the lengths from the tensors' shapes and use the pad_idx "
                            "argument.")


def check_teacher_forcing_loss(teacher_forcing_loss: Callable) -> None:
    """Check ``teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn)``, the loss per target
    token of one batch, against ``annotated.batching.Batch`` with the summed loss over its
    ``ntokens`` (itself checked against ``annotated.training.evaluate_loss``), with a small
    model without dropout, on the batches of ``TEACHER_SIZES`` (sentences of different
    lengths, so both sides have padding).

    Diagnoses: an input changed in place, a result that is not a scalar float tensor, labels
    not shifted, nothing shifted, the decoder reading its labels, the shift the wrong way, no
    look-ahead mask, no source mask, no masks, the sum or a division by the positions, the
    sentences, the target's or the input's tokens, the mean of per-sentence means,
    ``F.cross_entropy`` instead of the given loss, a padding id written into the code, and a
    loss without gradient.
    """
    name = _function(teacher_forcing_loss, "check_teacher_forcing_loss", "teacher_forcing_loss")
    g = torch.Generator().manual_seed(2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small runs faster on one thread, above all when busy
    try:
        _run_on_all_sizes(lambda sizes: _check_teacher_once(teacher_forcing_loss, name, sizes, g),
                          TEACHER_SIZES, _teacher_hint)
    finally:
        torch.set_num_threads(threads)
    print(
        f"check_teacher_forcing_loss passed: {name} feeds the decoder tgt[:, :-1] under the target "
        "mask, scores tgt[:, 1:] and divides the summed loss by the real label tokens, as Batch "
        f"and evaluate_loss do, for {len(TEACHER_SIZES)} batches with padding on both sides."
    )
