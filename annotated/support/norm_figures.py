"""Figure of notebook 06 (paper §3.1): which entries of a (batch, L, d_model) block are normalized
together, by layer norm and by batch norm, drawn as a 3-D block of cubes with the group shaded."""

import matplotlib.pyplot as plt
import torch


def draw_normalization_groups(groups: dict[str, torch.Tensor], entry: tuple[int, int, int]) -> plt.Figure:
    """One 3-D panel per item of ``groups``: a bool (batch, L, d_model) tensor, True where an entry
    is normalized together with ``entry`` (blue; ``entry`` itself red, the rest nearly clear). Axes:
    features d_model across, positions L in depth, sentences of the batch upward."""
    fig = plt.figure(figsize=(5.2 * len(groups), 4.6))
    for k, (title, group) in enumerate(groups.items()):
        ax = fig.add_subplot(1, len(groups), k + 1, projection="3d")
        # One voxels call per colour: a call hides the faces between its own cubes only, so the
        # group stays visible inside the block.
        b, l, d = entry
        own = torch.zeros_like(group)
        own[b, l, d] = True
        parts = [(~group, (0.8, 0.8, 0.8, 0.1)), (group & ~own, (0.12, 0.47, 0.71, 0.6)), (own, (0.84, 0.15, 0.16, 0.95))]
        for cubes, color in parts:
            ax.voxels(cubes.permute(2, 1, 0).numpy(), facecolors=color, edgecolor=(0.3, 0.3, 0.3, 0.4), linewidth=0.4)
        ax.set_xlabel("d_model (features)")
        ax.set_ylabel("L (positions)")
        ax.set_zlabel("batch (sentences)")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_zticks([])
        ax.set_box_aspect(tuple(group.permute(2, 1, 0).shape))
        ax.view_init(elev=22, azim=-58)
        ax.set_title(f"{title}\n{int(group.sum())} entries share one mean and variance", fontsize=10)
    fig.suptitle("Entries normalized together with the red one, in a (batch, L, d_model) block")
    fig.subplots_adjust(top=0.82, wspace=0.05)
    return fig
