"""Training on several GPUs: one process per GPU, launched by ``torchrun``, with DistributedDataParallel.

    torchrun --standalone --nproc_per_node=4 -m annotated.train --preset base

``torchrun`` starts ``nproc_per_node`` copies of the program and tells each who it is through
environment variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Each process
holds a full copy of the model and trains on its own share of the batches;
``DistributedDataParallel`` (DDP) averages the gradients over the processes during
``backward()``, so every copy makes the same update. The backend is NCCL between CUDA GPUs and
Gloo on the CPU (which is how the tests run two processes on one machine).

The loss needs one correction. A single process divides the summed loss of an update by its
number of target tokens T. With W processes holding T_1 .. T_W tokens (T = sum T_r), DDP
computes the *mean* of the processes' gradients, (1/W) sum_r grad(L_r / d_r). Choosing
d_r = T / W for every process gives sum_r grad(L_r) / T: exactly the gradient of one process
on the whole global batch. So each process divides by the global token count (one
``all_reduce``) over W: ``global_divisor``.

The taught loop (``annotated.training``) knows nothing of processes. This module composes its
pieces: ``train_epoch_distributed`` calls the taught ``train_step`` with that divisor, and
``fit_distributed`` is the taught ``fit`` plus what several processes and long runs need: the
decision to stop is shared by all processes (``any_process``), and a run can resume from an
epoch and save a checkpoint after each (``start_epoch``, ``on_epoch_end``). With one process it
trains exactly like the taught ``fit``.

    ctx = init_distributed()                      # reads torchrun's variables; gloo or nccl
    model = wrap_model(model, ctx)                # DistributedDataParallel when world_size > 1
    fit_distributed(model, shard(train_batches, ctx), val_batches, loss_fn, optimizer, scheduler, ctx)
"""

import inspect
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from annotated.batching import Batch
from annotated.support.checks import check_budget
from annotated.training import choose_device, evaluate_loss, train_step

T = TypeVar("T")


@dataclass
class DistributedContext:
    """Who this process is: its rank among ``world_size`` processes and its device."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 alone prints, saves checkpoints and evaluates."""
        return self.rank == 0


def init_distributed(device: str | torch.device | None = None) -> DistributedContext:
    """Join the process group that ``torchrun`` set up; a plain single process otherwise.

    ``device`` None picks CUDA, MPS or the CPU. Under ``torchrun`` with CUDA, process
    LOCAL_RANK uses GPU LOCAL_RANK and NCCL; without CUDA the processes use Gloo on the CPU.
    """
    device = torch.device(device) if device is not None else choose_device()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return DistributedContext(device=device)
    if "RANK" not in os.environ:
        raise RuntimeError(f"WORLD_SIZE={world_size} is set but RANK is not: launch several processes with "
                           f"`torchrun --nproc_per_node={world_size} -m annotated.train ...`")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"process LOCAL_RANK={local_rank} needs GPU {local_rank} but this machine has "
                               f"{torch.cuda.device_count()}; lower --nproc_per_node")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")  # DDP between processes on MPS is not supported: use the CPU
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return DistributedContext(rank, local_rank, world_size, device)


def cleanup(ctx: DistributedContext) -> None:
    """Leave the process group (at the end of training)."""
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()


def wrap_model(model: nn.Module, ctx: DistributedContext) -> nn.Module:
    """The model on its device, wrapped in DDP when there are several processes.

    DDP copies rank 0's initial weights to every process, so all copies start equal.
    """
    model = model.to(ctx.device)
    if not ctx.enabled:
        return model
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    # The only buffers are the fixed positional tables: nothing to broadcast before each forward.
    # (Newer PyTorch names this option forward_sync_buffers and deprecates broadcast_buffers.)
    no_sync = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
               else "broadcast_buffers")
    return DistributedDataParallel(model, device_ids=device_ids, **{no_sync: False})


def shard(items: list[T], ctx: DistributedContext) -> list[T]:
    """This process's share: items rank, rank + W, rank + 2W, ...

    Every process gets the same number (a few items at the end may be left out), because a
    process that runs one update more than the others would wait for them forever in
    ``backward()``.
    """
    per_process = len(items) // ctx.world_size
    if per_process == 0:
        raise ValueError(f"{len(items)} batches cannot be shared by {ctx.world_size} processes: "
                         f"use more data, smaller batches or fewer processes")
    return items[ctx.rank : per_process * ctx.world_size : ctx.world_size]


def all_reduce_sum(value: float, ctx: DistributedContext) -> float:
    """The sum of ``value`` over all processes (the value itself for one process)."""
    if not ctx.enabled:
        return float(value)
    # NCCL reduces CUDA tensors only; Gloo takes CPU tensors. float64 keeps token counts exact.
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return float(tensor.item())


def global_divisor(ntokens: int, ctx: DistributedContext) -> float:
    """The divisor of this process's summed loss for an update of ``ntokens`` local tokens: the
    global token count over world_size (see the module docstring), so that DDP's mean gradient
    is the gradient of the global batch. ``ntokens`` itself for a single process."""
    return all_reduce_sum(ntokens, ctx) / ctx.world_size


def any_process(flag: bool, ctx: DistributedContext) -> bool:
    """True on every process if ``flag`` is True on at least one. Used to stop training at a time
    limit: the processes' clocks reach it at slightly different updates, and a process that
    stopped alone would leave the others waiting in ``backward()``."""
    return all_reduce_sum(float(flag), ctx) > 0


def train_epoch_distributed(model: nn.Module, batches: list[Batch], loss_fn: nn.Module,
                            optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
                            ctx: DistributedContext, accum_steps: int = 1, clip: float | None = None,
                            progress: bool = True, stop: Callable[[], bool] | None = None,
                            step_losses: list[float] | None = None) -> float:
    """``annotated.training.train_epoch`` for one of ``ctx.world_size`` processes.

    Every process must hold the same number of batches (``shard``). Each update is the taught
    ``train_step`` with ``global_divisor``; the losses reported (returned, and appended to
    ``step_losses``) are those of the global batch: summed over the processes, per global token.
    """
    model.train()
    groups = [batches[i : i + accum_steps] for i in range(0, len(batches), accum_steps)]
    total_loss, total_tokens, start = 0.0, 0.0, time.perf_counter()
    bar = tqdm(groups, desc="train", disable=not progress)
    for group in bar:
        if stop is not None and stop():
            break
        divisor = global_divisor(sum(batch.ntokens for batch in group), ctx)
        lr = optimizer.param_groups[0]["lr"]
        local_loss = train_step(model, group, loss_fn, optimizer, scheduler, divisor, clip, ctx.device)
        group_loss, group_tokens = all_reduce_sum(local_loss, ctx), divisor * ctx.world_size
        total_loss, total_tokens = total_loss + group_loss, total_tokens + group_tokens
        if step_losses is not None:
            step_losses.append(group_loss / group_tokens)
        tokens_per_s = total_tokens / (time.perf_counter() - start)
        bar.set_postfix_str(f"loss={group_loss / group_tokens:.3f}, {tokens_per_s:.0f}tok/s, lr={lr:.2e}")
    bar.close()
    return total_loss / total_tokens if total_tokens else float("nan")


def fit_distributed(model: nn.Module, train_batches: list[Batch], val_batches: list[Batch], loss_fn: nn.Module,
                    optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
                    ctx: DistributedContext, epochs: int = 10, max_steps: int | None = None,
                    max_minutes: float | None = None, accum_steps: int = 1, clip: float | None = None,
                    progress: bool = True, seed: int = 0, start_epoch: int = 0,
                    on_epoch_end: Callable[[int, dict], None] | None = None,
                    stop: Callable[[], bool] | None = None) -> dict:
    """``annotated.training.fit`` for one of ``ctx.world_size`` processes, able to resume.

    As the taught ``fit`` (same batch order per epoch, same history), plus: a process stops
    when any process reaches the step or time budget (``any_process``); training starts at
    epoch ``start_epoch`` (``max_steps`` counts the updates the scheduler has seen, including
    those before a resumed checkpoint); ``on_epoch_end(epoch, history)`` runs after each epoch
    (to save a checkpoint, for instance); ``stop()`` returning True (Ctrl-C, say) ends training
    before the next update as a budget would. Every process evaluates the whole ``val_batches``.
    """
    check_budget(epochs, max_steps, max_minutes, accum_steps)
    history = {"epoch": [], "train_loss": [], "val_loss": [], "step": [], "minutes": [], "step_loss": []}
    start = time.monotonic()

    def out_of_budget() -> bool:
        over_steps = max_steps is not None and scheduler.last_epoch >= max_steps
        over_time = max_minutes is not None and time.monotonic() - start >= 60 * max_minutes
        return any_process(over_steps or over_time or (stop is not None and stop()), ctx)

    for epoch in range(start_epoch, epochs):
        if out_of_budget():
            break
        order = torch.randperm(len(train_batches), generator=torch.Generator().manual_seed(seed + epoch))
        train_loss = train_epoch_distributed(model, [train_batches[i] for i in order], loss_fn, optimizer,
                                             scheduler, ctx, accum_steps, clip, progress, out_of_budget,
                                             history["step_loss"])
        val_loss = evaluate_loss(model, val_batches, loss_fn, ctx.device)
        for key, value in [("epoch", epoch), ("train_loss", train_loss), ("val_loss", val_loss),
                           ("step", scheduler.last_epoch), ("minutes", (time.monotonic() - start) / 60)]:
            history[key].append(value)
        if progress:
            print(f"epoch {epoch + 1}: train loss {train_loss:.3f}, val loss {val_loss:.3f}, "
                  f"step {scheduler.last_epoch}")
        if on_epoch_end is not None:
            on_epoch_end(epoch, history)
    return history
