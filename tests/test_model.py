import pytest
import torch

from annotated.masks import padding_mask, subsequent_mask, target_mask
from annotated.model import TransformerConfig, count_parameters, make_model
from annotated.support.reference import load_from_torch_transformer, torch_reference

PAD = 0


def small_config(**overrides):
    defaults = dict(src_vocab_size=13, tgt_vocab_size=11, N=2, d_model=32, d_ff=64, h=4, dropout=0.0)
    return TransformerConfig(**{**defaults, **overrides})


def batch():
    src = torch.tensor([[3, 4, 5, 6, 7], [3, 4, 5, PAD, PAD], [8, 9, PAD, PAD, PAD]])
    tgt = torch.tensor([[1, 4, 5, 6], [1, 7, PAD, PAD], [1, 8, 9, PAD]])
    return src, tgt


def test_post_norm_stacks_equal_nn_transformer_in_outputs_and_gradients():
    torch.manual_seed(0)
    config = small_config()
    model, ref = make_model(config), torch_reference(config)
    load_from_torch_transformer(model, ref)
    model.train(), ref.train()  # dropout is 0; train mode keeps nn's fast path out of the comparison
    src, tgt = batch()
    x = model.src_embed(src).detach().requires_grad_()
    y = model.tgt_embed(tgt).detach().requires_grad_()
    x_ref, y_ref = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()

    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt, PAD)
    out = model.decoder(y, model.encoder(x, src_mask), src_mask, tgt_mask)
    expected = ref(x_ref, y_ref, tgt_mask=~subsequent_mask(tgt.size(1)), src_key_padding_mask=src == PAD,
                   tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
    real = tgt != PAD  # nn.Transformer leaves padded query rows unmasked; compare the real ones
    torch.testing.assert_close(out[real], expected[real])

    (out[real].square().sum()).backward()
    (expected[real].square().sum()).backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(y.grad, y_ref.grad)
    ours_layer, ref_layer = model.encoder.layers[0], ref.encoder.layers[0]
    torch.testing.assert_close(ours_layer.feed_forward.W_1.weight.grad, ref_layer.linear1.weight.grad)
    torch.testing.assert_close(ours_layer.sublayer[0].norm.gamma.grad, ref_layer.norm1.weight.grad)


def test_pre_norm_stacks_equal_nn_transformer_with_norm_first():
    torch.manual_seed(0)
    config = small_config(norm_first=True)
    model, ref = make_model(config), torch_reference(config)
    load_from_torch_transformer(model, ref)
    model.train(), ref.train()
    src, tgt = batch()
    x, y = model.src_embed(src), model.tgt_embed(tgt)
    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt, PAD)
    out = model.decoder(y, model.encoder(x, src_mask), src_mask, tgt_mask)
    expected = ref(x, y, tgt_mask=~subsequent_mask(tgt.size(1)), src_key_padding_mask=src == PAD,
                   tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
    real = tgt != PAD
    torch.testing.assert_close(out[real], expected[real])


def test_base_and_big_models_have_the_stated_parameter_counts():
    # Paper, Table 3: base about 65M, big about 213M (shared 37,000-token vocabulary).
    with torch.device("meta"):
        base = make_model(TransformerConfig(37_000, 37_000, share_embeddings=True))
        big = make_model(TransformerConfig(37_000, 37_000, d_model=1024, d_ff=4096, h=16, share_embeddings=True))
    assert count_parameters(base) == 63_119_496
    assert count_parameters(big) == 214_282_376


def test_generator_shares_the_target_embedding_and_optionally_the_source_one():
    model = make_model(small_config())
    assert model.generator.proj.weight is model.tgt_embed[0].lut.weight
    assert model.src_embed[0].lut.weight is not model.tgt_embed[0].lut.weight
    shared = make_model(small_config(src_vocab_size=11))
    assert shared.src_embed[0].lut.weight is not shared.tgt_embed[0].lut.weight
    three_way = make_model(small_config(src_vocab_size=11, share_embeddings=True))
    assert three_way.src_embed[0].lut.weight is three_way.generator.proj.weight


def test_sharing_embeddings_needs_one_vocabulary():
    with pytest.raises(ValueError, match="src_vocab_size=13 and tgt_vocab_size=11"):
        make_model(small_config(share_embeddings=True))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_output_at_position_i_ignores_tokens_after_i(norm_first):
    torch.manual_seed(0)
    model = make_model(small_config(norm_first=norm_first)).eval()
    src = torch.tensor([[3, 4, 5, 6]])
    tgt = torch.tensor([[1, 4, 5, 6, 7, 8]])
    src_mask = padding_mask(src, PAD)
    base = model(src, tgt, src_mask, target_mask(tgt, PAD))
    for i in range(tgt.size(1) - 1):
        changed = tgt.clone()
        changed[0, i + 1:] = torch.randint(3, 11, (tgt.size(1) - i - 1,), generator=torch.Generator().manual_seed(i))
        out = model(src, changed, src_mask, target_mask(changed, PAD))
        torch.testing.assert_close(out[0, : i + 1], base[0, : i + 1])


@pytest.mark.parametrize("norm_first", [False, True])
def test_more_padding_leaves_outputs_at_real_positions_unchanged(norm_first):
    torch.manual_seed(0)
    model = make_model(small_config(norm_first=norm_first)).eval()
    src = torch.tensor([[3, 4, 5]])
    tgt = torch.tensor([[1, 4, 5]])
    out = model(src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))
    src_padded = torch.tensor([[3, 4, 5, PAD, PAD, PAD]])
    tgt_padded = torch.tensor([[1, 4, 5, PAD, PAD]])
    padded = model(src_padded, tgt_padded, padding_mask(src_padded, PAD), target_mask(tgt_padded, PAD))
    torch.testing.assert_close(padded[:, :3], out)
    assert torch.isfinite(padded).all()


def test_a_sentence_of_only_padding_gives_finite_outputs_not_nan():
    model = make_model(small_config()).eval()
    src = torch.tensor([[3, 4], [PAD, PAD]])
    tgt = torch.tensor([[1, 4], [1, 5]])
    out = model(src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))
    assert torch.isfinite(out).all()


def test_source_longer_than_max_len_is_rejected_clearly():
    model = make_model(small_config(max_len=8))
    src = torch.full((1, 9), 3)
    with pytest.raises(ValueError, match=r"length 9 is longer than the positional table \(max_len=8\)"):
        model.encode(src, None)


def test_target_ids_outside_the_vocabulary_are_rejected_clearly():
    model = make_model(small_config())
    src, tgt = torch.tensor([[3, 4]]), torch.tensor([[1, 11]])
    with pytest.raises(ValueError, match="token ids \\[11\\] are outside the vocabulary of size 11"):
        model(src, tgt, None, None)
