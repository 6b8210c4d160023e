"""Checks of notebook 02's exercises: scaled dot-product attention (2.1), the same with loops
over the queries and keys (2.2), and the hard lookup it becomes when one score dominates (2.3),
compared with ``torch.nn.functional.scaled_dot_product_attention`` and ``annotated.attention``."""

import math
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.support.grading.core import (
    ExerciseFailed, _aliasing, _assert_close, _call, _function, _generic, _gradients_flow,
    _hard_coded_hint, _rows, _run_on_all_sizes, _same, _shape, _squeezed, _tensor,
)

# Two 3-D sets (batch, L, d) and one 4-D set (batch, h, L, d), as multi-head attention
# calls it; d_k is never 4, the d_k of a hand-worked example, no size repeats inside a set,
# and d_k changes between sets.
ATTENTION_SIZES = [
    dict(lead=(2,), L_q=3, L_k=5, d_k=6, d_v=7),
    dict(lead=(3,), L_q=7, L_k=4, d_k=10, d_v=5),
    dict(lead=(4, 5), L_q=2, L_k=6, d_k=9, d_v=3),  # lead = (batch, h)
]
# One sequence, (L, d), for the attention written with loops over its queries and keys.
LOOP_SIZES = [dict(L_q=3, L_k=5, d_k=6, d_v=2), dict(L_q=5, L_k=2, d_k=7, d_v=3)]
SIZE_SETS = {
    "check_attention": ATTENTION_SIZES,
    "check_attention_loops": LOOP_SIZES,
    "check_hard_lookup": ATTENTION_SIZES,
}

# The errors of a matrix product whose shapes do not fit: what query @ key.T gives.
_MATMUL_ERROR = (r"must match the size of tensor|cannot be multiplied|Expected size for first two"
                 r"|size mismatch|mat1 and mat2|\bx\.T\b")
_TRANSPOSE_HINT = (
    "\nHint: the scores query @ key^T need the last two dimensions of the key swapped, "
    "(..., L_k, d_k) -> (..., d_k, L_k): key.transpose(-2, -1), not key.transpose(1, 2) or "
    "key.T. key.T reverses all the dimensions of a tensor with more than two ((batch, L_k, d_k) "
    "becomes (d_k, L_k, batch)), and key.transpose(1, 2) is right for 3-D inputs only."
)


_ROLES = ("query", "key", "value", "mask")


def _call_attention(attention: Callable, *args, extra_hints: tuple = ()):
    """Call the learner's attention; ``key.T`` on a 3-D or 4-D key is named, whether the
    shapes then fail or happen to fit, from the warning torch gives for it. ``extra_hints``
    are more (pattern, hint) pairs for ``_call``."""
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # torch warns about x.T once per process otherwise
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                hints = ((_MATMUL_ERROR, _TRANSPOSE_HINT), *extra_hints)
                result, error = _call(attention, *args, hints=hints, roles=_ROLES), None
            except ExerciseFailed as err:
                result, error = None, err
    finally:
        torch.set_warn_always(warn_always)
    if any("x.T" in str(w.message) for w in caught):
        raise ExerciseFailed(
            "you used .T on a tensor with more than two dimensions (key.T?): .T reverses all of "
            "them, so a key (batch, L_k, d_k) becomes (d_k, L_k, batch), and the scores pair the "
            "wrong numbers or fail (torch warns that this use of .T is deprecated). Swap the "
            "last two dimensions only: key.transpose(-2, -1) (or key.mT)."
        )
    if error is not None:
        raise error
    return result


def _attention_pair(result, name: str, sizes: dict,
                    query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpack (output, weights) and check both: tensors of the query's dtype and device, and
    their shapes."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = type(result).__name__
        if torch.is_tensor(result):
            got = f"one tensor of shape {tuple(result.shape)}"
        elif isinstance(result, (tuple, list)):
            kinds = ", ".join(type(r).__name__ for r in result)
            got = f"a {got} of {len(result)} items ({kinds})"
        raise ExerciseFailed(f"{name} should return a pair (output, weights), got {got}")
    output = _tensor(result[0], name, "the output", like=query)
    weights = _tensor(result[1], name, "the weights", like=query)
    L_q, L_k, d_v, lead = sizes["L_q"], sizes["L_k"], sizes["d_v"], tuple(sizes["lead"])
    hint = ""
    if tuple(weights.shape) == (*lead, L_k, L_q):
        hint = (" Your weights are transposed: one row per query and one column per key comes "
                "from query @ key.transpose(-2, -1).")
    _shape(weights, (*lead, L_q, L_k), "the weights (..., L_q, L_k)",
           hint + _squeezed(weights.shape, (*lead, L_q, L_k)))
    _shape(output, (*lead, L_q, d_v), "the output (..., L_q, d_v)",
           _squeezed(output.shape, (*lead, L_q, d_v)))
    return output, weights


def _fitted_scale(weights: torch.Tensor, raw: torch.Tensor) -> float | None:
    """The c for which weights == softmax(raw / c), or None when no such c fits.

    log weights - their row mean == (raw - its row mean) / c: a least-squares fit of 1/c."""
    weights, raw = weights.double(), raw.double()
    if not (weights > 0).all():
        return None
    centred_log = weights.log() - weights.log().mean(-1, keepdim=True)
    centred_raw = raw - raw.mean(-1, keepdim=True)
    inverse = float((centred_log * centred_raw).sum() / (centred_raw**2).sum())
    if inverse <= 0 or not _same(weights, (raw * inverse).softmax(-1), atol=1e-4):
        return None
    return 1 / inverse


def _scale_mistake(weights: torch.Tensor, raw: torch.Tensor, sizes: dict) -> str | None:
    """Name a wrong scaling of the scores, if the weights are softmax(raw / c) for a wrong c."""
    d_k = sizes["d_k"]
    mistakes = [
        (1.0, "you forgot the 1/sqrt(d_k) scaling: your weights equal softmax(Q K^T) without the "
              f"division by sqrt(d_k) = {math.sqrt(d_k):.4g}. Divide the scores by "
              "math.sqrt(d_k) before the softmax (paper §3.2.1)."),
        (d_k, f"you divided the scores by d_k = {d_k} instead of sqrt(d_k) = {math.sqrt(d_k):.4g}: "
              "use math.sqrt(d_k)."),
        (1 / math.sqrt(d_k), "you multiplied the scores by sqrt(d_k) instead of dividing by it."),
    ]
    for c, message in mistakes:
        if _same(weights, (raw / c).softmax(-1)):
            return message
    c = _fitted_scale(weights, raw)
    if c is None or math.isclose(c, math.sqrt(d_k), rel_tol=1e-3):
        return None
    # A square root of another size of the inputs: d_k read from the wrong dimension.
    names = {f"dimension {i} of the query": n for i, n in enumerate(sizes["lead"])}
    names.update({"L_q, dimension -2 of the query": sizes["L_q"], "L_k, the number of keys":
                  sizes["L_k"], "d_v, the width of the values": sizes["d_v"]})
    for what, n in names.items():
        if math.isclose(c * c, n, rel_tol=1e-3):
            return (
                f"you divided the scores by sqrt({n}) = {c:.4g}, and {n} is {what} here, not "
                f"d_k = {d_k}: read d_k from the last dimension, d_k = query.size(-1), which is "
                "right whatever dimensions come in front."
            )
    return (
        f"you divided the scores by {c:.4g}, but here d_k = {d_k}, so sqrt(d_k) = "
        f"{math.sqrt(d_k):.4g}: is d_k (or its square root) written into your code? The check "
        "runs several sizes: read it from the input, d_k = query.size(-1), and divide by "
        "math.sqrt(d_k)."
    )


def _reference(q, k, v, mask=None, with_torch: bool = True):
    """The course's attention; checked against PyTorch's where no query is fully masked
    (PyTorch gives such a query NaN, the course zero)."""
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    if with_torch:
        if not _same(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)):
            raise AssertionError("the course's attention differs from PyTorch's: a bug of the course")
    return out, weights


def _padding_mask(sizes: dict) -> torch.Tensor:
    """(batch, 1, L_k), or (batch, 1, 1, L_k) with heads: sequence b has L_k - 1 - b keys
    (at least 1), so every sequence hides some keys and every query sees some."""
    batch, L_k = sizes["lead"][0], sizes["L_k"]
    lengths = torch.tensor([max(1, L_k - 1 - b) for b in range(batch)])
    mask = torch.arange(L_k) < lengths.unsqueeze(1)  # (batch, L_k)
    return mask.view(batch, *[1] * len(sizes["lead"]), L_k)


def _check_masked(name: str, sizes: dict, mask, weights, output, expected, unmasked, what) -> None:
    """Diagnose the weights of a mask under which every query sees at least one key."""
    full = mask.expand(*sizes["lead"], sizes["L_q"], sizes["L_k"])
    hidden = weights[~full]
    if weights.isnan().any():
        raise ExerciseFailed(
            f"with {what} your weights contain NaN although every query may attend to some key; "
            "fill the masked scores with float('-inf') (not the weights), before the softmax."
        )
    if not _same(hidden, torch.zeros_like(hidden)):
        if _same(weights[full], torch.zeros_like(weights[full])):
            raise ExerciseFailed(
                "your mask is inverted: keys where the mask is True got zero weight. True means "
                "'may attend', so hide the keys where it is False: scores.masked_fill(~mask, "
                "float('-inf'))."
            )
        if _same(weights, unmasked):
            raise ExerciseFailed(
                f"the mask was ignored: with {what} your weights are the same as without one. "
                "Fill the scores where the mask is False with float('-inf') before the softmax."
            )
        raise ExerciseFailed(
            f"with {what}, keys where the mask is False still get weight (up to "
            f"{hidden.abs().max():.4f}); fill their scores with float('-inf') before the softmax "
            "so they get exactly 0."
        )
    expected_out, expected_w = expected
    if not _same(weights, expected_w):
        if _same(weights, unmasked * full):
            raise ExerciseFailed(
                "the mask was applied after the softmax: the masked keys got weight 0, but the "
                f"rows no longer sum to 1 (sums {_rows(weights)}). Mask the scores with "
                "float('-inf') before the softmax, so the softmax shares the weight among the "
                "keys that remain."
            )
        _assert_close(weights, expected_w, f"the attention weights with {what}")
    _assert_close(output, expected_out, f"the output with {what}")


def _check_attention_once(attention: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    lead, L_q, L_k, d_k, d_v = sizes["lead"], sizes["L_q"], sizes["L_k"], sizes["d_k"], sizes["d_v"]
    q = torch.randn(*lead, L_q, d_k, generator=g)
    k = torch.randn(*lead, L_k, d_k, generator=g)
    v = torch.randn(*lead, L_k, d_v, generator=g)
    raw = q @ k.transpose(-2, -1)  # unscaled scores (..., L_q, L_k)
    unmasked = (raw / math.sqrt(d_k)).softmax(-1)
    ones = (1,) * len(lead)

    # 1. No mask.
    expected_out, expected_w = _reference(q, k, v)
    output, weights = _attention_pair(_call_attention(attention, q, k, v), name, sizes, q)
    if weights.isnan().any():
        raise ExerciseFailed("the weights contain NaN although no mask was given")
    if not _same(weights.sum(-1), torch.ones(*lead, L_q)):
        if _same(weights.sum(-2), torch.ones(*lead, L_k)):
            raise ExerciseFailed(
                "softmax over the wrong dimension: each column of your weights sums to 1 "
                "(softmax(dim=-2), over the queries), but each query's weights over the keys, "
                "a row, must sum to 1: use softmax(dim=-1)."
            )
        raise ExerciseFailed(
            f"the rows of your weights should each sum to 1 (a softmax over the keys, dim=-1); "
            f"their sums are {_rows(weights)}"
        )
    if not _same(weights, expected_w):
        message = _scale_mistake(weights, raw, sizes)
        if message:
            raise ExerciseFailed(message)
        _assert_close(weights, expected_w, "the attention weights (no mask)")
    _assert_close(output, expected_out, "the output weights @ value (no mask)")

    # 2. A padding mask, (batch, 1, L_k): the same keys hidden from every query.
    mask = _padding_mask(sizes)
    result = _call_attention(attention, q, k, v, mask)
    output, weights = _attention_pair(result, name, sizes, q)
    _check_masked(name, sizes, mask, weights, output, _reference(q, k, v, mask), unmasked,
                  "a padding mask")

    # 3. The same mask, and each hidden key's score far above the kept ones (about 1e4 / sqrt(d_k)
    # more). Masking after the softmax and renormalizing agrees with masking before until here:
    # exp(kept - hidden) underflows to 0, even in float64, and 0 / 0 is NaN.
    q_big = q.clone()
    q_big[..., 0] = q[..., 0].abs() + 1  # every query positive along dimension 0
    hidden_keys = (~mask).transpose(-2, -1) & (torch.arange(d_k) == 0)  # (..., L_k, d_k)
    k_big = torch.where(hidden_keys, torch.tensor(1e4), k)
    raw_big = q_big @ k_big.transpose(-2, -1) / math.sqrt(d_k)
    expected = _reference(q_big, k_big, v, mask)
    output, weights = _attention_pair(_call_attention(attention, q_big, k_big, v, mask), name,
                                      sizes, q_big)
    kept_sums = weights.double().sum(-1)
    if weights.isnan().any() or (kept_sums < 0.5).any():
        full = mask.expand_as(raw_big)
        raise ExerciseFailed(
            "the weights of the kept keys vanish (NaN or 0, row sums "
            f"{_rows(weights)}) when a masked key's score is far above theirs (scaled scores here: "
            f"masked keys {raw_big[~full].min():.0f} or more, kept keys {raw_big[full].max():.1f} "
            "or less): that is the "
            "softmax taken over all the keys, the masked weights zeroed and the rest renormalized "
            "afterwards. It agrees with masking first only while the kept weights stay above "
            "zero; here exp(kept - max) underflows to 0 and renormalizing gives 0 / 0. Fill the "
            "masked scores with float('-inf') before the softmax, so a masked key takes no part "
            "in it."
        )
    _check_masked(name, sizes, mask, weights, output, expected, raw_big.softmax(-1),
                  "a padding mask and a masked key of large score")

    # 4. A causal mask, (1, L_q, L_k): query i sees keys 0 .. i, the same for every sequence.
    mask = torch.ones(L_q, L_k, dtype=torch.bool).tril().view(*ones, L_q, L_k)
    output, weights = _attention_pair(_call_attention(attention, q, k, v, mask), name, sizes, q)
    _check_masked(name, sizes, mask, weights, output, _reference(q, k, v, mask), unmasked,
                  "a causal mask (1, L_q, L_k)")

    # 5. A query whose keys are all masked: zero weights and zero output, not NaN.
    mask = torch.rand(*lead, L_q, L_k, generator=g) > 0.4
    mask[..., 0] = True
    mask.view(-1, L_q, L_k)[0, 1] = False  # query 1 of the first sequence may attend to nothing
    expected_out, expected_w = _reference(q, k, v, mask, with_torch=False)
    output, weights = _attention_pair(_call_attention(attention, q, k, v, mask), name, sizes, q)
    if weights.isnan().any() or output.isnan().any():
        raise ExerciseFailed(
            "a query whose keys are all masked gets NaN: the softmax of a row of -inf is 0/0. "
            "Such a query sees nothing, so the course gives it zero weights: after the "
            "softmax, weights.masked_fill(~mask, 0.0)."
        )
    if _same(weights.reshape(-1, L_q, L_k)[0, 1], torch.full((L_k,), 1 / L_k)):
        raise ExerciseFailed(
            f"a query whose keys are all masked got uniform weights 1/L_k = {1 / L_k:.4f}: the "
            "scores were filled with a finite number (such as -1e9), so the softmax spread evenly "
            "over keys it may not see. The course gives such a query zero weights: after the "
            "softmax, weights.masked_fill(~mask, 0.0)."
        )
    _assert_close(weights, expected_w, "the attention weights with a fully masked row")
    _assert_close(output, expected_out, "the output with a fully masked row")


_NO_SHIFT = (
    "exp(300) overflows float32 (e^89 is already past its largest number), and inf / inf is "
    "NaN: is your softmax written out without subtracting the maximum? Use "
    "scores.softmax(dim=-1), which subtracts it, or subtract each row's maximum before the "
    "exponential, scores - scores.amax(dim=-1, keepdim=True)."
)
_UNDERFLOW = (
    "exp of scores that far below zero underflows to 0 for every key, and 0 / 0 is NaN: is the "
    "maximum subtracted only when the scores are large (if scores.max() > ...), or not at all? "
    "Subtract each row's maximum always (scores.softmax(dim=-1) does), so the largest exponent "
    "is exactly 0."
)


def _big_query(q: torch.Tensor, k: torch.Tensor, top: float = 300.0) -> torch.Tensor:
    """q rescaled so that the largest scaled score q.k / sqrt(d_k) is exactly +``top``."""
    scaled = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    sign = 1.0 if scaled.max() >= -scaled.min() else -1.0
    return q * (sign * top / scaled.abs().max())


# The float64 passes compare with float32's tolerance: the dtype must be kept, but a float32
# constant in the scaling (torch.sqrt(torch.tensor(d_k))) is a right answer. For the same reason
# the scores about -3e4 use d_k = 16, whose sqrt and 1/sqrt are exact in float32.
LOW_D_K = 16


def _low_scores(lead: tuple, L_q: int, L_k: int, d_k: int, g: torch.Generator):
    """float64 query and key whose scaled scores q.k / sqrt(d_k) are all about -3e4, spread by a
    few units: below a masked fill of -1e4, and far below zero."""
    q = torch.randn(*lead, L_q, d_k, generator=g, dtype=torch.float64) * 0.1
    k = torch.randn(*lead, L_k, d_k, generator=g, dtype=torch.float64) * 0.1
    q[..., 0] = 1.0
    k[..., 0] = -math.sqrt(d_k) * (3e4 + 2 * torch.randn(*lead, L_k, generator=g,
                                                          dtype=torch.float64))
    return q, k


def _check_attention_extras(attention: Callable, name: str, g: torch.Generator) -> None:
    """What every set of sizes leaves out: a batch of one sentence with one query, large
    scores, float64, scores far below zero (below a masked fill of -1e4), a second call that
    must leave the first result alone, and gradients."""
    # 6. A batch of one sentence with a single query (a decoding step), without and with a mask.
    sizes = dict(lead=(1,), L_q=1, L_k=5, d_k=6, d_v=3)
    q = torch.randn(1, 1, 6, generator=g)
    k = torch.randn(1, 5, 6, generator=g)
    v = torch.randn(1, 5, 3, generator=g)
    for mask in (None, _padding_mask(sizes)):
        what = "a batch of one sentence with one query, (1, 1, d_k)" + (
            ", and a padding mask (1, 1, L_k)" if mask is not None else "")
        expected_out, expected_w = _reference(q, k, v, mask)
        output, weights = _attention_pair(_call_attention(attention, q, k, v, mask), name, sizes, q)
        _assert_close(weights, expected_w, f"the attention weights with {what}")
        _assert_close(output, expected_out, f"the output with {what}")

    # 7. Large scores: the largest scaled score is +300, and exp(300) is inf in float32.
    sizes = ATTENTION_SIZES[0]
    lead, L_q, L_k, d_k, d_v = sizes["lead"], sizes["L_q"], sizes["L_k"], sizes["d_k"], sizes["d_v"]
    q = torch.randn(*lead, L_q, d_k, generator=g)
    k = torch.randn(*lead, L_k, d_k, generator=g)
    v = torch.randn(*lead, L_k, d_v, generator=g)
    q_big = _big_query(q, k)
    expected_out, expected_w = _reference(q_big, k, v)
    output, weights = _attention_pair(_call_attention(attention, q_big, k, v), name, sizes, q_big)
    if not (weights.isfinite().all() and output.isfinite().all()):
        raise ExerciseFailed(f"NaN or inf when a scaled score reaches 300: {_NO_SHIFT}")
    _assert_close(weights, expected_w, "the attention weights with scaled scores up to 300")
    _assert_close(output, expected_out, "the output with scaled scores up to 300")

    # 8. float64 inputs with a padding mask: float64 results (see LOW_D_K on the tolerance).
    mask = _padding_mask(sizes)
    q64, k64, v64 = q.double(), k.double(), v.double()
    expected_out, expected_w = _reference(q64, k64, v64, mask)
    output, weights = _attention_pair(_call_attention(attention, q64, k64, v64, mask), name, sizes,
                                      q64)
    _assert_close(weights, expected_w, "the attention weights (float64, padding mask)")
    _assert_close(output, expected_out, "the output (float64, padding mask)")

    # 9. Every scaled score about -3e4 (float64), with the padding mask: below a fill of -1e4.
    q_low, k_low = _low_scores(lead, L_q, L_k, LOW_D_K, g)
    expected_out, expected_w = _reference(q_low, k_low, v64, mask)
    output, weights = _attention_pair(_call_attention(attention, q_low, k_low, v64, mask), name,
                                      sizes, q_low)
    if weights.isnan().any() or output.isnan().any():
        raise ExerciseFailed(
            f"NaN when every scaled score is about -3e4 (a padding mask hides some keys): "
            f"{_UNDERFLOW}"
        )
    full = mask.expand(*lead, L_q, L_k)
    if (weights[~full] != 0).any() or (weights.sum(-1) < 0.5).any():
        how = ("the masked keys got weight (up to "
               f"{weights[~full].abs().max():.4f})" if (weights[~full] != 0).any() else
               f"the weights of the keys it may see vanished (row sums {_rows(weights)})")
        raise ExerciseFailed(
            "when every scaled score is about -3e4 (a legitimately low score: the scores are "
            f"not bounded), {how}: the masked scores were filled with a finite number "
            "(such as -1e4) that these scores go below, so a masked key outscored every key the "
            "query may see. Fill with float('-inf'), as the exercise asks: a masked key then "
            "takes no part in the softmax whatever the other scores are."
        )
    _assert_close(weights, expected_w, "the attention weights with scores about -3e4")
    _assert_close(output, expected_out, "the output with scores about -3e4")

    # 10. A second call, on other inputs of the same shapes, must leave the first result alone.
    first = _call_attention(attention, q, k, v, mask)
    _aliasing(lambda: _call_attention(attention, q * 2, v[..., :1].expand_as(k) + k, v - 1, mask),
              first, name, "the output and weights")

    # 11. Gradients reach the query, the key and the value: attention is trained through.
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    result = _call_attention(attention, qg, kg, vg, mask)
    _gradients_flow(result, {"the query": qg, "the key": kg, "the value": vg}, name,
                    "the output and weights")


def _attention_hint(passed: list, sizes: dict, message: str) -> str:
    if len(sizes["lead"]) > len(passed[-1]["lead"]):
        hint = (
            "\nHint: it works for (batch, L, d) inputs but not for (batch, h, L, d): every step "
            "must act on the last dimensions, whatever comes in front (d_k = query.size(-1), "
            "softmax(dim=-1)"
        )
        if _TRANSPOSE_HINT in message:
            return hint + ")."
        return hint + (", and transpose the last two dimensions of the key, "
                       "key.transpose(-2, -1), not key.transpose(1, 2) or key.T).")
    return _hard_coded_hint(passed, sizes, message,
                            "Read every size from the inputs, d_k = query.size(-1).")


def check_attention(attention: Callable) -> None:
    """Check ``attention(query, key, value, mask=None) -> (output, weights)``.

    Runs three sets of sizes (``ATTENTION_SIZES``), the last with heads in front, each
    without a mask, with a padding mask (batch, 1, L_k), with a masked key whose score
    dwarfs the kept ones, with a causal mask (1, L_q, L_k) and with a query whose keys are
    all masked. Masks have as many dimensions as the scores. Then a batch of one sentence
    with a single query, scaled scores up to 300, float64 inputs, scaled scores all about -3e4 under a padding mask (float64), a second call
    that must leave the first result unchanged, and gradients to the query, key and value.

    Diagnoses: an input changed in place, a result of another kind (not a pair of real
    floating tensors of the inputs' dtype and device), wrong shapes, softmax over the wrong
    dimension, a missing or wrong 1/sqrt(d_k) scaling (d_k hard-coded or read from the
    wrong dimension too), a mask that is ignored, inverted, applied after the softmax, or
    applied after it with the rows renormalized, NaN or uniform weights for a query whose
    keys are all masked, ``key.T``, code that only works for 3-dimensional inputs, a
    .squeeze() that drops a batch of one, a softmax written without the max shift (overflow)
    or with it only when the scores are large (0/0 far below zero), a masked fill of -1e4
    that low scores go below, a float32 result or float32 steps for float64 inputs, a result
    written into a tensor kept between calls, and gradients cut (@torch.no_grad(),
    .detach()) or broken by an in-place change the backward pass needs.
    """
    name = _function(attention, "check_attention", "attention")
    g = torch.Generator().manual_seed(0)
    _run_on_all_sizes(lambda sizes: _check_attention_once(attention, name, sizes, g),
                      ATTENTION_SIZES, _attention_hint)
    _check_attention_extras(attention, name, g)
    print(
        f"check_attention passed: {name} matches the course's attention (and "
        "F.scaled_dot_product_attention, except for fully masked queries) on 3-D (batch, L, d) "
        "and 4-D (batch, h, L, d) inputs of three sets of sizes: without a mask, with padding "
        "and causal masks, with a masked key whose score dwarfs the kept ones, and with a "
        "query whose keys are all masked (zero weights, not NaN); also for a batch of one "
        "sentence with one query, scaled scores up to 300 and about -3e4, and in float64, "
        "with gradients reaching the query, key and value."
    )


# ---------------------------------------------------------------- exercise 2.2: attention_loops


def _check_loops_once(attention_loops: Callable, name: str, sizes: dict) -> None:
    L_q, L_k, d_k, d_v = sizes["L_q"], sizes["L_k"], sizes["d_k"], sizes["d_v"]
    one = dict(lead=(), **sizes)  # one sequence: no leading dimensions
    g = torch.Generator().manual_seed(L_q * 100 + L_k)
    q = torch.randn(L_q, d_k, generator=g)
    k = torch.randn(L_k, d_k, generator=g)
    v = torch.randn(L_k, d_v, generator=g)
    raw = q @ k.T  # (L_q, L_k), unscaled

    # 1. Ordinary scores.
    expected_out, expected_w = _reference(q, k, v)
    result = _call_attention(attention_loops, q, k, v)
    if (isinstance(result, (tuple, list)) and len(result) == 2 and torch.is_tensor(result[0])
            and tuple(result[0].shape) == (L_q, d_k)):
        raise ExerciseFailed(
            f"your output has shape {(L_q, d_k)}, (L_q, d_k): you averaged the keys. The keys "
            "only decide the weights; the output of query i averages the values, "
            "sum over j of weights[i, j] * value[j], shape (L_q, d_v)."
        )
    output, weights = _attention_pair(result, name, one, q)
    if not _same(weights.sum(-1), torch.ones(L_q)):
        if _same(weights.sum(-2), torch.ones(L_k)):
            raise ExerciseFailed(
                "each column of your weights sums to 1: you normalized each key's scores over "
                "the queries. The softmax runs over the keys of one query: for query i, divide "
                "exp(s_ij - max_j s_ij) by its sum over j."
            )
        if (weights > 0).all() and _same(weights / weights.sum(-1, keepdim=True), expected_w):
            raise ExerciseFailed(
                "your weights are exponentials of the scaled scores not divided by their sum: "
                f"each row should sum to 1, yours sum to {_rows(weights)}. Divide query i's "
                "exponentials by their sum over the keys."
            )
        raise ExerciseFailed(
            f"each query's weights over the keys should sum to 1; yours sum to {_rows(weights)}"
        )
    if not _same(weights, expected_w):
        message = _scale_mistake(weights, raw, one)
        if message:
            raise ExerciseFailed(message)
        _assert_close(weights, expected_w, "the weights (L_q, L_k)")
    if not _same(output, expected_out):
        if _same(output, v.sum(0).expand(L_q, d_v)):
            raise ExerciseFailed(
                "every row of your output is the plain sum of the values: weight value j by "
                "query i's weight for key j, output[i] = sum over j of weights[i, j] * value[j]."
            )
        if _same(output, v.mean(0).expand(L_q, d_v)):
            raise ExerciseFailed(
                "every row of your output is the plain mean of the values: the average is "
                "weighted, output[i] = sum over j of weights[i, j] * value[j]."
            )
        _assert_close(output, expected_out, "the output (L_q, d_v)")

    # 2. Large scores: the largest scaled score is +300, and exp(300) is inf in float32.
    scaled = raw / math.sqrt(d_k)
    sign = 1.0 if scaled.max() >= -scaled.min() else -1.0
    q_big = q * (sign * 300 / scaled.abs().max())
    expected_out, expected_w = _reference(q_big, k, v)
    output, weights = _attention_pair(_call_attention(attention_loops, q_big, k, v), name, one,
                                      q_big)
    if not (weights.isfinite().all() and output.isfinite().all()):
        raise ExerciseFailed(
            "NaN or inf when a scaled score reaches 300: exp(300) overflows float32 and "
            "inf / inf is NaN. Write the softmax of notebook 01: for query i, subtract the "
            "largest of its scores before the exponential, exp(s_ij - max_j s_ij)."
        )
    # _same first: torch's assert_close imports seconds of modules on its first call.
    if not _same(weights, expected_w):
        _assert_close(weights, expected_w, "the weights with large scores")
    if not _same(output, expected_out):
        _assert_close(output, expected_out, "the output with large scores")


def _check_loops_extras(attention_loops: Callable, name: str, g: torch.Generator) -> None:
    """What every set of sizes leaves out: a single query, float64, scores far below zero, and a
    second call that must leave the first result alone."""
    # 3. A single query (one step of decoding), L_q = 1.
    one = dict(lead=(), L_q=1, L_k=3, d_k=5, d_v=2)
    q = torch.randn(1, 5, generator=g)
    k = torch.randn(3, 5, generator=g)
    v = torch.randn(3, 2, generator=g)
    expected_out, expected_w = _reference(q, k, v)
    output, weights = _attention_pair(_call_attention(attention_loops, q, k, v), name, one, q)
    _assert_close(weights, expected_w, "the weights for a single query, (1, L_k)")
    _assert_close(output, expected_out, "the output for a single query, (1, d_v)")

    # 4. float64 inputs: float64 results.
    sizes = dict(lead=(), L_q=4, L_k=3, d_k=5, d_v=2)
    q = torch.randn(4, 5, generator=g, dtype=torch.float64)
    k = torch.randn(3, 5, generator=g, dtype=torch.float64)
    v = torch.randn(3, 2, generator=g, dtype=torch.float64)
    expected_out, expected_w = _reference(q, k, v)
    output, weights = _attention_pair(_call_attention(attention_loops, q, k, v), name, sizes, q)
    _assert_close(weights, expected_w, "the weights (float64)")
    _assert_close(output, expected_out, "the output (float64)")

    # 5. Every scaled score about -3e4 (float64): exp underflows without the shift.
    q_low, k_low = _low_scores((), 4, 3, LOW_D_K, g)
    expected_out, expected_w = _reference(q_low, k_low, v)
    output, weights = _attention_pair(_call_attention(attention_loops, q_low, k_low, v), name,
                                      sizes, q_low)
    if weights.isnan().any() or output.isnan().any() or (weights.sum(-1) < 0.5).any():
        raise ExerciseFailed(f"NaN or weights that vanish when every scaled score is about -3e4: "
                             f"{_UNDERFLOW}")
    _assert_close(weights, expected_w, "the weights with scores about -3e4")
    _assert_close(output, expected_out, "the output with scores about -3e4")

    # 6. A second call, on other inputs of the same shapes, must leave the first result alone.
    first = _call_attention(attention_loops, q, k, v)
    _aliasing(lambda: _call_attention(attention_loops, q * 2, k - 1, v + 1), first, name,
              "the output and weights")


def _loops_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(
        passed, sizes, message,
        "Loop over range(L_q) and range(L_k), with L_q, L_k = query.size(0), key.size(0), and "
        "read d_k from query.size(-1).")


def check_attention_loops(attention_loops: Callable) -> None:
    """Check ``attention_loops(query, key, value) -> (output, weights)`` for one sequence,
    query (L_q, d_k), key (L_k, d_k), value (L_k, d_v), against the course's vectorized
    attention and F.scaled_dot_product_attention, on the sizes of ``LOOP_SIZES``: ordinary
    scores, then scores up to 300 (scaled), where a softmax without the max subtracted
    overflows. Then a single query, float64 inputs, scaled scores
    all about -3e4 (float64), and a second call that must leave the first result unchanged.

    Diagnoses: an input changed in place, a result of another kind or shape (the weights
    transposed, the keys averaged instead of the values), weights normalized over the
    queries or not at all, a missing or wrong 1/sqrt(d_k), the values summed or averaged
    without the weights, overflow on large scores, a shift only when the scores are large
    (0/0 far below zero), ``key.T`` on more than two dimensions, a .squeeze() that drops a
    single query, a float32 result for float64 inputs (torch.zeros without dtype=, Python
    floats), a result written into a tensor kept between calls, and sizes written into the
    code (a loop over a fixed range).
    """
    name = _function(attention_loops, "check_attention_loops", "attention_loops")
    _run_on_all_sizes(lambda sizes: _check_loops_once(attention_loops, name, sizes), LOOP_SIZES,
                      _loops_hint)
    _check_loops_extras(attention_loops, name, torch.Generator().manual_seed(4))
    shapes = " and ".join(f"(L_q={s['L_q']}, L_k={s['L_k']}, d_k={s['d_k']}, d_v={s['d_v']})"
                          for s in LOOP_SIZES)
    print(
        f"check_attention_loops passed: {name} gives the weights and output of the vectorized "
        f"attention (and F.scaled_dot_product_attention) for {shapes}, for a single query and "
        "in float64, and stays finite when a scaled score reaches 300 and when every scaled "
        "score is about -3e4."
    )


# ---------------------------------------------------------------- exercise 2.3: hard_lookup

_INDEX_HINT = (
    "\nHint: value[index] indexes the first dimension of value, the batch, not the keys. Pick "
    "along the keys' dimension, -2, with the leading dimensions kept: torch.gather(value, -2, "
    "index.unsqueeze(-1).expand(*index.shape, d_v)), or F.one_hot(index, L_k).to(value.dtype) "
    "@ value."
)


def _pick(value: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Row index[..., i] of value (..., L_k, d_v) for every query i: (..., L_q, d_v)."""
    return torch.gather(value, -2, index.unsqueeze(-1).expand(*index.shape, value.size(-1)))


def _picked(output: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """For each output row, the index of the value row it equals, or -1 when it equals none."""
    gaps = (output.unsqueeze(-2) - value.unsqueeze(-3)).abs().amax(-1)  # (..., L_q, L_k)
    match = gaps < 1e-5
    return torch.where(match.any(-1), match.float().argmax(-1), -1)


def _check_hard_lookup_once(hard_lookup: Callable, name: str, sizes: dict,
                            g: torch.Generator) -> None:
    lead, L_q, L_k, d_k, d_v = sizes["lead"], sizes["L_q"], sizes["L_k"], sizes["d_k"], sizes["d_v"]
    q = torch.randn(*lead, L_q, d_k, generator=g)
    k = torch.randn(*lead, L_k, d_k, generator=g)
    v = torch.randn(*lead, L_k, d_v, generator=g)
    # A near tie for query 0 of every sequence: key 0 = 3 q_0 and key 1 = 3.006 q_0, the best
    # by a hair (0.2 %). A softmax shares the weight between them even with the query
    # multiplied by 20; the argmax picks key 1.
    k[..., 0, :] = 3 * q[..., 0, :]
    k[..., 1, :] = 3.006 * q[..., 0, :]
    scores = q @ k.transpose(-2, -1)  # (..., L_q, L_k)
    best = scores.argmax(-1)  # (..., L_q)
    assert (best[..., 0] == 1).all()
    expected = _pick(v, best)

    hints = ((r"out of bounds for dimension 0", _INDEX_HINT),)
    result = _call_attention(hard_lookup, q, k, v, extra_hints=hints)
    got = _tensor(result, name, "the output", like=q)
    shape = tuple(got.shape)
    hint = ""
    if shape == (*lead, L_q, d_k):
        hint = (" That is (..., L_q, d_k): you returned keys. The key decides which row is "
                "picked; the row returned is the value's.")
    elif shape == (*lead, L_q, 1):
        hint = (" torch.gather returns one number per index: expand the index over the d_v "
                "columns, index.unsqueeze(-1).expand(*index.shape, d_v).")
    elif shape == (*lead, L_k, d_v):
        hint = (" One row per key: the argmax ran over the queries (dim=-2). For each query, "
                "take it over the keys: scores.argmax(dim=-1).")
    _shape(got, (*lead, L_q, d_v), "the output (..., L_q, d_v)", hint)
    if _same(got, expected):
        return

    if _same(got, scaled_dot_product_attention(q, k, v)[0]):
        raise ExerciseFailed(
            "your output is the soft average, softmax(Q K^T / sqrt(d_k)) V: the weights spread "
            "over every key. The hard lookup returns the value of the single best key: "
            "index = scores.argmax(dim=-1), then that row of value."
        )
    picks = _picked(got, v)
    first = (0,) * len(lead)
    if not (picks >= 0).all():
        where = tuple((picks < 0).nonzero()[0].tolist())
        s0 = scores[first][0, :2].tolist()
        raise _generic(
            f"your output for query {where[-1]} of sequence {where[:-1]} is none of the values but "
            f"a mix of them. A softmax is never exactly one-hot: query 0 scores keys 0 and 1 at "
            f"{s0[0]:.3f} and {s0[1]:.3f} (first sequence), a near tie that shares the weight "
            "even with the query multiplied by 20 (the notebook's largest factor). Pick the one "
            "best key: index = scores.argmax(dim=-1), then that row of value (torch.gather, or "
            "F.one_hot(index, L_k).to(value.dtype) @ value)."
        )
    unit_q = q / q.norm(dim=-1, keepdim=True)
    unit_k = k / k.norm(dim=-1, keepdim=True)
    distance = (q.unsqueeze(-2) - k.unsqueeze(-3)).norm(dim=-1)  # (..., L_q, L_k)
    mistakes = [
        (scores.argmin(-1), "you picked the value of the key with the lowest score: the lookup "
                            "takes the highest, scores.argmax(dim=-1)."),
        (distance.argmin(-1),
         "you picked the key nearest to the query (the smallest distance |q - k|). Attention "
         "scores by the dot product q.k, which also grows with the key's length: query 0's "
         "nearest key is key 0 (3 q_0), but key 1 (3.006 q_0) scores higher. Take "
         "(query @ key.transpose(-2, -1)).argmax(dim=-1)."),
        ((unit_q @ unit_k.transpose(-2, -1)).argmax(-1),
         "you picked the key of the highest cosine similarity, the dot product of unit vectors. "
         "Attention's score q.k keeps the lengths: a longer key in the same direction scores "
         "higher (the notebook's 'on' attends most to the long 'sat'). Take "
         "(query @ key.transpose(-2, -1)).argmax(dim=-1)."),
    ]
    for index, message in mistakes:
        if _same(got, _pick(v, index)):
            raise ExerciseFailed(message)
    wrong = tuple((picks != best).nonzero()[0].tolist())
    raise _generic(
        f"each row of your output is one of the values, but not always the value of the "
        f"best-scoring key: for query {wrong[-1]} of sequence {wrong[:-1]} the highest score "
        f"q.k is key {int(best[wrong])}'s, and your row is the value of key {int(picks[wrong])}. "
        "Take index = (query @ key.transpose(-2, -1)).argmax(dim=-1) and pick value's row "
        "index[..., i] for query i, in the query's own sequence."
    )


def _check_ties(hard_lookup: Callable, name: str, g: torch.Generator) -> None:
    """Exact ties: integer queries and keys (exact dot products), key L_k - 1 a copy of key 0,
    the best key of query 0. Any one of the tied keys' values passes, and so does their mean
    (the limit of attention as the query grows); their sum does not."""
    lead, L_q, L_k, d_k, d_v = (2,), 4, 5, 3, 2
    q = torch.randint(-2, 3, (*lead, L_q, d_k), generator=g).float()
    q[..., 0, :] = torch.randint(1, 3, (*lead, d_k), generator=g).float()  # no zero component
    k = torch.randint(-2, 3, (*lead, L_k, d_k), generator=g).float()
    k[..., 0, :] = 3 * q[..., 0, :]  # 3 |q_0|^2 beats any key of components in [-2, 2]
    k[..., -1, :] = k[..., 0, :]  # an exact tie with key 0
    v = torch.randn(*lead, L_k, d_v, generator=g)
    scores = q @ k.transpose(-2, -1)
    tied = scores == scores.amax(-1, keepdim=True)  # (..., L_q, L_k), exact: integer scores
    got = _tensor(_call_attention(hard_lookup, q, k, v), name, "the output", like=q)
    _shape(got, (*lead, L_q, d_v), "the output (..., L_q, d_v)",
           _squeezed(got.shape, (*lead, L_q, d_v)))
    gaps = (got.unsqueeze(-2) - v.unsqueeze(-3)).abs().amax(-1)  # (..., L_q, L_k)
    one_of = ((gaps < 1e-5) & tied).any(-1)
    mean = (tied.float() / tied.sum(-1, keepdim=True)) @ v
    ok = one_of | ((got - mean).abs().amax(-1) < 1e-5)
    if ok.all():
        return
    if _same(got, tied.float() @ v):
        raise ExerciseFailed(
            "when two keys tie for the highest score, your output is the sum of their values: a "
            "one-hot made with scores == scores.max(...) marks every tied key, so the product "
            "with value adds them up (query 0 of each sequence here: key 0 and key "
            f"{L_k - 1} are the same vector). Take one index per query, "
            "scores.argmax(dim=-1) (the first of the tied keys), then its row of value."
        )
    where = tuple((~ok).nonzero()[0].tolist())
    keys = tied[where].nonzero().flatten().tolist()
    raise _generic(
        f"for query {where[-1]} of sequence {where[:-1]}, keys {keys} tie for the highest score "
        f"({scores[where].max():.0f}, integer queries and keys), and your row is neither the value "
        "of one of them nor their mean. Take index = scores.argmax(dim=-1), which picks the first "
        "of the tied keys, and that row of value."
    )


def _check_hard_lookup_extras(hard_lookup: Callable, name: str, g: torch.Generator) -> None:
    """What every set of sizes leaves out: exact ties, a batch of one sentence with one query,
    float64, and a second call that must leave the first result alone."""
    _check_ties(hard_lookup, name, g)

    # A batch of one sentence with a single query, then float64 inputs (the pick is exact).
    for dtype, what in [(torch.float32, "a batch of one sentence with one query, (1, 1, d_k)"),
                        (torch.float64, "float64 inputs")]:
        lead, L_q = ((1,), 1) if dtype == torch.float32 else ((2,), 3)
        q = torch.randn(*lead, L_q, 5, generator=g, dtype=dtype)
        k = torch.randn(*lead, 4, 5, generator=g, dtype=dtype)
        v = torch.randn(*lead, 4, 3, generator=g, dtype=dtype)
        expected = _pick(v, (q @ k.transpose(-2, -1)).argmax(-1))
        got = _tensor(_call_attention(hard_lookup, q, k, v), name, "the output", like=q)
        _shape(got, expected.shape, f"the output (..., L_q, d_v) for {what}",
               _squeezed(got.shape, expected.shape))
        _assert_close(got, expected, f"the output for {what}")

    # A second call, on other inputs of the same shapes, must leave the first result alone.
    first = _call_attention(hard_lookup, q, k, v)
    _aliasing(lambda: _call_attention(hard_lookup, -q, k, v * 2 + 1), first, name, "the output")


def _hard_lookup_hint(passed: list, sizes: dict, message: str) -> str:
    if len(sizes["lead"]) > len(passed[-1]["lead"]):
        return (
            "\nHint: it works for (batch, L, d) inputs but not for (batch, h, L, d): every step "
            "must act on the last dimensions, whatever comes in front: the scores with "
            "key.transpose(-2, -1), the argmax over dim=-1, and the pick along dim=-2 with every "
            "leading dimension kept (torch.gather(value, -2, index.unsqueeze(-1).expand("
            "*index.shape, d_v)), or F.one_hot(index, L_k).to(value.dtype) @ value)."
        )
    return _hard_coded_hint(passed, sizes, message, "Read every size from the inputs' shapes.")


def check_hard_lookup(hard_lookup: Callable) -> None:
    """Check ``hard_lookup(query, key, value)``: for every query, the value of the key with
    the highest score q.k, shape (..., L_q, d_v); the limit of attention when one score
    dominates. Runs the sizes of ``ATTENTION_SIZES`` (3-D, then 4-D with heads), each with a
    near tie for query 0 (key 1 = 1.002 key 0, both along the query), which a softmax shares
    and an argmax does not. Then an exact tie (integer queries and keys, two equal keys): one
    of the tied keys' values passes, and so does their mean, the limit of attention; then a
    batch of one sentence with a single query, float64 inputs, and a second call that must
    leave the first result unchanged.

    Diagnoses: an input changed in place, a result of another kind, dtype, device or shape
    (keys returned, a gather without the index expanded, the argmax over the queries,
    ``value[index]`` indexing the batch), the soft average returned, a mix of values (a
    softmax of multiplied scores), the lowest score, the nearest key by distance, the highest
    cosine similarity, ``key.T``, code that only works for 3-dimensional inputs, the sum of
    the tied values (a one-hot from ``scores == max``), a .squeeze() that drops a batch of
    one, a float32 result for float64 inputs (a one-hot's .float(), torch.zeros without
    dtype=), a result written into a tensor kept between calls, and sizes written into the
    code.
    """
    name = _function(hard_lookup, "check_hard_lookup", "hard_lookup")
    g = torch.Generator().manual_seed(3)
    _run_on_all_sizes(lambda sizes: _check_hard_lookup_once(hard_lookup, name, sizes, g),
                      ATTENTION_SIZES, _hard_lookup_hint)
    _check_hard_lookup_extras(hard_lookup, name, g)
    print(
        f"check_hard_lookup passed: {name} returns the value of the best-scoring key for every "
        "query, on 3-D (batch, L, d) and 4-D (batch, h, L, d) inputs of three sets of sizes, "
        "including a near tie (scores 0.2 % apart) that a softmax would share, an exact tie "
        "(one of the tied values, not their sum), a batch of one sentence with one query, and "
        "float64 inputs."
    )
