"""Layer normalization (Ba et al., 2016), used around every sublayer (paper §3.1).

Notebook: ``06_feed_forward_residual_layer_norm.ipynb``.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.support.checks import check_layer_norm_arguments, check_layer_norm_call
from annotated.support.class_guards import check_arguments, check_call


class LayerNorm(nn.Module):
    """Normalize each position's d_model features to mean 0 and variance 1, then scale
    by ``gamma`` and shift by ``beta``; equal to ``nn.LayerNorm(d_model, eps)``. ``fast``:
    F.layer_norm, one fused kernel, in place of the formula (the same outputs, tested)."""

    def __init__(self, d_model: int, eps: float = 1e-5, fast: bool = True):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps, self.fast = eps, fast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fast:
            return F.layer_norm(x, self.gamma.shape, self.gamma, self.beta, self.eps)
        centered = x - x.mean(dim=-1, keepdim=True)
        var = (centered**2).mean(dim=-1, keepdim=True)  # biased (/ d_model), as nn.LayerNorm
        # 1 / sqrt once per position, multiplied into each feature: cheaper than a division.
        return self.gamma * centered * (1 / torch.sqrt(var + self.eps)) + self.beta


# The input guards, kept out of the class: a width that is not a positive integer, eps <= 0 (which
# divides by zero on a constant input) or an input of another width get a ValueError naming them.
check_arguments(LayerNorm, check_layer_norm_arguments)  # d_model > 0, eps > 0
check_call(LayerNorm, check_layer_norm_call)  # the last dimension is d_model
