import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.masks import padding_mask, subsequent_mask

# Two configurations whose sizes all differ, so a size hard-coded or swapped shows up.
CONFIGS = [dict(batch=2, heads=3, lq=5, lk=7, d_k=8, d_v=6), dict(batch=4, heads=1, lq=3, lk=2, d_k=5, d_v=9)]


def qkv(batch=2, heads=3, lq=5, lk=7, d_k=8, d_v=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, heads, lq, d_k, generator=g), torch.randn(batch, heads, lk, d_k, generator=g),
            torch.randn(batch, heads, lk, d_v, generator=g))


@pytest.mark.parametrize("config", CONFIGS, ids=["config0", "config1"])
def test_output_and_weight_shapes_follow_the_inputs(config):
    q, k, v = qkv(**config)
    out, weights = scaled_dot_product_attention(q, k, v)
    c = config
    assert out.shape == (c["batch"], c["heads"], c["lq"], c["d_v"])
    assert weights.shape == (c["batch"], c["heads"], c["lq"], c["lk"])


@pytest.mark.parametrize("config", CONFIGS, ids=["config0", "config1"])
def test_equals_torch_sdpa_without_mask(config):
    q, k, v = qkv(**config)
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_equals_torch_sdpa_with_causal_mask():
    q, k, v = qkv(lq=6, lk=6)
    mask = subsequent_mask(6)[None, None]  # (1, 1, L, L): one dimension per score dimension
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
    scaled_dot_product_attention(*ours, subsequent_mask(6)[None, None])[0].square().sum().backward()
    F.scaled_dot_product_attention(*theirs, is_causal=True).square().sum().backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)


def test_fully_masked_rows_give_zero_attention_not_nan():
    q, k, v = qkv(lq=3, lk=4)
    q.requires_grad_()
    mask = torch.ones(1, 1, 3, 4, dtype=torch.bool)
    mask[..., 1, :] = False  # query 1 may attend to nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert (weights[:, :, 1] == 0).all() and (out[:, :, 1] == 0).all()
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_dropout_acts_on_the_weights_only_while_training():
    q, k, v = qkv()
    dropout = nn.Dropout(0.5)
    _ = torch.manual_seed(0)
    _, dropped = scaled_dot_product_attention(q, k, v, dropout=dropout)
    assert (dropped == 0).any() and not torch.allclose(dropped.sum(-1), torch.ones(2, 3, 5))
    dropout.eval()
    _, kept = scaled_dot_product_attention(q, k, v, dropout=dropout)
    torch.testing.assert_close(kept, scaled_dot_product_attention(q, k, v)[1])


def test_padding_mask_without_query_axis_is_refused_even_when_batch_equals_l_q():
    # batch == L_q == 3: a (batch, L_k) mask would broadcast to (3, 3, L_k) and be applied per query.
    q, k, v = torch.randn(3, 3, 4), torch.randn(3, 5, 4), torch.randn(3, 5, 2)
    lengths = torch.tensor([5, 3, 2])
    mask = torch.arange(5) < lengths[:, None]  # (batch, L_k): the query axis is missing
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) has 2 dimensions.*\(3, 3, 5\).*unsqueeze\(1\)"):
        scaled_dot_product_attention(q, k, v, mask)
    out, weights = scaled_dot_product_attention(q, k, v, mask.unsqueeze(1))  # the fix
    assert (weights[1, :, 3:] == 0).all() and (weights[1, :, :3] > 0).all()


def test_mask_with_fewer_dimensions_than_the_scores_is_refused():
    q, k, v = qkv(lq=5, lk=7)  # scores (2, 3, 5, 7)
    for shape in [(5, 7), (2, 1, 7), (2, 5, 7)]:
        with pytest.raises(ValueError, match=rf"mask of shape \({shape[0]}, .*has {len(shape)} dimensions.*"
                                             r"\(2 or 1, 3 or 1, 5 or 1, 7\)"):
            scaled_dot_product_attention(q, k, v, torch.ones(shape, dtype=torch.bool))


def test_mask_whose_sizes_do_not_fit_names_both_shapes():
    q, k, v = qkv(lq=5, lk=7)
    for shape in [(2, 1, 5, 5), (2, 2, 5, 7), (2, 1, 7, 7), (2, 1, 1, 1)]:
        with pytest.raises(ValueError, match=r"does not fit the attention scores of shape \(2, 3, 5, 7\)"):
            scaled_dot_product_attention(q, k, v, torch.ones(shape, dtype=torch.bool))


def test_non_bool_mask_is_rejected():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        scaled_dot_product_attention(q, k, v, torch.ones(1, 1, 5, 7))


def test_query_and_key_widths_must_match():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="query and key must share d_k, got 8 and 4"):
        scaled_dot_product_attention(q, k[..., :4], v)


def test_keys_and_values_must_pair_up():
    q, k, v = qkv(lk=7)
    with pytest.raises(ValueError, match=r"same number of positions L_k"):
        scaled_dot_product_attention(q, k, v[..., :6, :])
