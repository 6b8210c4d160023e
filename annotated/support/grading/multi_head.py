"""Checks of notebook 04's exercises: the head split and merge of
``annotated.multi_head.MultiHeadAttention``."""

from collections.abc import Callable

import torch

from annotated.support.grading.core import (
    ExerciseFailed, _assert_close, _call, _function, _hard_coded_hint, _run_on_all_sizes, _same,
    _shape, _tensor,
)

HEAD_SIZES = [dict(batch=2, L=3, h=5, d_k=6), dict(batch=4, L=7, h=2, d_k=3)]
SIZE_SETS = {"check_split_heads": HEAD_SIZES, "check_merge_heads": HEAD_SIZES}


def _check_split_once(split_heads: Callable, name: str, sizes: dict) -> None:
    batch, L, h, d_k = sizes["batch"], sizes["L"], sizes["h"], sizes["d_k"]
    d_model = h * d_k
    # Distinct numbers: every way of regrouping them gives a different tensor.
    x = torch.arange(batch * L * d_model, dtype=torch.float32).view(batch, L, d_model)
    expected = x.view(batch, L, h, d_k).transpose(1, 2)  # (batch, h, L, d_k)

    got = _tensor(_call(split_heads, x, h, roles=("x", "h")), name, "the split tensor", like=x)
    hint = ""
    if tuple(got.shape) == (batch, L, h, d_k):
        hint = (" You have (batch, L, h, d_k): the heads must come before the positions, so "
                "that attention runs over the L positions of each head; add .transpose(1, 2).")
    call = f"{name}(x of shape (batch={batch}, L={L}, d_model={d_model}), h={h})"
    _shape(got, (batch, h, L, d_k), call, hint)
    if _same(got, expected):
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


def _heads_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(
        passed, sizes, message, "Read the sizes from the input (batch, L, d_model = x.shape, or "
        "batch, h, L, d_k = x.shape) and use the h you are given.")


def check_split_heads(split_heads: Callable) -> None:
    """Check ``split_heads(x, h)``: (batch, L, d_model) -> (batch, h, L, d_k), on the two
    sets of sizes of ``HEAD_SIZES``.

    Diagnoses: an input changed in place, a result of another dtype or device, the missing
    transpose, the view straight to (batch, h, L, d_k) (right shape, wrong grouping), heads
    that take every h-th column instead of a block, and sizes written into the code.
    """
    name = _function(split_heads, "check_split_heads", "split_heads")
    _run_on_all_sizes(lambda sizes: _check_split_once(split_heads, name, sizes), HEAD_SIZES,
                      _heads_hint)
    print(
        f"check_split_heads passed: head i of {name} holds columns i*d_k .. (i+1)*d_k - 1 of "
        f"every position, in shape (batch, h, L, d_k), for {len(HEAD_SIZES)} sets of sizes."
    )


def _check_merge_once(merge_heads: Callable, name: str, sizes: dict) -> None:
    batch, L, h, d_k = sizes["batch"], sizes["L"], sizes["h"], sizes["d_k"]
    d_model = h * d_k
    # Contiguous, like the output of attention: the state merge_heads receives in the model.
    x = torch.arange(batch * h * L * d_k, dtype=torch.float32).view(batch, h, L, d_k)
    expected = x.transpose(1, 2).reshape(batch, L, d_model)  # (batch, L, d_model)

    got = _tensor(_call(merge_heads, x, roles=("x",)), name, "the merged tensor", like=x)
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
    merged = _tensor(_call(merge_heads, split, roles=("x",)), name, "the merged tensor", like=split)
    _assert_close(merged, y,
                  f"the round trip {name}(split_heads(y)), which should give y back")


def check_merge_heads(merge_heads: Callable) -> None:
    """Check ``merge_heads(x)``: (batch, h, L, d_k) -> (batch, L, h * d_k), the
    concatenation, on the two sets of sizes of ``HEAD_SIZES``.

    Diagnoses: an input changed in place, a result of another dtype or device, ``.view``
    after the transpose (the tensor is not contiguous), the reshape without transposing
    back, sizes written into the code, and a round trip that does not give back the input.
    """
    name = _function(merge_heads, "check_merge_heads", "merge_heads")
    _run_on_all_sizes(lambda sizes: _check_merge_once(merge_heads, name, sizes), HEAD_SIZES,
                      _heads_hint)
    print(
        f"check_merge_heads passed: {name} puts the h heads side by side, (batch, L, h * d_k), "
        f"and undoes the split, for {len(HEAD_SIZES)} sets of sizes."
    )

