import math

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

import annotated.beam_search
from annotated.beam_search import beam_search, lp, select_rows, simple_beam_search
from annotated.decoding import greedy_decode, next_token_logits
from annotated.masks import padding_mask
from annotated.model import TransformerConfig, make_model

# Token ids of the hand-made models: <pad>=0, <s>=1, </s>=2, then words A..E.
PAD, BOS, EOS, A, B, C, D, E = range(8)


def bigram_model(probs: dict[int, dict[int, float]]) -> nn.Module:
    """A model with no layers whose next token depends only on the previous one, with the
    probabilities ``probs[previous][next]`` (every other next token gets about e^-30)."""
    V = 8
    model = make_model(TransformerConfig(V, V, N=1, d_model=V, d_ff=8, h=2, dropout=0.0))
    model.encoder.layers, model.decoder.layers = nn.ModuleList(), nn.ModuleList()  # no layers at all
    table = torch.full((V, V), -30.0)  # log P(next | previous), rows: previous
    for previous, row in probs.items():
        for following, p in row.items():
            table[previous, following] = math.log(p)
    with torch.no_grad():
        # Embeddings multiply by sqrt(d_model): the decoder state becomes one-hot(previous).
        model.tgt_embed[0].lut.weight.copy_(torch.eye(V) / math.sqrt(V))
        model.tgt_embed[1].pe.zero_()
    model.generator.proj = nn.Linear(V, V)  # untied from the embedding
    with torch.no_grad():
        model.generator.proj.weight.copy_(table.T)  # logits[next] = table[previous, next]
        model.generator.proj.bias.zero_()
    return model.eval()


def one_source(batch: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.full((batch, 3), 4)
    return src, padding_mask(src, PAD)


def score(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor, ys: torch.Tensor, alpha: float) -> float:
    """log P(Y | X) / lp(Y) of one output row (batch 1), from the model's own forward pass."""
    ys = ys[:, : (ys[0] == EOS).nonzero()[0, 0] + 1] if (ys[0] == EOS).any() else ys
    tgt_mask = torch.ones(ys.size(1) - 1, ys.size(1) - 1, dtype=torch.bool).tril().unsqueeze(0)
    with torch.no_grad():
        logp = model(src, ys[:, :-1], src_mask, tgt_mask).log_softmax(-1)  # (1, |Y|, vocab)
    total = logp.gather(-1, ys[:, 1:].unsqueeze(-1)).sum()
    return float(total / lp(torch.tensor(ys.size(1) - 1.0), alpha))


def random_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = make_model(TransformerConfig(13, 11, N=2, d_model=32, d_ff=64, h=4))
    model.generator.proj.weight = nn.Parameter(torch.randn(11, 32))  # varied outputs (see test_decoding)
    with torch.no_grad():
        model.generator.proj.bias[EOS] = 2.0  # so that sentences end, at different steps
    return model.eval()


def padded_source() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(3, 13, (4, 6), generator=torch.Generator().manual_seed(1))
    src[1, 4:] = 0
    src[3, 2:] = 0
    return src, padding_mask(src, 0)


def test_length_penalty_is_the_gnmt_formula():
    assert float(lp(torch.tensor(1.0), 0.6)) == pytest.approx(1.0)
    assert float(lp(torch.tensor(7.0), 0.6)) == pytest.approx(2.0**0.6)
    assert float(lp(torch.tensor(30.0), 0.0)) == 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_size_1_without_length_penalty_is_greedy_decoding(seed):
    model = random_model(seed)
    src, src_mask = padded_source()
    greedy = greedy_decode(model, src, src_mask, max_len=12)
    assert torch.equal(beam_search(model, src, src_mask, beam_size=1, max_len=12, length_penalty=0.0), greedy)
    assert len(set(map(tuple, greedy.tolist()))) > 1, "every sentence got the same output: a weak test"


@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_beam_size_1_with_length_penalty_never_scores_below_greedy(alpha):
    # Greedy's output is the first hypothesis a single beam finishes; it is replaced only by
    # a longer one that scores higher under s(Y).
    model = random_model()
    src, src_mask = padded_source()
    greedy = greedy_decode(model, src, src_mask, max_len=12)
    beam = beam_search(model, src, src_mask, beam_size=1, max_len=12, length_penalty=alpha)
    for i in range(src.size(0)):
        one = (src[i : i + 1], src_mask[i : i + 1])
        assert score(model, *one, beam[i : i + 1], alpha) >= score(model, *one, greedy[i : i + 1], alpha) - 1e-5


def test_beam_search_finds_a_likelier_output_than_greedy_where_greedy_is_trapped():
    # Greedy takes A (0.5), after which nothing is likely; B (0.4) is followed by </s> (0.9).
    model = bigram_model({BOS: {A: 0.5, B: 0.4, EOS: 0.1}, A: {C: 0.35, D: 0.35, E: 0.3},
                          B: {EOS: 0.9, C: 0.1}, C: {EOS: 1.0}, D: {EOS: 1.0}, E: {EOS: 1.0}})
    src, src_mask = one_source()
    greedy = greedy_decode(model, src, src_mask, max_len=10)
    beam = beam_search(model, src, src_mask, beam_size=4, max_len=10)
    assert greedy.tolist() == [[BOS, A, C, EOS]]
    assert beam.tolist() == [[BOS, B, EOS]]
    assert score(model, src, src_mask, beam, 0.6) > score(model, src, src_mask, greedy, 0.6)


def test_the_length_penalty_changes_which_output_wins():
    # "</s>" at once has P = 0.4 and "A C </s>" has P = 0.35: the longer one wins only
    # once the penalty stops summed log-probabilities from favouring short outputs.
    model = bigram_model({BOS: {EOS: 0.4, A: 0.35, B: 0.25}, A: {C: 1.0}, B: {EOS: 1.0}, C: {EOS: 1.0}})
    src, src_mask = one_source()
    assert beam_search(model, src, src_mask, beam_size=2, length_penalty=0.0).tolist() == [[BOS, EOS]]
    assert beam_search(model, src, src_mask, beam_size=2, length_penalty=0.6).tolist() == [[BOS, A, C, EOS]]


def test_the_search_ends_when_no_live_hypothesis_can_beat_the_best_finished_one():
    model = bigram_model({BOS: {EOS: 0.9, A: 0.1}, A: {EOS: 1.0}})
    steps = []
    model.generator.register_forward_hook(lambda *_: steps.append(1))
    src, src_mask = one_source(batch=3)
    out = beam_search(model, src, src_mask, beam_size=2, max_len=50)
    # Step 1 finishes "</s>" (s = log 0.9); the best live "A" has log P = log 0.1, and even
    # at the longest length, log 0.1 / lp(49) < log 0.9: nothing can catch up, so one step.
    assert math.log(0.1) / lp(49.0, 0.6) < math.log(0.9)
    assert len(steps) == 1
    assert out.tolist() == [[BOS, EOS]] * 3


def test_a_live_hypothesis_that_could_still_win_keeps_the_search_going():
    # "</s>" finishes first (0.4), but "A" (0.35) could still score more once divided by a
    # larger lp: with alpha 0.6 the search goes on and finds "A C </s>".
    model = bigram_model({BOS: {EOS: 0.4, A: 0.35, B: 0.25}, A: {C: 1.0}, B: {EOS: 1.0}, C: {EOS: 1.0}})
    steps = []
    model.generator.register_forward_hook(lambda *_: steps.append(1))
    src, src_mask = one_source()
    assert beam_search(model, src, src_mask, beam_size=2, length_penalty=0.6).tolist() == [[BOS, A, C, EOS]]
    assert len(steps) == 3


def test_finished_hypotheses_give_their_slots_to_live_ones():
    # Kept in the beam, the finished "</s>" would push out "B", whose "B D E </s>" is the best
    # output under alpha = 1: finished hypotheses must be set aside, leaving k live ones.
    model = bigram_model({BOS: {EOS: 0.35, A: 0.33, B: 0.32}, A: {EOS: 0.02, C: 0.98}, B: {D: 1.0},
                          C: {EOS: 1.0}, D: {E: 1.0}, E: {EOS: 1.0}})
    src, src_mask = one_source()
    out = beam_search(model, src, src_mask, beam_size=2, length_penalty=1.0)
    assert out.tolist() == [[BOS, B, D, E, EOS]]
    for shorter in ([BOS, EOS], [BOS, A, C, EOS]):
        assert score(model, src, src_mask, out, 1.0) > score(model, src, src_mask, torch.tensor([shorter]), 1.0)


def test_tokens_after_eos_are_padding():
    model = random_model()
    src, src_mask = padded_source()
    out = beam_search(model, src, src_mask, beam_size=3, max_len=12)
    ends = []
    for row in out.tolist():
        if EOS not in row:  # a sentence that never ends runs to max_len
            assert len(row) == 12 and PAD not in row
            continue
        end = row.index(EOS)
        assert all(token == PAD for token in row[end + 1 :])
        ends.append(end)
    assert len(set(ends)) > 1, "sentences should end at different steps for this test to mean something"


def test_a_batch_gives_the_same_outputs_as_each_sentence_alone():
    model = random_model()
    src, src_mask = padded_source()
    together = beam_search(model, src, src_mask, beam_size=3, max_len=12)
    for i in range(src.size(0)):
        length = int(src_mask[i].sum())
        alone = beam_search(model, src[i : i + 1, :length], src_mask[i : i + 1, :, :length], beam_size=3, max_len=12)
        assert together[i, : alone.size(1)].tolist() == alone[0].tolist()
        assert together[i, alone.size(1) :].eq(PAD).all()


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("beam_size", [1, 2, 3, 5])
def test_batched_beam_search_equals_the_plain_python_one_without_cache_or_batching(alpha, beam_size):
    model = random_model()
    src, src_mask = padded_source()
    with torch.no_grad():
        out = beam_search(model, src, src_mask, beam_size=beam_size, max_len=10, length_penalty=alpha)
        for i in range(src.size(0)):
            memory = model.encode(src[i : i + 1], src_mask[i : i + 1])

            def next_log_probs(prefix: list[int]) -> dict[int, float]:
                logits = next_token_logits(model, memory, src_mask[i : i + 1], torch.tensor([prefix]))
                return dict(enumerate(logits.log_softmax(-1)[0].tolist()))

            expected = simple_beam_search(next_log_probs, beam_size, 10, alpha, BOS, EOS)
            assert out[i, : len(expected)].tolist() == expected
            assert out[i, len(expected) :].eq(PAD).all()


def test_the_plain_beam_search_on_a_table_of_probabilities():
    table = {(BOS,): {A: 0.5, B: 0.4, EOS: 0.1}, (BOS, A): {C: 0.35, D: 0.35, E: 0.3},
             (BOS, B): {EOS: 0.9, C: 0.1}}

    def next_log_probs(prefix: list[int]) -> dict[int, float]:
        return {t: math.log(p) for t, p in table.get(tuple(prefix), {EOS: 1.0}).items()}

    assert simple_beam_search(next_log_probs, 2, 10, 0.6, BOS, EOS) == [BOS, B, EOS]
    assert simple_beam_search(next_log_probs, 1, 10, 0.0, BOS, EOS) == [BOS, A, C, EOS]  # greedy


def test_every_hypothesis_gets_the_logits_of_full_recomputation_after_the_cache_is_reordered(monkeypatch):
    steps = []

    def checked_next_token_logits(model, memory, src_mask, ys, cache):
        full = next_token_logits(model, memory, src_mask, ys)  # no cache: from the tokens alone
        cached = next_token_logits(model, memory, src_mask, ys, cache)
        assert_close(cached, full, rtol=1e-5, atol=1e-5, msg=lambda m: f"step {len(steps)}: {m}")
        steps.append(len({tuple(row) for row in ys.tolist()}))  # distinct hypotheses
        return cached

    monkeypatch.setattr(annotated.beam_search, "next_token_logits", checked_next_token_logits)
    model = random_model()
    src, src_mask = padded_source()
    beam_search(model, src, src_mask, beam_size=3, max_len=10)
    assert max(steps) > src.size(0), "the hypotheses of a sentence never differed: a weak test"


def test_select_rows_keeps_the_chosen_rows_in_order():
    cache = [{"self_k": torch.arange(3.0).view(3, 1, 1, 1), "self_v": torch.arange(3.0).view(3, 1, 1, 1) + 10}]
    select_rows(cache, torch.tensor([2, 2, 0]), ("self_k", "self_v"))
    assert cache[0]["self_k"].flatten().tolist() == [2.0, 2.0, 0.0]
    assert cache[0]["self_v"].flatten().tolist() == [12.0, 12.0, 10.0]


def test_drop_done_keeps_the_same_cache_rows_as_select_rows():
    """support/beams.py writes select_rows out (it may not import beam_search back): the two agree."""
    from annotated.support.beams import drop_done

    names = ("self_k", "self_v", "memory_k", "memory_v")
    n, k = 3, 2  # three sentences of two rows each; the middle one is done
    cache = [{name: torch.randn(n * k, 2, 1, 4) for name in names} for _ in range(2)]
    expected = [dict(layer) for layer in cache]
    keep_rows = torch.tensor([0, 1, 4, 5])
    select_rows(expected, keep_rows, names)
    done = torch.tensor([False, True, False])
    ys, memory = torch.arange(n * k).view(n * k, 1), torch.randn(n * k, 5, 4)
    active, log_prob, ys, memory, src_mask = drop_done(done, k, torch.arange(n), torch.randn(n, k), ys, memory, None,
                                                       cache)
    assert active.tolist() == [0, 2] and ys.flatten().tolist() == keep_rows.tolist() and src_mask is None
    for layer, wanted in zip(cache, expected, strict=True):
        for name in names:
            assert torch.equal(layer[name], wanted[name]), name


@pytest.mark.parametrize("beam_size", [0, -1])
def test_a_beam_smaller_than_1_is_a_clear_error(beam_size):
    model = bigram_model({BOS: {EOS: 1.0}})
    src, src_mask = one_source()
    with pytest.raises(ValueError, match=f"beam_size must be a positive integer, got {beam_size}"):
        beam_search(model, src, src_mask, beam_size=beam_size)


def test_a_negative_length_penalty_is_a_clear_error():
    model = bigram_model({BOS: {EOS: 1.0}})
    src, src_mask = one_source()
    with pytest.raises(ValueError, match="length_penalty .alpha. must be a finite number >= 0, got -0.5"):
        beam_search(model, src, src_mask, length_penalty=-0.5)


def test_a_sentence_that_never_ends_returns_its_best_live_hypothesis_at_max_len():
    model = bigram_model({BOS: {A: 1.0}, A: {A: 1.0}})
    src, src_mask = one_source(batch=2)
    assert beam_search(model, src, src_mask, beam_size=3, max_len=6).tolist() == [[BOS, A, A, A, A, A]] * 2


@pytest.mark.parametrize("kwargs, message", [
    ({"max_len": 0}, "max_len must be a positive integer"), ({"eos_idx": 99}, "eos_idx=99 is not a token id"),
    ({"pad_idx": -1}, "pad_idx=-1 is not a token id"), ({"length_penalty": float("nan")}, "finite number >= 0, got nan"),
    ({"length_penalty": float("inf")}, "finite number >= 0, got inf"), ({"beam_size": 2.5}, "positive integer, got 2.5"),
    ({"eos_idx": None}, "beam search needs the id of </s>"),
])
def test_beam_search_arguments_that_make_no_sense_are_clear_errors(kwargs, message):
    model = random_model()
    src, src_mask = one_source(2)
    with pytest.raises(ValueError, match=message):
        beam_search(model, src, src_mask, **{"beam_size": 2, "max_len": 6, **kwargs})


def test_beam_search_handles_an_empty_batch_and_max_len_1_like_greedy():
    model = random_model()
    src, src_mask = one_source(2)
    empty = beam_search(model, src[:0], src_mask[:0], beam_size=3, max_len=6)
    assert empty.shape == (0, 1)
    assert torch.equal(beam_search(model, src, src_mask, beam_size=3, max_len=1),
                       greedy_decode(model, src, src_mask, max_len=1))


@pytest.mark.parametrize("decode", ["greedy", "beam"])
@pytest.mark.parametrize("batch", [1, 3])
def test_decoding_encodes_the_source_once_and_projects_each_key_and_value_once(decode, batch):
    """Every step runs the decoder on the newest token only: the encoder and the cross-attention
    key/value projections run once per call, self-attention's on one position per step."""
    model = random_model()
    src = torch.randint(4, 13, (batch, 6))
    src_mask = padding_mask(src, 0)
    calls = {"encoder": [], "memory_kv": [], "self_kv": []}
    hooks = [model.encoder.register_forward_hook(lambda m, i, o: calls["encoder"].append(o.shape))]
    for layer in model.decoder.layers:
        for linear in (layer.src_attn.W_K, layer.src_attn.W_V):
            hooks.append(linear.register_forward_hook(lambda m, i, o: calls["memory_kv"].append(o.shape)))
        for linear in (layer.self_attn.W_K, layer.self_attn.W_V):
            hooks.append(linear.register_forward_hook(lambda m, i, o: calls["self_kv"].append(o.shape)))
    k = 3 if decode == "beam" else 1
    if decode == "beam":
        out = beam_search(model, src, src_mask, beam_size=k, max_len=12, length_penalty=0.6)
    else:
        out = greedy_decode(model, src, src_mask, max_len=12)
    for hook in hooks:
        hook.remove()
    assert len(calls["encoder"]) == 1
    assert len(calls["memory_kv"]) == 2 * len(model.decoder.layers)  # W_K and W_V of each layer, once
    steps = len(calls["self_kv"]) // (2 * len(model.decoder.layers))
    assert 1 <= steps <= 12 - 1 and out.size(0) == batch  # at most max_len - 1 steps
    assert all(shape[1] == 1 for shape in calls["self_kv"])  # one new position per step, never the prefix


def test_a_double_precision_model_is_a_clear_error_in_beam_search():
    torch.manual_seed(0)
    model = make_model(TransformerConfig(6, 6, N=1, d_model=8, d_ff=8, h=2)).double().eval()
    src = torch.tensor([[1, 4, 5, 2], [1, 3, 3, 2]])
    with pytest.raises(ValueError, match=r"weights are torch.float64; beam search keeps its scores in float32.*"
                                         r"model.float\(\)"):
        beam_search(model, src, None, 3, 30, 0.6, 1, 2, 0)
    assert beam_search(model.float(), src, None, 3, 30, 0.6, 1, 2, 0).dtype == torch.long


def test_a_length_penalty_that_would_overflow_is_refused_at_once():
    model = make_model(TransformerConfig(6, 6, N=1, d_model=8, d_ff=8, h=2)).eval()
    for alpha in (200, 1e308):
        with pytest.raises(ValueError, match=r"length_penalty \(alpha\) must be at most 10"):
            beam_search(model, torch.tensor([[1, 4, 2]]), None, 2, 250, alpha, 1, 2, 0)
