"""Pictures of attention weights: one map, every head of a block, a layer x head grid of a
number, and an interactive view for Jupyter. Notebooks 04, 09, 11 and 12 draw with these.

Drawing code only; the course does not teach it. In every map rows are queries and columns
keys, each labelled with its token, in order.
"""

import matplotlib.pyplot as plt
import seaborn as sns
import torch


def plot_attention(ax: plt.Axes, weights: torch.Tensor, rows: list[str], cols: list[str], title: str = "",
                   row_title: str = "query", col_title: str = "key", produced: list[str] | None = None,
                   vmax: float | None = 1.0) -> None:
    """One (L_q, L_k) map of attention weights on ``ax``: row i is the query labelled ``rows[i]``,
    column j the key ``cols[j]``. ``produced``, for a decoder's rows, labels the right-hand side
    with the token each row predicts (the left says which token it reads)."""
    weights = torch.as_tensor(weights).detach().cpu()
    if weights.shape != (len(rows), len(cols)):
        raise ValueError(f"weights of shape {tuple(weights.shape)} need {weights.shape[0]} row labels and "
                         f"{weights.shape[1]} column labels, got {len(rows)} and {len(cols)}")
    ax.imshow(weights.numpy(), cmap="viridis", vmin=0, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_xlabel(col_title, fontsize=8)
    ax.set_ylabel(row_title, fontsize=8)
    if produced is not None:
        if len(produced) != len(rows):
            raise ValueError(f"{len(produced)} produced tokens for {len(rows)} rows")
        right = ax.secondary_yaxis("right")
        right.set_yticks(range(len(rows)), produced, fontsize=7)
        right.set_ylabel("produces", fontsize=8)


KIND_TITLES = {"encoder": "encoder self-attention (German x German)",
               "decoder": "decoder masked self-attention (English x English)",
               "cross": "encoder-decoder attention (English queries x German keys)"}


def plot_heads(weights: torch.Tensor, rows: list[str], cols: list[str], title: str,
               produced: list[str] | None = None, row_title: str = "query", col_title: str = "key") -> plt.Figure:
    """Every head of every layer of one kind: ``weights`` (layers, h, L_q, L_k); a figure of
    layers x h maps, labelled on the left column and the bottom row (layers and heads count from 1)."""
    layers, h = weights.shape[:2]
    fig, axes = plt.subplots(layers, h, figsize=(2.1 * h, 2.3 * layers + 0.8), squeeze=False,
                             sharex=True, sharey=True)
    for layer in range(layers):
        for head in range(h):
            ax = axes[layer, head]
            plot_attention(ax, weights[layer, head], rows, cols, title=f"layer {layer + 1}, head {head + 1}",
                           row_title=row_title if head == 0 else "", col_title=col_title,
                           produced=produced if head == h - 1 else None)
            ax.tick_params(labelbottom=layer == layers - 1, labelleft=head == 0)
            if layer < layers - 1:
                ax.set_xlabel("")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_grid(ax: plt.Axes, values: torch.Tensor, title: str, fmt: str = ".2f", cmap: str = "viridis",
              vmin: float | None = None, vmax: float | None = None) -> None:
    """A (layers, h) number per head as an annotated heatmap; layers and heads count from 1."""
    values = torch.as_tensor(values).detach().cpu()
    layers, h = values.shape
    sns.heatmap(values.numpy(), annot=True, fmt=fmt, cmap=cmap, vmin=vmin, vmax=vmax, ax=ax, cbar=False,
                xticklabels=[str(i + 1) for i in range(h)], yticklabels=[str(i + 1) for i in range(layers)],
                annot_kws={"fontsize": 7})
    ax.set(xlabel="head", ylabel="layer")
    ax.set_title(title, fontsize=9)


def attention_explorer(model, tokenizer, sentences: list[str]):
    """An interactive view for Jupyter, offline (ipywidgets, no JavaScript from a CDN): pick a
    sentence or type one, the kind of attention, the layer and the head (or the mean of the heads).
    Returns the widget; as a cell's last value, Jupyter shows it."""
    import ipywidgets as widgets

    from annotated.heads import sentence_attention

    sentence = widgets.Combobox(value=sentences[0], options=list(sentences), description="German",
                                ensure_option=False, layout=widgets.Layout(width="70%"))
    kind = widgets.Dropdown(options=[(title, k) for k, title in KIND_TITLES.items()], value="cross", description="kind")
    n_layers, h = len(model.decoder.layers), model.decoder.layers[0].self_attn.h
    layer = widgets.IntSlider(value=n_layers, min=1, max=n_layers, description="layer")
    head = widgets.Dropdown(options=[("mean of the heads", 0)] + [(str(i), i) for i in range(1, h + 1)],
                            value=0, description="head")
    out = widgets.Output()
    cache = {}

    def draw(*_):
        text = sentence.value.strip()
        if not text:
            return
        if text not in cache:
            cache[text] = sentence_attention(model, tokenizer, text)
        found = cache[text]
        rows, cols = found.labels(kind.value)
        w = found.weights[kind.value][layer.value - 1]
        w = w.mean(0) if head.value == 0 else w[head.value - 1]
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(0.35 * len(cols) + 2.5, 0.3 * len(rows) + 2))
            plot_attention(ax, w, rows, cols, title=f"{kind.value}, layer {layer.value}, "
                           f"{'mean of the heads' if head.value == 0 else f'head {head.value}'}",
                           produced=found.produced if kind.value != "encoder" else None)
            plt.show()
            plt.close(fig)
            print("translation:", tokenizer.detokenize(found.produced[:-1]))

    for control in (sentence, kind, layer, head):
        control.observe(draw, names="value")
    draw()
    view = widgets.VBox([sentence, widgets.HBox([kind, layer, head]), out])
    view.controls, view.found = {"sentence": sentence, "kind": kind, "layer": layer, "head": head}, cache
    return view
