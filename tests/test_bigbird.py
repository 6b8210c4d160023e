"""BigBird's mask: window, random and global keys; a constant number of keys; a short diameter."""

import math

import pytest
import torch
import torch.nn.functional as F

from annotated.bigbird import bigbird_mask, graph_diameter, keys_per_query
from annotated.model import TransformerConfig, make_model
from annotated.multi_head import MultiHeadAttention


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("n, window, n_random, n_global", [(20, 3, 2, 1), (64, 5, 3, 2), (9, 1, 0, 0)])
def test_the_mask_holds_window_random_and_global_keys(n, window, n_random, n_global):
    mask = bigbird_mask(n, window, n_random, n_global, gen())
    i = torch.arange(n)
    band = (i[:, None] - i[None, :]).abs() <= window // 2
    assert mask.dtype == torch.bool and mask.shape == (n, n)
    assert mask[band].all()
    assert mask[:n_global].all() and mask[:, :n_global].all()
    rest = keys_per_query(mask)[n_global:]
    assert (rest <= window + n_random + n_global).all()
    assert (rest >= min(n, window // 2 + 1 + n_global)).all()
    assert (keys_per_query(mask)[:n_global] == n).all()


def test_random_keys_are_drawn_per_query_and_seeded():
    a, b = bigbird_mask(50, 1, 4, 0, gen(0)), bigbird_mask(50, 1, 4, 0, gen(0))
    assert torch.equal(a, b)
    assert not torch.equal(a, bigbird_mask(50, 1, 4, 0, gen(1)))
    off_diagonal = a & ~torch.eye(50, dtype=torch.bool)
    assert (off_diagonal.sum(-1) >= 3).all() and (a.sum(-1) <= 5).all()


def test_keys_per_query_stay_constant_as_n_grows():
    counts = [keys_per_query(bigbird_mask(n, 3, 2, 1, gen()))[1:].max().item() for n in (32, 128, 512)]
    assert max(counts) <= 3 + 2 + 1


@pytest.mark.parametrize("n, window", [(10, 3), (17, 5)])
def test_diameter_of_a_window_alone_is_n_over_the_half_window(n, window):
    assert graph_diameter(bigbird_mask(n, window, 0, 0)) == math.ceil((n - 1) / (window // 2))


def test_global_tokens_make_the_diameter_two():
    for n in (16, 100):
        assert graph_diameter(bigbird_mask(n, 1, 0, 1)) == 2
        assert graph_diameter(bigbird_mask(n, 3, 2, 1, gen())) == 2


def test_a_disconnected_mask_is_named_and_bad_arguments_refused():
    with pytest.raises(ValueError, match="not connected"):
        graph_diameter(torch.eye(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="window=4 must be odd"):
        bigbird_mask(10, 4)
    with pytest.raises(ValueError, match="cannot exceed"):
        bigbird_mask(5, 3, 6)
    with pytest.raises(ValueError, match=r"must be \(n, n\)"):
        graph_diameter(torch.ones(2, 3, dtype=torch.bool))


@pytest.mark.parametrize("batch, n, d_model, h", [(2, 12, 16, 4), (1, 30, 24, 3)])
def test_drop_in_mask_for_multi_head_attention_and_the_encoder(batch, n, d_model, h):
    torch.manual_seed(0)
    mask = bigbird_mask(n, 3, 2, 1, gen()).unsqueeze(0)  # (1, n, n)
    attn = MultiHeadAttention(d_model, h, fast=False).eval()
    x = torch.randn(batch, n, d_model)
    q, k, v = (attn.split_heads(W(x)) for W in (attn.W_Q, attn.W_K, attn.W_V))
    expected = attn.W_O(attn.merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1))))
    torch.testing.assert_close(attn(x, x, x, mask), expected)
    model = make_model(TransformerConfig(11, 11, N=2, d_model=d_model, d_ff=32, h=h, dropout=0.0)).eval()
    src = torch.randint(1, 11, (batch, n))
    memory = model.encode(src, mask)
    assert memory.shape == (batch, n, d_model) and torch.isfinite(memory).all()
    assert not torch.allclose(memory, model.encode(src, None))
