import pytest
import torch
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.masks import padding_mask, subsequent_mask


def qkv(batch=2, heads=3, lq=5, lk=7, d_k=8, d_v=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, heads, lq, d_k, generator=g), torch.randn(batch, heads, lk, d_k, generator=g),
            torch.randn(batch, heads, lk, d_v, generator=g))


def test_equals_torch_sdpa_without_mask():
    q, k, v = qkv()
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))


def test_equals_torch_sdpa_with_causal_mask():
    q, k, v = qkv(lq=6, lk=6)
    mask = subsequent_mask(6)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_equals_torch_sdpa_with_padding_mask():
    q, k, v = qkv(lk=4)
    tokens = torch.tensor([[5, 6, 7, 0], [5, 6, 0, 0]])
    mask = padding_mask(tokens, pad_idx=0).unsqueeze(1)  # (batch, 1, 1, L_k): every head
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert (weights[1, :, :, 2:] == 0).all()


def test_gradients_equal_torch_sdpa():
    q, k, v = qkv(lq=6, lk=6)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    scaled_dot_product_attention(*ours, subsequent_mask(6))[0].square().sum().backward()
    F.scaled_dot_product_attention(*theirs, is_causal=True).square().sum().backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)


def test_fully_masked_rows_give_zero_attention_not_nan():
    q, k, v = qkv(lq=3, lk=4)
    q.requires_grad_()
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False  # query 1 may attend to nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert (weights[:, :, 1] == 0).all() and (out[:, :, 1] == 0).all()
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_mask_that_cannot_broadcast_names_both_shapes():
    q, k, v = qkv(lq=5, lk=7)
    with pytest.raises(ValueError, match=r"mask of shape \(5, 5\) cannot broadcast .* \(2, 3, 5, 7\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 5, dtype=torch.bool))


def test_non_bool_mask_is_rejected():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 7))


def test_query_and_key_widths_must_match():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="query and key must share d_k, got 8 and 4"):
        scaled_dot_product_attention(q, k[..., :4], v)
