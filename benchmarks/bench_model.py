"""Speed of the course's model against PyTorch's built-ins, measured side by side.

    python benchmarks/bench_model.py [--repeats 15] [--device cpu|cuda]

Times (1) forward + backward of multi-head self-attention, ours against
``nn.MultiheadAttention``, and (2) one training step (forward, loss, backward, Adam) of
our full model against ``nn.Transformer`` with the same embeddings and generator, at
d_model=256, N=3, h=8, d_ff=1024, batch 64 x 32 tokens. Ours runs twice: on the fast path
(``F.scaled_dot_product_attention``) and on the explicit teaching path. Runs of the
contenders are interleaved and the median is reported, so both see the same machine load.
Prints milliseconds and the ratio ours / PyTorch (lower is better).
"""

import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.masks import padding_mask, subsequent_mask, target_mask
from annotated.model import TransformerConfig, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.positional import sinusoidal_table
from annotated.support.reference import copy_mha_from_torch

D_MODEL, N, H, D_FF, BATCH, LENGTH, VOCAB = 256, 3, 8, 1024, 64, 32, 1000


class TorchSeq2Seq(nn.Module):
    """nn.Transformer with the same embeddings, positional encoding and tied generator."""

    def __init__(self):
        super().__init__()
        self.src_embed = nn.Embedding(VOCAB, D_MODEL)
        self.tgt_embed = nn.Embedding(VOCAB, D_MODEL)
        self.transformer = nn.Transformer(D_MODEL, H, N, N, D_FF, dropout=0.1, batch_first=True)
        self.generator = nn.Linear(D_MODEL, VOCAB)
        self.generator.weight = self.tgt_embed.weight
        self.register_buffer("pe", sinusoidal_table(LENGTH, D_MODEL))
        self.dropout = nn.Dropout(0.1)

    def forward(self, src, tgt):
        scale = math.sqrt(D_MODEL)
        x = self.dropout(self.src_embed(src) * scale + self.pe[: src.size(1)])
        y = self.dropout(self.tgt_embed(tgt) * scale + self.pe[: tgt.size(1)])
        causal = ~subsequent_mask(tgt.size(1), tgt.device)
        out = self.transformer(x, y, tgt_mask=causal, src_key_padding_mask=src == 0,
                               tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0)
        return self.generator(out)


def timed(step, device, repeats):
    def run():
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start
    return run


def compare(contenders: dict, repeats: int, warmup: int = 3) -> dict[str, float]:
    """Median milliseconds of each contender, runs interleaved round-robin."""
    for run in contenders.values():
        for _ in range(warmup):
            run()
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            times[name].append(run())
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def attention_contenders(device, repeats):
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

    return {"nn.MultiheadAttention": timed(torch_mha, device, repeats),
            "ours, fast path": timed(ours(fast), device, repeats),
            "ours, teaching path": timed(ours(explicit), device, repeats)}


def training_contenders(device, repeats):
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, VOCAB, (BATCH, LENGTH), generator=g)
    tgt = torch.randint(4, VOCAB, (BATCH, LENGTH + 1), generator=g)
    src[:, -4:] = 0  # some padding, as in real batches
    src, tgt = src.to(device), tgt.to(device)
    tgt_in, tgt_y = tgt[:, :-1], tgt[:, 1:]
    src_mask, tgt_mask = padding_mask(src, 0), target_mask(tgt_in, 0)

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
    config = TransformerConfig(VOCAB, VOCAB, N=N, d_model=D_MODEL, d_ff=D_FF, h=H, max_len=LENGTH)
    ours_fast = make_model(config).to(device).train()
    ours_explicit = make_model(TransformerConfig(**{**config.__dict__, "fast_attention": False})).to(device).train()
    reference = TorchSeq2Seq().to(device).train()

    def ours(model):
        return model(src, tgt_in, src_mask, tgt_mask)

    return {"nn.Transformer": timed(step_for(reference, lambda m: m(src, tgt_in)), device, repeats),
            "ours, fast path": timed(step_for(ours_fast, ours), device, repeats),
            "ours, teaching path": timed(step_for(ours_explicit, ours), device, repeats)}


def report(title: str, medians: dict[str, float]) -> dict[str, float]:
    baseline_name = next(iter(medians))
    baseline = medians[baseline_name]
    print(f"\n{title}")
    print(f"  {'contender':<24}{'median ms':>11}{'ratio':>8}")
    ratios = {}
    for name, ms in medians.items():
        ratios[name] = ms / baseline
        print(f"  {name:<24}{ms:>11.2f}{ratios[name]:>7.2f}x")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    devices = ["cpu"] + (["cuda"] if args.device == "cuda" else [])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; "
          f"d_model={D_MODEL}, N={N}, h={H}, d_ff={D_FF}, batch {BATCH} x {LENGTH} tokens")
    for name in devices:
        device = torch.device(name)
        report(f"[{name}] multi-head self-attention, forward + backward (causal mask)",
               compare(attention_contenders(device, args.repeats), args.repeats))
        report(f"[{name}] one training step of the encoder-decoder (forward, loss, backward, Adam)",
               compare(training_contenders(device, args.repeats), args.repeats))


if __name__ == "__main__":
    main()
