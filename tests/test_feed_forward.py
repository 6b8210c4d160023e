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


def test_default_has_no_dropout_inside_as_in_the_paper():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(8, 32).train()
    x = torch.randn(3, 4, 8)
    assert ffn.dropout.p == 0.0
    torch.testing.assert_close(ffn(x), ffn(x), rtol=0, atol=0)


def test_dropout_option_acts_on_the_hidden_layer_in_training_only():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(6, 20, dropout=0.5)
    x = torch.randn(2, 3, 6)
    ffn.train()
    hidden = []
    handle = ffn.W_2.register_forward_pre_hook(lambda module, inputs: hidden.append(inputs[0]))
    ffn(x)
    handle.remove()
    relu = ffn.W_1(x).relu()
    dropped = (hidden[0] == 0) & (relu > 0)
    assert 0 < dropped.float().sum() < (relu > 0).sum()  # some active units zeroed, not all
    kept = hidden[0] != 0
    torch.testing.assert_close(hidden[0][kept], 2 * relu[kept])  # survivors scaled by 1 / (1 - p)
    ffn.eval()
    reference = torch.nn.Sequential(ffn.W_1, torch.nn.ReLU(), ffn.W_2)
    torch.testing.assert_close(ffn(x), reference(x))
