"""The paper's model variations (§6.2, Table 3): one setting changed at a time against the base.

Rows (A), (C) and (D) are settings ``TransformerConfig`` and the training recipe already have
(heads, layers, widths, dropout, label smoothing). Two rows need a module of their own:

* (B) a smaller attention key size d_k alone: queries and keys are projected to h x d_k columns,
  values keep d_v = d_model / h (the paper's row B leaves d_v at the base's 64);
* (E) learned positions instead of sinusoids: notebook 14's ``LearnedPositionalEncoding``.

``make_variant`` builds either from a config; ``table3_parameters`` counts a row's parameters
exactly, as notebook 07 counts the base and big models. The rest is notebook 15's decision rule, fixed
before the record's last seeds ran: each row read through its paired differences from the base, seed
by seed, with a pooled spread, a t-test, Holm's correction and one verdict per row and score. The module
ends by attaching the input checks the notebook's cells leave out (``annotated.support.variant_checks``):
a NaN score, a row's seed without the base's run, a row of fewer than two differences or a NaN p-value is
an error naming it, never a spread, a p-value or a verdict computed from it.

Notebook: ``15_model_variations.ipynb``. Benchmark: ``benchmarks/table3.py``.
"""

import statistics

import torch
import torch.nn as nn
from scipy import stats

from annotated.learned_positions import LearnedPositionalEncoding
from annotated.model import EncoderDecoder, TransformerConfig, count_parameters, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.support import variant_checks as guards
from annotated.support.class_guards import check_arguments, checked


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



# The decision rule of notebook 15, written before seeds 2 and 3 of the record were trained (seeds 0 and
# 1 had been seen). Each row is read through its paired differences from the base: the same seed fixes
# the initialization and the batch order of both runs, so a seed's luck cancels in the difference.
FAMILY_ALPHA = 0.05  # the chance of one or more false verdicts over the whole table (Holm's correction)
UNSTABLE_CUTOFF = 5.0  # robust standard deviations from its row's median difference: an unstable run
POWER = 0.8  # for the smallest difference the design detects
# The long table (notebook 15's last section, 6,000 updates) is read by the same rule once its plan is
# complete (rows base, A1, A16, B16, C-N4 and D-drop0, seeds 0, 1 and 2): unstable runs by the rule above,
# over its rows of three seeds; the paired spread pooled over its stable runs; t-tests; Holm over the plan's
# 10 comparisons. Written on 2026-11-29, after 12 of its 18 runs had ended (C-N4 seed 0 diverged, perplexity
# 22) and before the other 6.


def paired_differences(base: dict[int, float], row: dict[int, float]) -> dict[int, float]:
    """Seed -> the row's score minus the base's score with the same seed, for every seed both have."""
    return {seed: row[seed] - base[seed] for seed in sorted(base.keys() & row.keys())}


def unstable_runs(differences: dict[str, dict[int, float]], cutoff: float = UNSTABLE_CUTOFF) -> set[tuple[str, int]]:
    """(row, seed) of every run whose paired difference lies more than ``cutoff`` robust standard deviations
    from its row's median difference. The robust standard deviation is 1.4826 times the median absolute
    residual over every row of at least three seeds; a row of fewer seeds cannot tell an odd run from the
    other one and is not judged. (Measured about each row's own median of 4 seeds, this scale is about
    0.72 of a normal spread's standard deviation, so the cutoff of 5 sits near 3.6 of them: on normal
    noise alone it flags about 0.15 runs of an 18-row table, simulated by table3.flags_on_normal_noise.)"""
    residuals = {(row, seed): d - statistics.median(ds.values())
                 for row, ds in differences.items() if len(ds) >= 3 for seed, d in ds.items()}
    if not residuals:
        return set()
    scale = 1.4826 * statistics.median(abs(r) for r in residuals.values())
    return {run for run, r in residuals.items() if abs(r) > cutoff * scale}


def paired_spread(differences: dict[str, list[float]]) -> tuple[float, int]:
    """The standard deviation of a paired difference around its row's mean, pooled over the rows of at least
    two seeds, and its degrees of freedom: sqrt(sum of squared deviations / sum of (seeds - 1))."""
    squares, freedom = 0.0, 0
    for ds in differences.values():
        if len(ds) > 1:
            mean = sum(ds) / len(ds)
            squares += sum((d - mean) ** 2 for d in ds)
            freedom += len(ds) - 1
    if freedom == 0:
        raise ValueError("no row has two paired seeds: the spread of a difference cannot be measured")
    return (squares / freedom) ** 0.5, freedom


def paired_test(ds: list[float], spread: float, freedom: int) -> dict[str, float]:
    """A row's mean paired difference, its 95% interval and the two-sided p-value of a t-test of no change,
    with the pooled ``spread`` of ``freedom`` degrees of freedom."""
    if spread <= 0:
        raise ValueError(f"spread={spread}: a pooled spread of paired differences is positive")
    mean, error = sum(ds) / len(ds), spread / len(ds) ** 0.5
    half = float(stats.t.ppf(0.975, freedom)) * error
    return {"effect": mean, "low": mean - half, "high": mean + half,
            "p": float(2 * stats.t.sf(abs(mean) / error, freedom))}


def holm(p_values: dict[str, float], alpha: float = FAMILY_ALPHA) -> set[str]:
    """Holm's step-down correction: the comparisons whose no-change hypothesis is rejected, with a chance of
    at most ``alpha`` that any of them is rejected falsely. The k-th smallest p-value of m is tested
    against alpha / (m - k + 1), stopping at the first that fails."""
    rejected = set()
    for k, (name, p) in enumerate(sorted(p_values.items(), key=lambda item: item[1])):
        if not p <= alpha / (len(p_values) - k):  # a NaN p-value rejects nothing either
            break
        rejected.add(name)
    return rejected


def smallest_detectable(spread: float, freedom: int, seeds: int, comparisons: int, alpha: float = FAMILY_ALPHA,
                        power: float = POWER) -> float:
    """The paired difference a row of ``seeds`` seeds detects with probability ``power`` at Holm's strictest
    step, alpha / comparisons (two-sided)."""
    critical = stats.t.ppf(1 - alpha / (2 * comparisons), freedom)
    return float((critical + stats.t.ppf(power, freedom)) * spread / seeds**0.5)


def verdict(effect: float, rejected: bool, paper_change: float | None) -> str:
    """'agrees with the paper', 'disagrees with the paper' or 'cannot tell at this budget': a change is read
    only where Holm's correction rejects no change, and then against the sign of the paper's change in the
    same score (a paper change of 0: the paper saw none). ``paper_change`` None: the paper has no such row."""
    if not rejected:
        return "cannot tell at this budget"
    if paper_change is None:
        return "a change (the paper has no such row)"
    return "agrees with the paper" if paper_change != 0 and (effect > 0) == (paper_change > 0) else \
        "disagrees with the paper"


# The input guards, which notebook 15's cells leave out: a NaN score, a seed run for the row but not for the
# base, a row of fewer than two differences, a p-value outside [0, 1] are a ValueError naming the value,
# never a spread, a p-value or a verdict computed from them.
check_arguments(NarrowKeyAttention, guards.check_narrow_key_arguments)
make_variant = checked(make_variant, guards.check_make_variant_arguments)
table3_parameters = checked(table3_parameters, guards.check_table3_parameters_arguments)
paired_differences = checked(paired_differences, guards.check_paired_differences_arguments)
unstable_runs = checked(unstable_runs, guards.check_unstable_runs_arguments)
paired_spread = checked(paired_spread, guards.check_paired_spread_arguments)
paired_test = checked(paired_test, guards.check_paired_test_arguments)
holm = checked(holm, guards.check_holm_arguments)
smallest_detectable = checked(smallest_detectable, guards.check_smallest_detectable_arguments)
verdict = checked(verdict, guards.check_verdict_arguments)
