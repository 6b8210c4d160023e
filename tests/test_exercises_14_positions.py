"""Notebook 12's checks: each passes on the course's code and names the mistake of a typical
wrong answer."""

import math

import pytest
import torch
import torch.nn.functional as F

from annotated.relative_positions import relative_positions, skew
from annotated.rotary import rotate
from annotated.support.grading.core import ExerciseFailed
from annotated.support.grading.positions import check_relative_positions, check_rotate, check_skew


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- relative positions

def offsets(lq, lk):
    return torch.arange(lk)[None, :] - torch.arange(lq)[:, None]


def rel_i_minus_j(lq, lk, k):
    return (-offsets(lq, lk)).clamp(-k, k) + k


def rel_no_shift(lq, lk, k):
    return offsets(lq, lk).clamp(-k, k)


def rel_no_clip(lq, lk, k):
    return offsets(lq, lk) + k


def rel_clip_k_minus_1(lq, lk, k):
    return offsets(lq, lk).clamp(-k + 1, k - 1) + k


def rel_float(lq, lk, k):
    return relative_positions(lq, lk, k).float()


def rel_k_written_in(lq, lk, k):
    return offsets(lq, lk).clamp(-2, 2) + 2


_TABLE_512 = torch.arange(512)[None, :] - torch.arange(512)[:, None]


def rel_table_512(lq, lk, k):  # offsets precomputed for 512 positions
    return _TABLE_512[:lq, :lk].clamp(-k, k) + k


def rel_squeezed(lq, lk, k):  # drops the query axis of a single query
    return (offsets(lq, lk).clamp(-k, k) + k).squeeze()


_BUFFER = torch.zeros(1024, 1024, dtype=torch.long)


def rel_into_a_buffer(lq, lk, k):  # every call writes into, and returns a view of, one buffer
    out = _BUFFER[:lq, :lk]
    out.copy_(offsets(lq, lk).clamp(-k, k) + k)
    return out


def rel_loops(lq, lk, k):  # right: Python loops, then a tensor
    rows = [[min(max(j - i, -k), k) + k for j in range(lk)] for i in range(lq)]
    return torch.tensor(rows, dtype=torch.long).reshape(lq, lk)


def rel_where(lq, lk, k):  # right: torch.where instead of clamp
    o = torch.arange(lk).unsqueeze(0) - torch.arange(lq).unsqueeze(1)
    return torch.where(o > k, k, torch.where(o < -k, -k, o)) + k


def rel_minimum_maximum(lq, lk, k):  # right: expanded grids, torch.minimum / maximum
    i, j = torch.arange(lq).view(-1, 1).expand(lq, lk), torch.arange(lk).expand(lq, lk)
    return torch.minimum(torch.maximum(j - i, torch.tensor(-k)), torch.tensor(k)) + k


# ---------------------------------------------------------------- skew

def skew_right(qe):
    L = qe.size(-1)
    return F.pad(qe, (0, 1)).reshape(*qe.shape[:-2], L + 1, L)[..., 1:, :]


def skew_drop_last(qe):
    L = qe.size(-1)
    return F.pad(qe, (1, 0)).reshape(*qe.shape[:-2], L + 1, L)[..., :-1, :]


def skew_identity(qe):
    return qe.clone()


def skew_L_written_in(qe):
    return F.pad(qe, (1, 0)).reshape(qe.size(0), 6, 5)[:, 1:, :]


def skew_wrong_shape(qe):
    L = qe.size(-1)
    return F.pad(qe, (1, 0)).reshape(*qe.shape[:-2], L + 1, L)


def skew_unpacking_a_batch(qe):  # 3-D only
    batch, L, _ = qe.shape
    return F.pad(qe, (1, 0)).reshape(batch, L + 1, L)[:, 1:, :]


def skew_merging_the_leading_axes(qe):  # (batch, heads, L, L) comes back (batch * heads, L, L)
    L = qe.size(-1)
    return F.pad(qe, (1, 0)).reshape(-1, L + 1, L)[:, 1:, :]


def skew_squeezed(qe):  # a batch of one loses its axis
    L = qe.size(-1)
    return F.pad(qe, (1, 0)).reshape(*qe.shape[:-2], L + 1, L)[..., 1:, :].squeeze()


def skew_zeros_without_dtype(qe):  # float32 padding: float64 comes back float32
    L = qe.size(-1)
    padded = torch.zeros(*qe.shape[:-1], L + 1)
    padded[..., 1:] = qe
    return padded.reshape(*qe.shape[:-2], L + 1, L)[..., 1:, :]


def skew_through_float32(qe):  # the dtype restored, the precision lost
    L = qe.size(-1)
    return F.pad(qe.float(), (1, 0)).reshape(*qe.shape[:-2], L + 1, L)[..., 1:, :].to(qe.dtype)


_PADDED = {}


def skew_into_a_buffer(qe):  # one padded buffer per shape, reused: the next call overwrites
    L = qe.size(-1)
    buffer = _PADDED.setdefault((qe.shape, qe.dtype), qe.new_zeros(*qe.shape[:-1], L + 1))
    buffer[..., 1:] = qe
    return buffer.reshape(*qe.shape[:-2], L + 1, L)[..., 1:, :]


def skew_cat_and_view(qe):  # right: a zero column by torch.cat, then view
    L = qe.size(-1)
    padded = torch.cat([qe.new_zeros(*qe.shape[:-1], 1), qe], dim=-1)
    return padded.view(*qe.shape[:-2], L + 1, L)[..., 1:, :]


def skew_by_gather(qe):  # right: row i takes column L - 1 - i + j (leftovers above the diagonal)
    L = qe.size(-1)
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    return qe.gather(-1, (L - 1 - i + j).clamp(max=L - 1).expand(*qe.shape).contiguous())


def skew_flattening_the_leading_axes(qe):  # right: merged for the reshape, restored after
    L = qe.size(-1)
    flat = F.pad(qe.reshape(-1, L, L), (1, 0)).reshape(-1, L + 1, L)[:, 1:]
    return flat.reshape(*qe.shape[:-2], L, L)


# ---------------------------------------------------------------- rotate

def rotate_generic(x, sign=1.0, halves=False, exponent_step=2, first=0, d_fixed=None):
    L, d = x.shape[-2:]
    d_theta = d_fixed or d
    theta = 10000.0 ** (-torch.arange(0, d, 2).float() * (exponent_step / 2) / d_theta)
    angles = torch.arange(first, first + L).float()[:, None] * theta
    cos, sin = angles.cos(), sign * angles.sin()
    if halves:
        a, b = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


def rotate_unpacking_a_batch(x):  # 3-D only
    batch, L, d = x.shape
    return rotate_generic(x)


def rotate_along_dim_1(x):  # positions read along dimension 1: the heads of a 4-D input
    L, d = x.size(1), x.size(-1)
    theta = 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    angles = (torch.arange(L).float()[:, None] * theta).reshape(L, *[1] * (x.dim() - 3), d // 2)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1).flatten(-2)


def rotate_into_float32_zeros(x):  # torch.zeros without dtype=: float64 comes back float32
    r = rotate_generic(x)
    out = torch.zeros(x.shape)
    out[..., 0::2], out[..., 1::2] = r[..., 0::2], r[..., 1::2]
    return out


def rotate_as_float(x):  # .float() "for safety"
    return rotate_generic(x.float())


def rotate_pairs_as_halves(x):  # the rotated pairs concatenated, not put back in place
    L, d = x.shape[-2:]
    angles = torch.arange(L).float()[:, None] * 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.cat([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1)


_POSITIONS = torch.arange(5000).float()


def rotate_table_5000(x):  # positions precomputed up to 5,000
    L, d = x.shape[-2:]
    angles = _POSITIONS[:L, None] * 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1).flatten(-2)


def rotate_clamped_to_the_table(x):  # positions beyond the table take its last row
    L, d = x.shape[-2:]
    positions = _POSITIONS[torch.arange(L).clamp(max=4999)]
    angles = positions[:, None] * 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1).flatten(-2)


_ROTATED = {}


def rotate_into_a_buffer(x):  # one output buffer per shape, reused: the next call overwrites
    r = rotate_generic(x)
    return _ROTATED.setdefault((r.shape, r.dtype), torch.empty_like(r)).copy_(r)


@torch.no_grad()
def rotate_without_gradients(x):  # "it is only a rotation": no_grad cuts training through it
    return rotate_generic(x)


def skew_detached(qe):  # .detach() "to save memory"
    return skew(qe).detach()


def rotate_float64_angles(x):  # right: angles in float64, the result back in x's dtype
    L, d = x.shape[-2:]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(L, dtype=torch.float64)[:, None] * theta
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.stack([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1)
    return out.flatten(-2).to(x.dtype)


def rotate_complex(x):  # right: pairs as complex numbers times e^(i m theta)
    L, d = x.shape[-2:]
    angles = torch.arange(L, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2).to(x.dtype)


def rotate_by_repeat_interleave(x):  # right: x cos + (-x1, x0) sin, angles in x's dtype
    L, d = x.shape[-2:]
    angles = torch.arange(L, dtype=x.dtype)[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    cos, sin = angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)
    return x * cos + torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2) * sin


def rotate_into_empty_like(x):  # right: exp(-log(10000) 2i/d), written into a fresh empty_like
    L, d = x.shape[-2:]
    theta = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    angles = torch.outer(torch.arange(L, dtype=torch.float32), theta)
    a, b, out = x[..., ::2], x[..., 1::2], torch.empty_like(x)
    out[..., ::2], out[..., 1::2] = a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()
    return out


WRONG_ANSWERS = [
    (check_relative_positions, not_done, "not done yet|NotImplementedError"),
    (check_relative_positions, rel_i_minus_j, "i - j"),
    (check_relative_positions, rel_no_shift, "add k"),
    (check_relative_positions, rel_no_clip, "not clipped"),
    (check_relative_positions, rel_clip_k_minus_1, "k - 1"),
    (check_relative_positions, rel_float, "int64"),
    (check_relative_positions, rel_k_written_in, "written into your code"),
    (check_relative_positions, rel_table_512, r"got \(1, 512\).*a table precomputed for 512 positions"),
    (check_relative_positions, rel_squeezed, r"got \(530,\).*lost dimensions of size 1: \.squeeze\(\)"),
    (check_relative_positions, rel_into_a_buffer, r"a second call of rel_into_a_buffer, on other inputs, changed the "
                                                  r"result that the first call had returned"),
    (check_skew, not_done, "not done yet|NotImplementedError"),
    (check_skew, skew_right, "on the right"),
    (check_skew, skew_drop_last, "dropped the last row"),
    (check_skew, skew_identity, "unchanged"),
    (check_skew, skew_wrong_shape, "wrong shape"),
    (check_skew, skew_L_written_in, "written into your code|shape"),
    (check_skew, skew_unpacking_a_batch, r"(?s)too many values to unpack.*Note: this input is 4-D, with heads"),
    (check_skew, skew_merging_the_leading_axes, r"expected \(4, 2, 6, 6\), got \(8, 6, 6\).*keep every leading axis"),
    (check_skew, skew_squeezed, r"expected \(1, 3, 3\), got \(3, 3\).*lost dimensions of size 1"),
    (check_skew, skew_zeros_without_dtype, r"returned S_rel as torch\.float32 for torch\.float64 inputs"),
    (check_skew, skew_through_float32, r"the float64 reference and S_rel of skew_through_float32.*about float32's "
                                       r"precision"),
    (check_skew, skew_into_a_buffer, r"a second call of skew_into_a_buffer, on other inputs, changed S_rel"),
    (check_skew, skew_detached, r"skew_detached returned S_rel without a gradient"),
    (check_rotate, not_done, "not done yet|NotImplementedError"),
    (check_rotate, lambda x: rotate_generic(x, sign=-1.0), "sign is flipped"),
    (check_rotate, lambda x: rotate_generic(x, halves=True), "rotate half"),
    (check_rotate, lambda x: rotate_generic(x, exponent_step=1), "2i/d"),
    (check_rotate, lambda x: rotate_generic(x, first=1), "start at 1"),
    (check_rotate, lambda x: x.clone(), "unrotated"),
    (check_rotate, lambda x: rotate_generic(x, d_fixed=6), "written into your code"),
    (check_rotate, rotate_unpacking_a_batch, r"(?s)too many values to unpack.*Note: this input is 4-D, with heads"),
    (check_rotate, rotate_along_dim_1, r"your positions run along dimension 1, here the heads"),
    (check_rotate, rotate_into_float32_zeros, r"returned the rotated x as torch\.float32 for torch\.float64 inputs"),
    (check_rotate, rotate_as_float, r"returned the rotated x as torch\.float32 for torch\.float64 inputs"),
    (check_rotate, rotate_pairs_as_halves, r"come back as two halves"),
    (check_rotate, rotate_table_5000, r"(?s)5003.*a table precomputed for 5,000 positions is too short"),
    (check_rotate, rotate_clamped_to_the_table, r"right for the first 5,000 positions and wrong after them"),
    (check_rotate, rotate_without_gradients, r"returned the rotated x without a gradient.*remove @torch\.no_grad\(\)"),
    (check_rotate, rotate_into_a_buffer, r"a second call of rotate_into_a_buffer, on other inputs, changed the "
                                         r"rotated x"),
]


@pytest.mark.parametrize("check, answer, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(a, '__name__', 'lambda')}-{i}"
                              for i, (c, a, _) in enumerate(WRONG_ANSWERS)])
def test_each_wrong_answer_gets_its_diagnosis(check, answer, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(answer)


RIGHT_ANSWERS = [
    (check_relative_positions, relative_positions), (check_skew, skew), (check_rotate, rotate),  # the course's
    (check_relative_positions, rel_loops), (check_relative_positions, rel_where),
    (check_relative_positions, rel_minimum_maximum),
    (check_skew, skew_cat_and_view), (check_skew, skew_by_gather), (check_skew, skew_flattening_the_leading_axes),
    (check_rotate, rotate_float64_angles), (check_rotate, rotate_complex), (check_rotate, rotate_by_repeat_interleave),
    (check_rotate, rotate_into_empty_like),
]


@pytest.mark.parametrize("check, answer", RIGHT_ANSWERS,
                         ids=[f"{c.__name__}-{a.__name__}" for c, a in RIGHT_ANSWERS])
def test_each_check_passes_on_the_course_code_and_other_right_answers(check, answer, capsys):
    check(answer)
    assert f"{check.__name__} passed: " in capsys.readouterr().out


def test_a_check_leaves_the_global_random_state_as_it_was(capsys):
    before = torch.random.get_rng_state()
    for check, answer in RIGHT_ANSWERS[:3]:
        check(answer)
    assert torch.equal(torch.random.get_rng_state(), before)
