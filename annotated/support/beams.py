"""Beam search's bookkeeping and its picture (notebook 09): what the lesson leaves out.

* :func:`drop_done` takes the sentences whose search has ended out of every per-row tensor of
  ``annotated.beam_search.beam_search``, so that the rest run on a smaller batch: a matter of speed,
  not of the search (without it, the finished sentences would go on being extended and ignored).
* :func:`plot_beam_tree` draws the search of ``simple_beam_search`` on a toy model as a tree: every
  candidate of every step with its log-probability, the kept hypotheses highlighted.
"""

import math
from collections.abc import Callable

import torch


def drop_done(done: torch.Tensor, k: int, active: torch.Tensor, log_prob: torch.Tensor, ys: torch.Tensor,
              memory: torch.Tensor, src_mask: torch.Tensor | None, cache: list[dict[str, torch.Tensor]]):
    """Keep only the sentences not ``done`` (n,): their entries of ``active`` (n,) and
    ``log_prob`` (n, k), their k rows of ``ys``, ``memory`` and ``src_mask`` (n * k, ...) and of every
    cached tensor. Returns the new ``active, log_prob, ys, memory, src_mask``; ``cache`` in place."""
    keep = (~done).nonzero().squeeze(1)
    keep_rows = (keep.unsqueeze(1) * k + torch.arange(k, device=keep.device)).view(-1)
    # select_rows of annotated.beam_search, written out: that module imports this one, so this one does
    # not import it back (tests/test_beam_search.py checks that the two keep the same rows).
    for layer_cache in cache:
        for name in ("self_k", "self_v", "memory_k", "memory_v"):
            layer_cache[name] = layer_cache[name].index_select(0, keep_rows)  # (len(keep_rows), h, t, d_k)
    src_mask = src_mask[keep_rows] if src_mask is not None else None
    return active[keep], log_prob[keep], ys[keep_rows], memory[keep_rows], src_mask


def beam_tree(next_log_probs: Callable[[list[int]], dict[int, float]], trace: list, bos: int, eos: int) -> list:
    """The nodes of a traced ``simple_beam_search``: for every step, every candidate (the live
    hypotheses of the step before, each extended by every token) as a dict with ``step``,
    ``tokens``, ``log_p``, ``parent`` (tokens) and ``kind``: "kept" (live after the step),
    "finished" (ended in </s> among the k best: set aside) or "pruned"."""
    nodes, live = [], [([bos], 0.0)]
    for step, (kept, finished) in enumerate(trace, 1):
        kept_now = {tuple(y) for y, _ in kept}
        before = {tuple(y) for y, _ in trace[step - 2][1]} if step > 1 else set()
        finished_now = {tuple(y) for y, _ in finished} - before
        for tokens, log_p in live:
            for token, token_log_p in next_log_probs(tokens).items():
                y = tuple(tokens + [token])
                kind = "kept" if y in kept_now else "finished" if y in finished_now else "pruned"
                nodes.append({"step": step, "tokens": y, "log_p": log_p + token_log_p, "parent": tuple(tokens),
                              "kind": kind})
        live = kept
    return nodes


def plot_beam_tree(nodes: list, words: Callable[[list[int]], str], k: int, ax=None):
    """Draw ``beam_tree``'s nodes: one column per step, each node its last word and log P, kept
    hypotheses in blue, finished ones in green, pruned ones in grey; edges from each parent."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(11, 4.6))
    place = {(0, ()): (0, 0.0)}
    steps = max(node["step"] for node in nodes)
    for step in range(1, steps + 1):
        # Children under their parent (parents top to bottom as placed), the likelier first.
        column = sorted((node for node in nodes if node["step"] == step),
                        key=lambda node: (-place[(step - 1, node["parent"]) if step > 1 else (0, ())][1], -node["log_p"]))
        for row, node in enumerate(column):
            place[step, node["tokens"]] = (step, (len(column) - 1) / 2 - row)
    colours = {"kept": "#1f77b4", "finished": "#2ca02c", "pruned": "#b0b0b0"}
    x0, y0 = place[0, ()]
    ax.text(x0, y0, "<s>\nlog P = 0", ha="center", va="center", fontsize=8,
            bbox=dict(boxstyle="round", facecolor="white", edgecolor=colours["kept"], linewidth=2))
    for node in nodes:
        x, y = place[node["step"], node["tokens"]]
        parent_step = node["step"] - 1
        px, py = place[(parent_step, node["parent"]) if parent_step else (0, ())]
        colour = colours[node["kind"]]
        ax.plot([px + 0.22, x - 0.22], [py, y], color=colour, linewidth=2 if node["kind"] != "pruned" else 0.8,
                zorder=1)
        label = f"{words(list(node['tokens']))}\nlog P = {node['log_p']:.2f} (P = {math.exp(node['log_p']):.3f})"
        ax.text(x, y, label, ha="center", va="center", fontsize=7.5, zorder=2,
                color="black" if node["kind"] != "pruned" else "#707070",
                bbox=dict(boxstyle="round", facecolor="white", edgecolor=colour,
                          linewidth=2 if node["kind"] != "pruned" else 0.8))
    for kind, colour in colours.items():
        text = {"kept": f"kept: one of the {k} best live hypotheses", "finished": "finished: ends in </s>, set aside",
                "pruned": "pruned"}[kind]
        ax.plot([], [], color=colour, linewidth=2, label=text)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_xlim(-0.5, steps + 0.6)
    ax.set_ylim(min(y for _, y in place.values()) - 0.8, max(y for _, y in place.values()) + 0.8)
    ax.set_xticks(range(steps + 1), ["start"] + [f"step {s}" for s in range(1, steps + 1)])
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    return ax
