"""Checks of notebook 05 as declarations (``engine``): the sinusoidal table of ``annotated.positional``, the
rotation M_k that shifts an encoding by k positions, and the embeddings scaled by sqrt(d_model) plus positions."""

import math
from collections.abc import Callable

import torch

from annotated.positional import sinusoidal_table
from annotated.support.grading.core import _hard_coded_hint
from annotated.support.grading.engine import Declaration, Mistake, Probe, Tensor, _equal, check

# (max_len, d_model); the last is longer than a table built once for 512 or 5000 positions.
TABLE_SIZES = [(50, 16), (9, 22), (120, 6), (5003, 4)]
# A negative offset; the last beyond a table of encodings built once for 512 positions.
SHIFT_SIZES = [dict(k=3, d_model=10), dict(k=-5, d_model=16), dict(k=11, d_model=6), dict(k=600, d_model=8)]
# start = 0, later starts (decoding step by step), a batch of one, positions beyond a table of 512 or 5000.
EMBED_SIZES = [dict(batch=2, L=5, vocab=11, d_model=6, start=0), dict(batch=3, L=4, vocab=9, d_model=10, start=7),
               dict(batch=5, L=2, vocab=13, d_model=8, start=3), dict(batch=1, L=6, vocab=17, d_model=12, start=2),
               dict(batch=7, L=3, vocab=15, d_model=4, start=5001)]
_PRECOMPUTED = (512, 5000)  # the usual sizes of a table built once and sliced
SIZE_SETS = {"check_sinusoidal_table": [dict(max_len=m, d_model=d) for m, d in TABLE_SIZES],
             "check_shift_matrix": SHIFT_SIZES, "check_embed_with_positions": EMBED_SIZES}


def _if(test: Callable, message: str | Callable) -> Callable:
    """A ``find``: test(the learner's numbers, probe) -> message (or message(got, probe))."""
    return lambda found, p: None if found["values"] is None or not test(found["values"], p) else (
        message if isinstance(message, str) else message(found["values"], p))


def _probes(label: str, sets: list, extra: list) -> list[Probe]:
    """A probe per set of sizes (args, sizes), then the ``extra`` arguments, then a second call after the first."""
    first, second = sets[0][0], sets[1][0]
    return ([Probe(args, label % args, sizes=sizes) for args, sizes in sets] + [Probe(a, label % a) for a in extra]
            + [Probe(first, label % first, again=second)])


def _pairs(d_model: int) -> torch.Tensor:
    return torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i, per pair


def _omega(d_model: int, width: float | None = None) -> torch.Tensor:
    """The d_model / 2 frequencies 10000^(-2i/width) in float64; width is d_model unless given."""
    return 10000.0 ** (-_pairs(d_model) / (width or d_model))


def _written_width(fit: Callable, what: str) -> Callable:
    """A ``find``: the width D, fit(the learner's numbers, *args), whose frequencies 10000^(-2i/D) they show."""
    def find(found: dict, p: Probe) -> str | None:
        width = None if found["values"] is None else fit(found["values"], *p.args)
        return None if width is None else (f"your frequencies are those of d_model = {width:.0f}, but this {what} "
                                           f"has d_model = {p.args[1]}: is a width written into your code? Use the "
                                           "d_model argument.")
    return find


# ---------------------------------------------------------------- 5.1 the sinusoidal table
def _table(max_len: int, d_model: int, exponents: torch.Tensor, order: str = "sin-cos") -> torch.Tensor:
    """A sinusoid table in float64 with the given exponent per column pair (or per column)."""
    angles = torch.arange(max_len, dtype=torch.float64).unsqueeze(1) / 10000.0 ** exponents
    if angles.size(1) == d_model:  # one exponent per column, not per pair
        return torch.where(torch.arange(d_model) % 2 == 0, angles.sin(), angles.cos())
    sin, cos = torch.sin(angles), torch.cos(angles)
    if order == "halves":
        return torch.cat([sin, cos], dim=1)
    first, second = (sin, cos) if order == "sin-cos" else (cos, sin)
    return torch.stack([first, second], dim=-1).reshape(max_len, d_model)


def _table_width(got: torch.Tensor, max_len: int, d_model: int) -> float | None:
    """The D for which ``got`` is the table with exponents 2i/D, or None when none fits. Row 1
    holds sin(f_i) and cos(f_i) with f_i = 1 / 10000^(2i/D) <= 1, so asin gives f_i."""
    if d_model < 4 or max_len < 2:
        return None
    freq = torch.asin(got[1, 2::2].double().clamp(-1, 1))
    if not (freq > 0).all() or not (freq < 1).all():
        return None
    width = float((_pairs(d_model)[1:] * math.log(10000.0) / -freq.log()).median())
    return width if _equal(got, _table(max_len, d_model, _pairs(d_model) / width), 1e-3) else None


def _sliced(found: dict, p: Probe) -> str | None:
    (max_len, d_model), shape = p.args, found["shape"]
    if len(shape) == 2 and shape[1] == d_model and shape[0] < max_len:
        return (f"It has {shape[0]} rows, not max_len = {max_len}: is the table built once for {shape[0]} "
                "positions and sliced, table[:max_len]? Build it from the max_len argument, torch.arange(max_len).")
    return None


_PAIR = "The exponent is 2i/d_model (2i the even dimension): torch.arange(0, d_model, 2) / d_model."
TABLE_MISTAKES = (
    Mistake("", "a table sliced", stage="shape", find=_sliced, example=lambda m, d: sinusoidal_table(512, d)[:m]),
    Mistake("Rows are positions, columns dimensions.", "transposed", stage="shape",
            shape=lambda p: p.args[::-1], example=lambda m, d: sinusoidal_table(m, d).T),
    *(Mistake(message, name, like=lambda m, d, e=e, o=o: _table(m, d, e(d), o),
              example=lambda m, d, e=e, o=o: _table(m, d, e(d), o).float()) for name, e, o, message in (
        ("sin and cos swapped", lambda d: _pairs(d) / d, "cos-sin", lambda p: (
            "sin and cos are swapped: position 0 should read [0, 1, 0, 1, ...] (sin 0 in the even dimensions, cos 0 "
            f"in the odd), yours reads [{', '.join(['1, 0'] * min(2, p.args[1] // 2))}, ...].")),
        ("sines and cosines in halves", lambda d: _pairs(d) / d, "halves",
         "your sines fill the first half of the dimensions and the cosines the second; the paper interleaves them: "
         "table[:, 0::2] = sin, table[:, 1::2] = cos."),
        ("the exponent i/d_model", lambda d: _pairs(d) / 2 / d, "sin-cos",
         "the exponent is i/d_model where the paper has 2i/d_model. " + _PAIR),
        ("a frequency per column", lambda d: torch.arange(d, dtype=torch.float64) / d, "sin-cos",
         "dimension 2i + 1 uses the exponent (2i + 1)/d_model: the sine and cosine of a pair share one frequency, "
         "1 / 10000^(2i/d_model). " + _PAIR),
        ("no /d_model", _pairs, "sin-cos", "the exponent is 2i where the paper has 2i/d_model: divide by d_model."))),
    # pos * 10000^(2i/d_model) reaches 10^5.5, beyond float32's precision for sine: the first two pairs only.
    Mistake("", "pos multiplied", example=lambda m, d: _table(m, d, -_pairs(d) / d).float(),
            find=_if(lambda got, p: _equal(got[:, :4], _table(*p.args, -_pairs(p.args[1]) / p.args[1])[:, :4], 1e-3),
                     "you multiplied pos by 10000^(2i/d_model) instead of dividing (a lost minus sign in "
                     "exp(-2i * log(10000) / d_model)?): the angle is pos / 10000^(2i/d_model).")),
    Mistake("", "a width written into the code", example=lambda m, d: _table(m, d, _pairs(d) / 16).float(),
            find=_written_width(_table_width, "table")),
)

TABLE = Declaration(
    check="check_sinusoidal_table", function="sinusoidal_table", roles=("max_len", "d_model"),
    reference=sinusoidal_table, mistakes=TABLE_MISTAKES,
    probes=lambda device: _probes("{what} of {name}(max_len=%d, d_model=%d)",
                                  [((m, d), dict(max_len=m, d_model=d)) for m, d in TABLE_SIZES], [(1, 2), (8, 8)]),
    returns=Tensor("the table", like=None, precision=1e-4, dtype_message=lambda found, name, what, args: (
        f"{name} returned a torch.{found['dtype']} table; the embeddings it is added to are float32, and it would turn "
        "the sum into its dtype. Build it in float32 (torch.arange(..., dtype=torch.float32)).")),
    sizes_fix="Build the table from the max_len and d_model arguments.",
    passed=("check_sinusoidal_table passed: {name} puts sin(pos / 10000^(2i/d_model)) in dimension 2i and the "
            "cosine of the same angle in dimension 2i + 1, for the (max_len, d_model) sizes "
            + ", ".join(f"({m}, {d})" for m, d in TABLE_SIZES) + " and (1, 2)."),
)


def check_sinusoidal_table(sinusoidal_table_fn: Callable) -> None:
    """Check ``sinusoidal_table(max_len, d_model)`` against §3.5's formula on ``TABLE_SIZES`` and (1, 2).

    Diagnoses: wrong shape, a table with fewer rows than max_len (built once for 512 or 5000 positions and sliced), a
    dtype other than float32 (complex, integer and bool named as such), a table off the cpu, a table a second call
    overwrites, sin and cos swapped, sines and cosines in two halves instead of interleaved, the exponent i/d_model
    instead of 2i/d_model, a separate frequency for the odd dimensions, a missing /d_model, pos multiplied instead of
    divided, and a d_model (or another size) written into the code.
    """
    check(TABLE, sinusoidal_table_fn)


# ---------------------------------------------------------------- 5.2 the shift M_k
def _blocks(d_model: int, cos_a, sin_ab, sin_ba, cos_b, layout: str = "pairs") -> torch.Tensor:
    """A (d_model, d_model) float64 matrix with one 2x2 block [[cos_a, sin_ab], [-sin_ba, cos_b]]
    per pair (a, b): (2i, 2i + 1) as in the table, or (i, i + d_model/2) for "halves"."""
    a, b = torch.arange(d_model).view(-1, 2).T if layout == "pairs" else torch.arange(d_model).view(2, -1)
    matrix = torch.zeros(d_model, d_model, dtype=torch.float64)
    matrix[a, a], matrix[a, b], matrix[b, a], matrix[b, b] = cos_a, sin_ab, -sin_ba, cos_b
    return matrix


def _shift(d_model: int, angles: torch.Tensor, layout: str = "pairs") -> torch.Tensor:
    """Block-diagonal rotations [[cos, sin], [-sin, cos]], one per angle (per pair)."""
    return _blocks(d_model, angles.cos(), angles.sin(), angles.sin(), angles.cos(), layout)


def course_shift_matrix(k: int, d_model: int) -> torch.Tensor:
    """M_k, with PE(pos + k) = PE(pos) @ M_k.T (notebook 05), in float64."""
    return _shift(d_model, k * _omega(d_model))


def _offset(got: torch.Tensor, p: Probe) -> str | None:
    """The integer k' for which ``got`` is M_k' (atan2 of the slowest pair, below pi for any test's k')."""
    (k, d_model), omega = p.args, _omega(p.args[1])
    offset = round(float(torch.atan2(got[-2, -1].double(), got[-2, -2].double()) / omega[-1]))
    if offset == k or not _equal(got, _shift(d_model, offset * omega)):
        return None
    if offset == 1:
        return (f"your matrix is M_1 whatever k: each block turns by omega_i, one position, but M_k shifts by "
                f"k = {k} positions, so its angles are k * omega_i.")
    return (f"your matrix shifts by {offset} positions, but k = {k}: is k written into your code? The angles "
            "are k * omega_i with the k argument.")


def _shift_width(got: torch.Tensor, k: int, d_model: int) -> int | None:
    """The width D (1 .. 4096) for which ``got`` is M_k with frequencies 10000^(-2i/D), or None."""
    pairs = torch.arange(0, d_model, 2)
    angles = k * 10000.0 ** (-pairs.double() / torch.arange(1, 4097, dtype=torch.float64).unsqueeze(1))
    cos, sin = got[pairs, pairs].double(), got[pairs, pairs + 1].double()
    error = ((angles.cos() - cos).abs() + (angles.sin() - sin).abs()).amax(dim=1)
    width = int(error.argmin()) + 1
    if error[width - 1] > 1e-4 or width == d_model or not _equal(got, _shift(d_model, k * _omega(d_model, width))):
        return None
    return width


def _structure(got: torch.Tensor, p: Probe) -> str | None:
    """Entries outside the 2x2 diagonal blocks, or a block that is not a rotation [[cos, sin], [-sin, cos]]."""
    d_model = p.args[1]
    pair = torch.arange(d_model) // 2
    outside = (pair.unsqueeze(1) != pair.unsqueeze(0)) & (got.double().abs() > 1e-6)
    if outside.any():
        r, c = outside.nonzero()[0].tolist()
        return (f"M[{r}, {c}] = {got[r, c].item():.4f}, but row {r} and column {c} belong to different pairs "
                f"({2 * (r // 2)}, {2 * (r // 2) + 1}) and ({2 * (c // 2)}, {2 * (c // 2) + 1}): M_k is "
                "block-diagonal, each pair (2i, 2i + 1) turns on its own, so every entry outside the 2x2 blocks is 0.")
    for i in range(d_model // 2):
        (a, b), (c, d) = got[2 * i: 2 * i + 2, 2 * i: 2 * i + 2].tolist()
        if abs(a - d) > 1e-5 or abs(b + c) > 1e-5 or abs(a * a + b * b - 1) > 1e-4:
            return (f"block {i} (rows and columns {2 * i}, {2 * i + 1}) is [[{a:.4f}, {b:.4f}], [{c:.4f}, {d:.4f}]], "
                    "not a rotation [[cos t, sin t], [-sin t, cos t]] of one angle, t = k * omega_i.")
    return None


def _shift_hint(passed: list, sizes: dict, message: str) -> str:
    if abs(sizes["k"]) >= _PRECOMPUTED[0]:
        return (f"\nHint: the same function passed with smaller offsets but not with k = {sizes['k']}: are the "
                f"sines and cosines read from a table of encodings built once for {_PRECOMPUTED[0]} positions? "
                "Compute the angles k * omega_i from k itself, whatever its size.")
    return _hard_coded_hint(passed, sizes, message, "Build the matrix from the k and d_model arguments.")


_SHARE = "the sine and cosine of a pair share one frequency, omega_i = 10000^(-2i/d_model)"
SHIFT_MISTAKES = tuple(Mistake(message, name, like=like) for name, like, message in (
    ("M_k transposed", lambda k, d: course_shift_matrix(k, d).T, lambda p: (
        f"your matrix is M_k transposed, the rotation by -k * omega_i: it maps PE(pos) to PE(pos - k), {p.args[0]} "
        "positions the other way. PE(pos + k) = PE(pos) @ M_k.T, and each block of M_k is [[cos(k omega_i), "
        "sin(k omega_i)], [-sin(k omega_i), cos(k omega_i)]]: the minus sign goes below the diagonal.")),
    ("sin and cos swapped", lambda k, d: (lambda a: _blocks(d, a.sin(), a.cos(), a.cos(), a.sin()))(k * _omega(d)),
     "sin and cos are swapped inside each block: the cosines go on the diagonal (M_0 is the identity)."),
    ("blocks of halves", lambda k, d: _shift(d, k * _omega(d), layout="halves"),
     "your blocks pair dimension i with dimension i + d_model/2; the course's table interleaves sin and cos, so "
     "each rotation acts on rows and columns 2i and 2i + 1."),
    ("frequencies reversed", lambda k, d: _shift(d, k * _omega(d).flip(0)),
     "your frequencies run in reverse order: pair i turns with omega_i = 10000^(-2i/d_model), the fastest "
     "(omega_0 = 1) in the first block."),
    # b: k times the frequency of the odd index 2i + 1, 10000^(-(2i+1)/d_model).
    ("a frequency per row", lambda k, d: (lambda a, b: _blocks(d, a.cos(), a.sin(), b.sin(), b.cos()))(
        k * _omega(d), k * _omega(d) * 10000.0 ** (-1 / d)),
     f"your odd rows 2i + 1 use the frequency 10000^(-(2i+1)/d_model): {_SHARE}."),
    ("a frequency per column", lambda k, d: (lambda a, b: _blocks(d, a.cos(), b.sin(), a.sin(), b.cos()))(
        k * _omega(d), k * _omega(d) * 10000.0 ** (-1 / d)),
     f"your odd columns 2i + 1 use the frequency 10000^(-(2i+1)/d_model): {_SHARE}."),
    ("the exponent i/d_model", lambda k, d: _shift(d, k * 10000.0 ** (-_pairs(d) / 2 / d)),
     "the exponent is i/d_model where the paper has 2i/d_model: omega_i from torch.arange(0, d_model, 2)."),
)) + (
    Mistake("", "M_1, or a k written into the code", find=_if(lambda got, p: True, _offset),
            example=lambda k, d: course_shift_matrix(3, d)),
    Mistake("", "a width written into the code", example=lambda k, d: _shift(d, k * _omega(d, 10)),
            find=_written_width(_shift_width, "matrix")),
    Mistake("", "not block-diagonal rotations", find=_if(lambda got, p: True, _structure),
            example=lambda k, d: course_shift_matrix(k, d) + 0.1 * (course_shift_matrix(k, d) == 0)),
)

SHIFT = Declaration(
    check="check_shift_matrix", function="shift_matrix", roles=("k", "d_model"), reference=course_shift_matrix,
    probes=lambda device: _probes("{what} of {name}(k=%d, d_model=%d)",
                                  [(tuple(s.values()), s) for s in SHIFT_SIZES], [(0, 4), (6, 6)]),
    mistakes=SHIFT_MISTAKES, sizes_fix=_shift_hint,
    returns=Tensor("the matrix M_k", like=None, dtypes=("float64", "float32"), precision="float32",
                   dtype_message=lambda found, name, what, args: (
                       f"{name} returned {what} as a torch.{found['dtype']} matrix; build it in float32 or float64 "
                       "(notebook 05 uses float64): it rounds the cosines too coarsely.")),
    passed=("check_shift_matrix passed: {name} builds M_k from 2x2 rotations [[cos k omega_i, sin k omega_i], "
            "[-sin k omega_i, cos k omega_i]], as PE(pos) @ M_k.T = PE(pos + k) asks, for "
            + ", ".join(f"(k={s['k']}, d_model={s['d_model']})" for s in SHIFT_SIZES) + " and (k=0, d_model=4)."),
)


def check_shift_matrix(shift_matrix_fn: Callable) -> None:
    """Check ``shift_matrix(k, d_model)``, M_k with PE(pos + k) = PE(pos) @ M_k.T, on ``SHIFT_SIZES`` and k = 0.

    Diagnoses: wrong shape, a dtype other than float32 or float64, NaN, a matrix a second call overwrites, sines and
    cosines read from a table too short for k (hint), the transpose (the rotation by -k omega), sin and cos swapped in
    the blocks, blocks pairing i with i + d_model/2, frequencies in reverse order, a frequency per row or per column
    instead of per pair, the exponent i/d_model, M_1 whatever k, a k or a d_model written into the code, entries
    outside the 2x2 blocks, and a block that is not a rotation.
    """
    check(SHIFT, shift_matrix_fn)


# ---------------------------------------------------------------- 5.3 embeddings plus positions
def course_embed(tokens: torch.Tensor, weight: torch.Tensor, start: int = 0) -> torch.Tensor:
    """weight[tokens] * sqrt(d_model) plus rows start .. start + L - 1 of the table: ``Embeddings``
    then ``PositionalEncoding`` (dropout 0), in the weight's dtype."""
    return weight[tokens] * math.sqrt(weight.size(1)) + sinusoidal_table(start + tokens.size(1), weight.size(1))[start:]


def _embed_probes(device: str | None) -> list[Probe]:
    g, probes = torch.Generator().manual_seed(0), []
    for sizes in EMBED_SIZES:
        batch, L, vocab, d_model, start = sizes.values()
        tokens, weight = torch.randint(vocab, (batch, L), generator=g), torch.randn(vocab, d_model, generator=g)
        label = (f"{{what}} of {{name}}(tokens of shape (batch={batch}, L={L}), weight of shape (vocab={vocab}, "
                 f"d_model={d_model}), start={start})")
        probes.append(Probe((tokens, weight, start), label, sizes=sizes, hints=((
            r"out of bounds|index out of range|out of range", "\nHint: row pos of the positional table belongs to "
            "position pos (from start), not to a token id: index the table with positions, and the embedding table "
            "with the tokens."),)))
    tokens, weight, start = probes[0].args
    probes.append(Probe((tokens, weight, start), "{what}", again=(torch.randint(11, tokens.shape, generator=g),
                                                                   weight, start)))
    # A float64 weight that requires grad, entries of about 100 (float32 rounds them by 1e-5: a float32 step shows).
    weight = (torch.randn(*weight.shape, generator=g) * 100).double()
    probes.append(Probe((tokens, weight, start), "{what} of {name}(tokens, a float64 weight that requires grad, "
                        "start=0)", grad=(1,), precision=2e-6))
    g = torch.Generator().manual_seed(5)  # batch = L = start and vocab = d_model
    probes.append(Probe((torch.randint(6, (3, 3), generator=g), torch.randn(6, 6, generator=g), 3), "{what} of "
                        "{name}(tokens of shape (batch=3, L=3), weight of shape (vocab=6, d_model=6), start=3)"))
    return probes


def _scale(got: torch.Tensor, p: Probe) -> str | None:
    """A wrong factor c when ``got`` is c * weight[tokens] + positions."""
    tokens, weight, start = p.args
    vectors, positions = weight.double()[tokens], course_embed(tokens, torch.zeros_like(weight), start).double()
    c = float(((got.double() - positions) * vectors).sum() / (vectors * vectors).sum())
    (batch, L), (vocab, d_model) = tokens.shape, weight.shape
    if not _equal(got, c * vectors + positions) or math.isclose(c, math.sqrt(d_model), rel_tol=1e-4):
        return None
    for what, n in (("vocab, the number of rows of weight", vocab), ("L, the sentence length", L),
                    ("batch, the number of sentences", batch)):
        if math.isclose(c * c, n, rel_tol=1e-4):
            return (f"you multiplied the embeddings by sqrt({n}) = {c:.4g}, and {n} is {what} here, not d_model = "
                    f"{d_model}: d_model is the width of a vector, weight.size(1).")
    return (f"you multiplied the embeddings by {c:.4g}, but here d_model = {d_model}, so sqrt(d_model) = "
            f"{math.sqrt(d_model):.4g}: is d_model (or its square root) written into your code? Read it from the "
            "table, d_model = weight.size(1).")


def _embed(scale: Callable = math.sqrt, rows: Callable = lambda t, start: t[start:], both: bool = False) -> Callable:
    """weight[tokens] * scale(d_model) plus the rows ``rows`` (table, start) of a long table (or their
    sum scaled, ``both``): the course's answer with one thing changed (a known mistake's)."""
    def embed_with_positions(tokens, weight, start=0):
        (batch, L), d_model = tokens.shape, weight.size(1)
        table = sinusoidal_table(max(weight.size(0), start + L + 1, start + batch) + 1, d_model)
        positions = rows(table, start)
        positions = positions[:L] if positions.dim() == 2 else positions
        if both:
            return (weight[tokens] + positions) * scale(d_model)
        return weight[tokens] * scale(d_model) + positions
    return embed_with_positions


def _sqrt(p: Probe) -> str:
    return f"sqrt(d_model) = {math.sqrt(p.args[1].size(1)):.4g}"


EMBED_MISTAKES = (
    Mistake(lambda p: (f"your positions start at 0, but start = {p.args[2]}: the tokens sit at positions start .. "
                       "start + L - 1 (decoding step by step): take table[start : start + L], as "
                       "PositionalEncoding(x, start) does."), "positions from 0", when=lambda p: p.args[2] != 0,
            like=_embed(rows=lambda t, start: t)),
) + tuple(Mistake(message, name, like=like) for name, like, message in (
    ("no scale", _embed(scale=lambda d: 1.0), lambda p: (
        f"the embeddings are not multiplied by {_sqrt(p)}: §3.4 multiplies them by sqrt(d_model) before the "
        "positions are added: weight[tokens] * math.sqrt(d_model).")),
    ("the scale d_model", _embed(scale=lambda d: d), lambda p: (
        f"you multiplied the embeddings by d_model = {p.args[1].size(1)} instead of {_sqrt(p)}.")),
    ("divided by sqrt(d_model)", _embed(scale=lambda d: d**-0.5),
     lambda p: f"you divided the embeddings by {_sqrt(p)} instead of multiplying."),
    ("the positions scaled too", _embed(both=True), "you scaled the sum: the positional encoding was multiplied by "
     "sqrt(d_model) too. Only the embeddings are scaled (§3.4); the positions are added afterwards."),
    ("no positions", _embed(rows=lambda t, start: torch.zeros_like(t)),
     "no positions were added: add row start + j of the sinusoidal table to the vector of the token at index j."),
    ("positions from 1", _embed(rows=lambda t, start: t[start + 1:]), lambda p: (
        f"your positions are counted from {p.args[2] + 1}: the token at index j sits at position start + j, so the "
        f"first one takes row {p.args[2]} of the table (start = {p.args[2]}).")),
    ("positions by token ids", lambda tokens, weight, start=0: weight[tokens] * math.sqrt(weight.size(1))
     + sinusoidal_table(max(weight.size(0), start + tokens.size(1)), weight.size(1))[tokens],
     "your positions are indexed by the token ids (table[tokens]): the token at index j takes row start + j of "
     "the table, whatever its id."),
    ("positions along the batch", lambda tokens, weight, start=0: _embed(
        rows=lambda t, s: t[s: s + tokens.size(0)].unsqueeze(1))(tokens, weight, start),
     "your positions run along the batch: every token of sentence b got the encoding of position start + b. The "
     "inputs are (batch, L, d_model): take table[start : start + L], which broadcasts over the batch."),
)) + (
    Mistake("", "a wrong scale", find=_if(lambda got, p: True, _scale), example=_embed(scale=lambda d: 2.0)),
)


def _embed_hint(passed: list, sizes: dict, message: str) -> str:
    """Past the positions of a table built once for 512 or 5000 of them, a failure says so."""
    last = sizes["start"] + sizes["L"] - 1
    fixed = " or ".join(str(n) for n in _PRECOMPUTED if n <= last)
    if fixed:
        return (f"\nHint: this call needs the encodings of positions up to start + L - 1 = {last}, beyond a table "
                f"built once for {fixed} positions (PositionalEncoding's max_len = 5000): build the table for the "
                "positions the call needs, sinusoidal_table(start + L, d_model).")
    return _hard_coded_hint(passed, sizes, message, "Read the sizes from the inputs: batch, L = tokens.shape and "
                            "d_model = weight.size(1), and use the start you are given.")


EMBED = Declaration(
    check="check_embed_with_positions", function="embed_with_positions", roles=("tokens", "weight", "start"),
    reference=course_embed, probes=_embed_probes, returns=Tensor("the vectors", like=1), mistakes=EMBED_MISTAKES,
    sizes_fix=_embed_hint,
    passed=("check_embed_with_positions passed: {name} gives weight[tokens] * sqrt(d_model) plus the encodings of "
            "positions start .. start + L - 1, as the course's Embeddings and PositionalEncoding do, for "
            f"{len(EMBED_SIZES)} sets of sizes (start = {', '.join(str(s['start']) for s in EMBED_SIZES)}), and "
            "keeps a float64 weight's dtype and its gradient."),
)


def check_embed_with_positions(embed_with_positions_fn: Callable) -> None:
    """Check ``embed_with_positions(tokens, weight, start)`` against ``Embeddings`` then ``PositionalEncoding`` on
    ``EMBED_SIZES``, then with a float64 weight that requires grad.

    Diagnoses: wrong shape (a batch of one squeezed away), dtype or device, an input changed in place, positions beyond
    a table built once for 512 or 5000 of them (hint), vectors a second call overwrites, a float64 weight computed in
    float32, no gradient to the weight (@torch.no_grad(), .detach()), a missing scale, the scale d_model or
    1/sqrt(d_model), the positions scaled too, no positions, positions from 0 whatever start, positions counted from
    1, positions indexed by token ids, positions along the batch (the (L, batch, d_model) convention), a factor that is
    the square root of another size, and a d_model or another size written into the code.
    """
    check(EMBED, embed_with_positions_fn)


DECLARATIONS = {d.check: d for d in (TABLE, SHIFT, EMBED)}
