import torch
import torch.nn as nn

from annotated.residual import SublayerConnection


def test_post_norm_normalizes_the_sum_as_in_the_paper():
    torch.manual_seed(0)
    sub = nn.Linear(8, 8)
    block = SublayerConnection(8, dropout=0.0, norm_first=False)
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(block(x, sub), nn.functional.layer_norm(x + sub(x), (8,)))


def test_pre_norm_adds_the_sublayer_of_the_normalized_input():
    torch.manual_seed(0)
    sub = nn.Linear(8, 8)
    block = SublayerConnection(8, dropout=0.0, norm_first=True)
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(block(x, sub), x + sub(nn.functional.layer_norm(x, (8,))))


def test_dropout_applies_to_the_sublayer_output_only_in_training():
    block = SublayerConnection(8, dropout=0.5, norm_first=True)
    x = torch.randn(4, 8)
    block.eval()
    torch.testing.assert_close(block(x, lambda y: torch.zeros_like(y)), x)
    block.train()
    added = block(torch.zeros(1000, 8), lambda y: torch.ones_like(y))
    kept = added != 0
    torch.testing.assert_close(added[kept], torch.full_like(added[kept], 2.0))  # 1 / (1 - p)
    assert 0.4 < kept.float().mean() < 0.6
