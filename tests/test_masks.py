import torch
import torch.nn as nn

from annotated.masks import padding_mask, subsequent_mask, target_mask


def test_subsequent_mask_lets_position_i_see_only_j_at_most_i():
    mask = subsequent_mask(5)
    for i in range(5):
        for j in range(5):
            assert bool(mask[i, j]) == (j <= i)


def test_subsequent_mask_is_the_negation_of_torch_convention():
    torch_mask = nn.Transformer.generate_square_subsequent_mask(6)  # float, -inf = masked
    assert torch.equal(~subsequent_mask(6), torch_mask == float("-inf"))


def test_padding_mask_hides_padding_keys_for_every_query():
    tokens = torch.tensor([[4, 5, 0], [4, 0, 0]])
    mask = padding_mask(tokens, pad_idx=0)
    assert mask.shape == (2, 1, 3)
    assert mask.tolist() == [[[True, True, False]], [[True, False, False]]]


def test_target_mask_combines_padding_and_look_ahead():
    tokens = torch.tensor([[1, 5, 6, 0]])
    mask = target_mask(tokens, pad_idx=0)
    assert mask.shape == (1, 4, 4)
    expected = subsequent_mask(4) & torch.tensor([True, True, True, False])
    assert torch.equal(mask[0], expected)


def test_mask_shapes_on_two_configurations_whose_sizes_all_differ():
    for batch, length in [(2, 5), (3, 4)]:
        tokens = torch.randint(1, 9, (batch, length))
        assert padding_mask(tokens, pad_idx=0).shape == (batch, 1, length)
        assert subsequent_mask(length).shape == (length, length)
        assert target_mask(tokens, pad_idx=0).shape == (batch, length, length)

