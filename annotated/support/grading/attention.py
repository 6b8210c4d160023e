"""Checks of notebook 02 as declarations (``engine``): scaled dot-product attention (2.1), the same with
loops (2.2) and the hard lookup it becomes when one score dominates (2.3), against ``annotated.attention``."""

import math
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.support.grading.core import ExerciseFailed, _hard_coded_hint, _rows
from annotated.support.grading.engine import Declaration, Items, Mistake, Probe, Tensor, _equal, check

# Two 3-D sets (batch, L, d) and a 4-D one (batch, h, L, d); d_k is never 4 and changes between sets.
ATTENTION_SIZES = [dict(lead=(2,), L_q=3, L_k=5, d_k=6, d_v=7), dict(lead=(3,), L_q=7, L_k=4, d_k=10, d_v=5),
                   dict(lead=(4, 5), L_q=2, L_k=6, d_k=9, d_v=3)]  # lead = (batch, h)
# One sequence, (L, d), for the attention written with loops over its queries and keys.
LOOP_SIZES = [dict(L_q=3, L_k=5, d_k=6, d_v=2), dict(L_q=5, L_k=2, d_k=7, d_v=3)]
SIZE_SETS = {"check_attention": ATTENTION_SIZES, "check_attention_loops": LOOP_SIZES,
             "check_hard_lookup": ATTENTION_SIZES}
OTHER_DEVICE: str | None = "cuda" if torch.cuda.is_available() else None  # 'meta' for the grader
LOW_D_K = 16  # the d_k of the scaled scores about -3e4: its sqrt and 1/sqrt are exact in float32

# The errors of a matrix product whose shapes do not fit: what query @ key.T gives.
_MATMUL_ERROR = (r"must match the size of tensor|cannot be multiplied|Expected size for first two"
                 r"|size mismatch|mat1 and mat2|\bx\.T\b")
_TRANSPOSE_HINT = ("\nHint: the scores query @ key^T swap the last two dimensions of the key: "
                   "key.transpose(-2, -1), not key.transpose(1, 2) (3-D only) or key.T (reverses all of them).")
_KEY_T = ("you used .T on a tensor with more than two dimensions (key.T?): it reverses all of them, (batch, L_k, d_k) "
          "becomes (d_k, L_k, batch). Swap the last two only: key.transpose(-2, -1) (or key.mT).")
_NO_SHIFT = ("exp(300) overflows float32, and inf / inf is NaN: is your softmax written without subtracting the "
             "maximum? Use scores.softmax(dim=-1), or subtract scores.amax(dim=-1, keepdim=True) first.")
_UNDERFLOW = ("exp of scores that far below zero is 0 for every key, and 0 / 0 is NaN: is the maximum subtracted "
              "only when the scores are large, or not at all? Subtract each row's maximum always.")
_TRANSPOSED = "Your weights are transposed: one row per query, one column per key: query @ key.transpose(-2, -1)."
_ZERO = "The course gives such a query zero weights: after the softmax, weights.masked_fill(~mask, 0.0)."
_PICK = ("index = (query @ key.transpose(-2, -1)).argmax(dim=-1), then that row of value (torch.gather(value, -2, "
         "index.unsqueeze(-1).expand(*index.shape, d_v)), or F.one_hot(index, L_k).to(value.dtype) @ value).")
_INDEX_HINT = ("\nHint: value[index] indexes the first dimension of value, the batch, not the keys. Pick along "
               "dimension -2: torch.gather or F.one_hot, as in " + _PICK)
_WHERE = {"cpu": ("the inputs are on {device}: build every tensor where the inputs are, with no .cuda() or "
                  ".to(...), and device=x.device (an input's) for a tensor you create.")}
_PAIR = Items((Tensor("the output", label="the output weights @ value", precision="float32", device_text=_WHERE),
               Tensor("the weights", precision="float32", device_text=_WHERE)), what="a pair (output, weights)",
              again_what="the output and weights")


def _call_attention(attention: Callable, *args):
    """Call ``attention``, naming ``key.T`` on a key of more than two dimensions from torch's warning, even where
    the shapes happen to fit."""
    was = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # torch warns about x.T once per process otherwise
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return attention(*args)
            finally:  # the warning is named before any exception it led to
                if any("x.T" in str(w.message) for w in caught):
                    raise ExerciseFailed(_KEY_T)
    finally:
        torch.set_warn_always(was)


def _scores(q, k, scale=None, fill=float("-inf"), mask=None):
    """query @ key^T / scale (sqrt(d_k) unless given), masked with ``fill`` where the mask is False."""
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale is None else scale)
    return scores if mask is None else scores.masked_fill(~mask, fill)


def _unshifted(scores):  # a softmax without the maximum subtracted
    return scores.exp() / scores.exp().sum(-1, keepdim=True)


def _attention(fill=float("-inf"), scale=None, normalize=lambda s: s.softmax(-1), after=None, output=None):
    """The course's attention with one thing changed (a known mistake's answer): the masked scores' ``fill``, the
    ``scale`` (sqrt(d_k)), ``normalize`` (scores -> weights), ``after`` (weights, mask -> the weights, the scores
    left unmasked) or ``output`` (value -> the rows of the output)."""
    def attention(q, k, v, mask=None):
        weights = normalize(_scores(q, k, scale, fill, mask if after is None else None))
        if mask is not None and (after or fill == float("-inf")):  # the course gives a blind query zero weights
            weights = after(weights, mask) if after else weights.masked_fill(~mask, 0.0)
        return (weights @ v if output is None else output(v).expand(q.size(0), -1)), weights
    return attention


_SHIFT_WHEN_LARGE = _attention(normalize=lambda s: _unshifted(s - s.amax(-1, keepdim=True) if s.max() > 80 else s))


def _key_T(q, k, v, mask=None):  # the scores with key.T: the exception it raises
    return q @ k.T


def _found(tag: str, test: Callable) -> Callable:
    """A ``find`` for the probes tagged ``tag``: test(the learner's numbers, probe) -> message."""
    return lambda found, p: test(found["values"], p) if p.tags.get(tag) and found["values"] is not None else None


def _scale_mistake(weights: torch.Tensor, p: Probe) -> str | None:
    """Name a wrong scaling of the scores, if the weights are softmax(Q K^T / c) for a wrong c."""
    q, k = p.args[0], p.args[1]
    raw, d_k = q @ k.transpose(-2, -1), q.size(-1)
    root, read = f"sqrt(d_k) = {math.sqrt(d_k):.4g}", "read it from the input, d_k = query.size(-1)"
    for c, message in [(1.0, f"you forgot the 1/sqrt(d_k) scaling: divide the scores by {root} (§3.2.1)."),
                       (d_k, f"you divided the scores by d_k = {d_k} instead of {root}."),
                       (1 / math.sqrt(d_k), "you multiplied the scores by sqrt(d_k) instead of dividing by it.")]:
        if _equal(weights, (raw / c).softmax(-1)):
            return message
    # c with weights == softmax(raw / c): a least-squares fit of 1/c to the centred log weights and raw scores.
    w, raw = weights.double(), raw.double()
    if not (w > 0).all():
        return None
    centred_log, centred_raw = w.log() - w.log().mean(-1, keepdim=True), raw - raw.mean(-1, keepdim=True)
    inverse = float((centred_log * centred_raw).sum() / (centred_raw**2).sum())
    if inverse <= 0 or not _equal(w, (raw * inverse).softmax(-1)) or math.isclose(1 / inverse, math.sqrt(d_k),
                                                                                  rel_tol=1e-3):
        return None
    c = 1 / inverse
    # A square root of another size of the inputs: d_k read from the wrong dimension.
    names = {f"dimension {i} of the query": n for i, n in enumerate(q.shape[:-2])}
    names.update({"L_q, dimension -2 of the query": q.size(-2), "L_k, the number of keys": k.size(-2),
                  "d_v, the width of the values": p.args[2].size(-1)})
    for what, n in names.items():
        if math.isclose(c * c, n, rel_tol=1e-3):
            return f"you divided the scores by sqrt({n}) = {c:.4g}, and {n} is {what} here, not d_k = {d_k}: {read}."
    return (f"you divided the scores by {c:.4g}, but here d_k = {d_k}, so {root}: is d_k (or its square root) "
            f"written into your code? {read[0].upper()}{read[1:]}.")


def _lead_hint(how: str) -> Callable:
    """The hint of a failure after whole sets passed: code for 3-D inputs only, or a size written in."""
    def hint(passed: list, sizes: dict, message: str) -> str:
        if len(sizes["lead"]) <= len(passed[-1]["lead"]):
            return _hard_coded_hint(passed, sizes, message, how)
        text = ("\nHint: it works for (batch, L, d) inputs but not for (batch, h, L, d): every step must act on "
                "the last dimensions, whatever comes in front")
        if "argmax" in how:
            return f"{text}: {_PICK}"
        return text + (" (d_k = query.size(-1), softmax(dim=-1))." if _TRANSPOSE_HINT in message else
                       " (d_k = query.size(-1), softmax(dim=-1), key.transpose(-2, -1)).")
    return hint


def _big_query(q: torch.Tensor, k: torch.Tensor, top: float = 300.0) -> torch.Tensor:
    """q rescaled so that the largest scaled score q.k / sqrt(d_k) is exactly +``top``."""
    scaled = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    sign = 1.0 if scaled.max() >= -scaled.min() else -1.0
    return q * (sign * top / scaled.abs().max())


def _low_scores(lead: tuple, L_q: int, L_k: int, g: torch.Generator):
    """float64 query and key whose scaled scores are all about -3e4, spread by a few units: below a masked fill
    of -1e4, and far below zero."""
    q = torch.randn(*lead, L_q, LOW_D_K, generator=g, dtype=torch.float64) * 0.1
    k = torch.randn(*lead, L_k, LOW_D_K, generator=g, dtype=torch.float64) * 0.1
    q[..., 0] = 1.0
    k[..., 0] = -math.sqrt(LOW_D_K) * (3e4 + 2 * torch.randn(*lead, L_k, generator=g, dtype=torch.float64))
    return q, k


# ---------------------------------------------------------------- exercise 2.1: attention
def _padding_mask(lead: tuple, L_k: int) -> torch.Tensor:
    """(batch, 1, L_k), or (batch, 1, 1, L_k) with heads: sequence b has L_k - 1 - b keys (at least 1)."""
    lengths = torch.tensor([max(1, L_k - 1 - b) for b in range(lead[0])])
    return (torch.arange(L_k) < lengths.unsqueeze(1)).view(lead[0], *[1] * len(lead), L_k)


def _attention_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(0), []

    def probe(args, label, sizes=None, tags=(), **options):
        probes.append(Probe(tuple(args), "{what}" + label, sizes=sizes, hints=((_MATMUL_ERROR, _TRANSPOSE_HINT),),
                            tags=dict(tags), **options))
    for sizes in ATTENTION_SIZES:
        lead, L_q, L_k, d_k, d_v = sizes.values()
        q, k = torch.randn(*lead, L_q, d_k, generator=g), torch.randn(*lead, L_k, d_k, generator=g)
        v = torch.randn(*lead, L_k, d_v, generator=g)
        probe((q, k, v), " (no mask)", sizes, {"plain": True})
        mask = _padding_mask(lead, L_k)
        probe((q, k, v, mask), " with a padding mask", sizes, {"masked": "a padding mask"})
        # Each hidden key's score far above the kept ones: masking after the softmax and renormalizing
        # agrees with masking before until exp(kept - hidden) underflows to 0 and 0 / 0 is NaN.
        q_big = q.clone()
        q_big[..., 0] = q[..., 0].abs() + 1  # every query positive along dimension 0
        k_big = torch.where((~mask).transpose(-2, -1) & (torch.arange(d_k) == 0), torch.tensor(1e4), k)
        what = "a padding mask and a masked key of large score"
        probe((q_big, k_big, v, mask), f" with {what}", sizes, {"masked": what, "big": True})
        causal = torch.ones(L_q, L_k, dtype=torch.bool).tril().view(*(1,) * len(lead), L_q, L_k)
        probe((q, k, v, causal), " with a causal mask (1, L_q, L_k)", sizes, {"masked": "a causal mask (1, L_q, L_k)"})
        blind = torch.rand(*lead, L_q, L_k, generator=g) > 0.4
        blind[..., 0] = True
        blind.view(-1, L_q, L_k)[0, 1] = False  # query 1 of the first sequence may attend to nothing
        probe((q, k, v, blind), " with a fully masked row", sizes, {"blind": True})
    q, k, v = torch.randn(1, 1, 6, generator=g), torch.randn(1, 5, 6, generator=g), torch.randn(1, 5, 3, generator=g)
    one = " for a batch of one sentence with one query, (1, 1, d_k)"
    probe((q, k, v), one)
    probe((q, k, v, _padding_mask((1,), 5)), one + ", and a padding mask (1, 1, L_k)")
    lead, L_q, L_k, d_k, d_v = ATTENTION_SIZES[0].values()
    q, k = torch.randn(*lead, L_q, d_k, generator=g), torch.randn(*lead, L_k, d_k, generator=g)
    v, mask = torch.randn(*lead, L_k, d_v, generator=g), _padding_mask(lead, L_k)
    probe((_big_query(q, k), k, v), " with scaled scores up to 300", tags={"overflow": True})
    probe((q.double(), k.double(), v.double(), mask), " (float64, padding mask)")
    probe((*_low_scores(lead, L_q, L_k, g), v.double(), mask), " with scores about -3e4", tags={"low": True})
    probe((q, k, v, mask), "", again=(q * 2, v[..., :1].expand_as(k) + k, v - 1, mask))
    probe((q, k, v, mask), "", grad=(0, 1, 2))
    x = torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(5))  # L_q = L_k, d_k = d_v
    causal = torch.ones(1, 4, 4, dtype=torch.bool).tril()
    probe((x, x, x, causal), " of self-attention, query = key = value, with a causal mask")
    if device is not None:
        probe((q.to(device), k.to(device), v.to(device), mask.to(device)), f" on the device {device!r}",
              compare=False)
    return probes


def _masked(test: Callable) -> Callable:
    """A ``find``: test(weights, the mask expanded, what it is, probe) for a mask every query can see through."""
    return _found("masked", lambda w, p: test(w, p.args[3].expand(*p.args[0].shape[:-1], p.args[1].size(-2)),
                                              p.tags["masked"], p))


def _renormalized(weights, full, what, p):
    if not (weights.isnan().any() or (weights.double().sum(-1) < 0.5).any()):
        return None
    raw = p.args[0] @ p.args[1].transpose(-2, -1) / math.sqrt(p.args[0].size(-1))
    return (f"the weights of the kept keys vanish (NaN or 0, row sums {_rows(weights)}) when a masked key's score "
            f"is far above theirs (masked {raw[~full].min():.0f} or more, kept {raw[full].max():.1f} or less): that "
            "is the softmax taken over all the keys, the masked weights zeroed and the rest renormalized afterwards, "
            "0 / 0 once exp(kept - max) underflows. Fill the masked scores with float('-inf') before the softmax.")


def _blind(weights: torch.Tensor, p: Probe) -> str | None:
    L_k = p.args[1].size(-2)
    if weights.isnan().any():
        return f"a query whose keys are all masked gets NaN: the softmax of a row of -inf is 0/0. {_ZERO}"
    if _equal(weights.reshape(-1, weights.size(-2), L_k)[0, 1], torch.full((L_k,), 1 / L_k)):
        return (f"a query whose keys are all masked got uniform weights 1/L_k = {1 / L_k:.4f}: the scores were "
                f"filled with a finite number (such as -1e9). {_ZERO}")
    return None


def _low(weights: torch.Tensor, p: Probe) -> str | None:
    full = p.args[3].expand_as(weights)
    if weights.isnan().any():
        return f"NaN when every scaled score is about -3e4 (a padding mask hides some keys): {_UNDERFLOW}"
    if (weights[~full] != 0).any() or (weights.sum(-1) < 0.5).any():
        how = (f"the masked keys got weight (up to {weights[~full].abs().max():.4f})" if (weights[~full] != 0).any()
               else f"the weights of the keys it may see vanished (row sums {_rows(weights)})")
        return (f"when every scaled score is about -3e4 (scores are not bounded), {how}: the masked scores were "
                "filled with a finite number (such as -1e4) that these scores go below. Fill with float('-inf').")
    return None


ATTENTION_MISTAKES = (
    Mistake(_TRANSPOSED, "the weights transposed", stage="shape", item=1,
            shape=lambda p: (*p.args[0].shape[:-2], p.args[1].size(-2), p.args[0].size(-2)),
            example=lambda q, k, v, mask=None: (lambda o, w: (o, w.transpose(-2, -1)))(*_attention()(q, k, v, mask))),
    Mistake(_KEY_T, "key.T", stage="error", like=_key_T, when=lambda p: p.args[1].dim() == 3),
    Mistake("", "a wrong scaling", item=1, find=_found("plain", _scale_mistake), example=_attention(scale=1.0)),
    Mistake("softmax over the wrong dimension: each column of your weights sums to 1 (over the queries), but each "
            "query's row must: use softmax(dim=-1).", "the softmax over the queries", items=(1,),
            like=_attention(normalize=lambda s: s.softmax(-2))),
    Mistake("", "the mask inverted", item=1, find=_masked(lambda w, full, what, p: (
        "your mask is inverted: keys where the mask is True got zero weight. True means 'may attend': "
        "scores.masked_fill(~mask, float('-inf'))." if (w[~full] != 0).any()
        and _equal(w[full], torch.zeros_like(w[full])) else None)),
            example=lambda q, k, v, mask=None: _attention()(q, k, v, None if mask is None else ~mask)),
    Mistake(lambda p: (f"the mask was ignored: with {p.tags['masked']} your weights are the same as without one. "
                       "Fill the scores where the mask is False with float('-inf') before the softmax."),
            "the mask ignored", items=(1,), when=lambda p: p.tags.get("masked"),
            like=lambda q, k, v, mask=None: _attention()(q, k, v)),
    Mistake("", "renormalized after the softmax", item=1, when=lambda p: p.tags.get("big"),
            find=_masked(_renormalized), example=_attention(
                after=lambda w, mask: (lambda w: w / w.sum(-1, keepdim=True))(w.masked_fill(~mask, 0.0)))),
    Mistake("", "NaN with a mask", item=1, example=_attention(fill=float("nan")), find=_masked(
        lambda w, full, what, p: None if not w.isnan().any() else (
            f"with {what} your weights contain NaN although every query may attend to some key; fill the masked "
            "scores with float('-inf') (not the weights), before the softmax."))),
    Mistake("the mask was applied after the softmax: the rows no longer sum to 1. Mask the scores with "
            "float('-inf') before the softmax.", "the mask applied after the softmax", items=(1,),
            when=lambda p: p.tags.get("masked"), like=_attention(after=lambda w, mask: w * mask)),
    Mistake("", "masked keys weighted", item=1, example=_attention(fill=-5.0), find=_masked(
        lambda w, full, what, p: (
            f"with {what}, keys where the mask is False still get weight (up to {w[~full].abs().max():.4f}); "
            "fill their scores with float('-inf') before the softmax so they get exactly 0."
            if w[~full].isfinite().all() and (w[~full].abs() > 1e-6).any() else None))),
    Mistake("", "a fully masked query", item=1, find=_found("blind", _blind), example=_attention(fill=-1e9)),
    Mistake("", "no max subtracted", item=1, find=_found("overflow", lambda w, p: None if w.isfinite().all() else
                                                        f"NaN or inf when a scaled score reaches 300: {_NO_SHIFT}"),
            example=_attention(normalize=_unshifted)),
    Mistake("", "a shift only when large, or a finite fill", item=1, find=_found("low", _low),
            example=_SHIFT_WHEN_LARGE),
)

ATTENTION = Declaration(
    check="check_attention", function="attention", roles=("query", "key", "value", "mask"),
    reference=scaled_dot_product_attention, probes=_attention_probes, returns=_PAIR,
    mistakes=ATTENTION_MISTAKES, sizes_fix=_lead_hint("Read every size from the inputs, d_k = query.size(-1)."),
    passed=("check_attention passed: {name} matches the course's attention (and F.scaled_dot_product_attention, "
            "except for fully masked queries) on 3-D (batch, L, d) and 4-D (batch, h, L, d) inputs of three sets "
            "of sizes: without a mask, with padding and causal masks, with a masked key whose score dwarfs the kept "
            "ones, and with a query whose keys are all masked (zero weights, not NaN); also for a batch of one "
            "sentence with one query, scaled scores up to 300 and about -3e4, and in float64, with gradients "
            "reaching the query, key and value."),
)


def check_attention(attention: Callable) -> None:
    """Check ``attention(query, key, value, mask=None) -> (output, weights)`` on ``ATTENTION_SIZES``.

    Diagnoses: an input changed in place, a result of another kind (not a pair of real floating tensors of the
    inputs' dtype and device), wrong shapes, softmax over the wrong dimension, a missing or wrong 1/sqrt(d_k)
    scaling (d_k hard-coded or read from the wrong dimension too), a mask that is ignored, inverted, applied after
    the softmax, or applied after it with the rows renormalized, NaN or uniform weights for a query whose keys are
    all masked, ``key.T``, code that only works for 3-dimensional inputs, a .squeeze() that drops a batch of one, a
    softmax written without the max shift (overflow) or with it only when the scores are large (0/0 far below zero),
    a masked fill of -1e4 that low scores go below, a float32 result or float32 steps for float64 inputs, a result
    written into a tensor kept between calls, and gradients cut (@torch.no_grad(), .detach()) or broken by an
    in-place change the backward pass needs."""
    check(ATTENTION, attention, OTHER_DEVICE)


# ---------------------------------------------------------------- exercise 2.2: attention_loops
def _loops_probes(device: str | None) -> list[Probe]:
    probes = []
    for sizes in LOOP_SIZES:
        L_q, L_k, d_k, d_v = sizes.values()
        g = torch.Generator().manual_seed(L_q * 100 + L_k)
        q, k, v = (torch.randn(*shape, generator=g) for shape in [(L_q, d_k), (L_k, d_k), (L_k, d_v)])
        probes.append(Probe((q, k, v), "{what}", sizes=sizes, tags={"plain": True}))
        probes.append(Probe((_big_query(q, k), k, v), "{what} with large scores", sizes=sizes, tags={"overflow": True}))
    g = torch.Generator().manual_seed(4)
    q, k, v = torch.randn(1, 5, generator=g), torch.randn(3, 5, generator=g), torch.randn(3, 2, generator=g)
    probes.append(Probe((q, k, v), "{what} for a single query, (1, L_k)"))
    q, k, v = (torch.randn(*shape, generator=g, dtype=torch.float64) for shape in [(4, 5), (3, 5), (3, 2)])
    probes.append(Probe((q, k, v), "{what} (float64)"))
    probes.append(Probe((*_low_scores((), 4, 3, g), v), "{what} with scores about -3e4", tags={"low": True}))
    probes.append(Probe((q, k, v), "{what}", again=(q * 2, k - 1, v + 1)))
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(5))  # L_q = L_k = d_k = d_v
    probes.append(Probe((x, x, x), "{what} of self-attention, query = key = value (4, 4)"))
    return probes


def _not_normalized(weights: torch.Tensor, p: Probe) -> str | None:
    sums = weights.sum(-1, keepdim=True)
    if (weights > 0).all() and not _equal(sums, torch.ones_like(sums)) and _equal(
            weights / sums, scaled_dot_product_attention(*p.args)[1]):
        return ("your weights are exponentials of the scaled scores not divided by their sum: each row should sum "
                f"to 1, yours sum to {_rows(weights)}.")
    return None


LOOPS_MISTAKES = (
    Mistake(lambda p: (f"That is {(p.args[0].size(0), p.args[1].size(1))}, (L_q, d_k): you averaged the keys. The "
                       "output averages the values, shape (L_q, d_v)."), "the keys averaged", stage="shape",
            shape=lambda p: (p.args[0].size(0), p.args[1].size(1)),
            example=lambda q, k, v: (scaled_dot_product_attention(q, k, k)[0],
                                     scaled_dot_product_attention(q, k, v)[1])),
    Mistake(_TRANSPOSED, "the weights transposed", stage="shape", item=1,
            shape=lambda p: (p.args[1].size(0), p.args[0].size(0)),
            example=lambda q, k, v: (lambda o, w: (o, w.T))(*scaled_dot_product_attention(q, k, v))),
    Mistake("each column of your weights sums to 1: you normalized each key's scores over the queries. The softmax "
            "runs over the keys of one query.", "normalized over the queries", items=(1,),
            like=_attention(normalize=lambda s: s.softmax(0))),
    Mistake("", "not normalized", item=1, find=_found("plain", _not_normalized),
            example=_attention(normalize=lambda s: (s - s.amax(-1, keepdim=True)).exp())),
    Mistake("", "a wrong scaling", item=1, find=_found("plain", _scale_mistake),
            example=lambda q, k, v: _attention(scale=q.size(-1))(q, k, v)),
) + tuple(Mistake(f"every row of your output is the plain {how} of the values: weight them, output[i] = sum over j "
                  "of weights[i, j] * value[j].", f"the values {done}", items=(0,),
                  like=_attention(output=lambda v, how=how: getattr(v, how)(0)))
          for how, done in (("sum", "summed"), ("mean", "averaged"))) + (
    Mistake("", "no max subtracted", item=1, example=_attention(normalize=_unshifted),
            find=_found("overflow", lambda w, p: None if w.isfinite().all() else (
                "NaN or inf when a scaled score reaches 300: exp(300) overflows float32. For query i, subtract "
                "the largest of its scores before the exponential, exp(s_ij - max_j s_ij)."))),
    Mistake("", "a shift only when large", item=1, example=_SHIFT_WHEN_LARGE,
            find=_found("low", lambda w, p: f"NaN or weights that vanish when every scaled score is about -3e4: "
                        f"{_UNDERFLOW}" if w.isnan().any() or (w.sum(-1) < 0.5).any() else None)),
)

LOOPS = Declaration(
    check="check_attention_loops", function="attention_loops", roles=("query", "key", "value"),
    reference=scaled_dot_product_attention, probes=_loops_probes, returns=_PAIR, mistakes=LOOPS_MISTAKES,
    sizes_fix=("Loop over range(L_q) and range(L_k), with L_q, L_k = query.size(0), key.size(0), and read d_k "
               "from query.size(-1)."),
    passed=("check_attention_loops passed: {name} gives the weights and output of the vectorized attention (and "
            "F.scaled_dot_product_attention) for " + " and ".join(
                f"(L_q={s['L_q']}, L_k={s['L_k']}, d_k={s['d_k']}, d_v={s['d_v']})" for s in LOOP_SIZES)
            + ", for a single query and in float64, and stays finite when a scaled score reaches 300 and when "
            "every scaled score is about -3e4."),
)


def check_attention_loops(attention_loops: Callable) -> None:
    """Check ``attention_loops(query, key, value) -> (output, weights)`` on ``LOOP_SIZES``.

    Diagnoses: an input changed in place, a result of another kind or shape (the weights transposed, the keys
    averaged instead of the values), weights normalized over the queries or not at all, a missing or wrong
    1/sqrt(d_k), the values summed or averaged without the weights, overflow on large scores, a shift only when the
    scores are large (0/0 far below zero), ``key.T`` on more than two dimensions, a .squeeze() that drops a single
    query, a float32 result for float64 inputs (torch.zeros without dtype=, Python floats), a result written into a
    tensor kept between calls, and sizes written into the code (a loop over a fixed range)."""
    check(LOOPS, attention_loops)


# ---------------------------------------------------------------- exercise 2.3: hard_lookup
def _best(q, k):
    return (q @ k.transpose(-2, -1)).argmax(-1)


def _hard(index: Callable = _best, rows: Callable = lambda q, k, v: v) -> Callable:
    """Row index(query, key)[..., i] of value (or of ``rows``) for every query i: the course's answer, or with one
    thing changed a known mistake's."""
    def lookup(q, k, v):
        i, r = index(q, k), rows(q, k, v)
        return torch.gather(r, -2, i.unsqueeze(-1).expand(*i.shape, r.size(-1)))
    return lookup


def course_hard_lookup(query, key, value):
    """For every query, the value of the key with the highest score q.k."""
    return _hard()(query, key, value)


def _matches(got: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(..., L_q, L_k): whether output row i equals value row j."""
    return (got.unsqueeze(-2) - v.unsqueeze(-3)).abs().amax(-1) < 1e-5


def _tied(q, k):
    scores = q @ k.transpose(-2, -1)
    return scores, scores == scores.amax(-1, keepdim=True)  # exact: integer scores


def _tie_rows(got: torch.Tensor, q, k, v) -> torch.Tensor:
    """Per query: whether its row is one of the tied keys' values, or their mean (the limit of attention)."""
    tied = _tied(q, k)[1]
    mean = (tied.to(v.dtype) / tied.sum(-1, keepdim=True)) @ v
    return (_matches(got, v) & tied).any(-1) | ((got - mean).abs().amax(-1) < 1e-5)


def _hard_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(3), []
    hints = ((_MATMUL_ERROR, _TRANSPOSE_HINT), (r"out of bounds for dimension 0", _INDEX_HINT))
    for sizes in ATTENTION_SIZES:
        lead, L_q, L_k, d_k, d_v = sizes.values()
        q, k = torch.randn(*lead, L_q, d_k, generator=g), torch.randn(*lead, L_k, d_k, generator=g)
        v = torch.randn(*lead, L_k, d_v, generator=g)
        # A near tie for query 0 of every sequence: key 1 = 1.002 key 0, both along q_0, the best by a
        # hair. A softmax shares the weight between them even with the query multiplied by 20.
        k[..., 0, :], k[..., 1, :] = 3 * q[..., 0, :], 3.006 * q[..., 0, :]
        probes.append(Probe((q, k, v), "{what} (..., L_q, d_v)", sizes=sizes, hints=hints, tags={"near": True}))
    # Exact ties: integer queries and keys, key L_k - 1 a copy of key 0, the best key of query 0.
    q = torch.randint(-2, 3, (2, 4, 3), generator=g).float()
    q[..., 0, :] = torch.randint(1, 3, (2, 3), generator=g).float()  # no zero component
    k = torch.randint(-2, 3, (2, 5, 3), generator=g).float()
    k[..., 0, :] = 3 * q[..., 0, :]  # 3 |q_0|^2 beats any key of components in [-2, 2]
    k[..., -1, :] = k[..., 0, :]
    v = torch.randn(2, 5, 2, generator=g)
    # Every row one of the tied keys' values, or their mean, passes.
    probes.append(Probe((q, k, v), "{what} with tied keys", hints=hints, tags={"tie": True},
                        accept=lambda got, q=q, k=k, v=v: got[0] is not None and bool(
                            got[0].shape == (*q.shape[:-1], v.size(-1)) and _tie_rows(got[0], q, k, v).all())))
    for dtype, what, lead, L_q in [(torch.float32, "a batch of one sentence with one query, (1, 1, d_k)", (1,), 1),
                                   (torch.float64, "float64 inputs", (2,), 3)]:
        q, k, v = (torch.randn(*lead, n, d, generator=g, dtype=dtype) for n, d in [(L_q, 5), (4, 5), (4, 3)])
        probes.append(Probe((q, k, v), "{what} for " + what, hints=hints))
    probes.append(Probe((q, k, v), "{what}", again=(-q, k, v * 2 + 1)))
    x = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(5))  # L_q = L_k = d_k = d_v
    probes.append(Probe((x, x, x), "{what} for query = key = value (2, 4, 4)", hints=hints))
    if device is not None:
        probes.append(Probe((q.to(device), k.to(device), v.to(device)), f"{{what}} on the device {device!r}",
                            compare=False))
    return probes


def _near_tie(got: torch.Tensor, p: Probe) -> str | None:
    q, k, v = p.args
    match = _matches(got, v)
    scores, picks = q @ k.transpose(-2, -1), torch.where(match.any(-1), match.float().argmax(-1), -1)
    if not (picks >= 0).all():
        where = tuple((picks < 0).nonzero()[0].tolist())
        s0 = scores[(0,) * (q.dim() - 2)][0, :2].tolist()
        return (f"your output for query {where[-1]} of sequence {where[:-1]} is none of the values but a mix of them: "
                f"a softmax is never one-hot, and query 0 scores keys 0 and 1 at {s0[0]:.3f} and {s0[1]:.3f} (first "
                f"sequence), a near tie that shares the weight even with the query multiplied by 20. Take {_PICK}")
    best = scores.argmax(-1)
    wrong = tuple((picks != best).nonzero()[0].tolist())
    return (f"each row of your output is one of the values, but not always the value of the best-scoring key: for "
            f"query {wrong[-1]} of sequence {wrong[:-1]} the highest score q.k is key {int(best[wrong])}'s, and your "
            f"row is the value of key {int(picks[wrong])}. Take {_PICK}")


def _tie(got: torch.Tensor, p: Probe) -> str | None:
    q, k, v = p.args
    scores, tied = _tied(q, k)
    if _equal(got, tied.float() @ v):
        return ("when two keys tie for the highest score, your output is the sum of their values: a one-hot made "
                f"with scores == scores.max(...) marks every tied key (key 0 and key {k.size(-2) - 1} here). Take one "
                "index per query, scores.argmax(dim=-1), then its row of value.")
    where = tuple((~_tie_rows(got, q, k, v)).nonzero()[0].tolist())
    return (f"for query {where[-1]} of sequence {where[:-1]}, keys {tied[where].nonzero().flatten().tolist()} tie "
            f"for the highest score ({scores[where].max():.0f}), and your row is neither the value of one of them "
            f"nor their mean. Take {_PICK}")


HARD_MISTAKES = (
    Mistake("That is (..., L_q, d_k): you returned keys. The key decides which row is picked; the row returned "
            "is the value's.", "keys returned", stage="shape",
            shape=lambda p: (*p.args[0].shape[:-1], p.args[1].size(-1)),
            example=_hard(rows=lambda q, k, v: k)),
    Mistake("torch.gather returns one number per index: expand the index over the d_v columns, "
            "index.unsqueeze(-1).expand(*index.shape, d_v).", "a gather not expanded", stage="shape",
            shape=lambda p: (*p.args[0].shape[:-1], 1),
            example=lambda q, k, v: torch.gather(v, -2, (q @ k.transpose(-2, -1)).argmax(-1, keepdim=True))),
    Mistake("One row per key: the argmax ran over the queries (dim=-2). For each query, take it over the keys: "
            "scores.argmax(dim=-1).", "the argmax over the queries", stage="shape",
            shape=lambda p: (*p.args[0].shape[:-2], p.args[1].size(-2), p.args[2].size(-1)),
            example=_hard(lambda q, k: (q @ k.transpose(-2, -1)).argmax(-2))),
    Mistake(_KEY_T, "key.T", stage="error", like=_key_T, when=lambda p: p.args[1].dim() == 3),
    Mistake("your output is the soft average, softmax(Q K^T / sqrt(d_k)) V. The hard lookup returns the value of "
            "the single best key: " + _PICK, "the soft average",
            like=lambda q, k, v: scaled_dot_product_attention(q, k, v)[0]),
    Mistake("you picked the value of the key with the lowest score: the lookup takes the highest, "
            "scores.argmax(dim=-1).", "the lowest score", like=_hard(lambda q, k: _best(-q, k))),
    Mistake("you picked the key nearest to the query (the smallest |q - k|). Attention scores by the dot product "
            "q.k, which grows with the key's length: " + _PICK, "the nearest key",
            like=_hard(lambda q, k: (q.unsqueeze(-2) - k.unsqueeze(-3)).norm(dim=-1).argmin(-1))),
    Mistake("you picked the key of the highest cosine similarity. Attention's score q.k keeps the lengths: a "
            "longer key in the same direction scores higher. " + _PICK, "the highest cosine", like=_hard(
                lambda q, k: _best(F.normalize(q, dim=-1), F.normalize(k, dim=-1)))),
    Mistake("", "not the best key's value", find=_found("near", _near_tie),
            example=_hard(lambda q, k: (_best(q, k) + 1) % k.size(-2))),
    Mistake("", "the tied values summed", find=_found("tie", _tie),
            example=lambda q, k, v: _tied(q, k)[1].to(v.dtype) @ v),
)

HARD = Declaration(
    check="check_hard_lookup", function="hard_lookup", roles=("query", "key", "value"), reference=course_hard_lookup,
    probes=_hard_probes, returns=Tensor("the output", precision="float32"), mistakes=HARD_MISTAKES,
    sizes_fix=_lead_hint("Read every size from the inputs' shapes, and take the argmax over dim=-1."),
    passed=("check_hard_lookup passed: {name} returns the value of the best-scoring key for every query, on 3-D "
            "(batch, L, d) and 4-D (batch, h, L, d) inputs of three sets of sizes, including a near tie (scores "
            "0.2 % apart) that a softmax would share, an exact tie (one of the tied values, not their sum), a batch "
            "of one sentence with one query, and float64 inputs."),
)


def check_hard_lookup(hard_lookup: Callable) -> None:
    """Check ``hard_lookup(query, key, value)``, the best key's value, on ``ATTENTION_SIZES``.

    Diagnoses: an input changed in place, a result of another kind, dtype, device or shape (keys returned, a gather
    without the index expanded, the argmax over the queries, ``value[index]`` indexing the batch), the soft average
    returned, a mix of values (a softmax of multiplied scores), the lowest score, the nearest key by distance, the
    highest cosine similarity, ``key.T``, code that only works for 3-dimensional inputs, the sum of the tied values
    (a one-hot from ``scores == max``), a .squeeze() that drops a batch of one, a float32 result for float64 inputs
    (a one-hot's .float(), torch.zeros without dtype=), a result written into a tensor kept between calls, and sizes
    written into the code."""
    check(HARD, hard_lookup, OTHER_DEVICE)


DECLARATIONS = {d.check: d for d in (ATTENTION, LOOPS, HARD)}
