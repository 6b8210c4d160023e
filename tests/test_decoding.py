import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

from annotated.decoding import greedy_decode, init_cache, next_token_logits
from annotated.support.guarded_training import greedy_decode as checked_greedy_decode
from annotated.masks import padding_mask
from annotated.model import TransformerConfig, make_model

SRC_VOCAB, TGT_VOCAB, D_MODEL = 13, 11, 32
NEVER = TGT_VOCAB - 1  # a token the test models never produce: as eos_idx, decoding runs to max_len
NORMS = pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])


def tiny_model(norm_first: bool = False, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    config = TransformerConfig(SRC_VOCAB, TGT_VOCAB, N=2, d_model=D_MODEL, d_ff=64, h=4, norm_first=norm_first)
    model = make_model(config)
    # An untrained tied generator predicts nearly the same token everywhere; a random
    # untied one makes the outputs depend on the source and the step.
    model.generator.proj.weight = nn.Parameter(torch.randn(TGT_VOCAB, D_MODEL))
    with torch.no_grad():
        model.generator.proj.bias[NEVER] = -1e4
    return model.eval()


def padded_source(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Five sentences of lengths 7, 5, 7, 2, 6: padding in the batch."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, SRC_VOCAB, (5, 7), generator=g)
    src[1, 5:] = 0
    src[3, 2:] = 0
    src[4, 6:] = 0
    return src, padding_mask(src, 0)


@NORMS
def test_cached_logits_equal_full_recomputation_at_every_step(norm_first):
    model = tiny_model(norm_first)
    src, src_mask = padded_source()
    ys = torch.randint(1, TGT_VOCAB, (5, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = init_cache(model, memory)
        for t in range(1, ys.size(1) + 1):
            cached = next_token_logits(model, memory, src_mask, ys[:, :t], cache)
            full = next_token_logits(model, memory, src_mask, ys[:, :t])
            assert_close(cached, full, rtol=1e-5, atol=1e-5, msg=lambda m: f"step {t}: {m}")


@NORMS
def test_cached_greedy_decoding_gives_the_same_tokens_as_full_recomputation(norm_first):
    model = tiny_model(norm_first)
    src, src_mask = padded_source()
    cached = greedy_decode(model, src, src_mask, max_len=15, eos_idx=NEVER, use_cache=True)
    full = greedy_decode(model, src, src_mask, max_len=15, eos_idx=NEVER, use_cache=False)
    assert cached.shape == (5, 15)
    assert torch.equal(cached, full)
    assert len(set(map(tuple, cached.tolist()))) > 1, "every sentence got the same output: a weak test"


def test_greedy_tokens_are_the_argmax_of_the_models_own_forward_pass():
    model = tiny_model()
    src, src_mask = padded_source()
    ys = greedy_decode(model, src, src_mask, max_len=10, eos_idx=NEVER)
    tgt_mask = torch.ones(9, 9, dtype=torch.bool).tril().unsqueeze(0)  # (1, 9, 9)
    with torch.no_grad():
        logits = model(src, ys[:, :-1], src_mask, tgt_mask)  # (batch, 9, vocab)
    assert ys[:, 0].eq(1).all(), "every output starts with <s>"
    assert torch.equal(logits.argmax(-1), ys[:, 1:])


def first_eos_cut(unstopped: torch.Tensor, eos: int) -> tuple[torch.Tensor, list[int]]:
    """The unstopped outputs cut after each row's first ``eos`` and padded; and where each ends."""
    expected, ends = unstopped.clone(), []
    for row in expected:
        hits = (row[1:] == eos).nonzero()
        end = int(hits[0]) + 1 if len(hits) else row.numel() - 1  # index of the first </s>
        row[end + 1 :] = 0
        ends.append(end)
    return expected[:, : max(ends) + 1], ends


def test_greedy_output_is_the_unstopped_output_cut_at_each_sentences_first_eos():
    model = tiny_model()
    src, src_mask = padded_source()
    unstopped = greedy_decode(model, src, src_mask, max_len=15, eos_idx=NEVER)
    # Call "</s>" the first token that sentence 0 produces after which sentences stop at different steps.
    eos = next(int(t) for t in unstopped[0, 1:] if int(t) > 1 and len(set(first_eos_cut(unstopped, int(t))[1])) > 1)
    expected, ends = first_eos_cut(unstopped, eos)
    out = greedy_decode(model, src, src_mask, max_len=15, eos_idx=eos)
    assert len(set(ends)) > 1, "sentences should stop at different steps for this test to mean something"
    assert torch.equal(out, expected)


def test_greedy_decoding_stops_as_soon_as_every_sentence_has_produced_eos():
    model = tiny_model()
    with torch.no_grad():
        model.generator.proj.bias[2] = 100.0  # </s> always wins
    src, src_mask = padded_source()
    out = greedy_decode(model, src, src_mask, max_len=50)
    assert torch.equal(out, torch.tensor([[1, 2]] * 5))


def test_the_cache_holds_one_key_per_decoded_position_and_the_memory_projection_once():
    model = tiny_model()
    src, src_mask = padded_source()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = init_cache(model, memory)
        memory_k = [c["memory_k"] for c in cache]
        ys = torch.ones(5, 1, dtype=torch.long)
        for t in range(1, 5):
            next_token_logits(model, memory, src_mask, ys[:, :t].expand(5, t), cache)
    assert len(cache) == 2  # one per decoder layer
    for layer_cache, k in zip(cache, memory_k):
        assert layer_cache["self_k"].shape == (5, 4, 4, D_MODEL // 4)  # (batch, h, t, d_k)
        assert layer_cache["self_v"].shape == (5, 4, 4, D_MODEL // 4)
        assert layer_cache["memory_k"] is k  # computed once, never again
        assert layer_cache["memory_k"].shape == (5, 4, 7, D_MODEL // 4)  # (batch, h, L_src, d_k)


def test_a_cache_out_of_step_with_the_tokens_is_a_clear_error():
    model = tiny_model()
    src, src_mask = padded_source()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = init_cache(model, memory)
        with pytest.raises(ValueError, match="the cache holds 0 positions but ys has 3 tokens"):
            next_token_logits(model, memory, src_mask, torch.ones(5, 3, dtype=torch.long), cache)


@pytest.mark.parametrize("kwargs, message", [
    ({"max_len": 0}, "max_len must be a positive integer"), ({"max_len": -3}, "max_len must be a positive integer"),
    ({"pad_idx": -1}, r"pad_idx=-1 is not a token id of the target vocabulary \(0..10\)"),
    ({"eos_idx": TGT_VOCAB}, "eos_idx=11 is not a token id"), ({"bos_idx": 2.0}, "bos_idx=2.0 is not a token id"),
    ({"eos_idx": 1}, "must be three different ids"),
])
def test_decoding_arguments_outside_the_vocabulary_or_lengths_below_1_are_clear_errors(kwargs, message):
    model = tiny_model()
    src, src_mask = padded_source()
    with pytest.raises(ValueError, match=message):
        checked_greedy_decode(model, src, src_mask, **{"max_len": 5, **kwargs})


def test_a_source_of_the_wrong_shape_or_type_is_a_clear_error():
    model = tiny_model()
    src, src_mask = padded_source()
    with pytest.raises(ValueError, match=r"src must be a \(batch, L_src\) tensor of token ids"):
        checked_greedy_decode(model, src[0], src_mask[0], max_len=5)
    with pytest.raises(ValueError, match="src must be"):
        checked_greedy_decode(model, src.float(), src_mask, max_len=5)
    with pytest.raises(ValueError, match="mask of shape"):
        checked_greedy_decode(model, src, src_mask.squeeze(1), max_len=5)


def test_max_len_1_gives_bos_alone_and_a_model_in_training_mode_gets_a_warning():
    model = tiny_model()
    src, src_mask = padded_source()
    assert greedy_decode(model, src, src_mask, max_len=1).tolist() == [[1]] * 5
    model.train()
    with pytest.warns(UserWarning, match=r"training mode.*model.eval\(\)") as caught:
        checked_greedy_decode(model, src, src_mask, max_len=3)
    assert caught[0].filename == __file__  # the warning points at the caller's line


def test_a_model_with_nan_weights_is_an_error_not_a_row_of_padding():
    torch.manual_seed(0)
    model = make_model(TransformerConfig(6, 6, N=1, d_model=8, d_ff=8, h=2)).eval()
    with torch.no_grad():
        model.generator.proj.bias[0] = float("nan")
    with pytest.raises(ValueError, match=r"the model's weights generator.proj.bias hold NaN or infinite values"):
        checked_greedy_decode(model, torch.tensor([[1, 4, 2]]), None, 5, 1, 2, 0)


def test_the_guarded_greedy_decode_gives_the_taught_tokens():
    model = tiny_model()
    src, src_mask = padded_source()
    for use_cache in (True, False):
        assert torch.equal(checked_greedy_decode(model, src, src_mask, 12, use_cache=use_cache),
                           greedy_decode(model, src, src_mask, 12, use_cache=use_cache))
