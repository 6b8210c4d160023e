import pytest
import torch
import torch.nn as nn

from annotated.masks import padding_mask, subsequent_mask
from annotated.multi_head import MultiHeadAttention
from annotated.support.reference import copy_mha_from_torch

D_MODEL, H = 32, 4


def pair(fast=True):
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(D_MODEL, H, dropout=0.0, batch_first=True)
    ours = MultiHeadAttention(D_MODEL, H, dropout=0.0, fast=fast)
    copy_mha_from_torch(ours, theirs)
    return ours, theirs


def inputs(batch=3, lq=5, lk=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, lq, D_MODEL, generator=g), torch.randn(batch, lk, D_MODEL, generator=g)


@pytest.mark.parametrize("fast", [True, False])
def test_equals_nn_multihead_attention_for_cross_attention(fast):
    ours, theirs = pair(fast)
    x, memory = inputs()
    expected, _ = theirs(x, memory, memory, need_weights=False)
    torch.testing.assert_close(ours(x, memory, memory), expected)


@pytest.mark.parametrize("fast", [True, False])
def test_equals_nn_multihead_attention_with_padding_mask(fast):
    ours, theirs = pair(fast)
    x, memory = inputs(lk=4)
    tokens = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 0], [5, 0, 0, 0]])
    mask = padding_mask(tokens, 0)  # (batch, 1, L_k), True = may attend
    expected, _ = theirs(x, memory, memory, key_padding_mask=~mask.squeeze(1), need_weights=False)
    torch.testing.assert_close(ours(x, memory, memory, mask), expected)


@pytest.mark.parametrize("fast", [True, False])
def test_equals_nn_multihead_attention_with_causal_mask_in_values_and_gradients(fast):
    ours, theirs = pair(fast)
    x, _ = inputs(lq=6)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = ours(x1, x1, x1, subsequent_mask(6).unsqueeze(0))  # (1, L, L)
    expected, _ = theirs(x2, x2, x2, attn_mask=~subsequent_mask(6), need_weights=False)
    torch.testing.assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(ours.W_Q.weight.grad, theirs.in_proj_weight.grad[:D_MODEL])
    torch.testing.assert_close(ours.W_O.weight.grad, theirs.out_proj.weight.grad)


def test_kept_attention_weights_equal_torch_per_head_weights():
    ours, theirs = pair()
    ours.keep_attention = True
    x, memory = inputs()
    ours(x, memory, memory)
    _, expected = theirs(x, memory, memory, need_weights=True, average_attn_weights=False)
    assert ours.attention.shape == (3, H, 5, 6)
    torch.testing.assert_close(ours.attention, expected)


def test_attention_is_not_kept_by_default():
    ours, _ = pair()
    x, memory = inputs()
    ours(x, memory, memory)
    assert ours.keep_attention is False and ours.attention is None


def test_fast_and_explicit_paths_agree_when_a_query_sees_nothing():
    fast, _ = pair(fast=True)
    explicit, _ = pair(fast=False)
    x, memory = inputs(lk=4)
    mask = torch.ones(3, 5, 4, dtype=torch.bool)
    mask[0, 2] = False
    out = fast(x, memory, memory, mask)
    torch.testing.assert_close(out, explicit(x, memory, memory, mask))
    assert torch.isfinite(out).all()


def test_d_model_not_divisible_by_h_names_both_values():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by h=4"):
        MultiHeadAttention(10, 4)


@pytest.mark.parametrize("fast", [True, False])
def test_mask_that_does_not_fit_is_rejected_with_the_module_shapes(fast):
    ours, _ = pair(fast)
    x, memory = inputs()  # batch 3, L_q 5, L_k 6
    with pytest.raises(ValueError, match=r"does not fit the attention scores of shape \(3, 5, 6\)"):
        ours(x, memory, memory, torch.ones(3, 5, 5, dtype=torch.bool))


def test_wrong_input_width_is_rejected():
    ours, _ = pair()
    x = torch.randn(2, 5, D_MODEL + 1)
    with pytest.raises(ValueError, match=f"expected inputs of width d_model={D_MODEL}"):
        ours(x, x, x)


def test_attention_dropout_is_off_by_default_as_in_the_paper():
    assert MultiHeadAttention(D_MODEL, H).dropout.p == 0.0


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("batch, lq, lk, d_model, h", [(2, 3, 5, 12, 4), (3, 7, 4, 30, 5)])
def test_output_and_kept_weights_have_the_documented_shapes(fast, batch, lq, lk, d_model, h):
    mha = MultiHeadAttention(d_model, h, fast=fast)
    x, memory = torch.randn(batch, lq, d_model), torch.randn(batch, lk, d_model)
    assert mha.split_heads(x).shape == (batch, h, lq, d_model // h)
    assert mha(x, memory, memory).shape == (batch, lq, d_model)
    mha.keep_attention = True
    mha(x, memory, memory)
    assert mha.attention.shape == (batch, h, lq, lk)


@pytest.mark.parametrize("fast", [True, False])
def test_switching_keep_attention_off_clears_the_previous_weights(fast):
    ours, _ = pair(fast)
    ours.keep_attention = True
    x, memory = inputs()
    ours(x, memory, memory)
    assert ours.attention is not None
    ours.keep_attention = False
    other, _ = inputs(batch=2, lq=3, lk=3, seed=2)
    ours(other, other, other)  # another input, of another shape
    assert ours.attention is None, "weights of an earlier call were left in .attention"


def test_a_sequence_without_its_batch_axis_is_a_clear_error():
    attn = MultiHeadAttention(D_MODEL, H)
    x = torch.randn(5, D_MODEL)  # one sentence, the batch axis forgotten
    with pytest.raises(ValueError, match=r"query of shape \(5, 32\) is not \(batch, L, d_model=32\); one sequence "
                                         r"needs unsqueeze\(0\)"):
        attn(x, x, x)
