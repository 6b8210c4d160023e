"""Layer normalization (Ba et al., 2016), used around every sublayer (paper §3.1).

Notebook: ``06_feed_forward_residual_layer_norm.ipynb``.
"""

import torch
import torch.nn as nn

from annotated.support.checks import check_features, check_positive, check_sizes


class LayerNorm(nn.Module):
    """Normalize each position's d_model features to mean 0 and variance 1, then scale
    by ``gamma`` and shift by ``beta``; equal to ``nn.LayerNorm(d_model, eps)``."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        check_sizes(d_model=d_model)
        check_positive("eps", eps)  # eps = 0 divides by zero on a constant input
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features(x, self.gamma.numel(), "LayerNorm")
        mean = x.mean(dim=-1, keepdim=True)
        # The biased variance (divide by d_model), as nn.LayerNorm uses.
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta
