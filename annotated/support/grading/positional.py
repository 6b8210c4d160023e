"""Checks of notebook 05's exercises: the sinusoidal table of ``annotated.positional``."""

import math
from collections.abc import Callable

import torch

from annotated.positional import sinusoidal_table
from annotated.support.grading.core import (
    ExerciseFailed, _assert_close, _call, _function, _hard_coded_hint, _run_on_all_sizes, _same,
    _shape, _tensor,
)

TABLE_SIZES = [(50, 16), (9, 22), (120, 6)]  # (max_len, d_model)
SIZE_SETS = {"check_sinusoidal_table": [dict(max_len=m, d_model=d) for m, d in TABLE_SIZES]}


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


def _fitted_width(got: torch.Tensor, max_len: int, d_model: int) -> float | None:
    """The D for which ``got`` is the table with exponents 2i/D, or None when none fits.

    Row 1 holds sin(f_i) and cos(f_i) with f_i = 1 / 10000^(2i/D) <= 1, so asin gives f_i."""
    if d_model < 4:
        return None
    two_i = torch.arange(2, d_model, 2, dtype=torch.float64)  # pairs 1 .. d_model/2 - 1
    freq = torch.asin(got[1, 2::2].double().clamp(-1, 1))
    if not (freq > 0).all() or not (freq < 1).all():
        return None
    widths = two_i * math.log(10000.0) / -freq.log()
    width = float(widths.median())
    exponents = torch.arange(0, d_model, 2, dtype=torch.float64) / width
    if not _same(got, _table(max_len, d_model, exponents), atol=1e-3):
        return None
    return width


def _check_table_once(fn: Callable, name: str, max_len: int, d_model: int) -> None:
    expected = sinusoidal_table(max_len, d_model)
    call = f"{name}(max_len={max_len}, d_model={d_model})"
    got = _tensor(_call(fn, max_len, d_model, roles=("max_len", "d_model")), name, "the table")
    hint = " Rows are positions, columns dimensions." if tuple(got.shape) == (d_model, max_len) else ""
    _shape(got, (max_len, d_model), call, hint)
    if got.dtype != torch.float32:
        raise ExerciseFailed(
            f"{call} is a {got.dtype} table; the embeddings it is added to are float32, and a "
            f"{got.dtype} table would turn the sum into {got.dtype}. Build it in float32, "
            "as the instructions say (torch.arange(..., dtype=torch.float32))."
        )
    if got.isnan().any() or got.isinf().any():
        raise ExerciseFailed(
            f"{name}'s table contains NaN or inf; every entry is a sine or cosine, in [-1, 1]"
        )
    if _same(got, expected, atol=1e-4):
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
    width = _fitted_width(got, max_len, d_model)
    if width is not None:
        raise ExerciseFailed(
            f"your frequencies are those of d_model = {width:.0f}, but this table has d_model = "
            f"{d_model}: is a width written into your code? The exponent is 2i/d_model with the "
            "d_model argument."
        )
    _assert_close(got, expected, call, atol=1e-4)


def _table_hint(passed: list, sizes: tuple, message: str) -> str:
    return _hard_coded_hint(
        [dict(max_len=m, d_model=d) for m, d in passed], dict(max_len=sizes[0], d_model=sizes[1]),
        message, "Build the table from the max_len and d_model arguments.")


def check_sinusoidal_table(sinusoidal_table_fn: Callable) -> None:
    """Check ``sinusoidal_table(max_len, d_model)`` against the paper's §3.5 formula, on the
    sizes of ``TABLE_SIZES``.

    Diagnoses: wrong shape, a dtype other than float32 (complex, integer and bool named as
    such), a table off the cpu, sin and cos swapped, sines and cosines in two halves instead
    of interleaved, the exponent i/d_model instead of 2i/d_model, a separate frequency for
    the odd dimensions, a missing /d_model, pos multiplied instead of divided, and a d_model
    (or another size) written into the code.
    """
    name = _function(sinusoidal_table_fn, "check_sinusoidal_table", "sinusoidal_table")
    _run_on_all_sizes(lambda sizes: _check_table_once(sinusoidal_table_fn, name, *sizes),
                      TABLE_SIZES, _table_hint)
    shapes = ", ".join(f"({m}, {d})" for m, d in TABLE_SIZES)
    print(
        f"check_sinusoidal_table passed: {name} puts sin(pos / 10000^(2i/d_model)) in "
        f"dimension 2i and the cosine of the same angle in dimension 2i + 1, for the "
        f"(max_len, d_model) sizes {shapes}."
    )
