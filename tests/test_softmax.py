import pytest
import torch

from annotated.softmax import softmax


def test_softmax_equals_torch_softmax_along_every_dim():
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0))
    for dim in range(3):
        torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim))


def test_large_scores_do_not_overflow():
    x = torch.tensor([1000.0, 1001.0, 1002.0])
    out = softmax(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))


def test_temperature_divides_the_scores():
    x = torch.randn(10, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(softmax(x, temperature=2.0), torch.softmax(x / 2.0, dim=-1))


def test_non_positive_temperature_is_rejected_with_its_value():
    with pytest.raises(ValueError, match="temperature must be positive, got 0"):
        softmax(torch.zeros(3), temperature=0)
