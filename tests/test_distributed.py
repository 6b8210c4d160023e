"""Two processes with DistributedDataParallel (Gloo, CPU) train exactly like one process.

Each of 3 steps has a global batch of 8 sentence pairs of unequal lengths. Two processes
each take 4 of them (so their token counts differ); one process takes all 8. The losses
(summed over both processes, divided by the global token count) and the weights after
every step agree within rtol=1e-5, atol=1e-6: they differ only in float32 summation order.

Plain SGD with a constant rate is used rather than Adam, whose update is nearly invariant
to the gradient's scale: a divisor off by a factor of world_size would pass unnoticed with
Adam, but with SGD it changes every weight. The gradients of the first update are compared
too. A second run accumulates two micro-batches per process per update.

All traffic stays on the loopback interface (MASTER_ADDR=127.0.0.1, GLOO_SOCKET_IFNAME=lo).
"""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.testing import assert_close

from annotated.batching import collate
from annotated.label_smoothing import LabelSmoothingLoss
from annotated.model import TransformerConfig, make_model
from annotated.support.distributed import (DistributedContext, any_process, fit_distributed, global_divisor,
                                           init_distributed, shard, train_epoch_distributed, wrap_model)
from annotated.training import fit, train_epoch

VOCAB, PAD, WORLD_SIZE, STEPS, PER_STEP = 12, 0, 2, 3, 8
RTOL, ATOL = 1e-5, 1e-6


def global_batches() -> list[list[tuple[list[int], list[int]]]]:
    """STEPS lists of PER_STEP (source, target) pairs of lengths 3 .. 10."""
    g = torch.Generator().manual_seed(0)
    steps = []
    for _ in range(STEPS):
        pairs = []
        for _ in range(PER_STEP):
            src_len, tgt_len = torch.randint(1, 9, (2,), generator=g).tolist()
            src = torch.randint(4, VOCAB, (src_len,), generator=g).tolist()
            tgt = torch.randint(4, VOCAB, (tgt_len,), generator=g).tolist()
            pairs.append(([1, *src, 2], [1, *tgt, 2]))
        steps.append(pairs)
    return steps


def run(pairs_per_update: list[list[list]], accum_steps: int, ctx=None) -> dict:
    """Train a tiny model, one update per entry; each entry is a list of micro-batches (lists of pairs).

    With ``ctx``, the update is ``train_epoch_distributed``; without, the taught ``train_epoch``.
    Returns the weights after every update, the gradients of the first update and the loss of
    every update as the training function reports it."""
    torch.set_num_threads(1)
    _ = torch.manual_seed(0)
    model = make_model(TransformerConfig(VOCAB, VOCAB, N=1, d_model=16, d_ff=32, h=2, dropout=0.0))
    model = wrap_model(model, ctx or DistributedContext())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1.0)
    grads = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: grads.append(
        [p.grad.clone() for p in opt.param_groups[0]["params"]]))
    loss_fn = LabelSmoothingLoss(VOCAB, PAD, 0.1)
    out = {"losses": [], "weights": []}
    for micro in pairs_per_update:
        batches = [collate(pairs, PAD) for pairs in micro]
        if ctx is None:
            loss = train_epoch(model, batches, loss_fn, optimizer, scheduler, accum_steps=accum_steps, progress=False)
        else:  # the loss it reports is that of the global batch, per global token
            loss = train_epoch_distributed(model, batches, loss_fn, optimizer, scheduler, ctx,
                                           accum_steps=accum_steps, progress=False)
        out["losses"].append(loss)
        out["weights"].append([p.detach().clone() for p in model.parameters()])
    out["first_grads"] = grads[0]
    return out


def worker(rank: int, port: int, result_dir: str) -> None:
    torch.set_num_threads(1)
    # What torchrun would set for each process.
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    ctx = init_distributed("cpu")
    assert dist.get_backend() == "gloo" and ctx.world_size == WORLD_SIZE
    steps = global_batches()
    # Process r takes pairs r, r + 2, ... of each step's global batch.
    mine = [shard(pairs, ctx) for pairs in steps]
    results = {
        "plain": run([[pairs] for pairs in mine], 1, ctx),
        "accumulated": run([[pairs[:2], pairs[2:]] for pairs in mine], 2, ctx),
        # Rank 1 alone wants to stop, then nobody does.
        "any_process": [any_process(ctx.rank == 1, ctx), any_process(False, ctx)],
    }
    if ctx.is_main:
        torch.save(results, os.path.join(result_dir, "ddp.pt"))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory, single_results):
    # single_results first: the parent then has every lazy import (the optimizer pulls in
    # torch._dynamo, seconds on a busy machine) done once, before the children are forked.
    result_dir = tmp_path_factory.mktemp("ddp")
    # fork: the children inherit the imported modules instead of importing torch again (seconds each).
    mp.start_processes(worker, args=(free_port(), str(result_dir)), nprocs=WORLD_SIZE, join=True,
                       start_method="fork")
    return torch.load(result_dir / "ddp.pt", weights_only=True)


@pytest.fixture(scope="module")
def single_results():
    threads = torch.get_num_threads()
    try:
        return run([[pairs] for pairs in global_batches()], 1)
    finally:
        torch.set_num_threads(threads)


def test_the_two_processes_hold_unequal_token_counts():
    # With equal counts, dividing by the local count would give the right answer by luck.
    for pairs in global_batches():
        tokens = [collate(shard(pairs, DistributedContext(rank=r, world_size=WORLD_SIZE)), PAD).ntokens
                  for r in range(WORLD_SIZE)]
        assert tokens[0] != tokens[1]


@pytest.mark.parametrize("variant", ["plain", "accumulated"])
def test_two_gloo_processes_match_one_process_on_the_global_batch(ddp_results, single_results, variant):
    ddp, single = ddp_results[variant], single_results
    assert_close(ddp["first_grads"], single["first_grads"], rtol=RTOL, atol=ATOL)
    assert_close(torch.tensor(ddp["losses"]), torch.tensor(single["losses"]), rtol=RTOL, atol=ATOL)
    for step in range(STEPS):
        assert_close(ddp["weights"][step], single["weights"][step], rtol=RTOL, atol=ATOL)
    assert single["losses"][-1] < single["losses"][0]  # the steps did train


def test_a_stop_decided_by_one_process_is_taken_by_all(ddp_results):
    assert ddp_results["any_process"] == [True, False]


def test_shards_are_disjoint_equal_sized_and_cover_all_but_the_remainder():
    items = list(range(7))
    shards = [shard(items, DistributedContext(rank=r, world_size=3)) for r in range(3)]
    assert shards == [[0, 3], [1, 4], [2, 5]]
    with pytest.raises(ValueError, match="cannot be shared by 3 processes"):
        shard([1, 2], DistributedContext(rank=0, world_size=3))


def test_a_single_process_needs_no_process_group():
    ctx = init_distributed("cpu")
    assert (ctx.rank, ctx.world_size, ctx.enabled, ctx.is_main) == (0, 1, False, True)
    assert not dist.is_initialized()
    assert global_divisor(123, ctx) == 123


def test_with_one_process_fit_distributed_trains_exactly_like_the_taught_fit():
    batches = [collate(pairs, PAD) for pairs in global_batches()]
    histories, weights = [], []
    for distributed in (False, True):
        _ = torch.manual_seed(0)
        model = make_model(TransformerConfig(VOCAB, VOCAB, N=1, d_model=16, d_ff=32, h=2, dropout=0.1))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1.0)
        loss_fn = LabelSmoothingLoss(VOCAB, PAD, 0.1)
        args = (model, batches, batches[:1], loss_fn, optimizer, scheduler)
        if distributed:
            history = fit_distributed(*args, DistributedContext(), epochs=3, max_steps=7, progress=False, seed=5)
        else:
            history = fit(*args, epochs=3, max_steps=7, progress=False, seed=5)
        histories.append(history)
        weights.append([p.detach().clone() for p in model.parameters()])
    taught, support = histories
    assert taught["step"] == support["step"] == [3, 6, 7]
    assert taught["step_loss"] == support["step_loss"] and taught["val_loss"] == support["val_loss"]
    assert_close(weights[0], weights[1], rtol=0, atol=0)


def test_fit_distributed_resumes_at_start_epoch_and_calls_on_epoch_end():
    batches = [collate(pairs, PAD) for pairs in global_batches()]
    _ = torch.manual_seed(0)
    model = make_model(TransformerConfig(VOCAB, VOCAB, N=1, d_model=16, d_ff=32, h=2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1.0)
    seen = []
    history = fit_distributed(model, batches, batches[:1], LabelSmoothingLoss(VOCAB, PAD), optimizer, scheduler,
                              DistributedContext(), epochs=4, start_epoch=2, progress=False,
                              on_epoch_end=lambda epoch, h: seen.append((epoch, list(h["step"]))))
    assert history["epoch"] == [2, 3] and seen == [(2, [3]), (3, [3, 6])]
