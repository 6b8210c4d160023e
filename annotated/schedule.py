"""Adam and the warm-up learning-rate schedule (paper §5.3).

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

The rate grows linearly for the first ``warmup`` steps and then decays as the inverse
square root of the step; the two branches meet at step = warmup, the peak. The paper uses
Adam with beta_1 = 0.9, beta_2 = 0.98, epsilon = 1e-9 and warmup_steps = 4000.

Notebook: ``08_training.ipynb``. With its arguments checked first: ``annotated.support.guarded_training``.
"""

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LambdaLR

from annotated.support.class_guards import checked
from annotated.support.variant_checks import check_make_optimizer_arguments, check_rate_arguments


def rate(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """The learning rate of update number ``step`` (counted from 1; step 0 is treated as 1,
    where the formula would divide by zero). ``factor`` scales the whole curve."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def make_optimizer(model: nn.Module, d_model: int, warmup: int = 4000,
                   factor: float = 1.0) -> tuple[torch.optim.Adam, LambdaLR]:
    """Adam with the paper's betas and epsilon, and the schedule as a ``LambdaLR``.

    The base learning rate is 1.0, so the factor ``LambdaLR`` multiplies it by *is* the rate.
    ``LambdaLR`` calls the function with the number of ``scheduler.step()`` calls so far,
    starting at 0; the first optimizer update therefore uses rate(1), and after k calls of
    ``scheduler.step()`` the next update uses rate(k + 1).
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = LambdaLR(optimizer, lr_lambda=lambda k: rate(k + 1, d_model, warmup, factor))
    return optimizer, scheduler


# The input guards, kept out of the code above: a negative step, a d_model or warmup that is not a
# positive integer, or a factor that is not a finite number > 0 get a ValueError naming them.
rate = checked(rate, check_rate_arguments)  # make_optimizer's schedule calls this one
make_optimizer = checked(make_optimizer, check_make_optimizer_arguments)
