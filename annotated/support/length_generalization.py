"""The experiment §3.5 of the paper proposes but does not run: does a position scheme let a
model trained on short sequences handle longer ones?

Train the copy (or reverse) task on sequences of 1 .. ``max_train_length`` symbols with each
kind of position until it fits them (exact match on held-out sequences of the training
lengths), then measure exact-match accuracy (greedy decoding) on longer ones. A kind that
does not fit within its budget of updates is reported as such: its extrapolation says nothing. The
machinery of notebook 14: the course's model (``annotated.model.make_model``), batches,
loss, schedule, ``train_epoch`` and ``greedy_decode``, with the positions swapped:

- ``sinusoidal``: the paper's ``PositionalEncoding`` (notebook 05), unchanged;
- ``learned``: ``annotated.learned_positions.LearnedPositionalEncoding`` in its place;
- ``relative``: no absolute positions; every self-attention is Shaw et al.'s
  ``RelativeMultiHeadAttention``;
- ``rotary``: no absolute positions; every self-attention is ``RotaryMultiHeadAttention``.

Cross-attention keeps the paper's attention in every kind (Shaw et al. and RoFormer put
positions in self-attention). The swapped attentions start from the same projection weights
as the model they replace, so with one seed the kinds differ only in their positions.

Decoding recomputes the decoder at each step (``use_cache=False``): the cache of
``annotated.decoding`` calls the projections itself and would skip the relative and rotary
terms.

    python -m annotated.support.length_generalization            # the notebook's small run, CPU
    python -m annotated.support.length_generalization --full     # larger models, more steps; a GPU
"""

import argparse
import dataclasses
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.batching import batch_by_tokens, collate
from annotated.decoding import greedy_decode
from annotated.label_smoothing import LabelSmoothingLoss
from annotated.learned_positions import LearnedPositionalEncoding
from annotated.masks import padding_mask
from annotated.model import EncoderDecoder, TransformerConfig, make_model
from annotated.relative_positions import RelativeMultiHeadAttention
from annotated.rotary import RotaryMultiHeadAttention
from annotated.schedule import make_optimizer
from annotated.synthetic import copy_task, reverse_task
from annotated.training import choose_device, train_epoch

KINDS = ("sinusoidal", "learned", "relative", "rotary")
TASKS = {"copy": copy_task, "reverse": reverse_task}
PAD = 0


@dataclass
class LengthExperiment:
    """Sizes of one run. The defaults are the notebook's: small enough for a 2-core CPU."""

    task: str = "copy"
    vocab_size: int = 24  # 20 symbols (ids 4 .. 23)
    max_train_length: int = 10
    test_lengths: tuple[int, ...] = (5, 10, 15, 20, 30, 40)
    d_model: int = 64
    N: int = 2
    h: int = 4
    d_ff: int = 128
    # The relative kind's clipping distance k: below the longest offset in training (11), so that
    # the clipped offsets' vectors are trained (Shaw et al. use 16 on sentences far longer).
    max_distance: int = 8
    steps: int = 2000  # the most updates: training stops earlier once the model fits
    batch_tokens: int = 1024  # tokens per batch (about 140 sequences of mean length 7.5)
    warmup: int = 100
    factor: float = 0.5
    fit_lengths: tuple[int, ...] = (4, 7, 10)  # validation lengths, all inside the training lengths
    fit_threshold: float = 0.9  # exact match at every fit length that counts as "fits"
    check_every: int = 100  # updates between two validations
    test_examples: int = 50  # per test length (and per validation length)
    seed: int = 0

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r}: choose one of {sorted(TASKS)}")
        if not self.test_lengths or min(self.test_lengths) < 1:
            raise ValueError(f"test_lengths must be positive lengths, got {self.test_lengths}")
        if not self.fit_lengths or min(self.fit_lengths) < 1 or max(self.fit_lengths) > self.max_train_length:
            raise ValueError(f"fit_lengths must lie in the training lengths 1 .. {self.max_train_length}, "
                             f"got {self.fit_lengths}")


FULL = LengthExperiment(d_model=256, N=3, h=8, d_ff=1024, steps=5000, batch_tokens=4096, check_every=250,
                        warmup=400, factor=1.0, test_examples=500, max_train_length=20, fit_lengths=(5, 10, 15, 20),
                        max_distance=16,
                        test_lengths=(10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60))


class NoPositions(nn.Module):
    """Dropout only: the stand-in for ``PositionalEncoding`` when positions live in attention."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return self.dropout(x)


def swap_self_attention(model: EncoderDecoder, make: callable) -> None:
    """Replace every self-attention (encoder and decoder) by ``make(old)``, which starts from
    the old projection weights; cross-attention is left alone."""
    layers = list(model.encoder.layers) + list(model.decoder.layers)
    for layer in layers:
        old = layer.self_attn
        new = make(old)
        missing, unexpected = new.load_state_dict(old.state_dict(), strict=False)
        assert not unexpected and all(name.startswith(("w_K", "w_V")) for name in missing)
        layer.self_attn = new


def position_model(kind: str, exp: LengthExperiment) -> EncoderDecoder:
    """The course's Transformer with positions of ``kind``, seeded by ``exp.seed``."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: choose one of {KINDS}")
    max_len = max(exp.test_lengths) + 2  # <s> and </s>
    torch.manual_seed(exp.seed)
    config = TransformerConfig(exp.vocab_size, exp.vocab_size, N=exp.N, d_model=exp.d_model, d_ff=exp.d_ff,
                               h=exp.h, dropout=0.0, max_len=max_len, share_embeddings=True)
    model = make_model(config)
    torch.manual_seed(exp.seed + 1)  # the new parameters: the same whatever the kind
    if kind == "learned":
        for embed in (model.src_embed, model.tgt_embed):
            embed[1] = LearnedPositionalEncoding(exp.d_model, 0.0, max_len)
    elif kind in ("relative", "rotary"):
        for embed in (model.src_embed, model.tgt_embed):
            embed[1] = NoPositions()
        if kind == "relative":
            swap_self_attention(model, lambda old: RelativeMultiHeadAttention(old.d_model, old.h, exp.max_distance))
        else:
            swap_self_attention(model, lambda old: RotaryMultiHeadAttention(old.d_model, old.h, fast=False))
    return model


def training_pairs(exp: LengthExperiment) -> list:
    """``steps`` batches' worth of pairs, lengths drawn uniformly from 1 .. max_train_length."""
    rng = random.Random(exp.seed)
    mean_tokens = exp.max_train_length / 2 + 2.5
    count = int(exp.steps * exp.batch_tokens / mean_tokens) + 1
    lengths = [rng.randint(1, exp.max_train_length) for _ in range(count)]
    make = TASKS[exp.task]
    return [make(1, n, exp.vocab_size, seed=exp.seed * 1_000_003 + i)[0] for i, n in enumerate(lengths)]


def train(kind: str, exp: LengthExperiment, device: torch.device | str = "cpu") -> tuple[EncoderDecoder, dict]:
    """Train a ``kind`` model on ``exp`` until it fits the training lengths, or for ``exp.steps`` updates.

    Every ``exp.check_every`` updates the model decodes fresh validation sequences of each of
    ``exp.fit_lengths`` (drawn apart from the test sequences); once every length reaches
    ``exp.fit_threshold`` exact match, training stops. Returns the model (in eval mode) and a
    history: ``step_loss`` (every update), ``checks`` [(updates, {length: exact match})] and
    ``fitted_at`` (the updates after which it fitted, or None).
    """
    model = position_model(kind, exp).to(device)
    pairs = training_pairs(exp)
    lengths = [len(src) for src, _ in pairs]
    batches = [collate([pairs[i] for i in ids], PAD)
               for ids in batch_by_tokens(lengths, exp.batch_tokens, shuffle=True, seed=exp.seed)][: exp.steps]
    optimizer, scheduler = make_optimizer(model, exp.d_model, warmup=exp.warmup, factor=exp.factor)
    loss_fn = LabelSmoothingLoss(exp.vocab_size, PAD, smoothing=0.0)
    history = {"step_loss": [], "checks": [], "fitted_at": None}
    for start in range(0, len(batches), exp.check_every):
        train_epoch(model, batches[start : start + exp.check_every], loss_fn, optimizer, scheduler,
                    device=device, progress=False, step_losses=history["step_loss"])
        scores = {n: exact_match(model, exp, n, device, validation=True) for n in exp.fit_lengths}
        history["checks"].append((scheduler.last_epoch, scores))
        if min(scores.values()) >= exp.fit_threshold:
            history["fitted_at"] = scheduler.last_epoch
            break
    return model.eval(), history


@torch.no_grad()
def exact_match(model: EncoderDecoder, exp: LengthExperiment, length: int,
                device: torch.device | str = "cpu", validation: bool = False) -> float:
    """Share of ``exp.test_examples`` fresh sequences of ``length`` symbols decoded exactly: the
    test sequences, or with ``validation`` others drawn apart, on which training is stopped."""
    pairs = TASKS[exp.task](exp.test_examples, length, exp.vocab_size, seed=(20_000 if validation else 10_000) + length)
    model.eval()
    src = torch.tensor([s for s, _ in pairs], device=device)  # one length: no padding
    tgt = torch.tensor([t for _, t in pairs], device=device)
    out = greedy_decode(model, src, padding_mask(src, PAD), max_len=tgt.size(1), use_cache=False)
    out = F.pad(out, (0, tgt.size(1) - out.size(1)), value=PAD)  # if every output ended early
    return (out == tgt).all(dim=1).float().mean().item()


def run(exp: LengthExperiment, kinds: tuple[str, ...] = KINDS, device: torch.device | str = "cpu",
        verbose: bool = False) -> dict:
    """{kind: {"accuracy": {length: exact match on the test sequences}, "fitted_at": updates or None,
    "steps": updates made, "validation": the last check's {length: exact match}, "loss": the mean
    training loss of the last 20 updates, "seconds": ...}}."""
    results = {}
    for kind in kinds:
        start = time.perf_counter()
        model, history = train(kind, exp, device)
        accuracy = {n: exact_match(model, exp, n, device) for n in exp.test_lengths}
        steps, validation = history["checks"][-1]
        results[kind] = {"accuracy": accuracy, "fitted_at": history["fitted_at"], "steps": steps,
                         "validation": validation, "loss": sum(history["step_loss"][-20:]) / len(history["step_loss"][-20:]),
                         "seconds": time.perf_counter() - start}
        if verbose:
            row = "  ".join(f"{n}:{a:4.0%}" for n, a in accuracy.items())
            fitted = f"fitted after {steps}" if history["fitted_at"] else f"NOT fitted in {steps}"
            print(f"{kind:>10}  {row}  ({fitted} updates, loss {results[kind]['loss']:.3f}, "
                  f"{results[kind]['seconds']:.0f} s)", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.support.length_generalization",
                                     description="Train short, test long: exact match per length and position kind.")
    parser.add_argument("--full", action="store_true", help="larger models and more steps (a GPU)")
    parser.add_argument("--task", choices=sorted(TASKS), default="copy")
    parser.add_argument("--steps", type=int, help="override the number of updates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = parser.parse_args(argv)
    exp = dataclasses.replace(FULL if args.full else LengthExperiment(), task=args.task, seed=args.seed)
    if args.steps:
        exp = dataclasses.replace(exp, steps=args.steps)
    device = choose_device() if args.full else torch.device("cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # tiny models: one thread is faster than two fighting over a busy CPU
    print(f"{exp}\ndevice: {device}")
    run(exp, tuple(args.kinds), device, verbose=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
