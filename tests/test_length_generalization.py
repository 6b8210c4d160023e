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
                        test_examples=4, max_train_length=4)


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
