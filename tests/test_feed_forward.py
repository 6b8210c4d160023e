import torch

from annotated.feed_forward import PositionwiseFeedForward


def test_acts_on_each_position_independently():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(8, 32, dropout=0.0)
    x = torch.randn(2, 5, 8)
    per_position = torch.stack([ffn(x[:, i]) for i in range(5)], dim=1)
    torch.testing.assert_close(ffn(x), per_position)


def test_equals_the_torch_linear_relu_linear_stack():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(8, 32, dropout=0.0)
    reference = torch.nn.Sequential(ffn.W_1, torch.nn.ReLU(), ffn.W_2)
    x = torch.randn(3, 4, 8)
    torch.testing.assert_close(ffn(x), reference(x))
