"""The warm-up schedule (§5.3) and the optimizer that applies it."""

import copy
import math

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

from annotated.schedule import make_optimizer, rate

D_MODEL, WARMUP = 512, 4000


def test_rate_peaks_at_the_end_of_warmup_at_d_model_and_warmup_to_the_minus_half():
    peak = rate(WARMUP, D_MODEL, WARMUP)
    assert peak == pytest.approx(D_MODEL**-0.5 * WARMUP**-0.5, rel=1e-12)
    steps = range(1, 3 * WARMUP)
    assert max(steps, key=lambda s: rate(s, D_MODEL, WARMUP)) == WARMUP


def test_rate_grows_linearly_during_warmup():
    for step in [1, 10, 100, 1000, WARMUP]:
        assert rate(step, D_MODEL, WARMUP) == pytest.approx(step * rate(1, D_MODEL, WARMUP), rel=1e-12)


def test_rate_decays_as_the_inverse_square_root_of_the_step_after_warmup():
    for step in [WARMUP, 2 * WARMUP, 10 * WARMUP, 100 * WARMUP]:
        assert rate(step, D_MODEL, WARMUP) * math.sqrt(step) == pytest.approx(D_MODEL**-0.5, rel=1e-12)
    assert rate(4 * WARMUP, D_MODEL, WARMUP) == pytest.approx(rate(WARMUP, D_MODEL, WARMUP) / 2, rel=1e-12)


def test_step_zero_is_treated_as_step_one_and_factor_scales_the_curve():
    assert rate(0, D_MODEL, WARMUP) == rate(1, D_MODEL, WARMUP)
    assert rate(500, D_MODEL, WARMUP, factor=2.0) == pytest.approx(2 * rate(500, D_MODEL, WARMUP), rel=1e-12)


def test_optimizer_is_adam_with_the_papers_betas_and_epsilon():
    optimizer, _ = make_optimizer(nn.Linear(3, 3), D_MODEL, WARMUP)
    assert isinstance(optimizer, torch.optim.Adam)
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9


def test_after_k_scheduler_steps_the_optimizer_applies_rate_of_k_plus_one():
    """The first update uses rate(1); after k scheduler.step() calls, the update uses rate(k + 1).

    Checked on the parameters themselves: each scheduled Adam update equals the update of an
    Adam with the same state and the constant learning rate rate(k + 1), and the very first
    Adam update moves every weight by lr * g / (|g| + eps), that is by rate(1) here.
    """
    _ = torch.manual_seed(0)
    warmup = 10
    model = nn.Linear(4, 3)
    optimizer, scheduler = make_optimizer(model, D_MODEL, warmup)
    x = torch.randn(8, 4)
    for k in range(2 * warmup):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(rate(k + 1, D_MODEL, warmup), rel=1e-12)
        model.zero_grad()
        model(x).pow(2).sum().backward()
        # A twin optimizer with the same moments but a fixed learning rate rate(k + 1).
        twin_model = nn.Linear(4, 3)
        twin_model.load_state_dict(model.state_dict())
        for p, q in zip(model.parameters(), twin_model.parameters()):
            q.grad = p.grad.clone()
        twin = torch.optim.Adam(twin_model.parameters(), betas=(0.9, 0.98), eps=1e-9)
        # deepcopy: load_state_dict would otherwise share (and update twice) the moment tensors.
        twin.load_state_dict(copy.deepcopy(optimizer.state_dict()))
        twin.param_groups[0]["lr"] = rate(k + 1, D_MODEL, warmup)
        before = model.weight.detach().clone()
        optimizer.step()
        twin.step()
        scheduler.step()
        assert_close(model.weight, twin_model.weight, rtol=0, atol=0)
        if k == 0:
            # First Adam update: -lr * g / (|g| + eps), about lr in size for every weight
            # (up to float32 rounding of weights near 0.5: a few 1e-6 relative).
            moved = (model.weight - before).abs()
            assert_close(moved, torch.full_like(moved, rate(1, D_MODEL, warmup)), rtol=1e-4, atol=0)
