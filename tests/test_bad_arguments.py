"""The building blocks refuse sizes, probabilities and inputs that would build an empty layer,
divide by zero, return NaN or fail deep inside PyTorch, with a message naming the value. Notebook
08's functions do so through ``annotated.support.guarded_training``, which checks and then calls them."""

import pytest
import torch

from annotated.evaluation import translate
from annotated.feed_forward import PositionwiseFeedForward
from annotated.layer_norm import LayerNorm
from annotated.masks import subsequent_mask
from annotated.model import TransformerConfig, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.positional import PositionalEncoding, sinusoidal_table
from annotated.support.guarded_training import (LabelSmoothingLoss, batch_by_tokens, collate, copy_task, fit,
                                                make_optimizer, rate, reverse_task, train_epoch)
from annotated.vocab import UNK, build_vocab_from_iterator

CASES = [
    ("MultiHeadAttention h=0", lambda: MultiHeadAttention(8, 0), "h must be a positive integer, got 0"),
    ("MultiHeadAttention d_model=-8", lambda: MultiHeadAttention(-8, 2), "d_model must be a positive integer"),
    ("MultiHeadAttention dropout=1", lambda: MultiHeadAttention(8, 2, dropout=1.0), r"dropout must be a probability"),
    ("feed-forward d_ff=0", lambda: PositionwiseFeedForward(8, 0), "d_ff must be a positive integer, got 0"),
    ("feed-forward dropout=1.5", lambda: PositionwiseFeedForward(8, 4, 1.5), "dropout must be a probability"),
    ("LayerNorm eps=0", lambda: LayerNorm(8, eps=0), "eps must be a finite number > 0, got 0"),
    ("LayerNorm d_model=0", lambda: LayerNorm(0), "d_model must be a positive integer"),
    ("LayerNorm of other width", lambda: LayerNorm(8)(torch.zeros(2, 6)), r"built for d_model=8.*\(2, 6\)"),
    ("sinusoidal_table max_len=-1", lambda: sinusoidal_table(-1, 8), "max_len must be an integer >= 0"),
    ("positions from -2", lambda: PositionalEncoding(8, 0.0, 10)(torch.zeros(1, 3, 8), start=-2),
     "start must be an integer >= 0, got -2"),
    ("positions of other width", lambda: PositionalEncoding(8, 0.0, 10)(torch.zeros(1, 3, 6)),
     "PositionalEncoding was built for d_model=8"),
    ("subsequent_mask(-1)", lambda: subsequent_mask(-1), "size must be an integer >= 0, got -1"),
    ("label smoothing 1.0", lambda: LabelSmoothingLoss(10, 0, 1.0), r"smoothing must be a probability in \[0, 1\)"),
    ("label smoothing -0.1", lambda: LabelSmoothingLoss(10, 0, -0.1), "smoothing must be a probability"),
    ("label smoothing pad_idx=10", lambda: LabelSmoothingLoss(10, 10), r"pad_idx=10 is not a token id.*\(0..9\)"),
    ("label smoothing vocab 2", lambda: LabelSmoothingLoss(2, 0), "needs at least 3 tokens"),
    ("loss target outside", lambda: LabelSmoothingLoss(10, 0)(torch.randn(3, 10), torch.tensor([1, 2, 11])),
     r"target ids \[11\] are outside the vocabulary of 10"),
    ("loss target of other shape", lambda: LabelSmoothingLoss(10, 0)(torch.randn(3, 10), torch.tensor([1, 2])),
     r"target of shape \(2,\) does not fit logits of shape \(3, 10\)"),
    ("rate warmup=0", lambda: rate(5, 512, 0), "warmup must be a positive integer, got 0"),
    ("optimizer d_model=0", lambda: make_optimizer(torch.nn.Linear(2, 2), 0, 10)[1].step(),
     "d_model must be a positive integer"),
    ("batch_by_tokens of a string", lambda: batch_by_tokens("123", 10), "lengths must be a list of sequence lengths"),
    ("batch_by_tokens negative length", lambda: batch_by_tokens([3, -1], 10), r"lengths\[1\] = -1"),
    ("copy_task of -1 examples", lambda: copy_task(-1, 5, 10), "num_examples must be an integer >= 0, got -1"),
    # the rest of the class (issue 40): each argument's type and range, one line naming it
    ("copy_task length 2.5", lambda: copy_task(3, 2.5, 10), "length must be a positive integer, got 2.5"),
    ("reverse_task vocab_size '10'", lambda: reverse_task(3, 5, "10"), "vocab_size must be a positive integer"),
    ("copy_task seed 0.5", lambda: copy_task(3, 5, 10, seed=0.5), "seed must be an integer, got 0.5"),
    ("batch_by_tokens max_tokens 2.5", lambda: batch_by_tokens([3], 2.5), "max_tokens must be a positive integer"),
    ("batch_by_tokens shuffle 'no'", lambda: batch_by_tokens([3], 10, shuffle="no"), "shuffle must be True or False"),
    ("collate pad_idx -1", lambda: collate([([5], [1, 2])], -1), "pad_idx must be an integer >= 0, got -1"),
    ("rate step -5", lambda: rate(-5, 512, 10), "step must be an integer >= 0, got -5"),
    ("rate factor 0", lambda: rate(5, 512, 10, factor=0.0), "factor must be a finite number > 0, got 0.0"),
    ("optimizer factor nan", lambda: make_optimizer(torch.nn.Linear(2, 2), 8, 10, float("nan")), "factor must be"),
    ("optimizer of no model", lambda: make_optimizer([torch.zeros(2)], 8, 10), "model must be a torch.nn.Module"),
    ("train_epoch clip 0", lambda: train_epoch(None, [], None, None, None, clip=0.0), "clip must be a finite number > 0"),
    ("fit seed '0'", lambda: fit(None, [], [], None, None, None, max_steps=1, seed="0"), "seed must be an integer"),
]


@pytest.mark.parametrize("call, message", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_a_value_that_makes_no_sense_is_named(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_the_limits_themselves_are_accepted():
    assert MultiHeadAttention(8, 8, dropout=0.0).d_k == 1
    assert PositionwiseFeedForward(8, 1)(torch.zeros(1, 1, 8)).shape == (1, 1, 8)
    assert subsequent_mask(0).shape == (0, 0)
    assert sinusoidal_table(0, 4).shape == (0, 4)
    assert copy_task(0, 5, 10) == []
    assert LabelSmoothingLoss(3, 0, 0.0)(torch.randn(2, 3), torch.tensor([1, 2])).isfinite()


def test_translate_refuses_a_batch_size_or_max_len_below_1():
    vocab = build_vocab_from_iterator([["ein"]])
    vocab.set_default_index(vocab[UNK])
    model = make_model(TransformerConfig(len(vocab), len(vocab), N=1, d_model=8, d_ff=8, h=2))
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        translate(model, ["ein"], vocab, vocab, str.split, batch_size=0)
    with pytest.raises(ValueError, match="max_len must be a positive integer, got 0"):
        translate(model, ["ein"], vocab, vocab, str.split, max_len=0)
