"""Checks of notebook 02's exercises: scaled dot-product attention, compared with
``torch.nn.functional.scaled_dot_product_attention`` and ``annotated.attention``."""

import math
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.support.grading.core import (
    ExerciseFailed, _assert_close, _call, _function, _hard_coded_hint, _rows, _run_on_all_sizes,
    _same, _shape, _tensor,
)

# Two 3-D sets (batch, L, d) and one 4-D set (batch, h, L, d), as multi-head attention
# calls it; d_k is never 4, the d_k of a hand-worked example, no size repeats inside a set,
# and d_k changes between sets.
ATTENTION_SIZES = [
    dict(lead=(2,), L_q=3, L_k=5, d_k=6, d_v=7),
    dict(lead=(3,), L_q=7, L_k=4, d_k=10, d_v=5),
    dict(lead=(4, 5), L_q=2, L_k=6, d_k=9, d_v=3),  # lead = (batch, h)
]
SIZE_SETS = {"check_attention": ATTENTION_SIZES}

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


def _call_attention(attention: Callable, *args):
    """Call the learner's attention; ``key.T`` on a 3-D or 4-D key is named, whether the
    shapes then fail or happen to fit, from the warning torch gives for it."""
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # torch warns about x.T once per process otherwise
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                hints = ((_MATMUL_ERROR, _TRANSPOSE_HINT),)
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
    _shape(weights, (*lead, L_q, L_k), "the weights (..., L_q, L_k)", hint)
    _shape(output, (*lead, L_q, d_v), "the output (..., L_q, d_v)")
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
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
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
    all masked. Masks have as many dimensions as the scores.

    Diagnoses: an input changed in place, a result of another kind (not a pair of real
    floating tensors of the inputs' dtype and device), wrong shapes, softmax over the wrong
    dimension, a missing or wrong 1/sqrt(d_k) scaling (d_k hard-coded or read from the
    wrong dimension too), a mask that is ignored, inverted, applied after the softmax, or
    applied after it with the rows renormalized, NaN or uniform weights for a query whose
    keys are all masked, ``key.T``, and code that only works for 3-dimensional inputs.
    """
    name = _function(attention, "check_attention", "attention")
    g = torch.Generator().manual_seed(0)
    _run_on_all_sizes(lambda sizes: _check_attention_once(attention, name, sizes, g),
                      ATTENTION_SIZES, _attention_hint)
    print(
        f"check_attention passed: {name} matches the course's attention (and "
        "F.scaled_dot_product_attention, except for fully masked queries) on 3-D (batch, L, d) "
        "and 4-D (batch, h, L, d) inputs of three sets of sizes: without a mask, with padding "
        "and causal masks, with a masked key whose score dwarfs the kept ones, and with a "
        "query whose keys are all masked (zero weights, not NaN)."
    )

