"""Checks for the exercises in ``exercises/``: each runs a learner's function on small
inputs, compares the result with the course's own code, and names the mistake when there
is one.

    from annotated.support.grading import check_attention
    check_attention(attention)   # prints one line when it passes, raises ExerciseFailed if not

The references: ``torch.nn.functional.scaled_dot_product_attention`` and
``annotated.attention.scaled_dot_product_attention`` (notebook 02), the head split and
merge of ``annotated.multi_head.MultiHeadAttention`` (notebook 04) and
``annotated.positional.sinusoidal_table`` (notebook 05). Each check first compares with a
list of typical mistakes, so a wrong answer gets a diagnosis rather than a table of numbers.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.positional import sinusoidal_table

# Tolerances of the comparisons: float32 sums in a different order differ by about 1e-6.
ATOL, RTOL = 1e-5, 1e-4


class ExerciseFailed(AssertionError):
    """A check found a mistake; the message says which one and how to fix it."""


def _describe(args: tuple) -> str:
    return ", ".join(
        f"tensor of shape {tuple(a.shape)}" if torch.is_tensor(a) else repr(a) for a in args
    )


def _call(fn: Callable, *args):
    """Call the learner's function; an exception becomes a message that says where to look."""
    name = getattr(fn, "__name__", "your function")
    try:
        return fn(*args)
    except NotImplementedError:
        raise ExerciseFailed(
            f"{name} raised NotImplementedError: the exercise is not done yet. Replace "
            "`# YOUR CODE HERE` and `raise NotImplementedError()` in its cell with your code, "
            "run that cell, then run this check again."
        ) from None
    except Exception as err:
        hint = ""
        if "view size is not compatible" in str(err):
            # The classic merge mistake: transpose(1, 2) then view.
            hint = (
                "\nHint: after transpose(1, 2) the tensor is no longer contiguous in memory, so "
                ".view cannot merge its dimensions; use .reshape(...) (or .contiguous().view(...))."
            )
        raise ExerciseFailed(
            f"{name}({_describe(args)}) raised {type(err).__name__}: {err}{hint}"
        ) from err


def _tensor(result, name: str, what: str) -> torch.Tensor:
    if result is None:
        raise ExerciseFailed(f"{name} returned None: did you forget the `return` of {what}?")
    if not torch.is_tensor(result):
        raise ExerciseFailed(f"{name} should return {what} as a tensor, got {type(result).__name__}")
    return result


def _shape(got: torch.Tensor, expected: tuple, what: str, hint: str = "") -> None:
    if tuple(got.shape) != tuple(expected):
        raise ExerciseFailed(
            f"wrong shape for {what}: expected {tuple(expected)}, got {tuple(got.shape)}.{hint}"
        )


def _same(got: torch.Tensor, candidate: torch.Tensor, atol: float = ATOL) -> bool:
    """True when ``got`` equals ``candidate`` up to float32 rounding (NaN never equals)."""
    if got.shape != candidate.shape:
        return False
    return torch.allclose(got.float(), candidate.float(), atol=atol, rtol=RTOL)


def _assert_close(got: torch.Tensor, expected: torch.Tensor, what: str, atol: float = ATOL) -> None:
    """The last resort when no known mistake fits: torch's report of what differs where."""
    try:
        torch.testing.assert_close(got.float(), expected.float(), atol=atol, rtol=RTOL)
    except AssertionError as err:
        raise ExerciseFailed(f"mismatch in {what}, compared with the reference:\n{err}") from None


def _rows(weights: torch.Tensor) -> str:
    return "[" + ", ".join(f"{s:.4f}" for s in weights.sum(-1).flatten()[:6].tolist()) + ", ...]"


# ---------------------------------------------------------------- exercise 02: attention


def _attention_pair(result, name: str, shapes: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpack (output, weights) and check both shapes."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = type(result).__name__
        if torch.is_tensor(result):
            got = f"one tensor of shape {tuple(result.shape)}"
        raise ExerciseFailed(f"{name} should return a pair (output, weights), got {got}")
    output = _tensor(result[0], name, "the output")
    weights = _tensor(result[1], name, "the weights")
    L_q, L_k, d_v = shapes["L_q"], shapes["L_k"], shapes["d_v"]
    lead = tuple(shapes["lead"])
    hint = ""
    if tuple(weights.shape) == (*lead, L_k, L_q):
        hint = (" Your weights are transposed: one row per query and one column per key comes "
                "from query @ key.transpose(-2, -1).")
    _shape(weights, (*lead, L_q, L_k), "the weights (..., L_q, L_k)", hint)
    _shape(output, (*lead, L_q, d_v), "the output (..., L_q, d_v)")
    return output, weights


def check_attention(attention: Callable) -> None:
    """Check ``attention(query, key, value, mask=None) -> (output, weights)``.

    Diagnoses: wrong shapes, softmax over the wrong dimension, a missing or wrong
    1/sqrt(d_k) scaling, a mask that is ignored, inverted or applied after the softmax,
    NaN or uniform weights for a query whose keys are all masked, and code that only works
    for 3-dimensional inputs.
    """
    name = getattr(attention, "__name__", "attention")
    g = torch.Generator().manual_seed(0)
    # Every size different, so a transposed or swapped tensor shows in the shape.
    batch, L_q, L_k, d_k, d_v = 2, 3, 5, 4, 6
    shapes = dict(L_q=L_q, L_k=L_k, d_v=d_v, lead=(batch,))
    q = torch.randn(batch, L_q, d_k, generator=g)
    k = torch.randn(batch, L_k, d_k, generator=g)
    v = torch.randn(batch, L_k, d_v, generator=g)
    raw = q @ k.transpose(-2, -1)  # unscaled scores (batch, L_q, L_k)
    expected_out, expected_w = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(expected_out, F.scaled_dot_product_attention(q, k, v))

    # 1. No mask.
    output, weights = _attention_pair(_call(attention, q, k, v), name, shapes)
    if weights.isnan().any():
        raise ExerciseFailed("the weights contain NaN although no mask was given")
    if not _same(weights.sum(-1), torch.ones(batch, L_q)):
        if _same(weights.sum(-2), torch.ones(batch, L_k)):
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
        mistakes = [
            (raw, "you forgot the 1/sqrt(d_k) scaling: your weights equal softmax(Q K^T) "
                  f"without the division by sqrt(d_k) = {math.sqrt(d_k):g}. Divide the scores "
                  "by math.sqrt(d_k) before the softmax (paper §3.2.1)."),
            (raw / d_k, f"you divided the scores by d_k = {d_k} instead of sqrt(d_k) = "
                        f"{math.sqrt(d_k):g}: use math.sqrt(d_k)."),
            (raw * math.sqrt(d_k), "you multiplied the scores by sqrt(d_k) instead of dividing "
                                   "by it."),
        ]
        for scores, message in mistakes:
            if _same(weights, scores.softmax(-1)):
                raise ExerciseFailed(message)
        _assert_close(weights, expected_w, "the attention weights (no mask)")
    if not _same(output, expected_out):
        _assert_close(output, expected_out, "the output weights @ value (no mask)")

    # 2. A padding mask (batch, 1, L_k): every query may attend to some key.
    mask = torch.tensor([[True, True, True, True, False], [True, True, False, False, False]])
    mask = mask.unsqueeze(1)  # (batch, 1, L_k): the same keys hidden for every query
    full = mask.expand(batch, L_q, L_k)
    expected_out, expected_w = scaled_dot_product_attention(q, k, v, mask)
    output, weights = _attention_pair(_call(attention, q, k, v, mask), name, shapes)
    hidden = weights[~full]
    if weights.isnan().any():
        raise ExerciseFailed(
            "with a mask your weights contain NaN although every query may attend to some key; "
            "fill the masked scores with float('-inf') (not the weights), before the softmax."
        )
    if not _same(hidden, torch.zeros_like(hidden)):
        if _same(weights[full], torch.zeros_like(weights[full])):
            raise ExerciseFailed(
                "your mask is inverted: keys where the mask is True got zero weight. True means "
                "'may attend', so hide the keys where it is False: scores.masked_fill(~mask, "
                "float('-inf'))."
            )
        if _same(weights, (raw / math.sqrt(d_k)).softmax(-1)):
            raise ExerciseFailed(
                "the mask was ignored: with a mask your weights are the same as without one. "
                "Fill the scores where the mask is False with float('-inf') before the softmax."
            )
        raise ExerciseFailed(
            f"keys where the mask is False still get weight (up to {hidden.abs().max():.4f}); "
            "fill their scores with float('-inf') before the softmax so they get exactly 0."
        )
    if not _same(weights, expected_w):
        unmasked = (raw / math.sqrt(d_k)).softmax(-1)
        if _same(weights, unmasked * full):
            raise ExerciseFailed(
                "the mask was applied after the softmax: the masked keys got weight 0, but the "
                f"rows no longer sum to 1 (sums {_rows(weights)}). Mask the scores with "
                "float('-inf') before the softmax, so the softmax shares the weight among the "
                "keys that remain."
            )
        _assert_close(weights, expected_w, "the attention weights with a padding mask")
    _assert_close(output, expected_out, "the output with a padding mask")

    # 3. A query whose keys are all masked: zero weights and zero output, not NaN.
    mask = torch.rand(batch, L_q, L_k, generator=g) > 0.4
    mask[..., 0] = True
    mask[0, 1] = False  # query 1 of the first sequence may attend to nothing
    expected_out, expected_w = scaled_dot_product_attention(q, k, v, mask)
    output, weights = _attention_pair(_call(attention, q, k, v, mask), name, shapes)
    if weights.isnan().any() or output.isnan().any():
        raise ExerciseFailed(
            "a query whose keys are all masked gets NaN: the softmax of a row of -inf is 0/0. "
            "Such a query sees nothing, so the course gives it zero weights: after the "
            "softmax, weights.masked_fill(~mask, 0.0)."
        )
    if _same(weights[0, 1], torch.full((L_k,), 1 / L_k)):
        raise ExerciseFailed(
            f"a query whose keys are all masked got uniform weights 1/L_k = {1 / L_k:.4f}: the "
            "scores were filled with a finite number (such as -1e9), so the softmax spread evenly "
            "over keys it may not see. The course gives such a query zero weights: after the "
            "softmax, weights.masked_fill(~mask, 0.0)."
        )
    _assert_close(weights, expected_w, "the attention weights with a fully masked row")
    _assert_close(output, expected_out, "the output with a fully masked row")

    # 4. Heads in front: (batch, h, L, d_k) inputs, as multi-head attention calls it.
    h = 3
    q4 = torch.randn(batch, h, L_q, d_k, generator=g)
    k4 = torch.randn(batch, h, L_k, d_k, generator=g)
    v4 = torch.randn(batch, h, L_k, d_v, generator=g)
    mask4 = torch.tensor([[True, True, True, False, False], [True] * L_k]).view(batch, 1, 1, L_k)
    expected = F.scaled_dot_product_attention(q4, k4, v4, attn_mask=mask4)
    hint = (
        "\nHint: it works for (batch, L, d_k) inputs but not for (batch, h, L, d_k); transpose "
        "the last two dimensions of the key, key.transpose(-2, -1), not key.transpose(1, 2) or key.T."
    )
    try:
        result = _call(attention, q4, k4, v4, mask4)
        shapes4 = dict(shapes, lead=(batch, h))
        output, _ = _attention_pair(result, name, shapes4)
        _assert_close(output, expected, "the output for (batch, h, L, d_k) inputs")
    except ExerciseFailed as err:
        raise ExerciseFailed(f"{err}{hint}") from None

    print(
        f"check_attention passed: {name} gives the right shapes, divides by sqrt(d_k), takes the "
        "softmax over the keys, masks before the softmax, gives fully masked queries zero "
        "weights, and matches F.scaled_dot_product_attention with heads in front."
    )


# ---------------------------------------------------------------- exercise 04: heads


def check_split_heads(split_heads: Callable) -> None:
    """Check ``split_heads(x, h)``: (batch, L, d_model) -> (batch, h, L, d_k).

    Diagnoses: the missing transpose, the view straight to (batch, h, L, d_k) (right shape,
    wrong grouping) and heads that take every h-th column instead of a block.
    """
    name = getattr(split_heads, "__name__", "split_heads")
    batch, L, h, d_k = 2, 3, 2, 4
    d_model = h * d_k
    # Distinct numbers: every way of regrouping them gives a different tensor.
    x = torch.arange(batch * L * d_model, dtype=torch.float32).view(batch, L, d_model)
    expected = x.view(batch, L, h, d_k).transpose(1, 2)  # (batch, h, L, d_k)

    got = _tensor(_call(split_heads, x, h), name, "the split tensor")
    hint = ""
    if tuple(got.shape) == (batch, L, h, d_k):
        hint = (" You have (batch, L, h, d_k): the heads must come before the positions, so "
                "that attention runs over the L positions of each head; add .transpose(1, 2).")
    call = f"{name}(x of shape (batch={batch}, L={L}, d_model={d_model}), h={h})"
    _shape(got, (batch, h, L, d_k), call, hint)
    if _same(got, expected):
        print(
            f"check_split_heads passed: head i of {name} holds columns i*d_k .. (i+1)*d_k - 1 of "
            "every position, in shape (batch, h, L, d_k)."
        )
        return
    if _same(got, x.view(batch, h, L, d_k)):
        raise ExerciseFailed(
            "the shape is right but the numbers are grouped wrongly: view(batch, h, L, d_k) "
            "without a transpose cuts each sequence's memory into h consecutive blocks, so a head "
            "gets whole positions' vectors (features of different positions mixed) instead of "
            f"its own d_k = {d_k} columns of every position. View as (batch, L, h, d_k) first, "
            "then .transpose(1, 2)."
        )
    if _same(got, x.view(batch, L, d_k, h).permute(0, 3, 1, 2)):
        raise ExerciseFailed(
            "head i takes every h-th column (i, i + h, i + 2h, ...) instead of the block of "
            "d_k consecutive columns i*d_k .. (i+1)*d_k - 1: view as (batch, L, h, d_k), "
            "not (batch, L, d_k, h)."
        )
    _assert_close(got, expected, f"{name}(x, h={h})")


def check_merge_heads(merge_heads: Callable) -> None:
    """Check ``merge_heads(x)``: (batch, h, L, d_k) -> (batch, L, h * d_k), the concatenation.

    Diagnoses: ``.view`` after the transpose (the tensor is not contiguous), the reshape
    without transposing back, and a round trip that does not give back the input.
    """
    name = getattr(merge_heads, "__name__", "merge_heads")
    batch, L, h, d_k = 2, 3, 2, 4
    d_model = h * d_k
    # Contiguous, like the output of attention: the state merge_heads receives in the model.
    x = torch.arange(batch * h * L * d_k, dtype=torch.float32).view(batch, h, L, d_k)
    expected = x.transpose(1, 2).reshape(batch, L, d_model)  # (batch, L, d_model)

    got = _tensor(_call(merge_heads, x), name, "the merged tensor")
    _shape(got, (batch, L, d_model), f"{name}(x of shape (batch={batch}, h={h}, L={L}, d_k={d_k}))")
    if not _same(got, expected):
        if _same(got, x.reshape(batch, L, d_model)):
            raise ExerciseFailed(
                "you merged without transposing back: reshape(batch, L, d_model) straight from "
                "(batch, h, L, d_k) mixes the positions. First .transpose(1, 2), to "
                "(batch, L, h, d_k), then .reshape(batch, L, h * d_k)."
            )
        _assert_close(got, expected, f"{name}(x)")

    # The round trip: merging the split of y gives y back.
    y = torch.arange(batch * L * d_model, dtype=torch.float32).view(batch, L, d_model)
    split = y.view(batch, L, h, d_k).transpose(1, 2)  # (batch, h, L, d_k)
    _assert_close(_tensor(_call(merge_heads, split), name, "the merged tensor"), y,
                  f"the round trip {name}(split_heads(y)), which should give y back")
    print(
        f"check_merge_heads passed: {name} puts the h heads side by side, (batch, L, h * d_k), "
        "and undoes the split."
    )


# ---------------------------------------------------------------- exercise 05: positions


def _table(max_len: int, d_model: int, exponents: torch.Tensor, order: str = "sin-cos") -> torch.Tensor:
    """A sinusoid table in float64 with the given exponent per column pair, for the mistakes."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    angles = pos / 10000.0 ** exponents  # (max_len, d_model / 2) or (max_len, d_model)
    if angles.size(1) == d_model:  # one exponent per column, not per pair
        table = torch.empty(max_len, d_model, dtype=torch.float64)
        table[:, 0::2] = torch.sin(angles[:, 0::2])
        table[:, 1::2] = torch.cos(angles[:, 1::2])
        return table
    sin, cos = torch.sin(angles), torch.cos(angles)
    if order == "halves":
        return torch.cat([sin, cos], dim=1)
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = (sin, cos) if order == "sin-cos" else (cos, sin)
    return table


def check_sinusoidal_table(sinusoidal_table_fn: Callable) -> None:
    """Check ``sinusoidal_table(max_len, d_model)`` against the paper's §3.5 formula.

    Diagnoses: wrong shape, sin and cos swapped, sines and cosines in two halves instead of
    interleaved, the exponent i/d_model instead of 2i/d_model, a separate frequency for the
    odd dimensions, a missing /d_model and pos multiplied instead of divided.
    """
    name = getattr(sinusoidal_table_fn, "__name__", "sinusoidal_table")
    max_len, d_model = 50, 16
    expected = sinusoidal_table(max_len, d_model)
    got = _tensor(_call(sinusoidal_table_fn, max_len, d_model), name, "the table")
    hint = " Rows are positions, columns dimensions." if tuple(got.shape) == (d_model, max_len) else ""
    _shape(got, (max_len, d_model), f"{name}(max_len={max_len}, d_model={d_model})", hint)
    if got.isnan().any() or got.isinf().any():
        raise ExerciseFailed(
            f"{name}'s table contains NaN or inf; every entry is a sine or cosine, in [-1, 1]"
        )
    if _same(got, expected, atol=1e-4):
        print(
            f"check_sinusoidal_table passed: {name} puts sin(pos / 10000^(2i/d_model)) in "
            "dimension 2i and the cosine of the same angle in dimension 2i + 1."
        )
        return
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i, per pair
    row0 = ", ".join(f"{x:.0f}" for x in got[0, :4].tolist())
    mistakes = [
        (_table(max_len, d_model, two_i / d_model, "cos-sin"),
         f"sin and cos are swapped: position 0 should read [0, 1, 0, 1, ...] (sin 0 = 0 in the "
         f"even dimensions 2i, cos 0 = 1 in the odd dimensions 2i + 1), yours reads [{row0}, ...]."),
        (_table(max_len, d_model, two_i / d_model, "halves"),
         "your sines fill the first half of the dimensions and the cosines the second; the "
         "paper interleaves them, sin in dimension 2i and cos in 2i + 1: table[:, 0::2] = sin, "
         "table[:, 1::2] = cos."),
        (_table(max_len, d_model, two_i / 2 / d_model),
         "the exponent is i/d_model where the paper has 2i/d_model (2i is the index of the "
         "even dimension): use torch.arange(0, d_model, 2) / d_model."),
        (_table(max_len, d_model, torch.arange(d_model, dtype=torch.float64) / d_model),
         "dimension 2i + 1 uses the exponent (2i + 1)/d_model: the sine and cosine of a pair share "
         "one frequency, 1 / 10000^(2i/d_model), so the exponent steps by pairs, not by columns."),
        (_table(max_len, d_model, two_i),
         "the exponent is 2i where the paper has 2i/d_model: divide by d_model."),
    ]
    for candidate, message in mistakes:
        if _same(got, candidate, atol=1e-4):
            raise ExerciseFailed(message)
    # pos * 10000^(2i/d_model) has angles up to 10^5.5, beyond float32's precision for
    # sine: compare the first two pairs only, whose angles stay small.
    wrong_sign = _table(max_len, d_model, -two_i / d_model)
    if _same(got[:, :4], wrong_sign[:, :4], atol=1e-3):
        raise ExerciseFailed(
            "you multiplied pos by 10000^(2i/d_model) instead of dividing (a lost minus sign in "
            "exp(-2i * log(10000) / d_model)?): the angle is pos / 10000^(2i/d_model)."
        )
    _assert_close(got, expected, f"{name}(max_len={max_len}, d_model={d_model})", atol=1e-4)
