"""Speed of the course's model against PyTorch's built-ins, measured side by side.

    python benchmarks/bench_model.py [--repeats 15] [--device cpu|cuda] [--threads N] [--clock wall|cpu]

Times (1) forward + backward of multi-head self-attention, ours against
``nn.MultiheadAttention`` (no dropout on either side), and (2) one training step (forward,
loss, backward, Adam) of our full model against ``nn.Transformer`` with the same embeddings
and generator, at d_model=256, N=3, h=8, d_ff=1024, batch 64 x 32 tokens.

(2) compares equal work by default: ``nn.Transformer(dropout=0.1)`` drops out the attention
weights, the feed-forward hidden layer and every sub-layer output, so our model runs with
``dropout=0.1, attention_dropout=0.1, ff_dropout=0.1``, the same sites, and without
nn.Transformer's two final LayerNorms, which the post-norm stack of the paper does not have
(``annotated.support.reference.torch_reference`` builds it). Both sides build their masks
inside the step. Before timing, the script counts the dropout draws of one training forward
of every contender and prints them, so the output shows the work is equal. Ours runs on the
fast path (``F.scaled_dot_product_attention`` and ``F.layer_norm``) and on the explicit teaching path
(notebook 04's attention and notebook 06's layer-norm formula); a last row
runs the paper's configuration (dropout at §5.4's two sites only, the course's default),
which does less work than ``nn.Transformer`` and is therefore not the comparison.

Runs of the contenders are interleaved (a shuffled order in every round) and the median is
reported, so all see the same machine load. ``--clock cpu`` measures the CPU time of this
process instead of the wall clock: with ``--threads 1`` on a busy machine that leaves out the
time other processes hold the core. Prints milliseconds and the ratio ours / PyTorch (lower is
better), with the quartiles of the per-round ratios.
"""

import argparse
import os
import platform
import random
import statistics
import time
from dataclasses import replace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from annotated.layer_norm import LayerNorm
from annotated.masks import padding_mask, subsequent_mask, target_mask
from annotated.model import TransformerConfig, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.positional import Embeddings, PositionalEncoding
from annotated.support.reference import copy_mha_from_torch, torch_reference

D_MODEL, N, H, D_FF, BATCH, LENGTH, VOCAB = 256, 3, 8, 1024, 64, 32, 1000
P_DROP = 0.1

# The paper's configuration: dropout at §5.4's two sites only (the course's defaults).
PAPER = TransformerConfig(VOCAB, VOCAB, N=N, d_model=D_MODEL, d_ff=D_FF, h=H, dropout=P_DROP, max_len=LENGTH)
# Equal work: dropout wherever nn.Transformer(dropout=P_DROP) has it.
EQUAL_WORK = replace(PAPER, attention_dropout=P_DROP, ff_dropout=P_DROP)


class TorchSeq2Seq(nn.Module):
    """nn.Transformer (``torch_reference(config)``: the same shape, post-norm without final norms)
    with the same embeddings, positional encoding (and its dropout) and tied generator as ours."""

    def __init__(self, config: TransformerConfig = EQUAL_WORK):
        super().__init__()
        self.src_embed = nn.Sequential(Embeddings(config.src_vocab_size, config.d_model),
                                       PositionalEncoding(config.d_model, config.dropout, config.max_len))
        self.tgt_embed = nn.Sequential(Embeddings(config.tgt_vocab_size, config.d_model),
                                       PositionalEncoding(config.d_model, config.dropout, config.max_len))
        self.transformer = torch_reference(config)
        self.generator = nn.Linear(config.d_model, config.tgt_vocab_size)
        self.generator.weight = self.tgt_embed[0].lut.weight

    def forward(self, src, tgt):
        causal = ~subsequent_mask(tgt.size(1), tgt.device)  # nn.Transformer: True = masked out
        out = self.transformer(self.src_embed(src), self.tgt_embed(tgt), tgt_mask=causal,
                               src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt == 0,
                               memory_key_padding_mask=src == 0)
        return self.generator(out)


class DropoutCount(TorchDispatchMode):
    """Counts the dropout draws (``bernoulli``, ``native_dropout``) and the entries they cover."""

    DRAWS = {torch.ops.aten.bernoulli_, torch.ops.aten.bernoulli, torch.ops.aten.native_dropout}

    def __init__(self):
        super().__init__()
        self.draws, self.entries = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in self.DRAWS:
            self.draws += 1
            self.entries += args[0].numel()
        return func(*args, **(kwargs or {}))


def dropout_work(forward) -> tuple[int, int]:
    """(draws, entries) of dropout in one call of ``forward`` (a training forward, on the CPU)."""
    with DropoutCount() as count:
        forward()
    return count.draws, count.entries


def clock(kind: str, device: torch.device):
    if kind == "cpu":
        if device.type != "cpu":
            raise SystemExit("--clock cpu measures CPU time: use it with --device cpu")
        return time.process_time
    return time.perf_counter


def timed(step, device, now=time.perf_counter):
    def run():
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = now()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return now() - start
    return run


def compare(contenders: dict, repeats: int, warmup: int = 3, seed: int = 0) -> dict[str, list[float]]:
    """Seconds of each run of each contender, runs interleaved: every round runs each contender
    once, in a shuffled order, so that none always follows the same one."""
    for run in contenders.values():
        for _ in range(warmup):
            run()
    order, rng = list(contenders), random.Random(seed)
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        rng.shuffle(order)
        for name in order:
            times[name].append(contenders[name]())
    return times


def attention_contenders(device):
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(D_MODEL, H, dropout=0.0, batch_first=True).to(device)
    fast = MultiHeadAttention(D_MODEL, H, dropout=0.0, fast=True).to(device)
    explicit = MultiHeadAttention(D_MODEL, H, dropout=0.0, fast=False).to(device)
    copy_mha_from_torch(fast, theirs)
    copy_mha_from_torch(explicit, theirs)
    x = torch.randn(BATCH, LENGTH, D_MODEL, device=device, requires_grad=True)
    causal = subsequent_mask(LENGTH, device)

    def ours(module):
        return lambda: module(x, x, x, causal.unsqueeze(0)).sum().backward()  # (1, L, L): as many dims as (batch, L, L)

    def torch_mha():
        theirs(x, x, x, attn_mask=~causal, need_weights=False)[0].sum().backward()

    return {"nn.MultiheadAttention": torch_mha,
            "ours, fast path": ours(fast),
            "ours, teaching path": ours(explicit)}


def formula_norms(model: nn.Module) -> nn.Module:
    """``model`` with every LayerNorm on notebook 06's formula (fast=False) instead of F.layer_norm."""
    for module in model.modules():
        if isinstance(module, LayerNorm):
            module.fast = False
    return model


def training_contenders(device):
    """{name: (step, training forward)}: nn.Transformer first, then ours at equal work on both
    paths, then ours in the paper's configuration."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, VOCAB, (BATCH, LENGTH), generator=g)
    tgt = torch.randint(4, VOCAB, (BATCH, LENGTH + 1), generator=g)
    src[:, -4:] = 0  # some padding, as in real batches
    src, tgt = src.to(device), tgt.to(device)
    tgt_in, tgt_y = tgt[:, :-1], tgt[:, 1:]

    def theirs(model):
        return model(src, tgt_in)

    def ours(model):
        return model(src, tgt_in, padding_mask(src, 0), target_mask(tgt_in, 0))

    def step_for(model, forward):
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

        def step():
            logits = forward(model)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt_y.reshape(-1), ignore_index=0)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return step

    torch.manual_seed(0)
    models = {
        "nn.Transformer": (TorchSeq2Seq(EQUAL_WORK), theirs),
        "ours, fast path": (make_model(EQUAL_WORK), ours),
        "ours, teaching path": (formula_norms(make_model(replace(EQUAL_WORK, fast_attention=False))), ours),
        "ours, paper's dropout": (make_model(PAPER), ours),
    }
    contenders = {}
    for name, (model, forward) in models.items():
        model = model.to(device).train()
        contenders[name] = (step_for(model, forward), lambda model=model, forward=forward: forward(model))
    return contenders


def report(title: str, times: dict[str, list[float]]) -> dict[str, float]:
    """Print each contender's median milliseconds and its ratio to the first contender's median,
    with the quartiles of the per-round ratios; return the ratios of the medians."""
    baseline_name = next(iter(times))
    baseline = times[baseline_name]
    print(f"\n{title}")
    print(f"  {'contender':<24}{'median ms':>11}{'ratio':>8}   per-round ratio, quartiles")
    ratios = {}
    for name, runs in times.items():
        ratios[name] = statistics.median(runs) / statistics.median(baseline)
        paired = statistics.quantiles([t / b for t, b in zip(runs, baseline)], n=4) if len(runs) > 1 else [1.0] * 3
        spread = "" if name == baseline_name else f"   {paired[0]:.3f} .. {paired[2]:.3f}"
        print(f"  {name:<24}{1000 * statistics.median(runs):>11.2f}{ratios[name]:>7.3f}x{spread}")
    return ratios


def conditions(args) -> str:
    """The machine and the load, for the record."""
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return (f"torch {torch.__version__}; {model}, {os.cpu_count()} CPUs, load average {load}; "
            f"{torch.get_num_threads()} torch threads; clock: {args.clock} "
            f"({'CPU time of this process' if args.clock == 'cpu' else 'wall'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cuda: the CPU's rows, then the GPU's")
    parser.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's own)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall clock, or this process's CPU time (CPU only; with --threads 1 on a busy machine)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device cuda, but this PyTorch ({torch.__version__}) sees no CUDA device; use --device cpu")
    devices = ["cpu"] + (["cuda"] if args.device == "cuda" else [])
    if args.clock == "cpu" and "cuda" in devices:
        parser.error("--clock cpu measures CPU time: use it with --device cpu")
    print(conditions(args))
    print(f"d_model={D_MODEL}, N={N}, h={H}, d_ff={D_FF}, batch {BATCH} x {LENGTH} tokens, "
          f"{args.repeats} interleaved rounds")
    for name in devices:
        device = torch.device(name)
        now = clock(args.clock, device)
        report(f"[{name}] multi-head self-attention, forward + backward (causal mask, no dropout on either side)",
               compare({k: timed(step, device, now) for k, step in attention_contenders(device).items()},
                       args.repeats))
        contenders = training_contenders(device)
        print(f"\n[{name}] dropout in one training forward (counted on the CPU): draws, entries")
        cpu = contenders if name == "cpu" else training_contenders(torch.device("cpu"))
        work = {k: dropout_work(forward) for k, (_, forward) in cpu.items()}
        for k, (draws, entries) in work.items():
            print(f"  {k:<24}{draws:>4} draws, {entries:>10,} entries")
        equal = all(work[k] == work["nn.Transformer"] for k in ("ours, fast path", "ours, teaching path"))
        print("  equal work: ours (fast and teaching path) drops out exactly where nn.Transformer does" if equal
              else "  NOT EQUAL WORK: ours and nn.Transformer drop out differently; the ratios below mislead")
        report(f"[{name}] one training step of the encoder-decoder (forward, loss, backward, Adam); "
               f"ours at equal work with {P_DROP} dropout at nn.Transformer's sites "
               f"(attention_dropout={EQUAL_WORK.attention_dropout}, ff_dropout={EQUAL_WORK.ff_dropout}), "
               f"the last row with the paper's two sites only (less work)",
               compare({k: timed(step, device, now) for k, (step, _) in contenders.items()}, args.repeats))


if __name__ == "__main__":
    main()
