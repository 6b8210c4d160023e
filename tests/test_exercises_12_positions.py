"""Notebook 12's checks: each passes on the course's code and names the mistake of a typical
wrong answer."""

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


WRONG_ANSWERS = [
    (check_relative_positions, not_done, "not done yet|NotImplementedError"),
    (check_relative_positions, rel_i_minus_j, "i - j"),
    (check_relative_positions, rel_no_shift, "add k"),
    (check_relative_positions, rel_no_clip, "not clipped"),
    (check_relative_positions, rel_clip_k_minus_1, "k - 1"),
    (check_relative_positions, rel_float, "int64"),
    (check_relative_positions, rel_k_written_in, "written into your code"),
    (check_skew, not_done, "not done yet|NotImplementedError"),
    (check_skew, skew_right, "on the right"),
    (check_skew, skew_drop_last, "dropped the last row"),
    (check_skew, skew_identity, "unchanged"),
    (check_skew, skew_wrong_shape, "wrong shape"),
    (check_skew, skew_L_written_in, "written into your code|shape"),
    (check_rotate, not_done, "not done yet|NotImplementedError"),
    (check_rotate, lambda x: rotate_generic(x, sign=-1.0), "sign is flipped"),
    (check_rotate, lambda x: rotate_generic(x, halves=True), "rotate half"),
    (check_rotate, lambda x: rotate_generic(x, exponent_step=1), "2i/d"),
    (check_rotate, lambda x: rotate_generic(x, first=1), "start at 1"),
    (check_rotate, lambda x: x.clone(), "unrotated"),
    (check_rotate, lambda x: rotate_generic(x, d_fixed=6), "written into your code"),
]


@pytest.mark.parametrize("check, answer, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(a, '__name__', 'lambda')}-{i}"
                              for i, (c, a, _) in enumerate(WRONG_ANSWERS)])
def test_each_wrong_answer_gets_its_diagnosis(check, answer, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(answer)


@pytest.mark.parametrize("check, answer", [(check_relative_positions, relative_positions), (check_skew, skew),
                                           (check_rotate, rotate)])
def test_each_check_passes_on_the_course_code(check, answer, capsys):
    check(answer)
    assert " passed: " in capsys.readouterr().out
