"""The paper's model variations (§6.2, Table 3): one setting changed at a time against the base.

Rows (A), (C) and (D) are settings ``TransformerConfig`` and the training recipe already have
(heads, layers, widths, dropout, label smoothing). Two rows need a module of their own:

* (B) a smaller attention key size d_k alone: queries and keys are projected to h x d_k columns,
  values keep d_v = d_model / h (the paper's row B leaves d_v at the base's 64);
* (E) learned positions instead of sinusoids: notebook 14's ``LearnedPositionalEncoding``.

``make_variant`` builds either from a config; ``table3_parameters`` counts a row's parameters
exactly, as notebook 07 counts the base and big models. ``pooled_std`` and ``compare_to_base`` read a
row against the base through the spread between seeds: a difference smaller than the noise is not
ranked.

Notebook: ``15_model_variations.ipynb``. Benchmark: ``benchmarks/table3.py``.
"""

import torch
import torch.nn as nn

from annotated.learned_positions import LearnedPositionalEncoding
from annotated.model import EncoderDecoder, TransformerConfig, count_parameters, make_model
from annotated.multi_head import MultiHeadAttention


class NarrowKeyAttention(MultiHeadAttention):
    """Multi-head attention whose queries and keys are d_k wide while values stay d_model / h wide
    (Table 3, row B). The scores are scaled by 1/sqrt(d_k), the narrower width (§3.2.1)."""

    def __init__(self, d_model: int, h: int, d_k: int, dropout: float = 0.0, fast: bool = True):
        super().__init__(d_model, h, dropout, fast)
        if d_k < 1:
            raise ValueError(f"d_k={d_k} must be a positive number of columns per head")
        self.d_k = d_k  # d_v stays d_model // h: W_V and W_O are the base model's
        self.W_Q, self.W_K = nn.Linear(d_model, h * d_k), nn.Linear(d_model, h * d_k)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, L, h * width) -> (batch, h, L, width): d_k for queries and keys, d_v for values."""
        batch, length, columns = x.shape
        return x.view(batch, length, self.h, columns // self.h).transpose(1, 2)


def make_variant(config: TransformerConfig, d_k: int | None = None, learned_positions: bool = False,
                 max_len: int = 256) -> EncoderDecoder:
    """``make_model(config)``, then row B's narrower keys (``d_k``) or row E's learned positions
    (a table of ``max_len`` rows) put in place of the base modules, initialized as make_model does."""
    model = make_model(config)
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if d_k is not None and isinstance(child, MultiHeadAttention):
                new = NarrowKeyAttention(config.d_model, config.h, d_k, config.attention_dropout,
                                         config.fast_attention)
                for p in (new.W_Q.weight, new.W_K.weight, new.W_V.weight, new.W_O.weight):
                    nn.init.xavier_uniform_(p)  # as make_model initializes every matrix
                setattr(parent, name, new)
    if learned_positions:  # N(0, 1) rows, as in notebook 14
        for embed in (model.src_embed, model.tgt_embed):
            embed[1] = LearnedPositionalEncoding(config.d_model, config.dropout, max_len)
    return model


def table3_parameters(vocab_size: int, d_k: int | None = None, learned_positions: bool = False,
                      max_len: int = 256, **sizes) -> int:
    """Distinct trainable parameters of one Table 3 row: ``sizes`` override the base config (N, d_model,
    h, d_ff) with one shared vocabulary of ``vocab_size`` for source, target and output (§3.4)."""
    config = TransformerConfig(vocab_size, vocab_size, share_embeddings=True, **sizes)
    with torch.device("meta"):  # shapes only: the paper's sizes need no memory
        model = make_variant(config, d_k, learned_positions, max_len)
    return count_parameters(model)



def pooled_std(runs: dict[str, list[float]]) -> float:
    """The spread between seeds: the standard deviation of a score around its row's mean, pooled over
    every row that has at least two seeds, sqrt(sum of squared deviations / sum of (seeds - 1))."""
    squares, freedom = 0.0, 0
    for scores in runs.values():
        if len(scores) > 1:
            mean = sum(scores) / len(scores)
            squares += sum((x - mean) ** 2 for x in scores)
            freedom += len(scores) - 1
    if freedom == 0:
        raise ValueError("no row has two seeds: the spread between seeds cannot be measured")
    return (squares / freedom) ** 0.5


def compare_to_base(base: list[float], row: list[float], spread: float, higher_is_better: bool = True) -> str:
    """'better', 'worse' or 'within the noise': the row's mean against the base's, where a difference
    counts only beyond two standard errors, 2 * spread * sqrt(1/seeds of the row + 1/seeds of the base)."""
    difference = sum(row) / len(row) - sum(base) / len(base)
    margin = 2 * spread * (1 / len(row) + 1 / len(base)) ** 0.5
    if abs(difference) <= margin:
        return "within the noise"
    return "better" if (difference > 0) == higher_is_better else "worse"
