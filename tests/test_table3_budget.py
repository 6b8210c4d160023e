"""The long budget's rule of notebook 15 (section 7): the first multiple of 1,000 updates at which the
base's validation loss moved by less than 0.02 over the last 1,000."""

import math

import pytest

from annotated.support.table3 import LEVEL_STEP, LEVEL_TOLERANCE, levelled_budget, loss_at


def curve_of(f, last=8000, per_pass=350):
    steps = list(range(per_pass, last, per_pass)) + [last]
    return {"step": steps, "val_loss": [round(f(s), 4) for s in steps]}


def test_the_loss_is_read_on_the_line_between_two_passes():
    curve = {"step": [100, 300], "val_loss": [5.0, 4.0]}
    assert loss_at(curve, 100) == 5.0 and loss_at(curve, 300) == 4.0 and loss_at(curve, 250) == pytest.approx(4.25)
    with pytest.raises(ValueError, match="outside"):
        loss_at(curve, 301)
    with pytest.raises(ValueError, match="increasing"):
        loss_at({"step": [300, 100], "val_loss": [4.0, 5.0]}, 200)


def test_an_exponential_approach_levels_where_its_drop_over_a_window_falls_below_the_tolerance():
    scale, tau = 2.0, 1500.0
    curve = curve_of(lambda s: 3.0 + scale * math.exp(-s / tau))
    # exact drop over [n - 1000, n]: scale * exp(-n / tau) * (exp(1000 / tau) - 1) < 0.02
    exact = next(n for n in range(2000, 8001, 1000)
                 if scale * math.exp(-n / tau) * (math.exp(LEVEL_STEP / tau) - 1) < LEVEL_TOLERANCE)
    assert levelled_budget(curve) == exact == 7000


def test_a_curve_still_falling_at_its_end_has_no_budget_and_a_flat_one_levels_at_the_first_window():
    assert levelled_budget(curve_of(lambda s: 6.0 - s / 2000)) is None  # 0.5 per 1,000 updates
    assert levelled_budget(curve_of(lambda s: 3.0)) == 2000
    # a loss that rises again (over-fitting) by 0.05 per 1,000 has not levelled either
    assert levelled_budget(curve_of(lambda s: 3.0 + s / 20000)) is None
