"""Layer normalization (Ba et al., 2016), used around every sublayer (paper §3.1).

Notebook: ``06_feed_forward_residual_layer_norm.ipynb``.
"""

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    """Normalize each position's d_model features to mean 0 and variance 1, then scale
    by ``gamma`` and shift by ``beta``; equal to ``nn.LayerNorm(d_model, eps)``."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        # The biased variance (divide by d_model), as nn.LayerNorm uses.
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta
