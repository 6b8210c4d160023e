import dataclasses

import pytest
import torch

from annotated.learned_positions import LearnedPositionalEncoding
from annotated.positional import PositionalEncoding
from annotated.relative_positions import RelativeMultiHeadAttention
from annotated.rotary import RotaryMultiHeadAttention
from annotated.support.length_generalization import (KINDS, LengthExperiment, NoPositions, exact_match,
                                                     position_model, run, training_pairs)

TINY = LengthExperiment(d_model=16, N=1, h=2, d_ff=32, steps=3, batch_tokens=64, test_lengths=(3, 5),
                        test_examples=4, max_train_length=4, fit_lengths=(2, 4), check_every=1)


def test_each_kind_swaps_only_the_positions():
    models = {kind: position_model(kind, TINY) for kind in KINDS}
    assert isinstance(models["sinusoidal"].src_embed[1], PositionalEncoding)
    assert isinstance(models["learned"].tgt_embed[1], LearnedPositionalEncoding)
    for kind, cls in (("relative", RelativeMultiHeadAttention), ("rotary", RotaryMultiHeadAttention)):
        m = models[kind]
        assert isinstance(m.src_embed[1], NoPositions)
        assert all(isinstance(layer.self_attn, cls) for layer in [*m.encoder.layers, *m.decoder.layers])
        assert all(type(layer.src_attn).__name__ == "MultiHeadAttention" for layer in m.decoder.layers)
        # the same starting projections as the sinusoidal model
        torch.testing.assert_close(m.encoder.layers[0].self_attn.W_Q.weight,
                                   models["sinusoidal"].encoder.layers[0].self_attn.W_Q.weight)


def test_training_lengths_stay_within_the_maximum():
    pairs = training_pairs(TINY)
    lengths = {len(src) - 2 for src, _ in pairs}
    assert lengths == set(range(1, 5))
    assert all(src == tgt for src, tgt in pairs)
    reverse = training_pairs(dataclasses.replace(TINY, task="reverse"))
    assert all(tgt[1:-1] == src[1:-1][::-1] for src, tgt in reverse)


def test_run_reports_an_accuracy_per_kind_and_length():
    results = run(TINY, kinds=("sinusoidal", "rotary"))
    assert set(results) == {"sinusoidal", "rotary"}
    for r in results.values():
        assert set(r["accuracy"]) == {3, 5} and all(0 <= a <= 1 for a in r["accuracy"].values())
        assert set(r["validation"]) == {2, 4} and 1 <= r["steps"] <= 3


def test_training_stops_at_the_first_check_where_every_fit_length_fits(monkeypatch):
    import annotated.support.length_generalization as lg
    scores = {2: [0.5, 0.95, 1.0], 4: [0.95, 0.85, 0.9]}  # both at 0.9 or more only at the third check
    calls = []

    def fake_exact_match(model, exp, length, device="cpu", validation=False):
        assert validation  # stopping is decided on validation sequences, never on the test ones
        calls.append(length)
        return scores[length][calls.count(length) - 1]

    monkeypatch.setattr(lg, "exact_match", fake_exact_match)
    _, history = lg.train("sinusoidal", dataclasses.replace(TINY, steps=5, fit_threshold=0.9))
    assert history["fitted_at"] == 3 and [steps for steps, _ in history["checks"]] == [1, 2, 3]
    assert len(history["step_loss"]) == 3  # no update after the fit


def test_a_kind_that_never_fits_trains_its_whole_budget_and_says_so(monkeypatch):
    import annotated.support.length_generalization as lg
    monkeypatch.setattr(lg, "exact_match", lambda *args, **kwargs: 0.5)
    _, history = lg.train("learned", dataclasses.replace(TINY, steps=4, check_every=2))
    assert history["fitted_at"] is None and [steps for steps, _ in history["checks"]] == [2, 4]


def test_validation_and_test_sequences_are_drawn_apart():
    import annotated.support.length_generalization as lg
    model = position_model("sinusoidal", TINY).eval()
    seen = []
    original = lg.TASKS["copy"]
    lg.TASKS["copy"] = lambda n, length, vocab, seed: seen.append(seed) or original(n, length, vocab, seed)
    try:
        exact_match(model, TINY, 3)
        exact_match(model, TINY, 3, validation=True)
    finally:
        lg.TASKS["copy"] = original
    assert len(set(seen)) == 2


def test_exact_match_counts_whole_sequences(monkeypatch):
    import annotated.support.length_generalization as lg
    model = position_model("sinusoidal", TINY).eval()
    # A decoder that returns the source itself copies perfectly; one wrong symbol spoils a sequence.
    monkeypatch.setattr(lg, "greedy_decode", lambda model, src, mask, max_len, use_cache: src)
    assert exact_match(model, TINY, 3) == 1.0
    monkeypatch.setattr(lg, "greedy_decode", lambda model, src, mask, max_len, use_cache:
                        torch.cat([src[:, :-2], src[:, -2:-1] % 20 + 4, src[:, -1:]], 1))
    assert exact_match(model, TINY, 3) == 0.0


def test_bad_settings_are_clear_errors():
    with pytest.raises(ValueError, match="task='sort'"):
        LengthExperiment(task="sort")
    with pytest.raises(ValueError, match="kind='alibi'"):
        position_model("alibi", TINY)
    with pytest.raises(ValueError, match="fit_lengths must lie in the training lengths 1 .. 4"):
        dataclasses.replace(TINY, fit_lengths=(2, 5))
