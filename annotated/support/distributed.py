"""Training on several GPUs: one process per GPU, launched by ``torchrun``, with DistributedDataParallel.

    torchrun --standalone --nproc_per_node=4 -m annotated.train --preset base

``torchrun`` starts ``nproc_per_node`` copies of the program and tells each who it is through
environment variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Each process
holds a full copy of the model and trains on its own share of the batches;
``DistributedDataParallel`` (DDP) averages the gradients over the processes during
``backward()``, so every copy makes the same update. The backend is NCCL between CUDA GPUs and
Gloo on the CPU (which is how the tests run two processes on one machine).

The loss needs one correction. A single process divides the summed loss of a batch by its
number of target tokens T. With W processes holding T_1 .. T_W tokens (T = sum T_r), DDP
computes the *mean* of the processes' gradients, (1/W) sum_r grad(L_r / d_r). Choosing
d_r = T / W for every process gives sum_r grad(L_r) / T: exactly the gradient of one process
on the whole global batch. So each process divides by the global token count (one
``all_reduce``) times W; ``token_divisor`` hands that divisor to ``annotated.training``.

    ctx = init_distributed()                      # reads torchrun's variables; gloo or nccl
    model = wrap_model(model, ctx)                # DistributedDataParallel when world_size > 1
    fit(model, shard(train_batches, ctx), ..., token_divisor=token_divisor(ctx),
        stop_together=lambda stop: any_process(stop, ctx))
"""

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from annotated.training import choose_device

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


def token_divisor(ctx: DistributedContext) -> Callable[[int], float]:
    """The divisor of each process's summed loss: the global token count over world_size
    (see the module docstring), so DDP's mean gradient is the gradient of the global batch."""

    def divisor(ntokens: int) -> float:
        return all_reduce_sum(ntokens, ctx) / ctx.world_size

    return divisor


def any_process(flag: bool, ctx: DistributedContext) -> bool:
    """True on every process if ``flag`` is True on at least one. Used to stop training at a time
    limit: the processes' clocks reach it at slightly different updates, and a process that
    stopped alone would leave the others waiting in ``backward()``."""
    return all_reduce_sum(float(flag), ctx) > 0
