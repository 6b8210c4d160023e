"""Figures of notebook 11 (translating Multi30k): the plotting only, so that the notebook's cells hold
the idea and its checks. Each function draws from values the notebook read or computed and returns
the figure; nothing here computes a result the notebook asserts."""

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from annotated.schedule import rate


def plot_schedule_sweep(runs: list[dict], grid: np.ndarray, warmups: list[int], factors: list[float], d_model: int,
                        max_steps: int, chosen: tuple[int, float]) -> plt.Figure:
    """Left: the learning rate of every (warm-up, factor) pair of the sweep over ``max_steps`` updates,
    ``chosen`` drawn thick, with the paper's warm-up of 4,000 dotted. Right: ``grid``, the recorded
    validation loss of each pair (rows: ``warmups``, columns: ``factors``)."""
    fig, (ax_lr, ax_grid) = plt.subplots(1, 2, figsize=(12, 4))
    steps = np.arange(1, max_steps + 1)
    colours = dict(zip(warmups, ["tab:blue", "tab:orange", "tab:green"]))  # one colour per warm-up ...
    styles = dict(zip(factors, ["-", "--"]))  # ... and one line style per factor
    for run in runs:
        mine = (run["warmup"], run["factor"]) == chosen
        ax_lr.plot(steps, [rate(int(s), d_model, run["warmup"], run["factor"]) for s in steps],
                   linewidth=2.5 if mine else 1.2, color=colours[run["warmup"]], linestyle=styles[run["factor"]],
                   label=f"warm-up {run['warmup']}, factor {run['factor']:g}" + (" (this run)" if mine else ""))
    ax_lr.plot(steps, [rate(int(s), d_model, 4000, 1.0) for s in steps], "k:", linewidth=1,
               label="the paper's warm-up 4,000")
    ax_lr.set(title=f"The candidate schedules over {max_steps:,} updates", xlabel="optimizer update (step)",
              ylabel="learning rate")
    ax_lr.legend(fontsize=7)
    sns.heatmap(grid, annot=True, fmt=".3f", cmap="viridis_r", ax=ax_grid, xticklabels=[f"{f:g}" for f in factors],
                yticklabels=warmups, cbar_kws={"label": "validation loss"})
    ax_grid.set(xlabel="factor", ylabel="warm-up steps")
    ax_grid.set_title(f"Recorded by benchmarks/sweep_schedule.py: validation loss after {max_steps:,} updates",
                      fontsize=9)
    fig.tight_layout()
    return fig
