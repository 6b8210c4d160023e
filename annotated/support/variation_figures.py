"""Figures of notebook 15 (Table 3 after 600 and 6,000 updates): each row's paired change from the base, with its
interval, beside the paper's change, and the base's validation loss that fixed the long budget. The plotting only:
every number drawn is computed in the notebook."""

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd


def plot_paired_changes(verdicts: pd.DataFrame, differences: dict, unstable: list, updates: int,
                        bleu_linear_within: float | None = None) -> plt.Figure:
    """Two panels, BLEU and perplexity, one column per row of ``verdicts`` (index (row, score); columns
    effect, low, high, paper change, verdict, in the units shown). Each row: the mean paired difference with
    its 95% interval (blue where Holm's rule reads a change, grey where it cannot tell), every seed's own
    difference (small dots; unstable runs as red rings, left out of the test), and the paper's change (x).
    ``bleu_linear_within``: the BLEU axis is linear within that many points of 0 and logarithmic beyond (a row far
    from the others would flatten them), as the perplexity axis is beyond 20%."""
    fig, axes = plt.subplots(2, 1, figsize=(14, 7.5), sharex=True)
    for ax, (score, label) in zip(axes, [("BLEU", "change of BLEU (beam 4), points"),
                                         ("PPL %", "change of perplexity per piece, %")]):
        rows = verdicts.xs(score, level="score")
        for x, (row, v) in enumerate(rows.iterrows()):
            read = not v["verdict"].startswith("cannot tell")
            if pd.notna(v["effect"]):  # a row with fewer than two stable runs has no interval
                ax.errorbar(x, v["effect"], yerr=[[v["effect"] - v["low"]], [v["high"] - v["effect"]]], fmt="o",
                            color="tab:blue" if read else "tab:gray", capsize=3, zorder=3)
            for seed, d in differences[score][row].items():
                odd = (row, seed) in unstable
                ax.scatter(x + 0.18, d, s=40 if odd else 10, zorder=2, facecolors="none" if odd else "black",
                           edgecolors="tab:red" if odd else "black", alpha=1 if odd else 0.5)
            if pd.notna(v["paper change"]):
                ax.scatter(x - 0.18, v["paper change"], marker="x", color="tab:red", zorder=4)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_ylabel(label)
        ax.set_xticks(range(len(rows)), rows.index, rotation=45)
        ax.set_xlim(-0.6, len(rows) - 0.4)
        ax.margins(y=0.1)
    scaled = [(axes[1], 20, (-50, -20, -10, 0, 10, 20, 50, 100, 200, 400))]  # plain numbers: a superscript is too small
    if bleu_linear_within is not None:
        scaled.append((axes[0], bleu_linear_within, (-40, -20, -10, -5, 0, 5, 10, 20, 40)))
    for ax, linear, ticks in scaled:
        ax.set_yscale("symlog", linthresh=linear)
        low, high = ax.get_ylim()
        ax.set_yticks([t for t in ticks if low <= t <= high])
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    handles = [plt.Line2D([], [], marker="o", color="tab:blue", linestyle="", label="ours: a change (Holm)"),
               plt.Line2D([], [], marker="o", color="tab:gray", linestyle="", label="ours: cannot tell"),
               plt.Line2D([], [], marker="o", color="black", alpha=0.5, markersize=4, linestyle="",
                          label="one seed's difference"),
               plt.Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="tab:red", linestyle="",
                          label="an unstable run"),
               plt.Line2D([], [], marker="x", color="tab:red", linestyle="", label="the paper's change")]
    axes[0].legend(handles=handles, fontsize=8, ncol=5, loc="lower left")
    fig.suptitle(f"Each row against the base after {updates:,} updates: the mean of the paired seeds' differences "
                 "with its 95% interval, and the paper's change")
    fig.tight_layout()
    return fig


def plot_budget_curve(curve: dict, budget: int | None, step: int, tolerance: float) -> plt.Figure:
    """The base's validation loss after each pass over the training pairs (one run), with the budget the rule
    chose marked, and the 600-update budget of the first table."""
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(curve["step"], curve["val_loss"], marker="o", markersize=3, label="the base, seed 0")
    ax.axvline(600, color="tab:gray", linestyle=":", label="600 updates (sections 4-6)")
    if budget is not None:
        ax.axvline(budget, color="tab:red", linestyle="--",
                   label=f"{budget:,} updates: moved < {tolerance} over the last {step:,}")
    ax.set_xlabel("updates")
    ax.set_ylabel("validation loss (label-smoothed)")
    ax.legend(fontsize=9)
    ax.set_title("Where the base's validation loss levels: the long budget")
    fig.tight_layout()
    return fig
