"""Checks of notebook 05's exercises: the sinusoidal table of ``annotated.positional``, the
rotation M_k that shifts an encoding by k positions, and the embeddings scaled by
sqrt(d_model) plus positions, as ``Embeddings`` and ``PositionalEncoding`` compute them."""

import math
from collections.abc import Callable

import torch

from annotated.positional import Embeddings, PositionalEncoding, sinusoidal_table
from annotated.support.grading.core import (
    ExerciseFailed, _aliasing, _assert_close, _call, _function, _generic, _gradients_flow,
    _hard_coded_hint, _run_on_all_sizes, _same, _same64, _shape, _squeezed, _tensor,
)

# (max_len, d_model); the last is longer than a table built once for 512 or 5000 positions.
TABLE_SIZES = [(50, 16), (9, 22), (120, 6), (5003, 4)]
# A negative offset in the middle set: M_k shifts back as well as forward; the last offset is
# beyond a table of encodings built once for 512 positions.
SHIFT_SIZES = [dict(k=3, d_model=10), dict(k=-5, d_model=16), dict(k=11, d_model=6),
               dict(k=600, d_model=8)]
# start = 0 first (a whole sentence), then later starts (decoding one step at a time), a batch
# of one sentence, and positions beyond a table built once for 512 or 5000 positions.
EMBED_SIZES = [
    dict(batch=2, L=5, vocab=11, d_model=6, start=0),
    dict(batch=3, L=4, vocab=9, d_model=10, start=7),
    dict(batch=5, L=2, vocab=13, d_model=8, start=3),
    dict(batch=1, L=6, vocab=17, d_model=12, start=2),
    dict(batch=7, L=3, vocab=15, d_model=4, start=5001),
]
# A table built once for a fixed number of positions and sliced: the usual sizes.
_PRECOMPUTED = (512, 5000)
SIZE_SETS = {
    "check_sinusoidal_table": [dict(max_len=m, d_model=d) for m, d in TABLE_SIZES],
    "check_shift_matrix": SHIFT_SIZES,
    "check_embed_with_positions": EMBED_SIZES,
}


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
    if got.dim() == 2 and got.size(1) == d_model and got.size(0) < max_len:
        raise ExerciseFailed(
            f"{call} has {got.size(0)} rows, not max_len = {max_len}: is the table built once "
            f"for {got.size(0)} positions and sliced, table[:max_len]? A longer sentence needs "
            "more rows than any fixed number: build the table from the max_len argument, "
            "torch.arange(max_len)."
        )
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


def _not_overwritten(fn: Callable, name: str, what: str, first: dict, second: dict) -> None:
    """Once every size passed: the result of a call on the sizes ``first`` must survive a call
    on the sizes ``second`` (a function that fills a buffer kept between calls does not)."""
    result = _tensor(_call(fn, *first.values(), roles=tuple(first)), name, what)
    _aliasing(lambda: _call(fn, *second.values(), roles=tuple(second)), result, name, what)


def _table_hint(passed: list, sizes: tuple, message: str) -> str:
    return _hard_coded_hint(
        [dict(max_len=m, d_model=d) for m, d in passed], dict(max_len=sizes[0], d_model=sizes[1]),
        message, "Build the table from the max_len and d_model arguments.")


def check_sinusoidal_table(sinusoidal_table_fn: Callable) -> None:
    """Check ``sinusoidal_table(max_len, d_model)`` against the paper's §3.5 formula, on the
    sizes of ``TABLE_SIZES``.

    Diagnoses: wrong shape, a table with fewer rows than max_len (built once for 512 or 5000
    positions and sliced), a dtype other than float32 (complex, integer and bool named as
    such), a table off the cpu, a table a second call overwrites, sin and cos swapped, sines and cosines in two halves instead
    of interleaved, the exponent i/d_model instead of 2i/d_model, a separate frequency for
    the odd dimensions, a missing /d_model, pos multiplied instead of divided, and a d_model
    (or another size) written into the code.
    """
    name = _function(sinusoidal_table_fn, "check_sinusoidal_table", "sinusoidal_table")
    _run_on_all_sizes(lambda sizes: _check_table_once(sinusoidal_table_fn, name, *sizes),
                      TABLE_SIZES, _table_hint)
    first, second = (dict(max_len=m, d_model=d) for m, d in TABLE_SIZES[:2])
    _not_overwritten(sinusoidal_table_fn, name, "the table", first, second)
    shapes = ", ".join(f"({m}, {d})" for m, d in TABLE_SIZES)
    print(
        f"check_sinusoidal_table passed: {name} puts sin(pos / 10000^(2i/d_model)) in "
        f"dimension 2i and the cosine of the same angle in dimension 2i + 1, for the "
        f"(max_len, d_model) sizes {shapes}."
    )


# ---------------------------------------------------------------- the shift M_k (exercise 5.2)


def _omega(d_model: int, width: float | None = None) -> torch.Tensor:
    """The d_model / 2 frequencies 10000^(-2i/width) in float64; width is d_model unless given."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    return 10000.0 ** (-two_i / (width or d_model))


def _blocks(d_model: int, cos_a: torch.Tensor, sin_ab: torch.Tensor, sin_ba: torch.Tensor,
            cos_b: torch.Tensor, layout: str = "pairs") -> torch.Tensor:
    """A (d_model, d_model) float64 matrix with one 2x2 block [[cos_a, sin_ab], [-sin_ba, cos_b]]
    per pair (a, b): (2i, 2i + 1) as in the table, or (i, i + d_model/2) for "halves"."""
    half = d_model // 2
    if layout == "pairs":
        a, b = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    else:
        a, b = torch.arange(half), torch.arange(half, d_model)
    matrix = torch.zeros(d_model, d_model, dtype=torch.float64)
    matrix[a, a], matrix[a, b], matrix[b, a], matrix[b, b] = cos_a, sin_ab, -sin_ba, cos_b
    return matrix


def _shift(d_model: int, angles: torch.Tensor, layout: str = "pairs") -> torch.Tensor:
    """Block-diagonal rotations [[cos, sin], [-sin, cos]], one per angle (per pair)."""
    c, s = torch.cos(angles), torch.sin(angles)
    return _blocks(d_model, c, s, s, c, layout)


def _fitted_offset(got: torch.Tensor, d_model: int) -> int | None:
    """The integer k' for which ``got`` is M_k', or None. The last pair turns slowest, so its
    angle k' * omega stays below pi for any offset a test uses: atan2 gives it whole."""
    omega = _omega(d_model)
    angle = torch.atan2(got[-2, -1].double(), got[-2, -2].double())
    offset = round(float(angle / omega[-1]))
    if _same(got, _shift(d_model, offset * omega)):
        return offset
    return None


def _fitted_shift_width(got: torch.Tensor, k: int, d_model: int) -> int | None:
    """The width D (1 .. 4096) for which ``got`` is M_k with frequencies 10000^(-2i/D), or None."""
    pairs = torch.arange(0, d_model, 2)
    widths = torch.arange(1, 4097, dtype=torch.float64).unsqueeze(1)  # (4096, 1)
    angles = k * 10000.0 ** (-pairs.double() / widths)  # (4096, d_model / 2)
    cos, sin = got[pairs, pairs].double(), got[pairs, pairs + 1].double()
    error = ((angles.cos() - cos).abs() + (angles.sin() - sin).abs()).amax(dim=1)
    best = int(error.argmin())
    width = best + 1
    if error[best] > 1e-4 or width == d_model:
        return None
    if not _same(got, _shift(d_model, k * _omega(d_model, width))):
        return None
    return width


def _shift_structure(got: torch.Tensor, d_model: int) -> str | None:
    """Say what is wrong with the layout of ``got``: entries outside the 2x2 diagonal blocks, or
    a block that is not a rotation [[cos, sin], [-sin, cos]]."""
    pair = torch.arange(d_model) // 2
    outside = (pair.unsqueeze(1) != pair.unsqueeze(0)) & (got.double().abs() > 1e-6)
    if outside.any():
        r, c = outside.nonzero()[0].tolist()
        return (
            f"M[{r}, {c}] = {got[r, c].item():.4f}, but row {r} and column {c} belong to different "
            f"pairs ({2 * (r // 2)}, {2 * (r // 2) + 1}) and ({2 * (c // 2)}, {2 * (c // 2) + 1}): "
            "M_k is block-diagonal, each pair of dimensions (2i, 2i + 1) turns on its own, so "
            "every entry outside the 2x2 blocks on the diagonal is 0."
        )
    for i in range(d_model // 2):
        a, b = got[2 * i, 2 * i].item(), got[2 * i, 2 * i + 1].item()
        c, d = got[2 * i + 1, 2 * i].item(), got[2 * i + 1, 2 * i + 1].item()
        if abs(a - d) > 1e-5 or abs(b + c) > 1e-5 or abs(a * a + b * b - 1) > 1e-4:
            return (
                f"block {i} (rows and columns {2 * i}, {2 * i + 1}) is [[{a:.4f}, {b:.4f}], "
                f"[{c:.4f}, {d:.4f}]], not a rotation [[cos t, sin t], [-sin t, cos t]]: its four "
                f"entries share one angle, t = k * omega_i, because the sine and the cosine of a "
                "pair turn with one frequency, omega_i = 10000^(-2i/d_model)."
            )
    return None


def _check_shift_once(fn: Callable, name: str, k: int, d_model: int) -> None:
    call = f"{name}(k={k}, d_model={d_model})"
    got = _tensor(_call(fn, k, d_model, roles=("k", "d_model")), name, "the matrix M_k")
    _shape(got, (d_model, d_model), call)
    if got.dtype not in (torch.float32, torch.float64):
        raise ExerciseFailed(
            f"{call} is a {got.dtype} matrix; build it in float32 or float64 (notebook 05 uses "
            f"float64), as {got.dtype} rounds the cosines too coarsely."
        )
    if not got.isfinite().all():
        raise ExerciseFailed(f"{call} contains NaN or inf; every entry is a sine, a cosine or 0")
    omega = _omega(d_model)
    expected = _shift(d_model, k * omega)
    if not _same(got, expected):
        half = torch.arange(0, d_model, 2, dtype=torch.float64) / 2 / d_model  # i / d_model
        per_column = 10000.0 ** (-torch.arange(1, d_model, 2, dtype=torch.float64) / d_model)
        c, s = torch.cos(k * omega), torch.sin(k * omega)
        c_odd, s_odd = torch.cos(k * per_column), torch.sin(k * per_column)
        mistakes = [
            (expected.T,
             f"your matrix is M_k transposed, the rotation by -k * omega_i: it maps PE(pos) to "
             f"PE(pos - k), {k} positions the other way. With the encodings as row vectors the "
             "notebook writes PE(pos + k) = PE(pos) @ M_k.T, and each block of M_k is [[cos(k "
             "omega_i), sin(k omega_i)], [-sin(k omega_i), cos(k omega_i)]]: the minus sign "
             "goes below the diagonal."),
            (_blocks(d_model, s, c, c, s),
             "sin and cos are swapped inside each block: the cosines go on the diagonal, "
             "[[cos(k omega_i), sin(k omega_i)], [-sin(k omega_i), cos(k omega_i)]] (at k = 0, "
             "M_0 must be the identity)."),
            (_shift(d_model, k * omega, layout="halves"),
             "your blocks pair dimension i with dimension i + d_model/2, as if the table held its "
             "sines in the first half and its cosines in the second. The course's table "
             "interleaves them (sin in 2i, cos in 2i + 1), so each rotation acts on the "
             "neighbouring rows and columns 2i and 2i + 1."),
            (_shift(d_model, k * omega.flip(0)),
             "your frequencies run in reverse order, the slowest in the first block: pair i, "
             "rows and columns 2i and 2i + 1, turns with omega_i = 10000^(-2i/d_model), the "
             "fastest (omega_0 = 1) in the first block."),
            (_blocks(d_model, c, s, s_odd, c_odd),
             "your odd rows 2i + 1 use the frequency 10000^(-(2i+1)/d_model), one per column "
             "index: the sine and cosine of a pair share one frequency, omega_i = "
             "10000^(-2i/d_model), so both rows of a block use the same angle k * omega_i."),
            (_blocks(d_model, c, s_odd, s, c_odd),
             "your odd columns 2i + 1 use the frequency 10000^(-(2i+1)/d_model), one per column "
             "index: the sine and cosine of a pair share one frequency, omega_i = "
             "10000^(-2i/d_model), so both columns of a block use the same angle k * omega_i."),
            (_shift(d_model, k * 10000.0 ** -half),
             "the exponent is i/d_model where the paper has 2i/d_model (2i is the index of the "
             "even dimension): omega_i = 10000^(-2i/d_model), from torch.arange(0, d_model, 2)."),
        ]
        for candidate, message in mistakes:
            if _same(got, candidate):
                raise ExerciseFailed(message)
        offset = _fitted_offset(got, d_model)
        if offset == 1 and k != 1:
            raise ExerciseFailed(
                f"your matrix is M_1 whatever k: each block turns by omega_i, one position, but "
                f"M_k shifts by k = {k} positions, so its angles are k * omega_i."
            )
        if offset is not None and offset != k:
            raise ExerciseFailed(
                f"your matrix shifts by {offset} positions, but k = {k}: is k written into your "
                "code? The angles are k * omega_i with the k argument."
            )
        width = _fitted_shift_width(got, k, d_model)
        if width is not None:
            raise ExerciseFailed(
                f"your frequencies are those of d_model = {width}, but this matrix has d_model = "
                f"{d_model}: is a width written into your code? omega_i = 10000^(-2i/d_model) "
                "with the d_model argument."
            )
        structure = _shift_structure(got, d_model)
        if structure:
            raise _generic(structure)
        _assert_close(got, expected, call)
    # What M_k is for: it moves every row of the course's table k positions on.
    table = sinusoidal_table(abs(k) + 20, d_model).double()
    first = max(0, -k)
    rows = slice(first, first + 20)
    _assert_close(table[rows] @ got.double().T, table[first + k : first + k + 20],
                  f"sinusoidal_table(...)[pos] @ M_k.T, which should be row pos + k (k={k})",
                  atol=1e-4)


def _shift_hint(passed: list, sizes: dict, message: str) -> str:
    if abs(sizes["k"]) >= _PRECOMPUTED[0]:
        return (f"\nHint: the same function passed with smaller offsets but not with k = "
                f"{sizes['k']}: are the sines and cosines read from a table of encodings built "
                f"once for {_PRECOMPUTED[0]} positions? Compute the angles k * omega_i from k "
                "itself, whatever its size.")
    return _hard_coded_hint(passed, sizes, message,
                            "Build the matrix from the k and d_model arguments.")


def check_shift_matrix(shift_matrix_fn: Callable) -> None:
    """Check ``shift_matrix(k, d_model)``, the block-diagonal rotation M_k with
    PE(pos + k) = PE(pos) @ M_k.T, on the sizes of ``SHIFT_SIZES`` (one k negative, one
    beyond a table of encodings built once for 512 positions).

    Diagnoses: wrong shape, a dtype other than float32 or float64, NaN, a matrix a second
    call overwrites, sines and cosines read from a table too short for k (hint), the transpose (the
    rotation by -k omega), sin and cos swapped in the blocks, blocks pairing i with i +
    d_model/2, frequencies in reverse order, a frequency per row or per column instead of
    per pair, the exponent i/d_model, M_1 whatever k, a k or a d_model written into the
    code, entries outside the 2x2 blocks, and a block that is not a rotation.
    """
    name = _function(shift_matrix_fn, "check_shift_matrix", "shift_matrix")
    _run_on_all_sizes(lambda sizes: _check_shift_once(shift_matrix_fn, name, **sizes),
                      SHIFT_SIZES, _shift_hint)
    _not_overwritten(shift_matrix_fn, name, "the matrix M_k", *SHIFT_SIZES[:2])
    shapes = ", ".join(f"(k={s['k']}, d_model={s['d_model']})" for s in SHIFT_SIZES)
    print(
        f"check_shift_matrix passed: {name} builds M_k from 2x2 rotations [[cos k omega_i, "
        f"sin k omega_i], [-sin k omega_i, cos k omega_i]], and PE(pos) @ M_k.T gives PE(pos + k) "
        f"for every row of the course's sinusoidal_table, for {shapes}."
    )


# ---------------------------------------------------------------- embeddings plus positions (5.3)

_TOKEN_INDEX = (
    r"out of bounds|index out of range|out of range",
    "\nHint: row pos of the positional table belongs to position pos (0, 1, ... along the "
    "sentence, from start), not to a token id: index the table with positions, and the "
    "embedding table with the tokens.",
)


def _embedding_scale(got: torch.Tensor, vectors: torch.Tensor, positions: torch.Tensor,
                     sizes: dict) -> str | None:
    """Name a wrong factor c when ``got`` is c * vectors + positions."""
    d_model = sizes["d_model"]
    rest = got.double() - positions
    c = float((rest * vectors).sum() / (vectors * vectors).sum())
    if not _same(got, c * vectors + positions) or math.isclose(c, math.sqrt(d_model), rel_tol=1e-4):
        return None
    names = {"vocab, the number of rows of weight": sizes["vocab"], "L, the sentence length":
             sizes["L"], "batch, the number of sentences": sizes["batch"]}
    for what, n in names.items():
        if math.isclose(c * c, n, rel_tol=1e-4):
            return (
                f"you multiplied the embeddings by sqrt({n}) = {c:.4g}, and {n} is {what} here, "
                f"not d_model = {d_model}: d_model is the width of a vector, weight.size(1)."
            )
    return (
        f"you multiplied the embeddings by {c:.4g}, but here d_model = {d_model}, so "
        f"sqrt(d_model) = {math.sqrt(d_model):.4g}: is d_model (or its square root) written into "
        "your code? Read it from the table, d_model = weight.size(1)."
    )


def _check_embed_sizes(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    """``_check_embed_once``; past the positions of a table built once for 512 or 5000 of them,
    a failure no known mistake explains says so."""
    last = sizes["start"] + sizes["L"] - 1
    try:
        _check_embed_once(fn, name, sizes, g)
    except ExerciseFailed as err:
        fixed = " or ".join(str(n) for n in _PRECOMPUTED if n <= last)
        if not fixed or not getattr(err, "generic", False):
            raise
        raise _generic(
            f"{err}\nHint: this call needs the encodings of positions up to start + L - 1 = "
            f"{last}, beyond a table built once for {fixed} positions (PositionalEncoding's "
            "max_len = 5000): build the table for the positions the call needs, "
            "sinusoidal_table(start + L, d_model)."
        ) from None


def _check_embed_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    batch, L, vocab = sizes["batch"], sizes["L"], sizes["vocab"]
    d_model, start = sizes["d_model"], sizes["start"]
    tokens = torch.randint(vocab, (batch, L), generator=g)
    weight = torch.randn(vocab, d_model, generator=g)

    # The course's modules, with the same table and no dropout (as in evaluation).
    embed = Embeddings(vocab, d_model)
    add_positions = PositionalEncoding(d_model, dropout=0.0, max_len=start + L + 1)
    with torch.no_grad():
        embed.lut.weight.copy_(weight)
        expected = add_positions(embed(tokens), start)  # (batch, L, d_model)

    call = (f"{name}(tokens of shape (batch={batch}, L={L}), weight of shape (vocab={vocab}, "
            f"d_model={d_model}), start={start})")
    result = _call(fn, tokens, weight, start, roles=("tokens", "weight", "start"),
                   hints=(_TOKEN_INDEX,))
    got = _tensor(result, name, "the vectors", like=weight)
    _shape(got, (batch, L, d_model), call, _squeezed(got.shape, (batch, L, d_model)))
    if _same(got, expected):
        # Another call must not overwrite these vectors (a buffer kept between calls).
        other = torch.randint(vocab, (batch, L), generator=g)
        _aliasing(lambda: _call(fn, other, weight, start, roles=("tokens", "weight", "start")),
                  got, name, "the vectors")
        return
    # float64 versions of both terms, for the mistakes.
    table = sinusoidal_table(max(vocab, start + L + 1, start + batch) + 1, d_model).double()
    vectors = weight.double()[tokens]  # (batch, L, d_model)
    root = math.sqrt(d_model)
    positions = table[start : start + L]  # (L, d_model)
    mistakes = [
        (vectors + positions,
         f"the embeddings are not multiplied by sqrt(d_model) = {root:.4g}: §3.4 multiplies "
         "the embedding weights by sqrt(d_model) before the positions are added, as the "
         "course's Embeddings does: weight[tokens] * math.sqrt(d_model)."),
        (vectors * d_model + positions,
         f"you multiplied the embeddings by d_model = {d_model} instead of sqrt(d_model) = "
         f"{root:.4g}: use math.sqrt(d_model)."),
        (vectors / root + positions,
         f"you divided the embeddings by sqrt(d_model) = {root:.4g} instead of multiplying."),
        ((vectors + positions) * root,
         "you scaled the sum: the positional encoding was multiplied by sqrt(d_model) too. "
         "Only the embeddings are scaled (§3.4); the positions are added afterwards, unscaled, "
         "as Embeddings then PositionalEncoding do."),
        (vectors * root,
         "no positions were added: add row start + j of the sinusoidal table to the vector of "
         "the token at index j."),
        (vectors * root + table[1 + start : 1 + start + L],
         f"your positions are counted from {start + 1}: the token at index j of the sentence "
         f"sits at position start + j, so the first one takes row {start} of the table "
         f"(start = {start})."),
        (vectors * root + table[tokens],
         "your positions are indexed by the token ids (table[tokens]): row pos of the table is "
         "the encoding of the position pos, so the token at index j takes row start + j, "
         "whatever its id."),
        (vectors * root + table[start : start + batch].unsqueeze(1),
         "your positions run along the batch, one per sentence: every token of sentence b got "
         "the encoding of position start + b. The inputs are (batch, L, d_model), batch first; "
         "take L rows of the table, table[start : start + L], which broadcast over the batch "
         "(code written for (L, batch, d_model) inputs slices by x.size(0))."),
    ]
    if start:
        mistakes.insert(0, (
            vectors * root + table[:L],
            f"your positions start at 0, but start = {start}: the tokens sit at positions start, "
            "start + 1, ..., start + L - 1 (decoding one step at a time, the new token is not at "
            f"position 0): take table[start : start + L], as PositionalEncoding(x, start) does."))
    for candidate, message in mistakes:
        if _same(got, candidate):
            raise ExerciseFailed(message)
    message = _embedding_scale(got, vectors, positions, sizes)
    if message:
        raise ExerciseFailed(message)
    _assert_close(got, expected, call)


def _check_embed_float64(fn: Callable, name: str, g: torch.Generator) -> None:
    """One pass with a float64 weight that requires grad, as a trained embedding does: the
    vectors must come back float64, their embedding part exact to float64 precision (the
    positions may come from the float32 table), and the gradient must reach the weight."""
    sizes = EMBED_SIZES[0]
    batch, L, vocab = sizes["batch"], sizes["L"], sizes["vocab"]
    d_model, start = sizes["d_model"], sizes["start"]
    tokens = torch.randint(vocab, (batch, L), generator=g)
    # Entries of about 100: float32 rounds their scaled values by about 1e-5, far above the
    # float32 table's 1e-7, so a float32 step on the embeddings shows.
    weight = (torch.randn(vocab, d_model, generator=g) * 100).double().requires_grad_()
    call = (f"{name}(tokens of shape (batch={batch}, L={L}), a float64 weight of shape "
            f"(vocab={vocab}, d_model={d_model}) that requires grad, start={start})")
    got = _tensor(_call(fn, tokens, weight, start, roles=("tokens", "weight", "start")), name,
                  "the vectors", like=weight)
    _shape(got, (batch, L, d_model), call, _squeezed(got.shape, (batch, L, d_model)))
    table = sinusoidal_table(start + L, d_model)[start:].double()
    expected = weight[tokens] * math.sqrt(d_model) + table
    if not _same64(got, expected) and not torch.allclose(got.detach(), expected.detach(),
                                                          atol=2e-6, rtol=0):
        worst = float((got.detach() - expected.detach()).abs().max())
        if _same(got, expected, atol=1e-3):
            raise _generic(
                f"{call}: your vectors differ from weight[tokens] * sqrt(d_model) + PE by up to "
                f"{worst:.1e}, float32's rounding of embeddings of about 100 (a float64 "
                "computation is exact to 1e-12, the float32 table adds 1e-7 at most): a step "
                "computes in float32 and converts back. Look for a .float() or a tensor created "
                "without dtype=: keep weight[tokens] * math.sqrt(d_model) in weight's dtype."
            )
        _assert_close(got, expected.detach(), call)
    try:
        _gradients_flow(got, {"weight": weight}, name, "the vectors")
    except RuntimeError as err:  # backward itself failed, as loss.backward() would in training
        raise _generic(f"backpropagating through the vectors of {name} raised RuntimeError: "
                       f"{str(err).splitlines()[0]}") from None


def _embed_hint(passed: list, sizes: dict, message: str) -> str:
    if "beyond a table built once" in message:  # the message already says what to do
        return ""
    return _hard_coded_hint(
        passed, sizes, message, "Read the sizes from the inputs: batch, L = tokens.shape and "
        "d_model = weight.size(1), and use the start you are given.")


def check_embed_with_positions(embed_with_positions_fn: Callable) -> None:
    """Check ``embed_with_positions(tokens, weight, start)``: weight[tokens] * sqrt(d_model)
    plus rows start .. start + L - 1 of the sinusoidal table, against the course's
    ``Embeddings`` followed by ``PositionalEncoding`` (dropout 0), on ``EMBED_SIZES`` (one a
    batch of one sentence, one with positions past 5000), then once with a float64 weight
    that requires grad.

    Diagnoses: wrong shape (a batch of one squeezed away), dtype or device, an input changed
    in place, positions beyond a table built once for 512 or 5000 of them (hint), vectors a
    second call overwrites, a float64 weight computed in float32, no gradient to the weight
    (@torch.no_grad(), .detach()), a missing scale, the
    scale d_model or 1/sqrt(d_model), the positions scaled too, no positions, positions from
    0 whatever start, positions counted from 1, positions indexed by token ids, positions
    along the batch (the (L, batch, d_model) convention), a factor that is the square root of
    another size, and a d_model or another size written into the code.
    """
    name = _function(embed_with_positions_fn, "check_embed_with_positions", "embed_with_positions")
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():  # building the course's modules must not move the learner's seed
        _run_on_all_sizes(lambda sizes: _check_embed_sizes(embed_with_positions_fn, name, sizes, g),
                          EMBED_SIZES, _embed_hint)
        _check_embed_float64(embed_with_positions_fn, name, g)
    print(
        f"check_embed_with_positions passed: {name} gives weight[tokens] * sqrt(d_model) plus "
        f"the encodings of positions start .. start + L - 1, as the course's Embeddings and "
        f"PositionalEncoding do, for {len(EMBED_SIZES)} sets of sizes (start = "
        f"{', '.join(str(s['start']) for s in EMBED_SIZES)}), and keeps a float64 weight's "
        "dtype and its gradient."
    )
