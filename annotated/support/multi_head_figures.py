"""Pictures for notebook 04: the paper's Figure 2, and the split of d_model into h heads.

Drawing code only; the course does not teach it. Every label names the course's code.
"""

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyBboxPatch

HEAD_COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]


def _box(ax, x, y, w, h, text, colour="#f2f2f2", stacked=0, fontsize=9):
    """A rounded box centred on (x, y); ``stacked`` > 0 draws copies behind it (one per head)."""
    for s in range(stacked, -1, -1):
        ax.add_patch(FancyBboxPatch((x - w / 2 + 0.06 * s, y - h / 2 + 0.06 * s), w, h,
                                    boxstyle="round,pad=0.02,rounding_size=0.08",
                                    facecolor=colour, edgecolor="black", linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end):
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "-|>", "color": "black", "lw": 1})


def draw_figure_2() -> plt.Figure:
    """The paper's Figure 2, labelled with the course's names: scaled dot-product attention
    (left) and multi-head attention (right)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 6.2), width_ratios=[1, 1.35])
    for ax in (left, right):
        ax.set_xlim(0, 6)
        ax.set_ylim(0, 8)
        ax.axis("off")

    # Left: softmax(Q K^T / sqrt(d_k)) V, bottom to top.
    left.set_title("scaled_dot_product_attention\n(notebook 02, paper §3.2.1)", fontsize=10)
    for x, name in [(1.6, "Q"), (3.0, "K"), (4.6, "V")]:
        left.text(x, 0.35, name, ha="center", va="center", fontsize=11, fontweight="bold")
    steps = [(2.3, 1.6, "MatMul  Q K^T", "#f9e0b0"), (2.3, 2.8, "Scale  / sqrt(d_k)", "#fce9ef"),
             (2.3, 4.0, "Mask (optional)\nmasked_fill(~mask, -inf)", "#f0d9f5"),
             (2.3, 5.2, "SoftMax  (over keys)", "#dcefd6"), (3.2, 6.6, "MatMul  weights @ V", "#f9e0b0")]
    for x, y, text, colour in steps:
        _box(left, x, y, 2.6, 0.7, text, colour)
    _arrow(left, (1.6, 0.6), (1.8, 1.25))
    _arrow(left, (3.0, 0.6), (2.8, 1.25))
    for (_, y0, _, _), (_, y1, _, _) in zip(steps[:3], steps[1:4]):
        _arrow(left, (2.3, y0 + 0.35), (2.3, y1 - 0.35))
    _arrow(left, (2.3, 5.55), (2.9, 6.25))
    _arrow(left, (4.6, 0.6), (3.9, 6.25))
    _arrow(left, (3.2, 6.95), (3.2, 7.6))

    # Right: project, split into heads, attend in every head, merge, project.
    right.set_title("MultiHeadAttention\n(this notebook, paper §3.2.2)", fontsize=10)
    for x, name, proj in [(1.2, "V", "W_V"), (3.0, "K", "W_K"), (4.8, "Q", "W_Q")]:
        right.text(x, 0.35, name, ha="center", va="center", fontsize=11, fontweight="bold")
        _box(right, x, 1.5, 1.4, 0.6, f"Linear {proj}", "#dfe8f5")
        _box(right, x, 2.7, 1.4, 0.6, "split_heads", "#eeeeee")
        _arrow(right, (x, 0.6), (x, 1.2))
        _arrow(right, (x, 1.8), (x, 2.4))
        _arrow(right, (x, 3.0), (x, 3.6))
    _box(right, 3.0, 4.1, 5.0, 0.8, "scaled_dot_product_attention\nin every head at once", "#e8dcf5",
         stacked=3)
    right.text(5.75, 4.75, "h", fontsize=12, fontstyle="italic")
    _box(right, 3.0, 5.6, 2.6, 0.6, "merge_heads (Concat)", "#f9e0b0")
    _box(right, 3.0, 6.8, 2.6, 0.6, "Linear W_O", "#dfe8f5")
    _arrow(right, (3.0, 4.5), (3.0, 5.3))
    _arrow(right, (3.0, 5.9), (3.0, 6.5))
    _arrow(right, (3.0, 7.1), (3.0, 7.7))
    fig.suptitle("The paper's Figure 2, with the course's names", fontsize=12)
    fig.tight_layout()
    return fig


def draw_head_split(d_model: int = 12, h: int = 3, length: int = 4) -> tuple[plt.Figure, torch.Tensor]:
    """Draw one sequence's (L, d_model) projection and the h blocks of d_k columns that
    ``MultiHeadAttention.split_heads`` makes of it. Each cell shows its column index in
    the projection, computed by splitting a tensor of column indices as split_heads does
    (``.view(batch, L, h, d_k).transpose(1, 2)``). Returns the figure and that split, (h, L, d_k)."""
    d_k = d_model // h
    columns = torch.arange(d_model).expand(1, length, d_model)  # (1, L, d_model)
    split = columns.reshape(1, length, h, d_k).transpose(1, 2)[0]  # (h, L, d_k)

    fig, ax = plt.subplots(figsize=(11, 3.6))
    ax.set_xlim(-0.5, d_model + 2.5 + h * (d_k + 1))
    ax.set_ylim(-1.8, length + 1.2)
    ax.set_aspect("equal")
    ax.axis("off")
    # Left: (L, d_model), every column coloured by the head it goes to.
    for pos in range(length):
        for col in range(d_model):
            y = length - 1 - pos
            ax.add_patch(plt.Rectangle((col, y), 1, 1, facecolor=HEAD_COLOURS[col // d_k % 8],
                                       alpha=0.55, edgecolor="white"))
            ax.text(col + 0.5, y + 0.5, str(col), ha="center", va="center", fontsize=7)
    ax.text(d_model / 2, length + 0.5, f"W_Q(x) for one sequence: (L, d_model) = ({length}, {d_model})",
            ha="center", fontsize=9)
    ax.text(-0.3, length / 2, "positions", rotation=90, ha="right", va="center", fontsize=8)
    ax.annotate("", xy=(d_model + 2.0, length / 2), xytext=(d_model + 0.4, length / 2),
                arrowprops={"arrowstyle": "-|>", "lw": 1.5})
    ax.text(d_model + 1.2, length / 2 - 1.4, ".view(batch, L, h, d_k)\n.transpose(1, 2)", ha="center", fontsize=7)
    # Right: h blocks of (L, d_k), one per head.
    x0 = d_model + 2.5
    for head in range(h):
        left = x0 + head * (d_k + 1)
        for pos in range(length):
            for j in range(d_k):
                col = int(split[head, pos, j])
                y = length - 1 - pos
                ax.add_patch(plt.Rectangle((left + j, y), 1, 1, facecolor=HEAD_COLOURS[col // d_k % 8],
                                           alpha=0.55, edgecolor="white"))
                ax.text(left + j + 0.5, y + 0.5, str(col), ha="center", va="center", fontsize=7)
        ax.text(left + d_k / 2, -0.6, f"head {head + 1}\n(L, d_k) = ({length}, {d_k})", ha="center",
                va="top", fontsize=8)
    ax.text(x0 + h * (d_k + 1) / 2 - 0.5, length + 0.5, f"split_heads: (h, L, d_k) = ({h}, {length}, {d_k})",
            ha="center", fontsize=9)
    fig.suptitle(f"(batch, L, d_model) -> (batch, h, L, d_k): the d_model = {d_model} columns cut into "
                 f"h = {h} blocks of d_k = {d_k}", fontsize=10)
    fig.tight_layout()
    return fig, split


def figure_texts(fig: plt.Figure) -> str:
    """Every text drawn in the figure (titles and labels), joined: for checking the names."""
    parts = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    for ax in fig.axes:
        parts += [ax.get_title()] + [t.get_text() for t in ax.texts]
    return "\n".join(parts)
