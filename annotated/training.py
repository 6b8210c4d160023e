"""The training loop (paper §5): batches in, summed loss over tokens, Adam with the schedule.

The loss of a batch is its summed label-smoothed cross-entropy divided by its number of
target tokens. With gradient accumulation, the k micro-batches of one update are divided by
the tokens of all k together, so the update is exactly the one a single batch holding all
of them would give.

Notebook: ``08_training.ipynb``.
"""

import time
from collections.abc import Callable

import torch
import torch.nn as nn
from tqdm import tqdm

from annotated.batching import Batch


def choose_device() -> torch.device:
    """The fastest device available: a CUDA GPU, then Apple's MPS, then the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def train_epoch(model: nn.Module, batches: list[Batch], loss_fn: nn.Module, optimizer: torch.optim.Optimizer,
                scheduler: torch.optim.lr_scheduler.LRScheduler, accum_steps: int = 1, clip: float | None = None,
                device: torch.device | str | None = None, progress: bool = True,
                stop: Callable[[], bool] | None = None, step_losses: list[float] | None = None,
                token_divisor: Callable[[int], float] | None = None) -> float:
    """One pass over ``batches``, one optimizer update per ``accum_steps`` batches.

    Args:
        loss_fn: returns the loss *summed* over a batch's target tokens (``LabelSmoothingLoss``).
        clip: if set, rescale the gradients so that their global norm is at most ``clip``.
        stop: checked before every update; training ends early when it returns True
            (a time budget or a step limit).
        step_losses: if given, each update's loss per token is appended to it.
        token_divisor: maps an update's token count to the divisor of its summed loss
            (the count itself by default; ``annotated.support.distributed`` passes one
            that counts the tokens of every process).

    Returns the mean loss per target token over the updates made.
    """
    device = device or next(model.parameters()).device
    model.train()
    groups = [batches[i : i + accum_steps] for i in range(0, len(batches), accum_steps)]
    total_loss, total_tokens, start = 0.0, 0, time.perf_counter()
    bar = tqdm(groups, desc="train", disable=not progress)
    for group in bar:
        if stop is not None and stop():
            break
        ntokens = sum(batch.ntokens for batch in group)
        divisor = token_divisor(ntokens) if token_divisor else ntokens
        group_loss = 0.0
        for batch in group:
            batch = batch.to(device)
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (batch, L_tgt, vocab)
            loss = loss_fn(logits.flatten(0, 1), batch.tgt_y.flatten())  # over (batch * L_tgt) positions
            # Each micro-batch is divided by the tokens of the whole group, not its own:
            # the accumulated gradient is then that of one batch holding the whole group.
            (loss / divisor).backward()
            group_loss += loss.item()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
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
        max_minutes: float | None = None, max_steps: int | None = None, accum_steps: int = 1,
        clip: float | None = None, device: torch.device | str | None = None, progress: bool = True,
        seed: int = 0, start_epoch: int = 0, on_epoch_end: Callable[[int, dict], None] | None = None,
        token_divisor: Callable[[int], float] | None = None,
        stop_together: Callable[[bool], bool] | None = None) -> dict:
    """Train for ``epochs`` epochs, or until ``max_minutes`` or ``max_steps`` run out.

    The batches are visited in a new order each epoch (seeded by ``seed + epoch``); the
    validation loss is measured after each epoch. ``max_steps`` counts all updates the
    scheduler has seen, including those before a resumed checkpoint. ``on_epoch_end(epoch,
    history)`` runs after each epoch (to save a checkpoint, for instance).

    With several processes (``annotated.support.distributed``), ``token_divisor`` is passed
    on to ``train_epoch``, and ``stop_together`` turns each process's decision to stop into
    one shared by all, so that no process waits for an update the others never make.

    Returns the history: per epoch ``epoch``, ``train_loss``, ``val_loss``, ``step`` and
    ``minutes`` (since the start of ``fit``), and ``step_loss``, the loss of every update.
    """
    history = {"epoch": [], "train_loss": [], "val_loss": [], "step": [], "minutes": [], "step_loss": []}
    start = time.monotonic()

    def out_of_budget() -> bool:
        over_time = max_minutes is not None and time.monotonic() - start >= 60 * max_minutes
        # LambdaLR's last_epoch counts its step() calls, that is, the updates made so far.
        over_steps = max_steps is not None and scheduler.last_epoch >= max_steps
        return stop_together(over_time or over_steps) if stop_together else over_time or over_steps

    for epoch in range(start_epoch, epochs):
        if out_of_budget():
            break
        order = torch.randperm(len(train_batches), generator=torch.Generator().manual_seed(seed + epoch))
        train_loss = train_epoch(model, [train_batches[i] for i in order], loss_fn, optimizer, scheduler,
                                 accum_steps, clip, device, progress, stop=out_of_budget,
                                 step_losses=history["step_loss"], token_divisor=token_divisor)
        val_loss = evaluate_loss(model, val_batches, loss_fn, device)
        for key, value in [("epoch", epoch), ("train_loss", train_loss), ("val_loss", val_loss),
                           ("step", scheduler.last_epoch), ("minutes", (time.monotonic() - start) / 60)]:
            history[key].append(value)
        if progress:
            print(f"epoch {epoch + 1}: train loss {train_loss:.3f}, val loss {val_loss:.3f}, "
                  f"step {scheduler.last_epoch}")
        if on_epoch_end is not None:
            on_epoch_end(epoch, history)
    return history
