"""The measuring machinery of notebook 00 (the paper's §1 and §4, Table 1): the layers it
compares, written without the course's later modules where a few lines do; autograd's record
walked back to count the operations that wait for each other; FLOP counts; the number of
stacked layers that connect the first position to the last; the operators a recurrent layer
runs; and timings.

Notebook ``00_introduction.ipynb`` calls these and shows their results; the course does not
teach this code (it is how the introduction measures, not what the Transformer is), so it
lives here, tested in ``tests/test_introduction.py``.
"""

import functools
import math
import statistics
import time
import warnings
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

# Autograd's record walked back, and the stacked layers that connect two positions: the same
# counters notebook 13 uses.
from annotated.support.attention_cost import layers_to_connect, longest_chain

# Matrix-vector products per position of one recurrent layer: W_ih x_t and W_hh h_{t-1} for each
# of the cell's gates (the RNN's one tanh update, the GRU's reset, update and candidate, the
# LSTM's input, forget, cell and output gates).
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def rnn_step_by_step(cell: nn.RNNCell, x: torch.Tensor) -> torch.Tensor:
    """A recurrent layer as the loop it is: x (batch, n, d) -> (batch, n, d). Each step needs
    the previous step's h: there is no way around the loop."""
    h = torch.zeros(x.size(0), cell.hidden_size, dtype=x.dtype)
    outputs = []
    for t in range(x.size(1)):
        h = cell(x[:, t], h)  # (batch, d)
        outputs.append(h)
    return torch.stack(outputs, dim=1)  # (batch, n, d)


def self_attention(x: torch.Tensor) -> torch.Tensor:
    """softmax(x x^T / sqrt(d)) x with Q = K = V = x and no projections: (batch, n, d) ->
    (batch, n, d). Two matrix products and a softmax (notebook 02 builds the course's function)."""
    scores = x @ x.transpose(-2, -1) / math.sqrt(x.size(-1))  # (batch, n, n)
    return scores.softmax(dim=-1) @ x


def restricted_self_attention(x: torch.Tensor, r: int) -> torch.Tensor:
    """Each position attends to the window of r positions centred on it (r odd), computing only
    the r scores of each window: (batch, n, d) -> (batch, n, d)."""
    if r % 2 == 0:
        raise ValueError(f"the window must be centred on its position, so r must be odd, got r={r}")
    n, w = x.size(1), r // 2
    windows = F.pad(x, (0, 0, w, w)).unfold(1, r, 1).transpose(-1, -2)  # (batch, n, r, d)
    scores = torch.einsum("bnd,bnrd->bnr", x, windows) / math.sqrt(x.size(-1))  # (batch, n, r)
    position = torch.arange(n)[:, None] + torch.arange(r) - w  # (n, r): which key each score is
    scores = scores.masked_fill((position < 0) | (position >= n), float("-inf"))  # the padding
    return torch.einsum("bnr,bnrd->bnd", scores.softmax(dim=-1), windows)  # (batch, n, d)


class SequenceConv(nn.Module):
    """A convolution along the sequence, kernel width k, that keeps the length:
    (batch, n, d) -> (batch, n, d)."""

    def __init__(self, d: int, k: int, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.conv = nn.Conv1d(d, d, k, padding=k // 2, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


def table1_layers(k: int, r: int) -> dict[str, Callable[..., Callable[[torch.Tensor], torch.Tensor]]]:
    """The four rows of Table 1, name -> a function (d, dtype) that builds one such layer."""
    return {
        "self-attention": lambda d, dtype=torch.float32: self_attention,
        "recurrent": lambda d, dtype=torch.float32: nn.RNN(d, d, batch_first=True, dtype=dtype),
        f"convolutional, k={k}": lambda d, dtype=torch.float32: SequenceConv(d, k, dtype=dtype),
        f"restricted self-attention, r={r}": lambda d, dtype=torch.float32: functools.partial(
            restricted_self_attention, r=r),
    }


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of the matrix products that fn() runs, by PyTorch's counter (a multiply-add is 2).
    oneDNN's fused LSTM kernel hides its products from the counter: it is switched off here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # oneDNN's flag prints a note about Intel GPUs
        with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
            fn()
    return counter.get_total_flops()


def table1_flops(sizes: list[tuple[int, int]], k: int, r: int, seed: int = 0) -> dict[tuple[str, int, int], int]:
    """FLOPs of one layer of each row of Table 1, for every (n, d) in sizes: {(name, n, d): FLOPs}."""
    torch.manual_seed(seed)
    counts = {}
    for name, make in table1_layers(k, r).items():
        for n, d in sizes:
            layer, x = make(d), torch.randn(1, n, d)
            counts[name, n, d] = count_flops(lambda: layer(x))
    return counts


def table1_chains(lengths: list[int], d: int, k: int, r: int, seed: int = 0) -> dict[str, list[int]]:
    """The longest chain of matrix products that wait for each other in one layer of each row of
    Table 1, at each length; the recurrent layer is run as its loop of steps."""
    torch.manual_seed(seed)
    layers = table1_layers(k, r)
    layers["recurrent"] = lambda d: functools.partial(rnn_step_by_step, nn.RNNCell(d, d))
    return {name: [longest_chain(make(d)(torch.randn(1, n, d, requires_grad=True))) for n in lengths]
            for name, make in layers.items()}


def recurrent_steps_between_first_and_last(n: int, d: int = 8) -> int:
    """The recurrent steps (one tanh each) in autograd's record between x_1 and h_n."""
    x = torch.randn(1, n, d, requires_grad=True)
    return longest_chain(rnn_step_by_step(nn.RNNCell(d, d), x)[:, -1], kinds=frozenset({"TanhBackward0"}))


def table1_paths(n: int, k: int, r: int, d: int = 8, seed: int = 0) -> dict[str, int]:
    """Maximum path length between the first and last of n positions for each row of Table 1:
    stacked layers (steps, for the recurrent layer, which is one layer)."""
    torch.manual_seed(seed)
    paths = {}
    for name, make in table1_layers(k, r).items():
        if name == "recurrent":
            paths[name] = recurrent_steps_between_first_and_last(n, d)
        else:
            paths[name] = layers_to_connect(lambda: make(d, torch.float64), n, d)
    return paths


def attention_layer(d: int, h: int = 4, fast: bool = True) -> nn.Module:
    """The multi-head self-attention layer the model uses (notebook 04), called on x alone:
    projections W^Q, W^K, W^V, W^O around softmax(QK^T / sqrt(d_k)) V. ``fast=False`` runs the
    course's own attention function, whose products the FLOP counter can see."""
    from annotated.multi_head import MultiHeadAttention

    mha = MultiHeadAttention(d_model=d, h=h, dropout=0.0, fast=fast).eval()
    return lambda x: mha(x, x, x)


def recurrent_layer(kind: str, d: int) -> nn.Module:
    """One layer of PyTorch's RNN, GRU or LSTM, width d in and out."""
    return getattr(nn, kind)(d, d, batch_first=True)


def attention_and_recurrent_flops(lengths: list[int], d: int, seed: int = 0) -> dict[str, list[int]]:
    """Counted FLOPs of one layer at each length: attention alone (softmax(x x^T / sqrt(d)) x),
    the multi-head attention layer with its projections, and the RNN, GRU and LSTM layers."""
    torch.manual_seed(seed)
    layers = {"attention alone": self_attention, "attention layer": attention_layer(d, fast=False)}
    layers |= {kind: recurrent_layer(kind, d) for kind in GATES}
    counts = {name: [] for name in layers}
    for n in lengths:
        x = torch.randn(1, n, d)
        for name, layer in layers.items():
            counts[name].append(count_flops(lambda: layer(x)))
    return counts


class _OperatorLog(TorchDispatchMode):
    """Records every ATen operator that runs inside it, with the shapes of its tensor arguments."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, list[tuple[int, ...]]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        self.calls.append((str(func.overloadpacket), shapes))
        return func(*args, **(kwargs or {}))


def recurrent_operators(kind: str, n: int, d: int, seed: int = 0) -> dict[str, int]:
    """What one forward pass of PyTorch's RNN, GRU or LSTM layer runs on n positions (batch 1,
    no gradients), as the dispatcher records it: the matrix products whose input is all n
    positions at once, those whose input is one position, the fused oneDNN layer calls (which
    do their products inside), and the operator calls in all (n > 1; torch.profiler shows the
    same products)."""
    torch.manual_seed(seed)
    layer, x = recurrent_layer(kind, d), torch.randn(1, n, d)
    with torch.no_grad():
        layer(x)  # a first call, so that one-time set-up is not recorded
        with _OperatorLog() as log:
            layer(x)
    rows = [shapes[1][0] for name, shapes in log.calls if name == "aten.addmm"]  # addmm(bias, input, weight^T)
    return {
        "products of all n positions": rows.count(n),
        "products of one position": rows.count(1),
        "fused oneDNN calls": sum(name == "aten.mkldnn_rnn_layer" for name, _ in log.calls),
        "operator calls": len(log.calls),
    }


def median_seconds(fn: Callable[[], object], repeats: int = 9) -> float:
    """The median time of fn() over repeats calls, after one warm-up call."""
    fn()  # the first call pays for allocation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_layers(lengths: list[int], d: int, seed: int = 0) -> dict[str, list[float]]:
    """Median seconds per forward pass of the attention layer and the RNN, GRU and LSTM layers
    at each length, on one processor thread (batch 1, inference mode)."""
    torch.manual_seed(seed)
    layers = {"attention layer": attention_layer(d)} | {kind: recurrent_layer(kind, d) for kind in GATES}
    seconds = {name: [] for name in layers}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            for n in lengths:
                x = torch.randn(1, n, d)
                for name, layer in layers.items():
                    seconds[name].append(median_seconds(lambda: layer(x)))
    finally:
        torch.set_num_threads(threads)
    return seconds
