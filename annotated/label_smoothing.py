"""Label smoothing (paper §5.4, epsilon_ls = 0.1).

Instead of asking for all the probability on the reference token, the model is trained
towards a target distribution q that keeps 1 - epsilon on the reference token and spreads
epsilon evenly over the V - 2 other tokens that are not padding; the padding token gets
nothing, and positions whose target is padding contribute nothing to the loss. The paper notes
that this "hurts perplexity, as the model learns to be more unsure, but improves accuracy and
BLEU score", and does not say over which tokens epsilon is spread. This V - 2 convention is the
Annotated Transformer's (Rush, 2018); the paper's reference, Szegedy et al. (2016), and
PyTorch's ``F.cross_entropy(label_smoothing=...)`` spread epsilon uniformly over all V tokens.

    loss = - sum_over_positions sum_v q(v) log softmax(logits)_v

Notebook: ``08_training.ipynb``. The module ends by attaching the input checks its cells leave out
(``annotated.support.variant_checks``): a smoothing outside [0, 1), fewer than 3 tokens, targets outside
the vocabulary, logits of another width are a ValueError naming the value.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.support.class_guards import check_arguments, check_call, checked
from annotated.support.variant_checks import (check_label_smoothing_call, check_smoothed_targets_arguments,
                                              check_smoothing_arguments)


def smoothed_targets(target: torch.Tensor, vocab_size: int, pad_idx: int, smoothing: float = 0.1,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """target (N,) token ids -> (N, vocab_size) target distributions q.

    Each row holds 1 - smoothing at its target token, smoothing / (vocab_size - 2) at every
    other token except padding, and 0 at padding; rows whose target is padding are all 0.
    """
    # The smoothing mass is shared by the vocab_size - 2 tokens that are neither the target nor padding.
    q = torch.full((target.size(0), vocab_size), smoothing / (vocab_size - 2), dtype=dtype, device=target.device)
    q.scatter_(1, target.unsqueeze(1), 1.0 - smoothing)  # (N, vocab_size)
    q[:, pad_idx] = 0.0  # never predict padding
    q[target == pad_idx] = 0.0  # padding positions are not part of the loss
    return q


class LabelSmoothingLoss(nn.Module):
    """Cross-entropy against the smoothed targets, summed over the non-padding positions.

    The caller divides by the number of target tokens (``Batch.ntokens``), so that the loss
    of a batch, and of several accumulated batches, is a mean per token.

    This is the cross-entropy H(q, p); the KL divergence KL(q || p) differs from it by the
    entropy H(q), a constant, so both give the same gradients. PyTorch's
    ``F.cross_entropy(label_smoothing=s)`` spreads s over all V classes, padding and target
    included: this loss equals it with s = eps V / (V - 2), plus eps / (V - 2) times the sum
    over non-padding positions of (logit of padding - logit of the target).

    Args:
        vocab_size: size of the target vocabulary (the width of the logits).
        pad_idx: index of the padding token.
        smoothing: epsilon_ls; 0 gives ordinary cross-entropy.

    Shapes: logits (N, vocab_size) or (batch, L, vocab_size); target (N,) or (batch, L).
    """

    def __init__(self, vocab_size: int, pad_idx: int, smoothing: float = 0.1):
        super().__init__()
        self.vocab_size, self.pad_idx, self.smoothing = vocab_size, pad_idx, smoothing

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits = logits.reshape(-1, self.vocab_size)  # (N, vocab_size)
        target = target.reshape(-1)  # (N,)
        # log_softmax subtracts the log of the normalizer stably: no exp() of large logits.
        log_p = F.log_softmax(logits, dim=-1)  # (N, vocab_size)
        q = smoothed_targets(target, self.vocab_size, self.pad_idx, self.smoothing, log_p.dtype)
        return -(q * log_p).sum()


# The input guards, which notebook 08's cells leave out: smoothing in [0, 1) (1 would leave nothing on the
# true token, a negative one gives negative probabilities), at least 3 tokens, ids inside the vocabulary.
smoothed_targets = checked(smoothed_targets, check_smoothed_targets_arguments)
check_arguments(LabelSmoothingLoss, check_smoothing_arguments)
check_call(LabelSmoothingLoss, check_label_smoothing_call)  # logits as wide as the vocabulary, a target per row
