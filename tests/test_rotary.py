import math

import pytest
import torch

from annotated.multi_head import MultiHeadAttention
from annotated.rotary import RotaryMultiHeadAttention, rotary_angles, rotate


def rotate_complex(x: torch.Tensor) -> torch.Tensor:
    """Su et al.'s complex form: pair (x_2i, x_2i+1) as x_2i + i x_2i+1, times e^{i m theta_i}."""
    length, d = x.shape[-2:]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * theta
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2).to(x.dtype)


@pytest.mark.parametrize("shape", [(7, 4), (2, 3, 11, 16)])
def test_rotate_equals_the_complex_multiplication_of_the_paper(shape):
    x = torch.randn(shape)
    torch.testing.assert_close(rotate(x), rotate_complex(x))


@pytest.mark.parametrize("d", [8, 64])
def test_norms_are_preserved_and_scores_depend_only_on_the_offset(d):
    q, k = torch.randn(d), torch.randn(d)
    L = 40
    rq, rk = rotate(q.expand(L, d)), rotate(k.expand(L, d))  # the same vectors at every position
    torch.testing.assert_close(rq.norm(dim=-1), q.norm().expand(L))
    scores = rq @ rk.T  # (L, L): position m against position n
    for offset in (-5, 0, 3):
        diagonal = torch.diagonal(scores, offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), rtol=1e-4, atol=1e-4)


def test_angles_use_the_sinusoid_frequencies_and_the_start_offset():
    angles = rotary_angles(5, 8, start=3)
    assert angles.shape == (5, 4)
    assert math.isclose(angles[0, 1].item(), 3 / 10000 ** (2 / 8), rel_tol=1e-6)
    torch.testing.assert_close(rotate(torch.ones(1, 6, 8))[:, 3:], rotate(torch.ones(1, 3, 8), start=3))


def test_rotary_attention_equals_plain_attention_on_a_single_position():
    torch.manual_seed(0)
    plain = MultiHeadAttention(16, 4, fast=False)
    rotary = RotaryMultiHeadAttention(16, 4)
    rotary.load_state_dict(plain.state_dict())
    x = torch.randn(2, 1, 16)  # position 0: a rotation by angle 0
    torch.testing.assert_close(rotary(x, x, x), plain(x, x, x))
    y = torch.randn(2, 5, 16)
    assert not torch.allclose(rotary(y, y, y), plain(y, y, y))  # longer: positions change the output


def test_rotary_attention_is_unchanged_by_shifting_every_position():
    torch.manual_seed(0)
    attn = RotaryMultiHeadAttention(16, 2)
    x = torch.randn(1, 6, 16)
    q = attn.split_heads(attn.W_Q(x))
    k = attn.split_heads(attn.W_K(x))
    torch.testing.assert_close(rotate(q) @ rotate(k).transpose(-2, -1),
                               rotate(q, start=50) @ rotate(k, start=50).transpose(-2, -1), rtol=1e-4, atol=1e-4)


def test_odd_width_is_a_clear_error():
    with pytest.raises(ValueError, match="d=7 must be even"):
        rotate(torch.zeros(3, 7))
