import pytest
import torch

from annotated.decoding import greedy_decode
from annotated.learned_positions import LearnedPositionalEncoding
from annotated.masks import padding_mask
from annotated.model import TransformerConfig, make_model
from annotated.positional import PositionalEncoding


@pytest.mark.parametrize("batch, length, d_model", [(2, 5, 16), (3, 9, 8)])
def test_adds_the_table_row_of_each_position_and_honours_the_start_offset(batch, length, d_model):
    pe = LearnedPositionalEncoding(d_model, dropout=0.0, max_len=20)
    x = torch.randn(batch, length, d_model)
    torch.testing.assert_close(pe(x), x + pe.table.weight[:length])
    torch.testing.assert_close(pe(x[:, :2], start=7), x[:, :2] + pe.table.weight[7:9])


def test_the_table_is_trained_unlike_the_sinusoids():
    learned = LearnedPositionalEncoding(16, dropout=0.0, max_len=30)
    assert sum(p.numel() for p in learned.parameters()) == 30 * 16
    assert sum(p.numel() for p in PositionalEncoding(16, max_len=30).parameters()) == 0
    learned(torch.zeros(1, 4, 16)).sum().backward()
    grad = learned.table.weight.grad
    assert (grad[:4] != 0).all() and (grad[4:] == 0).all()  # only the positions seen get a gradient


def test_drop_in_for_the_sinusoids_decoding_with_and_without_the_cache_agree():
    torch.manual_seed(0)
    model = make_model(TransformerConfig(12, 12, N=1, d_model=16, d_ff=32, h=2, max_len=20))
    for embed in (model.src_embed, model.tgt_embed):
        embed[1] = LearnedPositionalEncoding(16, 0.0, 20)
    model.eval()
    src = torch.tensor([[1, 5, 6, 7, 2], [1, 9, 2, 0, 0]])
    cached = greedy_decode(model, src, padding_mask(src, 0), max_len=12, eos_idx=None, use_cache=True)
    full = greedy_decode(model, src, padding_mask(src, 0), max_len=12, eos_idx=None, use_cache=False)
    assert torch.equal(cached, full)


def test_a_position_past_the_table_is_a_clear_error():
    pe = LearnedPositionalEncoding(8, dropout=0.0, max_len=10)
    with pytest.raises(ValueError, match=r"length 12 is longer than the learned table \(max_len=10\)"):
        pe(torch.zeros(1, 12, 8))
    with pytest.raises(ValueError, match="d_model=8"):
        pe(torch.zeros(1, 3, 6))
