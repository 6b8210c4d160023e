"""Label smoothing (§5.4): the target distribution, and how the loss relates to PyTorch's.

Notation: V = vocab_size, eps = smoothing, z = logits, y = targets, P = pad index, and
CE_s = F.cross_entropy(z, y, label_smoothing=s, ignore_index=P, reduction="sum").

PyTorch smooths towards (1 - s) one_hot(y) + s / V over *all* V classes, padding and the
target included. Ours puts eps / (V - 2) on every class except the target and padding.
Writing S = sum_v log p_v, one position costs

    ours    = -(1 - eps) log p_y - eps / (V - 2) (S - log p_y - log p_P)
    PyTorch = -(1 - s) log p_y - s / V S.

Matching the coefficients of S gives s = eps V / (V - 2); what remains is
eps / (V - 2) (log p_P - log p_y) = eps / (V - 2) (z_P - z_y) (the log-normalizer cancels). So

    LabelSmoothingLoss(V, P, eps)(z, y)
        == CE_{eps V / (V - 2)}(z, y) + eps / (V - 2) * sum over non-pad i of (z[i, P] - z[i, y_i]),

and, with the distribution written out, LabelSmoothingLoss == F.cross_entropy(z, q, reduction="sum")
with q = smoothed_targets(y, V, P, eps) (soft targets). Both are asserted below in float64, with
assert_close's default float64 tolerance (rtol 1e-7, atol 1e-7); the gaps measured are 0.0.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from annotated.label_smoothing import LabelSmoothingLoss, smoothed_targets
from annotated.support import guarded_training as guarded

V, PAD, EPS = 7, 0, 0.1


def logits_and_targets(seed: int = 0, n: int = 12):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, V, generator=g, dtype=torch.float64) * 3
    target = torch.randint(1, V, (n,), generator=g)
    target[[2, 5, 11]] = PAD  # a few padding positions
    return logits, target


def test_target_distribution_puts_one_minus_eps_on_the_target_and_spreads_eps_over_the_rest_but_padding():
    target = torch.tensor([3, 1, PAD])
    q = smoothed_targets(target, V, PAD, EPS)
    assert q.shape == (3, V)
    assert_close(q[0, 3], torch.tensor(1 - EPS))
    assert_close(q[0, [1, 2, 4, 5, 6]], torch.full((5,), EPS / (V - 2)))
    assert_close(q[:, PAD], torch.zeros(3))
    assert_close(q[:2].sum(dim=1), torch.ones(2))  # real targets: a probability distribution
    assert_close(q[2], torch.zeros(V))  # a padding target: nothing at all


def test_loss_equals_soft_target_cross_entropy_with_the_smoothed_distribution():
    logits, target = logits_and_targets()
    q = smoothed_targets(target, V, PAD, EPS, dtype=torch.float64)
    ours = LabelSmoothingLoss(V, PAD, EPS)(logits, target)
    assert ours.dtype == torch.float64  # float64 logits: the equalities below hold to ~1e-15
    assert_close(ours, F.cross_entropy(logits, q, reduction="sum"))


def test_loss_equals_pytorch_label_smoothing_with_eps_v_over_v_minus_2_plus_the_padding_correction():
    logits, target = logits_and_targets(seed=1)
    ours = LabelSmoothingLoss(V, PAD, EPS)(logits, target)
    pytorch = F.cross_entropy(logits, target, label_smoothing=EPS * V / (V - 2), ignore_index=PAD, reduction="sum")
    real = target != PAD
    correction = EPS / (V - 2) * (logits[real, PAD] - logits[real, target[real]]).sum()
    assert_close(ours, pytorch + correction)
    # The same eps in both is a different loss: the gap is far above float64 rounding (~1e-14).
    naive = F.cross_entropy(logits, target, label_smoothing=EPS, ignore_index=PAD, reduction="sum")
    assert (ours - naive).abs() > 1e-2


def test_zero_smoothing_is_plain_cross_entropy_ignoring_padding():
    logits, target = logits_and_targets(seed=2)
    ours = LabelSmoothingLoss(V, PAD, smoothing=0.0)(logits, target)
    assert_close(ours, F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum"))


def test_padding_targets_contribute_nothing():
    logits, target = logits_and_targets(seed=3)
    loss_fn = LabelSmoothingLoss(V, PAD, EPS)
    real = target != PAD
    assert_close(loss_fn(logits, target), loss_fn(logits[real], target[real]))


def test_loss_is_smallest_when_the_model_predicts_the_smoothed_distribution_itself():
    target = torch.tensor([3, 1, 4])
    q = smoothed_targets(target, V, PAD, EPS)
    loss_fn = LabelSmoothingLoss(V, PAD, EPS)
    # Logits whose softmax is q (padding gets a tiny probability, not exactly 0).
    best = loss_fn(torch.log(q + 1e-12), target)
    entropy = -(q * torch.log(q.clamp_min(1e-30))).sum()
    assert_close(best, entropy, rtol=1e-5, atol=1e-5)  # cross-entropy = entropy of q, its minimum
    confident = torch.full((3, V), -10.0)
    confident[torch.arange(3), target] = 10.0
    assert loss_fn(confident, target) > best + 1.0  # certainty costs more than matching q


def test_batched_logits_give_the_same_loss_as_flattened_ones():
    logits, target = logits_and_targets(seed=4)
    loss_fn = LabelSmoothingLoss(V, PAD, EPS)
    assert_close(loss_fn(logits.view(3, 4, V), target.view(3, 4)), loss_fn(logits, target))


def test_wrong_vocabulary_size_gets_a_clear_error():
    logits, target = logits_and_targets()
    with pytest.raises(ValueError, match="vocab_size=9"):
        guarded.LabelSmoothingLoss(9, PAD, EPS)(logits, target)  # the loss behind its checks
    with pytest.raises(ValueError, match="needs at least 3 tokens"):
        guarded.smoothed_targets(target, 2, PAD, EPS)
    assert_close(guarded.LabelSmoothingLoss(V, PAD, EPS)(logits, target), LabelSmoothingLoss(V, PAD, EPS)(logits, target))
    assert_close(guarded.smoothed_targets(target, V, PAD, EPS), smoothed_targets(target, V, PAD, EPS))


def test_pytorch_builtin_is_szegedy_uniform_smoothing_over_all_classes_not_this_convention():
    # Szegedy et al. (2016), the paper's reference [36]: q = (1 - eps) onehot(y) + eps / V, padding included.
    V, eps = 9, 0.1
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(7, V, generator=g, dtype=torch.float64)
    target = torch.randint(1, V, (7,), generator=g)
    uniform = (1 - eps) * F.one_hot(target, V).double() + eps / V
    builtin = F.cross_entropy(logits, target, label_smoothing=eps, reduction="sum")
    assert_close(builtin, F.cross_entropy(logits, uniform, reduction="sum"))
    assert (builtin - LabelSmoothingLoss(V, 0, eps)(logits, target)).abs() > 1e-2
    q = smoothed_targets(target, V, 0, eps, torch.float64)
    assert_close(q[:, 0], torch.zeros(7, dtype=torch.float64))  # padding: 0 here, eps / V in Szegedy's
    assert_close(q.gather(1, target[:, None]), torch.full((7, 1), 1 - eps, dtype=torch.float64))


T = torch.tensor([1, 2])


@pytest.mark.parametrize("call, message", [
    # the module notebooks 09, 11 and 15 import: before its guards, -0.1 gave negative probabilities,
    # 1.0 put nothing on the true token, 2 tokens divided by zero and an integer dtype gave all zeros
    (lambda: smoothed_targets(T, V, PAD, -0.1), r"smoothing must be a probability in \[0, 1\), got -0.1"),
    (lambda: smoothed_targets(T, V, PAD, 1.0), r"smoothing must be a probability in \[0, 1\), got 1.0"),
    (lambda: smoothed_targets(T, V, PAD, float("nan")), r"smoothing must be a probability in \[0, 1\)"),
    (lambda: smoothed_targets(T, 2, PAD, EPS), "vocab_size=2: label smoothing needs at least 3 tokens"),
    (lambda: smoothed_targets(T, V, PAD, EPS, torch.long), r"dtype=torch.int64 cannot hold probabilities"),
    (lambda: smoothed_targets(T[None], V, PAD, EPS), r"target must be a 1-D tensor .* shape \(1, 2\).*reshape\(-1\)"),
    (lambda: smoothed_targets(T.float(), V, PAD, EPS), "target must be a 1-D tensor of token ids"),
    (lambda: smoothed_targets(torch.tensor([1, V]), V, PAD, EPS), rf"target ids \[{V}\] are outside the vocabulary"),
    (lambda: smoothed_targets(T, V, V, EPS), rf"pad_idx={V} is not a token id"),
    (lambda: LabelSmoothingLoss(V, PAD, -0.1), r"smoothing must be a probability in \[0, 1\), got -0.1"),
    (lambda: LabelSmoothingLoss(V, PAD, 1.0), r"smoothing must be a probability in \[0, 1\), got 1.0"),
    (lambda: LabelSmoothingLoss(2, PAD), "vocab_size=2: label smoothing needs at least 3 tokens"),
    (lambda: LabelSmoothingLoss(V, PAD)(torch.randn(2, V + 1), T), rf"logits have {V + 1} columns but vocab_size={V}"),
    (lambda: LabelSmoothingLoss(V, PAD)(torch.randn(2, V), T.float()), "target must be a tensor of token ids"),
    (lambda: LabelSmoothingLoss(V, PAD)(torch.randn(3, V), T), r"target of shape \(2,\) does not fit logits"),
    (lambda: LabelSmoothingLoss(V, PAD)(torch.randn(2, V), torch.tensor([1, -1])), r"target ids \[-1\] are outside"),
])
def test_the_taught_module_itself_names_a_value_out_of_range(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_guarded_names_are_the_taught_ones_now_that_they_check():
    assert guarded.LabelSmoothingLoss is LabelSmoothingLoss and guarded.smoothed_targets is smoothed_targets
    assert smoothed_targets(T, 3, PAD, 0.0).tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]  # the limits themselves
