import math

import pytest
import torch
import torch.nn as nn

from annotated.feed_forward import PositionwiseFeedForward
from annotated.masks import padding_mask, subsequent_mask, target_mask
from annotated.model import TransformerConfig, count_parameters, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.positional import PositionalEncoding
from annotated.residual import SublayerConnection
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


def test_eval_mode_equals_nn_transformer_with_the_same_dropout_at_all_three_sites():
    torch.manual_seed(0)
    config = small_config(dropout=0.1, attention_dropout=0.1, ff_dropout=0.1)
    model, ref = make_model(config), torch_reference(config)
    load_from_torch_transformer(model, ref)
    src, tgt = batch()
    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt, PAD)

    def outputs():
        with torch.no_grad():
            x, y = model.src_embed(src), model.tgt_embed(tgt)
            ours = model.decoder(y, model.encoder(x, src_mask), src_mask, tgt_mask)
            theirs = ref(x, y, tgt_mask=~subsequent_mask(tgt.size(1)), src_key_padding_mask=src == PAD,
                         tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
        real = tgt != PAD
        return ours[real], theirs[real]

    model.eval(), ref.eval()
    torch.testing.assert_close(*outputs())
    model.train(), ref.train()
    ours, theirs = outputs()
    assert (ours - theirs).abs().max() > 0.1  # different random masks: no entry-by-entry equality in training


@pytest.mark.parametrize("rates", [dict(dropout=0.1), dict(dropout=0.0, attention_dropout=0.1),
                                   dict(dropout=0.1, attention_dropout=0.1, ff_dropout=0.0)])
def test_torch_reference_refuses_dropout_rates_it_cannot_reproduce(rates):
    with pytest.raises(ValueError, match="nn.Transformer has one dropout rate .* set all three equal"):
        torch_reference(small_config(**rates))


def dropout_sites(model):
    sites = {SublayerConnection: "sublayer", PositionalEncoding: "embedding", MultiHeadAttention: "attention",
             PositionwiseFeedForward: "feed_forward"}
    counts = dict.fromkeys(sites.values(), 0)
    rates = {}
    for module in model.modules():
        for kind, site in sites.items():
            if isinstance(module, kind) and module.dropout.p > 0:
                counts[site] += 1
                rates.setdefault(site, set()).add(module.dropout.p)
    return counts, rates


@pytest.mark.parametrize("N", [1, 3])
def test_default_config_drops_out_exactly_at_the_papers_two_sites(N):
    # §5.4: each sub-layer's output (2N encoder + 3N decoder) and the two embedding sums; nowhere else.
    counts, rates = dropout_sites(make_model(TransformerConfig(13, 11, N=N, d_model=32, d_ff=64, h=4)))
    assert counts == {"sublayer": 5 * N, "embedding": 2, "attention": 0, "feed_forward": 0}
    assert rates == {"sublayer": {0.1}, "embedding": {0.1}}


def test_attention_and_feed_forward_dropout_are_separate_options():
    counts, rates = dropout_sites(make_model(small_config(dropout=0.1, attention_dropout=0.2)))
    assert counts == {"sublayer": 10, "embedding": 2, "attention": 6, "feed_forward": 0}
    assert rates["attention"] == {0.2}
    counts, rates = dropout_sites(make_model(small_config(dropout=0.0, ff_dropout=0.3)))
    assert counts == {"sublayer": 0, "embedding": 0, "attention": 0, "feed_forward": 4}
    assert rates == {"feed_forward": {0.3}}


def test_default_model_in_training_mode_leaves_attention_weights_undropped():
    torch.manual_seed(0)
    model = make_model(TransformerConfig(11, 11, N=1, d_model=16, d_ff=32, h=2)).train()
    attn = model.encoder.layers[0].self_attn
    attn.keep_attention, attn.fast = True, False
    x = torch.randn(2, 5, 16)
    attn(x, x, x, None)
    first = attn.attention.clone()
    attn(x, x, x, None)
    assert torch.equal(first, attn.attention)


def test_every_matrix_is_glorot_uniform_initialized():
    torch.manual_seed(0)
    model = make_model(small_config())
    for name, p in model.named_parameters():
        if p.dim() < 2:
            continue
        fan_out, fan_in = p.shape
        bound = math.sqrt(6 / (fan_in + fan_out))  # PyTorch's nn.Linear default would be 1 / sqrt(fan_in)
        assert 0.9 * bound < p.abs().max().item() <= bound, name


def test_parameter_counts_do_not_depend_on_dropout():
    plain = make_model(small_config())
    dropped = make_model(small_config(dropout=0.3, attention_dropout=0.2, ff_dropout=0.1))
    assert count_parameters(plain) == count_parameters(dropped)


@pytest.mark.parametrize("sizes", [dict(batch=2, L_src=5, L_tgt=4, d_model=32, h=4, d_ff=64, V_src=13, V_tgt=11, N=2),
                                   dict(batch=3, L_src=7, L_tgt=6, d_model=24, h=3, d_ff=40, V_src=17, V_tgt=19, N=1)])
def test_shapes_through_the_model(sizes):
    s = sizes
    torch.manual_seed(0)
    model = make_model(TransformerConfig(s["V_src"], s["V_tgt"], N=s["N"], d_model=s["d_model"], d_ff=s["d_ff"],
                                         h=s["h"])).eval()
    src = torch.randint(1, s["V_src"], (s["batch"], s["L_src"]))
    tgt = torch.randint(1, s["V_tgt"], (s["batch"], s["L_tgt"]))
    src_mask = padding_mask(src, PAD)
    memory = model.encode(src, src_mask)
    assert memory.shape == (s["batch"], s["L_src"], s["d_model"])
    assert model(src, tgt, src_mask, target_mask(tgt, PAD)).shape == (s["batch"], s["L_tgt"], s["V_tgt"])


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


@pytest.mark.parametrize("field, value, message", [
    ("N", 0, "N must be a positive integer, got 0"), ("N", -1, "N must be a positive integer"),
    ("d_ff", 0, "d_ff must be a positive integer"), ("h", 0, "h must be a positive integer"),
    ("d_model", 0, "d_model must be a positive integer"), ("max_len", -1, "max_len must be a positive integer"),
    ("max_len", 0, "max_len must be a positive integer"), ("src_vocab_size", 0, "src_vocab_size must be"),
    ("N", 2.0, "N must be a positive integer, got 2.0"), ("d_model", 30, "d_model=30 is not divisible by h=8"),
    ("d_model", 15, "d_model=15 must be even"), ("dropout", 1.0, "dropout must be a probability in \\[0, 1\\)"),
    ("dropout", -0.1, "dropout must be a probability"), ("attention_dropout", float("nan"), "attention_dropout must"),
    ("ff_dropout", 1.5, "ff_dropout must"), ("norm_first", "yes", "norm_first must be True or False"),
])
def test_every_config_field_is_validated_when_the_config_is_made(field, value, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**{"src_vocab_size": 100, "tgt_vocab_size": 100, field: value})


def test_a_valid_config_of_unusual_sizes_builds_a_model():
    model = make_model(TransformerConfig(5, 7, N=1, d_model=6, d_ff=1, h=3, max_len=1, dropout=0.0))
    out = model(torch.tensor([[1]]), torch.tensor([[2]]), None, None)
    assert out.shape == (1, 1, 7)


def test_a_single_sentence_without_its_batch_axis_is_a_clear_error():
    model = make_model(TransformerConfig(11, 11, N=1, d_model=8, d_ff=16, h=2)).eval()
    src = torch.tensor([1, 4, 5, 2])  # (L_src,): one sentence, no batch axis
    with pytest.raises(ValueError, match=r"PositionalEncoding takes a batch of sequences, \(batch, L, d_model=8\), "
                                         r"got an input of shape \(4, 8\); one sentence needs unsqueeze\(0\)"):
        model.encode(src, None)
    with pytest.raises(ValueError, match="one sentence needs unsqueeze"):
        PositionalEncoding(8, 0.0)(torch.zeros(8, 8))  # (L, d_model) with L == d_model ran silently before
    assert model.encode(src.unsqueeze(0), None).shape == (1, 4, 8)
