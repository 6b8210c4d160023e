"""The training loop: device choice, loss per token, gradient accumulation, clipping, budgets."""

import math

import pytest
import torch
from torch.testing import assert_close

from annotated.batching import Batch
from annotated.label_smoothing import LabelSmoothingLoss
from annotated.model import TransformerConfig, make_model
from annotated.schedule import make_optimizer
from annotated.support import guarded_training as guarded
from annotated.training import choose_device, evaluate_loss, fit, train_epoch, train_step

PAD, BOS, EOS, VOCAB = 0, 1, 2, 13


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def examples(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """Random (source, target) pairs of different lengths, wrapped in <s> ... </s>."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        src = torch.randint(4, VOCAB, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist()
        tgt = torch.randint(4, VOCAB, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist()
        pairs.append(([BOS, *src, EOS], [BOS, *tgt, EOS]))
    return pairs


def make_batch(pairs) -> Batch:
    """Pad to the longest source and target (the tests do not rely on annotated.batching.collate)."""
    def pad(seqs):
        width = max(len(s) for s in seqs)
        return torch.tensor([s + [PAD] * (width - len(s)) for s in seqs])
    return Batch(pad([s for s, _ in pairs]), pad([t for _, t in pairs]), PAD)


def tiny_model(seed: int = 0, dropout: float = 0.0):
    _ = torch.manual_seed(seed)
    return make_model(TransformerConfig(VOCAB, VOCAB, N=1, d_model=16, d_ff=32, h=2, dropout=dropout))


def constant_sgd(model, lr: float = 1.0):
    """SGD with a constant rate: unlike Adam, its update shows the gradient's scale."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1.0)


def record_gradients(optimizer) -> list[list[torch.Tensor]]:
    """The gradients each optimizer.step() sees, captured just before the update."""
    seen = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append(
        [p.grad.clone() for group in opt.param_groups for p in group["params"]]))
    return seen


def test_choose_device_picks_the_cpu_on_a_machine_without_gpu():
    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("this machine has a GPU; choose_device would rightly pick it")
    assert choose_device() == torch.device("cpu")


def test_returned_loss_is_the_summed_loss_divided_by_the_number_of_target_tokens():
    model, loss_fn = tiny_model(), LabelSmoothingLoss(VOCAB, PAD, 0.1)
    batches = [make_batch(examples(4, seed)) for seed in range(3)]
    with torch.no_grad():
        summed = sum(loss_fn(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask), b.tgt_y).item() for b in batches)
    ntokens = sum(b.ntokens for b in batches)
    assert ntokens < sum(b.tgt_y.numel() for b in batches)  # padding exists and is not counted
    optimizer, scheduler = constant_sgd(model, lr=0.0)  # no change: every batch sees the same weights
    loss = train_epoch(model, batches, loss_fn, optimizer, scheduler, progress=False)
    assert loss == pytest.approx(summed / ntokens, rel=1e-5)
    assert evaluate_loss(model, batches, loss_fn) == pytest.approx(summed / ntokens, rel=1e-5)


@pytest.mark.parametrize("k", [2, 3])
def test_k_accumulated_micro_batches_give_the_gradient_and_update_of_one_batch_of_their_union(k):
    pairs = examples(3 * k, seed=7)
    micro = [make_batch(pairs[3 * i : 3 * i + 3]) for i in range(k)]
    union = [make_batch(pairs)]
    assert len({b.ntokens for b in micro}) > 1  # unequal token counts: averaging the means would be wrong
    loss_fn = LabelSmoothingLoss(VOCAB, PAD, 0.1)
    results = []
    for batches, accum_steps in [(micro, k), (union, 1)]:
        model = tiny_model()
        optimizer, scheduler = constant_sgd(model)
        grads = record_gradients(optimizer)
        loss = train_epoch(model, batches, loss_fn, optimizer, scheduler, accum_steps=accum_steps, progress=False)
        results.append((grads, list(model.parameters()), loss))
    (grads_k, params_k, loss_k), (grads_1, params_1, loss_1) = results
    assert len(grads_k) == len(grads_1) == 1  # one update each
    assert_close(grads_k[0], grads_1[0], rtol=1e-5, atol=1e-6)
    assert_close(params_k, params_1, rtol=1e-5, atol=1e-6)
    assert loss_k == pytest.approx(loss_1, rel=1e-5)


def test_clipping_bounds_the_global_gradient_norm():
    batches = [make_batch(examples(6, seed=3))]
    loss_fn = LabelSmoothingLoss(VOCAB, PAD, 0.1)
    norms = {}
    for clip in [None, 0.01]:
        model = tiny_model()
        optimizer, scheduler = constant_sgd(model)
        grads = record_gradients(optimizer)
        train_epoch(model, batches, loss_fn, optimizer, scheduler, clip=clip, progress=False)
        norms[clip] = math.sqrt(sum(float(g.pow(2).sum()) for g in grads[0]))
    assert norms[None] > 0.1  # the unclipped gradient is much larger than the bound...
    assert norms[0.01] == pytest.approx(0.01, rel=1e-4)  # ...and clipping rescales it to the bound


def test_progress_bar_shows_loss_tokens_per_second_and_learning_rate(capsys):
    model = tiny_model()
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup=10)
    train_epoch(model, [make_batch(examples(4, seed=1))], LabelSmoothingLoss(VOCAB, PAD), optimizer, scheduler)
    err = capsys.readouterr().err
    assert "loss=" in err and "tok/s" in err and "lr=7.91e-03" in err  # rate(1) = 16^-0.5 * 10^-1.5


def test_fit_stops_at_max_steps_and_records_the_history():
    model = tiny_model()
    loss_fn = LabelSmoothingLoss(VOCAB, PAD, 0.1)
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup=10)
    train = [make_batch(examples(4, seed)) for seed in range(5)]
    val = [make_batch(examples(4, 100))]
    history = fit(model, train, val, loss_fn, optimizer, scheduler, epochs=10, max_steps=7, progress=False)
    assert scheduler.last_epoch == 7
    assert history["epoch"] == [0, 1] and history["step"] == [5, 7]
    assert len(history["step_loss"]) == 7 and len(history["val_loss"]) == 2
    assert history["val_loss"][1] < history["val_loss"][0]  # it learns something


@pytest.mark.parametrize("budget, message", [
    ({"max_minutes": 0}, "max_minutes must be a finite number > 0"), ({"max_steps": 0}, "max_steps must be a positive"),
    ({"max_steps": -5}, "max_steps must be a positive"), ({"epochs": -1}, "epochs must be a positive"),
    ({"accum_steps": 0}, "accum_steps must be a positive"), ({"accum_steps": -1}, "accum_steps must be a positive"),
])
def test_a_budget_that_allows_no_update_is_an_error_before_any_update(budget, message):
    model = tiny_model()
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup=10)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=message):  # fit behind its checks
        guarded.fit(model, [make_batch(examples(4, 0))], [make_batch(examples(4, 1))], LabelSmoothingLoss(VOCAB, PAD),
                    optimizer, scheduler, **{"epochs": 3, **budget}, progress=False)
    assert scheduler.last_epoch == 0
    assert_close(list(model.parameters()), before, rtol=0, atol=0)


def test_evaluate_loss_turns_dropout_off_and_changes_nothing():
    model = tiny_model(dropout=0.5)
    batches = [make_batch(examples(4, 2))]
    before = [p.detach().clone() for p in model.parameters()]
    loss_fn = LabelSmoothingLoss(VOCAB, PAD)
    first, second = evaluate_loss(model, batches, loss_fn), evaluate_loss(model, batches, loss_fn)
    assert first == second  # no dropout noise
    assert_close(list(model.parameters()), before, rtol=0, atol=0)


def test_train_step_divides_the_summed_loss_by_the_divisor_it_is_given():
    # Doubling the divisor halves the gradient the optimizer sees.
    batches = [make_batch(examples(4, seed=5)), make_batch(examples(3, seed=6))]
    seen = {}
    for divisor in (10.0, 20.0):
        model = tiny_model()
        optimizer, scheduler = constant_sgd(model, lr=0.1)
        grads = record_gradients(optimizer)
        summed = train_step(model, batches, LabelSmoothingLoss(VOCAB, PAD, 0.1), optimizer, scheduler, divisor)
        assert summed > 0 and scheduler.last_epoch == 1 and len(grads) == 1  # one update for both batches
        seen[divisor] = grads[0]
    assert_close([2 * g for g in seen[20.0]], seen[10.0], rtol=1e-5, atol=1e-7)
    assert not torch.allclose(seen[20.0][0], seen[10.0][0])


def test_the_guarded_loop_checks_accum_steps_and_then_trains_as_the_taught_one():
    batches = [make_batch(examples(4, seed)) for seed in range(4)]
    with pytest.raises(ValueError, match="accum_steps must be a positive integer, got 0"):
        model = tiny_model()
        guarded.train_epoch(model, batches, LabelSmoothingLoss(VOCAB, PAD), *make_optimizer(model, 16, 10),
                            accum_steps=0, progress=False)
    losses = []
    for train in (train_epoch, guarded.train_epoch):
        model = tiny_model()
        losses.append(train(model, batches, LabelSmoothingLoss(VOCAB, PAD), *make_optimizer(model, 16, 10),
                            accum_steps=2, progress=False))
    assert losses[0] == losses[1]
