import torch
import torch.nn as nn

from annotated.layer_norm import LayerNorm


def test_equals_nn_layer_norm_in_values_and_gradients():
    torch.manual_seed(0)
    ours, theirs = LayerNorm(16), nn.LayerNorm(16)
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


def test_each_position_is_normalized_to_mean_zero_and_unit_variance():
    x = torch.randn(2, 3, 64) * 5 + 7
    y = LayerNorm(64)(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(2, 3), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(2, 3), atol=1e-3, rtol=0)
