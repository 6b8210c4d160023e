"""Local attention in memory blocks equals full attention under the band-of-blocks mask."""

import math

import pytest
import torch
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.local_attention import block_band_mask, local_attention
from annotated.support.attention_cost import flops, layers_to_connect


@pytest.mark.parametrize("shape, b", [((2, 3, 12, 8), 4), ((1, 10, 5), 3), ((4, 7, 6), 8), ((2, 2, 9, 4), 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_blocks_equal_attention_under_the_band_mask(shape, b, causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g) for _ in range(3))
    mask = block_band_mask(shape[-2], b, causal).view((1,) * (len(shape) - 2) + (shape[-2],) * 2)
    out, weights = local_attention(q, k, v, b, causal)
    expected, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, expected)
    # The library's attention with the same mask agrees as well.
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    n_blocks = math.ceil(shape[-2] / b)
    assert weights.shape == (*shape[:-2], n_blocks, b, 2 * b)


def test_the_band_mask_is_a_block_and_the_one_before():
    expected = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [0, 0, 1, 1, 1]])
    assert torch.equal(block_band_mask(5, 2).int(), expected)
    assert torch.equal(block_band_mask(5, 2, causal=True).int(), expected.tril())


def test_padding_of_the_last_block_gets_no_weight():
    q = torch.randn(1, 7, 4)
    _, weights = local_attention(q, q, q, 3)
    assert (weights[0, 0, :, :3] == 0).all()  # block -1 does not exist
    assert (weights[0, 2, :, 4:] == 0).all()  # positions 7 and 8 are padding
    torch.testing.assert_close(weights[0, :, :1].sum(-1), torch.ones(3, 1))


def test_flops_grow_linearly_in_n_for_a_fixed_block():
    def count(n):
        q = torch.randn(1, n, 16)
        return flops(lambda: local_attention(q, q, q, 8))
    assert count(256) == 2 * count(128) == 4 * count(64)


@pytest.mark.parametrize("n, b", [(16, 4), (24, 4), (17, 3)])
def test_the_path_from_first_to_last_crosses_ceil_n_over_b_minus_one_layers(n, b):
    layer = lambda: (lambda x: local_attention(x, x, x, b)[0])  # noqa: E731
    assert layers_to_connect(layer, n) == math.ceil(n / b) - 1


def test_bad_inputs_are_named():
    q = torch.randn(1, 6, 4)
    with pytest.raises(ValueError, match="b"):
        local_attention(q, q, q, 0)
    with pytest.raises(ValueError, match="local attention is self-attention"):
        local_attention(q, torch.randn(1, 5, 4), torch.randn(1, 5, 4), 2)
