"""Figures of notebook 08 (training on the copy task): the plotting only, so that the notebook's
cells hold the idea and its checks. Each function draws from values the notebook computed and
returns the figure (Jupyter shows it); nothing here computes a result the notebook asserts."""

import matplotlib.pyplot as plt
import numpy as np
import torch


def plot_batch_masks(src_mask: torch.Tensor, tgt_mask: torch.Tensor, tgt_in: torch.Tensor,
                     sentence: int) -> plt.Figure:
    """A batch's ``src_mask`` (one row per sentence) beside one sentence's ``tgt_mask``, its keys and
    queries labelled with that sentence's ``tgt_in`` tokens."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [1.3, 1]})
    axes[0].imshow(src_mask[:, 0].int(), cmap="Blues", vmin=0, vmax=1)
    axes[0].set(title="src_mask: one row per sentence (True = real key)", xlabel="source position (key)",
                ylabel="sentence", yticks=range(src_mask.size(0)))
    axes[1].imshow(tgt_mask[sentence].int(), cmap="Blues", vmin=0, vmax=1)
    tokens = [str(t) for t in tgt_in[sentence].tolist()]
    axes[1].set(title=f"tgt_mask of sentence {sentence}: look-ahead and padding",
                xlabel="key: tgt_in token", ylabel="query: tgt_in token",
                xticks=range(len(tokens)), xticklabels=tokens, yticks=range(len(tokens)), yticklabels=tokens)
    fig.tight_layout()
    return fig


def plot_batching(lengths: list[int], by_length: list[list[int]], padding: dict[str, float],
                  max_tokens: int) -> plt.Figure:
    """Three panels: the drawn lengths; each length-sorted batch's size against its longest sentence,
    with the budget curve; and the padding share of each scheme in ``padding`` (name -> fraction)."""
    longest = [max(lengths[i] for i in b) for b in by_length]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    axes[0].hist(lengths, bins=range(3, max(lengths) + 2), color="tab:gray")
    axes[0].set(title=f"Sentence lengths ({len(lengths):,} drawn)", xlabel="tokens, with <s> and </s>",
                ylabel="sentences")
    axes[1].scatter(longest, [len(b) for b in by_length], s=10, label="a batch")
    grid = np.arange(3, max(lengths) + 1)
    axes[1].plot(grid, max_tokens // grid, color="tab:red", label="budget / length")
    axes[1].set(title="batch_by_tokens: size follows length", xlabel="longest sentence in the batch",
                ylabel="sentences in the batch", yscale="log")
    axes[1].legend()
    names = list(padding)
    axes[2].bar([n.split(" (")[0] for n in names], [100 * padding[n] for n in names],
                color=["tab:blue", "tab:orange"][: len(names)])
    axes[2].set(title=f"Padding, budget of {max_tokens} tokens", ylabel="% of the batch that is padding")
    fig.tight_layout()
    return fig


def plot_smoothed_targets(q: torch.Tensor, target: torch.Tensor, eps: float) -> plt.Figure:
    """The smoothed target distributions, one row per label, each probability written in its cell."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    image = ax.imshow(q, cmap="viridis")
    for (row, col), value in np.ndenumerate(q.numpy()):
        ax.text(col, row, f"{value:.3f}".rstrip("0").rstrip(".") if value else "0", ha="center", va="center",
                color="black" if value > 0.5 else "white", fontsize=8)
    ax.set(title=f"Smoothed targets q, V = {q.size(1)}, eps = {eps}", xlabel="token id (0 = <pad>)",
           ylabel="position (its label)", yticks=range(len(target)),
           yticklabels=[f"label {t}" for t in target.tolist()])
    fig.colorbar(image, ax=ax, label="q(v)")
    return fig


def plot_smoothing_loss(p: torch.Tensor, plain: torch.Tensor, smoothed: torch.Tensor, eps: float,
                        floor: float) -> plt.Figure:
    """Plain and label-smoothed loss against the probability of the reference token."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(p, plain, label="plain cross-entropy, -log p")
    ax.plot(p, smoothed, label=f"label smoothing, eps = {eps}")
    ax.axvline(1 - eps, color="gray", linestyle="--", label="p = 1 - eps")
    ax.axhline(floor, color="gray", linestyle=":", label="H(q), the smoothed minimum")
    ax.set(title="Loss vs the probability given to the right token", xlabel="p(reference token)",
           ylabel="loss", ylim=(0, 4))
    ax.legend()
    return fig


def plot_copy_losses(history: dict, floor: float) -> plt.Figure:
    """The training loss of each update and the held-out loss after each epoch, with the loss floor."""
    step_loss = history["step_loss"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(range(1, len(step_loss) + 1), step_loss, label="training loss of each update")
    ax.plot(history["step"], history["val_loss"], "o", label="held-out loss, after each epoch")
    ax.axhline(floor, color="gray", linestyle=":", label=f"floor H(q) = {floor:.3f}")
    ax.set(title="Copy task: loss per target token", xlabel="update", ylabel="loss (nats per token)")
    ax.legend()
    return fig


def plot_bug_results(results: dict[str, tuple[float, float]], caught: set[str], between: set[str],
                     steps: int) -> plt.Figure:
    """Exact match of each run (name -> (exact match, loss)): caught bugs red, in-between orange, the rest green."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    names = list(results)
    ax.barh(names, [100 * results[n][0] for n in names],
            color=["tab:red" if n in caught else "tab:orange" if n in between else "tab:green" for n in names])
    ax.invert_yaxis()
    ax.set(title=f"Copy task, {steps} updates: exact match with one bug each",
           xlabel="% of held-out sequences exactly right")
    fig.tight_layout()
    return fig
