"""The training loop (paper §5): batches in, summed loss over tokens, Adam with the schedule.

The loss of a batch is its summed label-smoothed cross-entropy divided by its number of
target tokens. With gradient accumulation, the k micro-batches of one update are divided by
the tokens of all k together, so the update is exactly the one a single batch holding all
of them would give.

Notebook: ``08_training.ipynb``. Training on several GPUs wraps these functions:
``annotated.support.distributed``; with the arguments checked first: ``annotated.support.guarded_training``.
"""

import time
from collections.abc import Callable

import torch
import torch.nn as nn
from tqdm import tqdm

from annotated.batching import Batch
from annotated.support.class_guards import checked
from annotated.support.variant_checks import check_fit_arguments, check_train_epoch_arguments


def choose_device() -> torch.device:
    """The fastest device available: a CUDA GPU, then Apple's MPS, then the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def train_step(model: nn.Module, group: list[Batch], loss_fn: nn.Module, optimizer: torch.optim.Optimizer,
               scheduler: torch.optim.lr_scheduler.LRScheduler, divisor: float, clip: float | None = None,
               device: torch.device | str | None = None) -> float:
    """One optimizer update on the micro-batches of ``group``; returns their summed loss.

    ``loss_fn`` returns the loss *summed* over a batch's target tokens; every micro-batch's
    sum is divided by ``divisor``, the tokens of the whole group, so that the accumulated
    gradient is that of one batch holding the whole group. ``clip``, if set, rescales the
    gradients so that their global norm is at most ``clip``.
    """
    device = device or next(model.parameters()).device
    summed = 0.0
    for batch in group:
        batch = batch.to(device)
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (batch, L_tgt, vocab)
        loss = loss_fn(logits.flatten(0, 1), batch.tgt_y.flatten())  # over (batch * L_tgt) positions
        (loss / divisor).backward()  # gradients add up over the micro-batches
        summed += loss.item()
    if clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return summed


def train_epoch(model: nn.Module, batches: list[Batch], loss_fn: nn.Module, optimizer: torch.optim.Optimizer,
                scheduler: torch.optim.lr_scheduler.LRScheduler, accum_steps: int = 1, clip: float | None = None,
                device: torch.device | str | None = None, progress: bool = True,
                stop: Callable[[], bool] | None = None, step_losses: list[float] | None = None) -> float:
    """One pass over ``batches``, one ``train_step`` per ``accum_steps`` batches.

    ``stop`` is checked before every update: the epoch ends early when it returns True (a
    step limit). ``step_losses``, if given, gets each update's loss per token.
    Returns the mean loss per target token over the updates made.
    """
    model.train()
    groups = [batches[i : i + accum_steps] for i in range(0, len(batches), accum_steps)]
    total_loss, total_tokens, start = 0.0, 0, time.perf_counter()
    bar = tqdm(groups, desc="train", disable=not progress)
    for group in bar:
        if stop is not None and stop():
            break
        ntokens = sum(batch.ntokens for batch in group)  # of the whole group, not of each micro-batch
        lr = optimizer.param_groups[0]["lr"]
        group_loss = train_step(model, group, loss_fn, optimizer, scheduler, ntokens, clip, device)
        total_loss, total_tokens = total_loss + group_loss, total_tokens + ntokens
        if step_losses is not None:
            step_losses.append(group_loss / ntokens)
        tokens_per_s = total_tokens / (time.perf_counter() - start)
        bar.set_postfix_str(f"loss={group_loss / ntokens:.3f}, {tokens_per_s:.0f}tok/s, lr={lr:.2e}")
    bar.close()
    return total_loss / total_tokens if total_tokens else float("nan")


@torch.no_grad()
def evaluate_loss(model: nn.Module, batches: list[Batch], loss_fn: nn.Module,
                  device: torch.device | str | None = None) -> float:
    """Mean loss per target token over ``batches``, with dropout off and no gradients."""
    device = device or next(model.parameters()).device
    model.eval()
    total_loss, total_tokens = 0.0, 0
    for batch in batches:
        batch = batch.to(device)
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (batch, L_tgt, vocab)
        total_loss += loss_fn(logits.flatten(0, 1), batch.tgt_y.flatten()).item()
        total_tokens += batch.ntokens
    return total_loss / total_tokens if total_tokens else float("nan")


def fit(model: nn.Module, train_batches: list[Batch], val_batches: list[Batch], loss_fn: nn.Module,
        optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler, epochs: int = 10,
        max_steps: int | None = None, max_minutes: float | None = None, accum_steps: int = 1,
        clip: float | None = None, device: torch.device | str | None = None, progress: bool = True,
        seed: int = 0) -> dict:
    """Train for ``epochs`` epochs, or until ``max_steps`` updates (or ``max_minutes``) are done.

    The batches are visited in a new order each epoch, seeded by ``seed + epoch``; the
    validation loss is measured after each epoch. A step budget makes the same updates on any
    machine (their last bits still depend on the processor's float arithmetic); a time budget
    does not.

    Returns the history: per epoch ``epoch``, ``train_loss``, ``val_loss``, ``step`` and
    ``minutes`` (since the start), and ``step_loss``, the loss of every update.
    """
    history = {"epoch": [], "train_loss": [], "val_loss": [], "step": [], "minutes": [], "step_loss": []}
    start = time.monotonic()

    def out_of_budget() -> bool:
        # LambdaLR's last_epoch counts its step() calls, that is, the updates made so far.
        over_steps = max_steps is not None and scheduler.last_epoch >= max_steps
        return over_steps or (max_minutes is not None and time.monotonic() - start >= 60 * max_minutes)

    for epoch in range(epochs):
        if out_of_budget():
            break
        order = torch.randperm(len(train_batches), generator=torch.Generator().manual_seed(seed + epoch))
        train_loss = train_epoch(model, [train_batches[i] for i in order], loss_fn, optimizer, scheduler,
                                 accum_steps, clip, device, progress, out_of_budget, history["step_loss"])
        val_loss = evaluate_loss(model, val_batches, loss_fn, device)
        for key, value in [("epoch", epoch), ("train_loss", train_loss), ("val_loss", val_loss),
                           ("step", scheduler.last_epoch), ("minutes", (time.monotonic() - start) / 60)]:
            history[key].append(value)
        if progress:
            print(f"epoch {epoch + 1}: train loss {train_loss:.3f}, val loss {val_loss:.3f}, "
                  f"step {scheduler.last_epoch}")
    return history


# The input guards, kept out of the code above: a budget that allows no update, no batches to train on
# or to validate with, accum_steps below 1 or clip=0 get a ValueError naming them, before any work.
train_epoch = checked(train_epoch, check_train_epoch_arguments)  # fit calls this one
fit = checked(fit, check_fit_arguments)
