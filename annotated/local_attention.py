"""Local attention in memory blocks (Parmar et al., 2018, "Image Transformer").

The paper's Table 1 lists "self-attention (restricted)": each query sees a neighbourhood of
size r, at cost O(r·n·d) and with a maximum path length O(n/r); §4 proposes it for "very long
sequences". Image Transformer's 1D local attention is one way to build it: split the n
positions into query blocks of b, and let every query attend to its own block and the block
before it (its "memory block"). Each query then sees at most 2b keys, whatever n:

    cost O(n · b · d) instead of O(n² · d),

and a position reaches one block further per layer: the path from the first position to the
last crosses ceil(n / b) - 1 layers, O(n / b).

The blocked computation equals full attention under a band of blocks, ``block_band_mask``
(tested). Image Transformer adds the look-ahead mask inside the memory block, since it
generates pixels in order; ``causal=True`` does the same.

Notebook: ``13_the_cost_of_attention.ipynb``.
"""

import torch
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.support.checks import check_sizes
from annotated.support.variant_checks import check_local_attention


def block_band_mask(n: int, b: int, causal: bool = False, device: torch.device | str | None = None) -> torch.Tensor:
    """(n, n) bool mask, True where query i may attend to key j: j lies in i's block of b
    positions or in the block before it (and, with ``causal``, j <= i)."""
    check_sizes(n=n, b=b)
    block = torch.arange(n, device=device) // b  # the block of each position
    offset = block.unsqueeze(1) - block.unsqueeze(0)  # query block - key block: (n, n)
    mask = (offset == 0) | (offset == 1)
    return mask.tril() if causal else mask


def local_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, b: int,
                    causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of each block of b queries to its own block and the one before.

    Shapes: query and key (..., n, d_k), value (..., n, d_v). Returns the output (..., n, d_v)
    and the weights (..., n_blocks, b, 2b): block i's queries against blocks i - 1 and i.
    n need not be a multiple of b: the last block is padded, and padding is never attended to.
    """
    check_local_attention(query, key, b)  # a positive b, one sequence for query and key, or a clear error
    n = query.size(-2)
    n_blocks = -(-n // b)  # ceil(n / b)
    pad = n_blocks * b - n

    def blocks(x: torch.Tensor) -> torch.Tensor:
        # (..., n, d) -> (..., n_blocks, b, d), the last block padded with zeros.
        return F.pad(x, (0, 0, 0, pad)).unflatten(-2, (n_blocks, b))

    def with_previous(x: torch.Tensor) -> torch.Tensor:
        # (..., n_blocks, b, d) -> (..., n_blocks, 2b, d): block i - 1, then block i.
        previous = F.pad(x, (0, 0, 0, 0, 1, 0))[..., :-1, :, :]  # block -1 is all padding
        return torch.cat([previous, x], dim=-2)

    q = blocks(query)  # (..., n_blocks, b, d_k)
    k, v = with_previous(blocks(key)), with_previous(blocks(value))  # (..., n_blocks, 2b, d)
    # Which of the 2b keys are real positions: (n_blocks, 2b) from their index in the sequence.
    key_position = (torch.arange(n_blocks, device=query.device).unsqueeze(1) - 1) * b \
        + torch.arange(2 * b, device=query.device)
    mask = ((key_position >= 0) & (key_position < n)).unsqueeze(1)  # (n_blocks, 1, 2b)
    if causal:
        query_position = torch.arange(n_blocks * b, device=query.device).view(n_blocks, b, 1)
        mask = mask & (key_position.unsqueeze(1) <= query_position)  # (n_blocks, b, 2b)
    mask = mask.expand(n_blocks, b, 2 * b).view((1,) * (q.dim() - 3) + (n_blocks, b, 2 * b))
    out, weights = scaled_dot_product_attention(q, k, v, mask)  # (..., n_blocks, b, d_v)
    return out.flatten(-3, -2)[..., :n, :], weights  # (..., n, d_v)
