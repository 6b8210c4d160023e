"""Notebook 05's checks for exercises 5.2 and 5.3: each passes on the course's code and names
the mistake of a typical wrong answer (the first wrong answers of check_sinusoidal_table,
exercise 5.1, are in test_exercises.py; those of a table too short for 5003 positions, or kept
in a buffer between calls, are here)."""

import functools
import math

import pytest
import torch

from annotated.positional import Embeddings, PositionalEncoding, sinusoidal_table
import torch.nn.functional as F

from annotated.support.grading import (
    ExerciseFailed,
    check_embed_with_positions,
    check_shift_matrix,
    check_sinusoidal_table,
)


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- the sinusoidal table


@torch.no_grad()
def table_in_float64_then_float32(max_len, d_model):
    """Right: the angles in float64, sin and cos stacked per pair, the table cast to float32."""
    pos = torch.arange(max_len).unsqueeze(1).double()
    omega = torch.exp(-torch.arange(0, d_model, 2).double() * math.log(10000.0) / d_model)
    angles = pos * omega
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(max_len, d_model).float()


@functools.lru_cache(maxsize=None)
def table_cached(max_len, d_model):
    """Right: one table per (max_len, d_model), the same tensor for the same arguments."""
    return sinusoidal_table(max_len, d_model)


def _precomputed_table(rows):
    """A table built once per d_model for ``rows`` positions, then sliced."""
    tables = {}

    def sinusoidal_table_sliced(max_len, d_model):
        if d_model not in tables:
            tables[d_model] = sinusoidal_table(rows, d_model)
        return tables[d_model][:max_len]
    return sinusoidal_table_sliced


_TABLE_BUFFER = torch.zeros(6000, 64)


def table_in_a_global_buffer(max_len, d_model):
    out = _TABLE_BUFFER[:max_len, :d_model]  # a view of one buffer for every call
    out.copy_(sinusoidal_table(max_len, d_model))
    return out


WRONG_TABLES = [
    (_precomputed_table(512),
     r"sinusoidal_table_sliced\(max_len=5003, d_model=4\): expected \(5003, 4\), got \(512, 4\)\. It has 512 "
     r"rows, not max_len = 5003: is "
     r"the table built once for 512 positions and sliced"),
    (_precomputed_table(5000), r"has 5000 rows, not max_len = 5003"),
    (table_in_a_global_buffer,
     r"a second call of table_in_a_global_buffer, on other inputs, changed the table that the "
     r"first call had returned"),
]


# ---------------------------------------------------------------- the shift M_k


def _omega(d_model, width=None):
    return 10000.0 ** (-torch.arange(0, d_model, 2).double() / (width or d_model))


def _rotation(angles_of=lambda k, d_model: k * _omega(d_model),
              block=lambda c, s: ((c, s), (-s, c)), layout="pairs", dtype=torch.float64):
    """A configurable M_k, for the usual wrong answers in one line each."""
    def shift_matrix(k, d_model):
        angles = angles_of(k, d_model).to(dtype)
        (a, b), (c, d) = block(torch.cos(angles), torch.sin(angles))
        half = d_model // 2
        if layout == "pairs":
            even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
        else:
            even, odd = torch.arange(half), torch.arange(half, d_model)
        M = torch.zeros(d_model, d_model, dtype=dtype)
        M[even, even], M[even, odd], M[odd, even], M[odd, odd] = a, b, c, d
        return M
    return shift_matrix


def course_shift_matrix(k, d_model):
    """Notebook 05's shift_matrix: torch.block_diag of one 2x2 rotation per frequency."""
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    return torch.block_diag(*(torch.stack([torch.stack([ci, si]), torch.stack([-si, ci])])
                              for ci, si in zip(c, s)))


def shift_with_a_frequency_per_row(k, d_model):
    omega = 10000.0 ** (-torch.arange(d_model).double() / d_model)  # one per dimension
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    M[even, even], M[even, odd] = c[even], s[even]  # row 2i with its own frequency
    M[odd, even], M[odd, odd] = -s[odd], c[odd]  # row 2i + 1 with another
    return M


def shift_with_a_frequency_per_column(k, d_model):
    omega = 10000.0 ** (-torch.arange(d_model).double() / d_model)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    M[even, even], M[odd, even] = c[even], -s[even]  # column 2i
    M[even, odd], M[odd, odd] = s[odd], c[odd]  # column 2i + 1, another frequency
    return M


def shift_filled_everywhere(k, d_model):
    """cos and sin broadcast into full rows: no zeros outside the blocks."""
    M = course_shift_matrix(k, d_model)
    return M + 0.1 * (M == 0)


def shift_of_a_scaled_block(k, d_model):
    M = course_shift_matrix(k, d_model)
    M[0:2, 0:2] *= 2  # block 0 is no longer a rotation
    return M


def shift_in_half_precision(k, d_model):
    return course_shift_matrix(k, d_model).half()


def _shift_from_a_table(rows=None):
    """M_k with the sines and cosines of k * omega_i read from row |k| of a table of encodings
    (right when the table is built for the k given; ``rows``: built once for that many)."""
    tables = {}

    def shift_matrix(k, d_model):
        if (rows, d_model) not in tables or rows is None:
            tables[rows, d_model] = sinusoidal_table(rows or abs(k) + 1, d_model)
        encoding = tables[rows, d_model][abs(k)].double()  # sin(|k| w_i), cos(|k| w_i)
        sin, cos = encoding[0::2] * (1 if k >= 0 else -1), encoding[1::2]
        even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
        M = torch.zeros(d_model, d_model, dtype=torch.float64)
        M[even, even], M[odd, odd], M[even, odd], M[odd, even] = cos, cos, sin, -sin
        return M
    return shift_matrix


_SHIFT_BUFFER = torch.zeros(64, 64, dtype=torch.float64)


def shift_in_a_global_buffer(k, d_model):
    out = _SHIFT_BUFFER[:d_model, :d_model]
    out.copy_(course_shift_matrix(k, d_model))
    return out


def shift_hard_coded_shape(k, d_model):
    M = torch.zeros(10, 10, dtype=torch.float64)  # d_model of the first sizes
    M[:d_model, :d_model] = course_shift_matrix(k, d_model)[:10, :10]
    return M


WRONG_SHIFTS = [
    (not_done, r"raised NotImplementedError: the exercise is not done"),
    (lambda k, d_model: None, r"returned None: did you forget the `return`"),
    (_rotation(block=lambda c, s: ((c, -s), (s, c))),
     r"M_k transposed, the rotation by -k \* omega_i: it maps PE\(pos\) to PE\(pos - k\)"),
    (lambda k, d_model: course_shift_matrix(-k, d_model), r"M_k transposed"),
    (_rotation(block=lambda c, s: ((s, c), (-c, s))), r"sin and cos are swapped inside each block"),
    (_rotation(layout="halves"), r"pair dimension i with dimension i \+ d_model/2"),
    (_rotation(angles_of=lambda k, d: k * _omega(d).flip(0)), r"frequencies run in reverse order"),
    (shift_with_a_frequency_per_row,
     r"odd rows 2i \+ 1 use the frequency 10000\^\(-\(2i\+1\)/d_model\)"),
    (shift_with_a_frequency_per_column, r"odd columns 2i \+ 1 use the frequency"),
    (_rotation(angles_of=lambda k, d: k * 10000.0 ** (-torch.arange(d // 2).double() / d)),
     r"the exponent is i/d_model where the paper has 2i/d_model"),
    (_rotation(angles_of=lambda k, d: _omega(d)), r"your matrix is M_1 whatever k"),
    (_rotation(angles_of=lambda k, d: 3 * _omega(d)),
     r"your matrix shifts by 3 positions, but k = -5: is k written into your code"),
    (_rotation(angles_of=lambda k, d: k * _omega(d, 512)),
     r"frequencies are those of d_model = 512, but this matrix has d_model = 10"),
    (_rotation(angles_of=lambda k, d: k * 10000.0 ** (-torch.arange(0, d, 2).double() / 10)),
     r"frequencies are those of d_model = 10, but this matrix has d_model = 16: is a width "
     r"written into your code"),
    (shift_filled_everywhere,
     r"M\[0, 2\] = 0\.1000, but row 0 and column 2 belong to different pairs"),
    (shift_of_a_scaled_block, r"block 0 \(rows and columns 0, 1\) is \[\[.*\]\], not a rotation"),
    (shift_in_half_precision, r"torch\.float16 matrix; build it in float32 or float64"),
    (shift_hard_coded_shape,
     r"wrong shape for the matrix M_k of shift_hard_coded_shape\(k=-5, d_model=16\): expected \(16, 16\), got "
     r"\(10, 10\).*\nHint: the same function passed with \(k=3, d_model=10\) but not with "
     r"\(k=-5, d_model=16\): is a size written into your code"),
    (lambda k, d_model: course_shift_matrix(k, d_model).to(torch.complex128),
     r"the matrix M_k as a torch\.complex128 tensor, a complex one"),
    (shift_in_a_global_buffer, r"a second call of shift_in_a_global_buffer.*changed the matrix M_k"),
    (_shift_from_a_table(rows=512),
     r"(?s)\(600, 8\) raised IndexError.*\nHint: the same function passed with smaller offsets "
     r"but not with k = 600: are the sines and cosines read from a table of encodings built once "
     r"for 512 positions"),
]


# ---------------------------------------------------------------- embeddings plus positions


def course_embed_with_positions(tokens, weight, start=0):
    vocab, d_model = weight.shape
    embed = Embeddings(vocab, d_model)
    add_positions = PositionalEncoding(d_model, dropout=0.0, max_len=start + tokens.size(1))
    # The module run with the given weight as its table: gradients reach it, its dtype is kept.
    vectors = torch.func.functional_call(embed, {"lut.weight": weight}, (tokens,))
    return add_positions(vectors, start)


def _embed(scale=math.sqrt, positions="start", scale_sum=False, table_rows=None):
    """A configurable embed_with_positions, for the usual wrong answers in one line each;
    ``table_rows``: a table of that many positions, whatever the call needs."""
    def embed_with_positions(tokens, weight, start=0):
        batch, length = tokens.shape
        d_model = weight.size(1)
        table = sinusoidal_table(table_rows or start + length + 64, d_model)
        vectors = weight[tokens] * (scale(d_model) if not scale_sum else 1.0)
        rows = {
            "start": table[start : start + length],
            "zero": table[:length],
            "one": table[start + 1 : start + 1 + length],
            "tokens": table[tokens],
            "batch": table[start : start + batch].unsqueeze(1),
            "none": 0.0,
        }[positions]
        out = vectors + rows
        return out * math.sqrt(d_model) if scale_sum else out
    return embed_with_positions


def embed_with_a_table_of_length_L(tokens, weight, start=0):
    length, d_model = tokens.size(1), weight.size(1)
    return weight[tokens] * math.sqrt(d_model) + sinusoidal_table(length, d_model)[tokens]


def embed_scaling_in_place(tokens, weight, start=0):
    d_model = weight.size(1)
    weight *= math.sqrt(d_model)  # scales the caller's table
    return weight[tokens] + sinusoidal_table(start + tokens.size(1), d_model)[start:]


def embed_with_a_table_of_fixed_length(tokens, weight, start=0):
    d_model = weight.size(1)
    positions = sinusoidal_table(5, d_model)  # the L of the first sizes
    return weight[tokens] * math.sqrt(d_model) + positions


def embed_scaled_by_the_vocabulary(tokens, weight, start=0):
    d_model, vocab = weight.shape  # the two sizes of the table read the wrong way round
    positions = sinusoidal_table(start + tokens.size(1), vocab)[start:]
    return weight[tokens] * math.sqrt(d_model) + positions


def embed_in_float64(tokens, weight, start=0):
    return course_embed_with_positions(tokens, weight, start).double()


def embed_with_a_table_in_the_weights_dtype(tokens, weight, start=0):
    """Right: F.embedding, and the encodings computed in weight's dtype."""
    length, d_model = tokens.size(1), weight.size(1)
    pos = torch.arange(start, start + length, dtype=weight.dtype).unsqueeze(1)
    angles = pos * torch.exp(-torch.arange(0, d_model, 2, dtype=weight.dtype)
                             * math.log(10000.0) / d_model)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)
    return F.embedding(tokens, weight) * math.sqrt(d_model) + table


def embed_squeezed(tokens, weight, start=0):
    return course_embed_with_positions(tokens, weight, start).squeeze()


def embed_as_float(tokens, weight, start=0):
    return course_embed_with_positions(tokens, weight.float(), start)  # "for safety"


def embed_into_zeros(tokens, weight, start=0):
    batch, length = tokens.shape
    out = torch.zeros(batch, length, weight.size(1))  # float32 whatever weight's dtype
    out[:] = _embed()(tokens, weight, start)
    return out


def embed_as_float_and_back(tokens, weight, start=0):
    return _embed()(tokens, weight.float(), start).to(weight.dtype)


@torch.no_grad()
def embed_without_gradients(tokens, weight, start=0):
    return _embed()(tokens, weight, start)


def embed_of_detached_weights(tokens, weight, start=0):
    return _embed()(tokens, weight.detach(), start)


_EMBED_BUFFER = torch.zeros(8, 8, 16)


def embed_in_a_global_buffer(tokens, weight, start=0):
    batch, length = tokens.shape
    out = _EMBED_BUFFER[:batch, :length, : weight.size(1)]
    out.copy_(_embed()(tokens, weight, start))
    return out


WRONG_EMBEDDINGS = [
    (not_done, r"raised NotImplementedError: the exercise is not done"),
    (_embed(scale=lambda d: 1.0), r"not multiplied by sqrt\(d_model\) = 2\.449: §3\.4"),
    (_embed(scale=lambda d: d), r"multiplied the embeddings by d_model = 6 instead of sqrt"),
    (_embed(scale=lambda d: d**-0.5), r"divided the embeddings by sqrt\(d_model\)"),
    (_embed(scale_sum=True), r"you scaled the sum: the positional encoding was multiplied"),
    (_embed(positions="none"), r"no positions were added"),
    (_embed(positions="zero"), r"your positions start at 0, but start = 7"),
    (_embed(positions="one"), r"your positions are counted from 1:"),
    (_embed(positions="tokens"), r"positions are indexed by the token ids"),
    (embed_with_a_table_of_length_L, r"(?s)raised IndexError.*not to a token id"),
    (_embed(positions="batch"), r"positions run along the batch.*position start \+ b"),
    (_embed(scale=lambda d: math.sqrt(512)),
     r"multiplied the embeddings by 22\.63, but here d_model = 6.*written into your code"),
    (_embed(scale=lambda d: math.sqrt(6)),
     r"multiplied the embeddings by 2\.449, but here d_model = 10, so sqrt\(d_model\) = 3\.162: "
     r"is d_model \(or its square root\) written into your code"),
    (embed_scaled_by_the_vocabulary,
     r"sqrt\(11\) = 3\.317, and 11 is vocab, the number of rows of weight"),
    (embed_with_a_table_of_fixed_length,
     r"(?s)raised RuntimeError: The size of tensor a \(4\) must match.*\nHint: the same function "
     r"passed with \(batch=2, L=5, vocab=11, d_model=6, start=0\) but not with \(batch=3, L=4"),
    (embed_scaling_in_place, r"changed its second argument `weight` in place"),
    (embed_in_float64, r"the vectors as torch\.float64 for torch\.float32 inputs"),
    (_embed(table_rows=512),
     r"(?s)raised RuntimeError.*\nHint: this call needs the encodings of positions up to start \+ "
     r"L - 1 = 5003, beyond a table built once for 512 or 5000 positions.*sinusoidal_table\(start "
     r"\+ L, d_model\)\.$"),
    (_embed(table_rows=5000), r"(?s)raised RuntimeError.*beyond a table built once for 512 or 5000"),
    (embed_squeezed,
     r"expected \(1, 6, 12\), got \(6, 12\)\. Your result lost dimensions of size 1: \.squeeze\(\)"),
    (embed_as_float,
     r"the vectors as torch\.float32 for torch\.float64 inputs.*from a \.float\(\)"),
    (embed_into_zeros,
     r"the vectors as torch\.float32 for torch\.float64 inputs.*created without dtype="),
    (embed_as_float_and_back,
     r"the float64 reference and the vectors of embed_as_float_and_back\(tokens, a float64 weight "
     r"that requires grad, start=0\) differ by up to .*about float32's precision"),
    (embed_without_gradients,
     r"returned the vectors without a gradient \(requires_grad is False\).*@torch\.no_grad\(\)"),
    (embed_of_detached_weights, r"returned the vectors without a gradient"),
    (embed_in_a_global_buffer,
     r"a second call of embed_in_a_global_buffer, on other inputs, changed the vectors"),
]

WRONG_ANSWERS = (
    [(check_sinusoidal_table, wrong, message) for wrong, message in WRONG_TABLES]
    + [(check_shift_matrix, wrong, message) for wrong, message in WRONG_SHIFTS]
    + [(check_embed_with_positions, wrong, message) for wrong, message in WRONG_EMBEDDINGS]
)


@pytest.mark.parametrize("check, fn", [
    (check_sinusoidal_table, table_in_float64_then_float32),
    (check_sinusoidal_table, table_cached),
    (check_shift_matrix, course_shift_matrix),
    (check_shift_matrix, _rotation()),
    (check_shift_matrix, _rotation(dtype=torch.float32)),
    (check_shift_matrix, _shift_from_a_table()),
    (check_embed_with_positions, course_embed_with_positions),
    (check_embed_with_positions, _embed()),
    (check_embed_with_positions, embed_with_a_table_in_the_weights_dtype),
], ids=["table-float64-stacked", "table-cached", "notebook", "indexing", "float32", "shift-from-table",
        "course-modules", "formula", "table-in-weights-dtype"])
def test_check_passes_on_the_course_code_and_on_other_right_answers(check, fn, capsys):
    check(fn)
    out = capsys.readouterr().out
    assert out.startswith(f"{check.__name__} passed: ") and out.count("\n") == 1


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(WRONG_ANSWERS)])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


def test_the_embedding_check_leaves_the_global_seed_where_it_was(capsys):
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    check_embed_with_positions(course_embed_with_positions)
    assert torch.equal(torch.rand(3), expected)
