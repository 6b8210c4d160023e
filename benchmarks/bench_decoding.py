"""Greedy decoding with and without the key/value cache, for 50-token outputs.

    python benchmarks/bench_decoding.py [--repeats 3] [--threads N] [--device cpu|cuda|all]

The model has the cpu preset's shape (N=3, d_model=256, h=8, d_ff=1024, a 6,000-word
target vocabulary) and decodes a batch of 32 source sentences of 20 tokens. It is
untrained, and the generator's bias for </s> is -inf, so every run decodes exactly 50
tokens after <s>. Runs with and without the cache are interleaved, so both see the same
machine load, and the median of ``--repeats`` runs is reported; the cached tokens are
checked against full recomputation. Requirement: at least 2x faster on the CPU.
"""

import argparse
import statistics
import time

import torch

from annotated.decoding import greedy_decode
from annotated.masks import padding_mask
from annotated.model import TransformerConfig, make_model
from annotated.support.options import positive_int, thread_count

N, D_MODEL, H, D_FF, VOCAB = 3, 256, 8, 1024, 6000
BATCH, SRC_LEN, STEPS, EOS = 32, 20, 50, 2


def timed(run, device: torch.device) -> tuple[torch.Tensor, float]:
    """run()'s result and the seconds it took (waiting for the GPU to finish, on CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = run()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def bench(device: torch.device, repeats: int) -> dict[bool, float]:
    torch.manual_seed(0)
    model = make_model(TransformerConfig(VOCAB, VOCAB, N=N, d_model=D_MODEL, d_ff=D_FF, h=H)).to(device).eval()
    with torch.no_grad():
        model.generator.proj.bias[EOS] = float("-inf")  # </s> never wins: exactly STEPS tokens
    src = torch.randint(4, VOCAB, (BATCH, SRC_LEN), device=device)
    src[::2, SRC_LEN - 5 :] = 0  # padding in half the sentences
    src_mask = padding_mask(src, 0)

    def decode(use_cache: bool, steps: int = STEPS) -> torch.Tensor:
        return greedy_decode(model, src, src_mask, max_len=steps + 1, eos_idx=EOS, use_cache=use_cache)

    decode(True, steps=5), decode(False, steps=5)  # warm-up: first calls allocate memory
    times: dict[bool, list[float]] = {True: [], False: []}
    outputs: dict[bool, torch.Tensor] = {}
    for _ in range(repeats):
        for use_cache in (False, True):
            outputs[use_cache], elapsed = timed(lambda: decode(use_cache), device)
            times[use_cache].append(elapsed)
    assert outputs[True].shape == (BATCH, STEPS + 1), f"expected {STEPS} tokens, got {tuple(outputs[True].shape)}"
    assert torch.equal(outputs[True], outputs[False]), "the cache changed the decoded tokens"
    return {use_cache: statistics.median(t) for use_cache, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed runs per setting (median reported)")
    parser.add_argument("--threads", type=thread_count, default=None,
                        help="CPU threads for torch (default: torch's choice); 1 is steadier on a busy machine")
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all",
                        help="all: the CPU, and CUDA when present")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    devices = [torch.device("cpu")] if args.device in ("cpu", "all") else []
    if args.device == "cuda" or (args.device == "all" and torch.cuda.is_available()):
        devices.append(torch.device("cuda"))

    print(f"greedy decoding: batch {BATCH} x source {SRC_LEN} tokens -> {STEPS} tokens; N={N}, "
          f"d_model={D_MODEL}, h={H}, d_ff={D_FF}, vocab {VOCAB}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} CPU threads; median of {args.repeats}")
    print(f"{'device':<8}{'cache':<7}{'seconds':>9}{'tokens/s':>11}{'speed-up':>10}")
    speedups = {}
    for device in devices:
        median = bench(device, args.repeats)
        for use_cache in (False, True):
            tokens_per_s = BATCH * STEPS / median[use_cache]
            speedup = median[False] / median[use_cache]
            print(f"{device.type:<8}{'on' if use_cache else 'off':<7}{median[use_cache]:>9.3f}"
                  f"{tokens_per_s:>11.0f}{speedup:>9.1f}x")
        speedups[device.type] = median[False] / median[True]
    if "cpu" in speedups:
        verdict = "meets" if speedups["cpu"] >= 2 else "MISSES"
        print(f"cpu speed-up {speedups['cpu']:.1f}x {verdict} the requirement of at least 2x")


if __name__ == "__main__":
    main()
