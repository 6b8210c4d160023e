import math

import pytest
import torch

from annotated.positional import Embeddings, PositionalEncoding, sinusoidal_table


def test_table_follows_the_paper_formula():
    table = sinusoidal_table(50, 16)
    for pos in (0, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert math.isclose(table[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-5)
            assert math.isclose(table[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-5)


def test_encoding_adds_the_table_and_honours_the_start_offset():
    pe = PositionalEncoding(16, dropout=0.0, max_len=50)
    x = torch.zeros(2, 5, 16)
    torch.testing.assert_close(pe(x), sinusoidal_table(50, 16)[:5].expand(2, 5, 16))
    torch.testing.assert_close(pe(x[:, :1], start=7)[:, 0], sinusoidal_table(50, 16)[7].expand(2, 16))


def test_sequence_longer_than_the_table_names_the_length_and_the_maximum():
    pe = PositionalEncoding(16, dropout=0.0, max_len=10)
    with pytest.raises(ValueError, match=r"length 12 is longer than the positional table \(max_len=10\)"):
        pe(torch.zeros(1, 12, 16))


def test_odd_d_model_is_rejected():
    with pytest.raises(ValueError, match="d_model=7 must be even"):
        sinusoidal_table(10, 7)


def test_embeddings_are_scaled_by_sqrt_d_model():
    emb = Embeddings(11, 16)
    tokens = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(emb(tokens), emb.lut(tokens) * 4.0)


@pytest.mark.parametrize("bad", [11, -1])
def test_token_ids_outside_the_vocabulary_are_named(bad):
    emb = Embeddings(11, 16)
    with pytest.raises(ValueError, match=rf"token ids \[{bad}\] are outside the vocabulary of size 11"):
        emb(torch.tensor([[1, bad]]))


def test_the_table_is_a_buffer_outside_the_state_dict_rebuilt_from_the_formula():
    pe = PositionalEncoding(16, dropout=0.0, max_len=50)
    assert "pe" in dict(pe.named_buffers()) and "pe" not in pe.state_dict()
    fresh = PositionalEncoding(16, dropout=0.0, max_len=50)
    fresh.load_state_dict(pe.state_dict())
    torch.testing.assert_close(fresh.pe, sinusoidal_table(50, 16))


@pytest.mark.parametrize("batch, length, d_model, start", [(2, 5, 16, 0), (3, 7, 10, 4)])
def test_shapes_for_two_configurations(batch, length, d_model, start):
    assert sinusoidal_table(length, d_model).shape == (length, d_model)
    pe = PositionalEncoding(d_model, dropout=0.0, max_len=20)
    assert pe(torch.zeros(batch, length, d_model), start=start).shape == (batch, length, d_model)
    emb = Embeddings(11, d_model)
    assert emb(torch.zeros(batch, length, dtype=torch.long)).shape == (batch, length, d_model)
