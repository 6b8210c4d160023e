"""Measuring what attention costs, for notebook 13: wall-clock time, peak memory, FLOPs, a
power-law fit, and the autograd path counters of notebook 00 (the same code, importable here).

Nothing here is taught; the notebook shows what each measurement says.
"""

import functools
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

MATRIX_PRODUCTS = {"MmBackward0", "AddmmBackward0", "BmmBackward0", "ConvolutionBackward0"}


def longest_chain(y: torch.Tensor, kinds: set[str] = MATRIX_PRODUCTS) -> int:
    """Notebook 00's counter: the most operations of the given kinds on one path of autograd's
    record back from y, i.e. how many of them had to wait for each other."""
    @functools.cache
    def depth(node) -> int:
        if node is None:
            return 0
        below = max((depth(previous) for previous, _ in node.next_functions), default=0)
        return below + (node.name() in kinds)

    return depth(y.grad_fn)


def layers_to_connect(make_layer: Callable[[], Callable], n: int, d: int = 8, max_layers: int = 50,
                      source: int = 0, target: int = -1) -> int:
    """Notebook 00's path length: the smallest number of stacked layers after which output
    ``target`` depends on input ``source`` (a gradient that is not exactly zero)."""
    x = torch.randn(1, n, d, dtype=torch.float64, requires_grad=True)
    layers = []
    for depth in range(1, max_layers + 1):
        layers.append(make_layer())
        y = x
        for layer in layers:
            y = layer(y)
        (grad,) = torch.autograd.grad(y[0, target].sum(), x)
        if grad[0, source].abs().sum() > 0:
            return depth
    raise RuntimeError(f"positions {source} and {target % n} still unconnected after {max_layers} layers")


class _PeakMemory(TorchDispatchMode):
    """Follows every tensor storage that an operation creates, and frees it when no tensor holds it."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = self.peak = 0

    def _collect(self) -> None:
        for key, (ref, nbytes) in list(self.live.items()):
            if ref.expired():
                del self.live[key]
                self.current -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._collect()
        out = func(*args, **(kwargs or {}))
        # A view of an input (a transpose, a reshape) shares its storage: nothing new was allocated.
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor) and t.device.type != "meta"}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key not in self.live and key not in inputs and storage.nbytes() > 0:
                    self.live[key] = (StorageWeakRef(storage), storage.nbytes())
                    self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        return out


def peak_memory(fn: Callable[[], object]) -> int:
    """Bytes: the most memory that tensors created by ``fn()`` held at once (its inputs, made
    before, are not counted). Exact and the same on every machine: it counts tensors, not the
    allocator's pages, and sees nothing a fused kernel allocates inside itself."""
    with _PeakMemory() as mode:
        result = fn()
    del result
    return mode.peak


def flops(fn: Callable[[], object]) -> int:
    """Floating-point operations of ``fn()`` as PyTorch counts them (2 per multiply-add)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def time_call(fn: Callable[[], object], repeats: int = 5, min_seconds: float = 0.02) -> float:
    """Seconds per call of ``fn()``: the fastest of ``repeats`` measurements, each repeating the
    call until it lasts at least ``min_seconds`` (after one warm-up call). The fastest, as
    ``timeit`` advises: on a shared machine the slower runs measure the other work, not ``fn``."""
    fn()
    calls = 1
    while True:  # how many calls make one measurement long enough to time
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - start >= min_seconds:
            break
        calls *= 2
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return min(samples)


def fit_power_law(x: list[float], y: list[float]) -> tuple[float, float]:
    """(exponent a, coefficient c) of the least-squares line log y = a log x + log c."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"a power law needs two or more (x, y) pairs of equal count, got {len(x)} and {len(y)}")
    if min(x) <= 0 or min(y) <= 0:
        raise ValueError("a power law is fitted on logarithms: every x and y must be positive")
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    a = sum((u - mx) * (v - my) for u, v in zip(lx, ly)) / sum((u - mx) ** 2 for u in lx)
    return a, math.exp(my - a * mx)


def crossover(x: list[float], below: list[float], above: list[float]) -> float | None:
    """The first x where ``above`` overtakes ``below``, interpolated on log scales; None if never."""
    for i in range(1, len(x)):
        r0, r1 = math.log(above[i - 1] / below[i - 1]), math.log(above[i] / below[i])
        if r0 < 0 <= r1:
            t = -r0 / (r1 - r0)
            return math.exp(math.log(x[i - 1]) + t * (math.log(x[i]) - math.log(x[i - 1])))
    return None


@contextmanager
def encoder_mask(model: nn.Module, mask_for_length: Callable[[int], torch.Tensor],
                 drawn: list[torch.Tensor] | None = None) -> Iterator[None]:
    """Within the block, ``model.encode`` ands each sentence's padding mask with a mask drawn at
    that sentence's own length: ``mask_for_length(n)``, (n, n), for a sentence of n tokens
    (padding, which comes last, not counted), for the encoder's self-attention only; the
    decoder's cross-attention keeps the padding mask. A mask made once for a longer n and cut to
    each sentence would not do for random keys: most of them would fall beyond the sentence.

    ``mask_for_length`` is called once per sentence, in the order ``encode`` sees them (batches
    sorted by length, as ``annotated.evaluation.translate`` makes them): with a seeded generator
    inside it, the same sentences get the same masks on every run. Each mask is appended to
    ``drawn`` when given, to count afterwards what the queries saw."""
    encode = model.encode

    def masked_encode(src: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        batch, L = src.shape
        lengths = [L] * batch if src_mask is None else src_mask[:, 0, :].sum(-1).tolist()
        extra = torch.ones(batch, L, L, dtype=torch.bool, device=src.device)  # padding: src_mask's job
        for b, n in enumerate(lengths):
            mask = mask_for_length(n)
            if mask.shape != (n, n):
                raise ValueError(f"mask_for_length({n}) gave a mask of shape {tuple(mask.shape)}: "
                                 f"it must be ({n}, {n}), one row and column per token of the sentence")
            extra[b, :n, :n] = mask.to(src.device)
            if drawn is not None:
                drawn.append(mask)
        return encode(src, extra if src_mask is None else src_mask & extra)

    model.encode = masked_encode
    try:
        yield
    finally:
        del model.encode  # back to the class's method


def keys_by_kind(masks: list[torch.Tensor], window: int, n_global: int) -> dict[str, float]:
    """Mean keys per ordinary query (not one of the ``n_global`` global tokens) over the rows of
    every (n, n) BigBird mask in ``masks``, split by why the key is there: ``window`` (within
    window // 2 of the query), ``global`` (one of the first ``n_global`` positions, outside the
    window) and ``random`` (every other key the mask allows: what the random draws added), with
    their sum under ``all``. A random draw that lands in the window or on a global token adds no key."""
    total = {"window": 0, "global": 0, "random": 0, "all": 0}
    queries = 0
    for mask in masks:
        n = mask.size(0)
        position = torch.arange(n)
        in_window = (position.unsqueeze(1) - position.unsqueeze(0)).abs() <= window // 2  # (n, n)
        is_global = (position < n_global).unsqueeze(0).expand(n, n) & ~in_window
        rows = mask[n_global:]  # the ordinary queries
        total["window"] += int((rows & in_window[n_global:]).sum())
        total["global"] += int((rows & is_global[n_global:]).sum())
        total["random"] += int((rows & ~in_window[n_global:] & ~is_global[n_global:]).sum())
        total["all"] += int(rows.sum())
        queries += rows.size(0)
    if queries == 0:
        raise ValueError("no ordinary query in the masks: give masks longer than n_global")
    return {kind: count / queries for kind, count in total.items()}
