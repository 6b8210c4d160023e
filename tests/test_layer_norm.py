import pytest
import torch
import torch.nn as nn

from annotated.layer_norm import LayerNorm


@pytest.mark.parametrize("fast", [False, True], ids=["formula", "fused"])
def test_equals_nn_layer_norm_in_values_and_gradients(fast):
    torch.manual_seed(0)
    ours, theirs = LayerNorm(16, fast=fast), nn.LayerNorm(16)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
        ours.gamma.copy_(theirs.weight)
        ours.beta.copy_(theirs.bias)
    x = torch.randn(4, 7, 16) * 3 + 2
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.testing.assert_close(ours(x1), theirs(x2))
    ours(x1).pow(3).sum().backward()
    theirs(x2).pow(3).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(ours.gamma.grad, theirs.weight.grad)


@pytest.mark.parametrize("fast", [False, True], ids=["formula", "fused"])
def test_each_position_is_normalized_to_mean_zero_and_unit_variance(fast):
    x = torch.randn(2, 3, 64) * 5 + 7
    y = LayerNorm(64, fast=fast)(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(2, 3), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(2, 3), atol=1e-3, rtol=0)


def test_the_formula_and_the_fused_kernel_agree_on_a_large_offset_and_in_the_gradient_of_gamma():
    """fast=True (F.layer_norm) is the formula of notebook 06 within float32 rounding, where the
    mean is far from zero too (a two-pass variance, as the formula's, stays exact there)."""
    torch.manual_seed(1)
    x = torch.randn(8, 5, 32) * 0.5 + 1000.0
    formula, fused = LayerNorm(32, fast=False), LayerNorm(32)
    with torch.no_grad():
        for norm in (formula, fused):
            norm.gamma.copy_(torch.linspace(0.5, 2.0, 32))
    a, b = formula(x), fused(x)
    torch.testing.assert_close(a, b, atol=1e-3, rtol=0)  # 1000 in float32 keeps about 4 decimal digits
    a.square().sum().backward()
    b.square().sum().backward()
    torch.testing.assert_close(formula.gamma.grad, fused.gamma.grad, rtol=1e-3, atol=1e-2)
