"""Softmax, made numerically stable, with a temperature (paper §3.2.1).

Notebook: ``01_softmax_and_scaling.ipynb``.
"""

import torch


def softmax(x: torch.Tensor, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """Softmax along ``dim``; subtracting the maximum first keeps ``exp`` from overflowing.

    ``softmax(x) == softmax(x - c)`` for any constant ``c``, so shifting by the row's
    maximum changes nothing mathematically but keeps every exponent at most 0.
    A temperature above 1 flattens the distribution, below 1 sharpens it.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    z = x / temperature
    z = z - z.amax(dim=dim, keepdim=True)  # largest exponent is exp(0) = 1
    e = torch.exp(z)
    return e / e.sum(dim=dim, keepdim=True)
