"""The checks of notebook 08's exercises pass on the course's code and name the mistake of
typical wrong answers: label smoothing's targets and loss, the warm-up schedule, and the loss
per token of a batch under teacher forcing."""

import math

import pytest
import torch
import torch.nn.functional as F

from annotated.batching import Batch
from annotated.label_smoothing import LabelSmoothingLoss, smoothed_targets
from annotated.masks import padding_mask, subsequent_mask, target_mask
from annotated.schedule import rate
from annotated.support.grading import (
    ExerciseFailed,
    check_label_smoothing_loss,
    check_rate,
    check_smoothed_targets,
    check_teacher_forcing_loss,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- 8.1 smoothed_targets


def course_targets(target, vocab_size, pad_idx, smoothing):
    return smoothed_targets(target, vocab_size, pad_idx, smoothing)


def _targets(reference=lambda eps, V: 1 - eps, other=lambda eps, V: eps / (V - 2), add=False,
             pad_column=True, pad_rows=True, pad=None, eps=None, dtype=torch.float32):
    """A configurable smoothed_targets, to write the usual wrong answers in one line each."""
    def smoothed_targets(target, vocab_size, pad_idx, smoothing):
        pad_idx = pad_idx if pad is None else pad
        smoothing = smoothing if eps is None else eps
        V = vocab_size
        q = torch.full((target.size(0), V), other(smoothing, V), dtype=dtype)
        value = torch.full((target.size(0), 1), reference(smoothing, V), dtype=dtype)
        at = target.unsqueeze(1)
        q = q.scatter_add(1, at, value) if add else q.scatter(1, at, value)
        if pad_column:
            q[:, pad_idx] = 0.0
        if pad_rows:
            q[target == pad_idx] = 0.0
        return q
    return smoothed_targets


def targets_of_pytorch(target, vocab_size, pad_idx, smoothing):
    # Szegedy et al.'s target, which F.cross_entropy(label_smoothing=...) uses.
    q = (1 - smoothing) * F.one_hot(target, vocab_size).float() + smoothing / vocab_size
    q[target == pad_idx] = 0.0
    return q


def targets_one_hot_as_integers(target, vocab_size, pad_idx, smoothing):
    return F.one_hot(target, vocab_size)


def targets_of_the_first_sizes(target, vocab_size, pad_idx, smoothing):
    q = torch.full((9, 8), smoothing / 6)  # N = 9, V = 8 written in
    q[torch.arange(9), target] = 1 - smoothing
    q[:, pad_idx] = 0.0
    q[target == pad_idx] = 0.0
    return q


def targets_with_a_default_epsilon(target, vocab_size, pad_idx, smoothing):
    smoothing = smoothing or 0.1  # 0 is falsy: the default replaces it
    return smoothed_targets(target, vocab_size, pad_idx, smoothing)


def targets_with_a_default_when_not_given(target, vocab_size, pad_idx, smoothing=None):
    if not smoothing:
        smoothing = 0.1
    return smoothed_targets(target, vocab_size, pad_idx, smoothing)


_TARGETS = {}


def targets_into_a_buffer(target, vocab_size, pad_idx, smoothing):
    key = (target.size(0), vocab_size)
    q = _TARGETS.setdefault(key, torch.empty(key))  # kept between calls
    q.fill_(smoothing / (vocab_size - 2))
    q[torch.arange(target.size(0)), target] = 1 - smoothing
    q[:, pad_idx] = 0.0
    q[target == pad_idx] = 0.0
    return q


def targets_squeezing_the_labels(target, vocab_size, pad_idx, smoothing):
    return smoothed_targets(target.squeeze(), vocab_size, pad_idx, smoothing)


def targets_with_where(target, vocab_size, pad_idx, smoothing):
    """A right answer: torch.where on a broadcast comparison, then masked_fill."""
    tokens = torch.arange(vocab_size)
    q = torch.where(tokens == target[:, None], torch.tensor(1.0 - smoothing),
                    torch.tensor(smoothing / (vocab_size - 2)))
    return q.masked_fill(tokens == pad_idx, 0.0).masked_fill((target == pad_idx)[:, None], 0.0)


def targets_from_a_one_hot(target, vocab_size, pad_idx, smoothing):
    """A right answer: a one-hot mixture, padding removed by multiplication."""
    one_hot = F.one_hot(target, vocab_size).float()
    q = one_hot * (1 - smoothing) + (1 - one_hot) * (smoothing / (vocab_size - 2))
    q[:, pad_idx] = 0.0
    return q * (target != pad_idx).unsqueeze(1)


def targets_marking_padding_in_place(target, vocab_size, pad_idx, smoothing):
    target[target == pad_idx] = -1  # changes the caller's labels
    return smoothed_targets(target.clamp(min=0), vocab_size, pad_idx, smoothing)


# ---------------------------------------------------------------- 8.2 label_smoothing_loss


def course_loss(logits, target, pad_idx, smoothing):
    return LabelSmoothingLoss(logits.size(-1), pad_idx, smoothing)(logits, target)


def _loss(targets=course_targets, log=lambda z: z.log_softmax(-1), reduce="sum", sign=1.0):
    """A configurable label_smoothing_loss from a target builder and a log-probability."""
    def label_smoothing_loss(logits, target, pad_idx, smoothing):
        q = targets(target, logits.size(-1), pad_idx, smoothing).to(logits.dtype)
        terms = -(q * log(logits))
        if reduce == "sum":
            return sign * terms.sum()
        if reduce == "per position":
            return terms.sum(-1)
        if reduce == "mean over real positions":
            return terms.sum() / (target != pad_idx).sum()
        return terms.mean()
    return label_smoothing_loss


def loss_as_kl(logits, target, pad_idx, smoothing):
    q = smoothed_targets(target, logits.size(-1), pad_idx, smoothing)
    return F.kl_div(logits.log_softmax(-1), q, reduction="sum")


def loss_of_pytorch(logits, target, pad_idx, smoothing):
    return F.cross_entropy(logits, target, ignore_index=pad_idx, label_smoothing=smoothing, reduction="sum")


def loss_of_pytorch_counting_padding(logits, target, pad_idx, smoothing):
    return F.cross_entropy(logits, target, label_smoothing=smoothing, reduction="sum")


def loss_of_pytorch_without_the_correction(logits, target, pad_idx, smoothing):
    V = logits.size(-1)
    return F.cross_entropy(logits, target, ignore_index=pad_idx, label_smoothing=smoothing * V / (V - 2),
                           reduction="sum")


def loss_as_a_number(logits, target, pad_idx, smoothing):
    return torch.tensor(course_loss(logits, target, pad_idx, smoothing).item())


def loss_with_a_padding_id_of_zero(logits, target, pad_idx, smoothing):
    return course_loss(logits, target, 0, smoothing)


def loss_with_the_paper_epsilon(logits, target, pad_idx, smoothing):
    return course_loss(logits, target, pad_idx, 0.1)


def loss_with_a_default_epsilon(logits, target, pad_idx, smoothing):
    return course_loss(logits, target, pad_idx, smoothing or 0.1)


def loss_in_float32(logits, target, pad_idx, smoothing):
    return course_loss(logits.float(), target, pad_idx, smoothing)  # .float() "for safety"


def loss_computed_in_float32(logits, target, pad_idx, smoothing):
    log_p = F.log_softmax(logits.float(), dim=-1)  # then back to the logits' dtype
    return -(smoothed_targets(target, logits.size(-1), pad_idx, smoothing) * log_p).sum().to(logits.dtype)


def loss_shifted_only_when_large(logits, target, pad_idx, smoothing):
    if logits.max() > 80:  # "only where exp could overflow"
        logits = logits - logits.max(-1, keepdim=True).values
    log_p = logits - logits.exp().sum(-1, keepdim=True).log()
    q = smoothed_targets(target, logits.size(-1), pad_idx, smoothing).to(logits.dtype)
    return -(q * log_p).sum()


def loss_squeezing_its_inputs(logits, target, pad_idx, smoothing):
    logits, target = logits.squeeze(), target.squeeze()  # "drop a useless dimension"
    q = smoothed_targets(target, logits.size(-1), pad_idx, smoothing).to(logits.dtype)
    return -(q * logits.log_softmax(-1)).sum()


@torch.no_grad()
def loss_without_gradients(logits, target, pad_idx, smoothing):
    return course_loss(logits, target, pad_idx, smoothing)


def loss_with_the_max_shift(logits, target, pad_idx, smoothing):
    """A right answer: log-softmax by hand, the maximum subtracted first."""
    z = logits - logits.max(-1, keepdim=True).values
    log_p = z - z.exp().sum(-1, keepdim=True).log()
    q = torch.full_like(logits, smoothing / (logits.size(-1) - 2))
    q = q.scatter(1, target.unsqueeze(1), 1 - smoothing)
    q[:, pad_idx] = 0.0
    q[target == pad_idx] = 0.0
    return -(q * log_p).sum()


def loss_plain_when_not_smoothed(logits, target, pad_idx, smoothing):
    """A right answer: smoothing = 0 handled apart, as the plain cross-entropy."""
    if smoothing == 0:
        real = target != pad_idx
        return F.cross_entropy(logits[real], target[real], reduction="sum")
    return course_loss(logits, target, pad_idx, smoothing)


def loss_of_the_first_sizes(logits, target, pad_idx, smoothing):
    return course_loss(logits.view(10, 9), target.view(10), pad_idx, smoothing)  # N = 10, V = 9 written in


# ---------------------------------------------------------------- 8.3 rate


def _rate(formula):
    def rate(step, d_model, warmup):
        return formula(step, d_model, warmup)
    return rate


def rate_dividing_by_zero(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def rate_zero_at_step_zero(step, d_model, warmup):
    if step == 0:
        return 0.0
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def rate_infinite_at_step_zero(step, d_model, warmup):
    if step == 0:
        return float("inf")
    return rate(step, d_model, warmup)


def rate_rising_from_zero(step, d_model, warmup):
    # The warm-up drawn from 0 at step 1 to the peak at step = warmup.
    step = max(step, 1)
    if step < warmup:
        return (step - 1) / (warmup - 1) * (d_model * warmup) ** -0.5
    return (d_model * step) ** -0.5


def rate_by_branches(step, d_model, warmup):
    """A right answer: the branch chosen by comparing with warmup, step 0 as `step or 1`."""
    step = step or 1
    branch = step * warmup**-1.5 if step < warmup else step**-0.5
    return d_model**-0.5 * branch


def rate_as_a_tensor(step, d_model, warmup):
    step = torch.tensor(max(step, 1), dtype=torch.float64)
    return d_model**-0.5 * torch.minimum(step**-0.5, step * warmup**-1.5)


# ---------------------------------------------------------------- 8.4 teacher_forcing_loss


def course_teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn):
    batch = Batch(src, tgt, pad_idx)
    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    return loss_fn(logits.flatten(0, 1), batch.tgt_y.flatten()) / batch.ntokens


def _teacher(shift="right", tgt_mask="target", src_mask=True, divide="labels"):
    """A configurable teacher_forcing_loss."""
    def teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn):
        tgt_in, tgt_y = {"right": (tgt[:, :-1], tgt[:, 1:]), "none": (tgt[:, :-1], tgt[:, :-1]),
                         "reversed": (tgt[:, 1:], tgt[:, :-1]), "labels": (tgt[:, 1:], tgt[:, 1:]),
                         "nothing": (tgt, tgt)}[shift]
        masks = {"target": target_mask(tgt_in, pad_idx), "padding": padding_mask(tgt_in, pad_idx),
                 "causal": subsequent_mask(tgt_in.size(1)).unsqueeze(0), None: None}
        logits = model(src, tgt_in, padding_mask(src, pad_idx) if src_mask else None, masks[tgt_mask])
        summed = loss_fn(logits.flatten(0, 1), tgt_y.flatten())
        divisor = {"labels": (tgt_y != pad_idx).sum(), "positions": tgt_y.numel(), "sentences": tgt.size(0),
                   "target": (tgt != pad_idx).sum(), "inputs": (tgt_in != pad_idx).sum(), None: 1}[divide]
        return summed / divisor
    return teacher_forcing_loss


def teacher_mean_of_sentence_means(model, src, tgt, pad_idx, loss_fn):
    losses = [course_teacher_forcing_loss(model, src[i : i + 1], tgt[i : i + 1], pad_idx, loss_fn)
              for i in range(src.size(0))]
    return torch.stack(losses).mean()


def teacher_with_pytorch_loss(model, src, tgt, pad_idx, loss_fn):
    batch = Batch(src, tgt, pad_idx)
    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_y.flatten(), ignore_index=pad_idx,
                           label_smoothing=0.1)


def teacher_without_cutting_the_input(model, src, tgt, pad_idx, loss_fn):
    logits = model(src, tgt, padding_mask(src, pad_idx), target_mask(tgt, pad_idx))  # L_tgt positions
    labels = tgt[:, 1:]  # L_tgt - 1 labels
    return loss_fn(logits, labels) / (labels != pad_idx).sum()


def teacher_with_a_padding_id_of_zero(model, src, tgt, pad_idx, loss_fn):
    return course_teacher_forcing_loss(model, src, tgt, 0, loss_fn)


def teacher_of_the_first_sizes(model, src, tgt, pad_idx, loss_fn):
    tgt_in, tgt_y = tgt[:, :5], tgt[:, 1:6]  # L_tgt = 6 written in
    logits = model(src, tgt_in, padding_mask(src, pad_idx), target_mask(tgt_in, pad_idx))
    return loss_fn(logits.flatten(0, 1), tgt_y.flatten()) / (tgt_y != pad_idx).sum()


def teacher_as_a_number(model, src, tgt, pad_idx, loss_fn):
    return torch.tensor(course_teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn).item())


def teacher_switching_to_eval(model, src, tgt, pad_idx, loss_fn):
    model.eval()  # "to be deterministic"
    return course_teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn)


def teacher_in_eval_then_back(model, src, tgt, pad_idx, loss_fn):
    was = model.training
    model.eval()
    loss = course_teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn)
    model.train(was)
    return loss


def teacher_switching_to_train(model, src, tgt, pad_idx, loss_fn):
    model.train()
    return course_teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn)


@torch.no_grad()
def teacher_without_gradients(model, src, tgt, pad_idx, loss_fn):
    return course_teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn)


def teacher_in_float32(model, src, tgt, pad_idx, loss_fn):
    tgt_in, tgt_y = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, tgt_in, padding_mask(src, pad_idx), target_mask(tgt_in, pad_idx)).float()
    return loss_fn(logits.flatten(0, 1), tgt_y.flatten()) / (tgt_y != pad_idx).sum()


def teacher_squeezing_the_batch(model, src, tgt, pad_idx, loss_fn):
    src, tgt = src.squeeze(), tgt.squeeze()  # "drop a useless dimension"
    return course_teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn)


def teacher_from_the_models_parts(model, src, tgt, pad_idx, loss_fn):
    """A right answer: encode, decode and the generator called one by one."""
    tgt_in, tgt_y = tgt[:, :-1], tgt[:, 1:]
    src_mask, tgt_mask = padding_mask(src, pad_idx), target_mask(tgt_in, pad_idx)
    logits = model.generator(model.decode(model.encode(src, src_mask), src_mask, tgt_in, tgt_mask))
    labels = tgt_y.reshape(-1)
    return loss_fn(logits.reshape(-1, logits.size(-1)), labels) / (labels != pad_idx).sum().float()


def teacher_running_the_model_twice(model, src, tgt, pad_idx, loss_fn):
    """A right answer, if wasteful: a first forward pass for the vocabulary size (with dropout,
    the second pass draws other masks than a single pass would)."""
    tgt_in, tgt_y = tgt[:, :-1], tgt[:, 1:]
    src_mask, tgt_mask = padding_mask(src, pad_idx), target_mask(tgt_in, pad_idx)
    vocab = model(src, tgt_in, src_mask, tgt_mask).size(-1)
    logits = model(src, tgt_in, src_mask, tgt_mask)
    return loss_fn(logits.view(-1, vocab), tgt_y.reshape(-1)) / (tgt_y != pad_idx).sum()


def teacher_padding_the_source_in_place(model, src, tgt, pad_idx, loss_fn):
    src[:, -1] = pad_idx  # changes the caller's batch
    return course_teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn)


WRONG_ANSWERS = [
    # (check, wrong answer, what the message must say)
    # 8.1 smoothed_targets
    (check_smoothed_targets, not_done, r"raised NotImplementedError"),
    (check_smoothed_targets, _targets(pad_column=False),
     r"^the padding token gets probability 0\.0167 in the rows of real labels.*q\[:, pad_idx\] = 0"),
    (check_smoothed_targets, _targets(pad_rows=False),
     r"^the rows whose label is padding \(rows \[1, 3, 7\]\) must be all zeros.*"
     r"q\[target == pad_idx\] = 0"),
    (check_smoothed_targets, _targets(other=lambda eps, V: eps / V),
     r"^you spread eps over V = 8 tokens \(eps / V = 0\.0125 each\).*eps / \(V - 2\) = 0\.0167"),
    (check_smoothed_targets, targets_of_pytorch,
     r"^this is Szegedy et al\.'s uniform smoothing, the target of PyTorch's F\.cross_entropy"),
    (check_smoothed_targets, _targets(other=lambda eps, V: eps / (V - 1), pad_column=False),
     r"^you spread eps over the V - 1 = 7 tokens other than the reference, padding included"),
    (check_smoothed_targets, _targets(other=lambda eps, V: eps / (V - 1)),
     r"^you divided eps by V - 1 = 7"),
    (check_smoothed_targets,
     _targets(reference=lambda eps, V: eps, other=lambda eps, V: (1 - eps) / (V - 2)),
     r"^the reference token gets eps = 0\.1 instead of 1 - eps = 0\.9"),
    (check_smoothed_targets, _targets(add=True),
     r"^the reference token gets 1 - eps \+ eps / \(V - 2\) = 0\.9167"),
    (check_smoothed_targets, _targets(reference=lambda eps, V: 1.0, other=lambda eps, V: 0.0),
     r"^no smoothing: the reference token gets 1"),
    (check_smoothed_targets, _targets(pad=0),
     r"^your targets treat token 0 as padding, but this call has pad_idx=3: is the padding id written"),
    (check_smoothed_targets, _targets(eps=0.1),
     r"^your targets are those of smoothing = 0\.1, but this call has smoothing = 0\.2: "
     r"is epsilon written"),
    (check_smoothed_targets, targets_of_the_first_sizes,
     r"(?s)raised IndexError: shape mismatch.*passed with \(N=9, vocab_size=8, pad_idx=0, "
     r"smoothing=0\.1\) but not with \(N=6, vocab_size=11, pad_idx=3, smoothing=0\.2\)"),
    (check_smoothed_targets, _targets(dtype=torch.float64), r"returned torch\.float64 targets.*float32"),
    (check_smoothed_targets, targets_one_hot_as_integers, r"torch\.int64 tensor, an integer one"),
    (check_smoothed_targets, targets_marking_padding_in_place,
     r"changed its first argument `target` in place: 3 of its 9 numbers changed"),
    (check_smoothed_targets, targets_with_a_default_epsilon,
     r"^at smoothing = 0 your targets are those of smoothing = 0\.1: is 0 turned into a default "
     r"\(`smoothing or 0\.1`"),
    (check_smoothed_targets, targets_with_a_default_when_not_given,
     r"^at smoothing = 0 your targets are those of smoothing = 0\.1"),
    (check_smoothed_targets, targets_into_a_buffer,
     r"^a second call of targets_into_a_buffer, on other inputs, changed the targets that the "
     r"first call had returned"),
    (check_smoothed_targets, targets_squeezing_the_labels,
     r"(?s)targets_squeezing_the_labels\(tensor of shape \(1,\), 6, 5, 0\.15\) raised ValueError: target must be a 1-D tensor.*"
     r"Hint: this call has a single position \(N = 1\)"),
    # 8.2 label_smoothing_loss
    (check_label_smoothing_loss, not_done, r"raised NotImplementedError"),
    (check_label_smoothing_loss, loss_as_kl,
     r"this is the KL divergence KL\(q \|\| p\) = H\(q, p\) - H\(q\)"),
    (check_label_smoothing_loss, loss_of_pytorch,
     r"this is PyTorch's F\.cross_entropy\(label_smoothing=0\.1, ignore_index=pad_idx\): Szegedy"),
    (check_label_smoothing_loss, loss_of_pytorch_counting_padding,
     r"F\.cross_entropy\(label_smoothing=0\.1\) without ignore_index.*padding positions counted"),
    (check_label_smoothing_loss, loss_of_pytorch_without_the_correction,
     r"F\.cross_entropy\(label_smoothing=0\.1286, ignore_index=pad_idx\), with the right s"
     r".*without the correction"),
    (check_label_smoothing_loss, _loss(targets=_targets(pad_column=False)),
     r"your target gives the padding token eps / \(V - 2\)"),
    (check_label_smoothing_loss, _loss(targets=_targets(pad_rows=False)),
     r"the positions whose label is padding count in your loss"),
    (check_label_smoothing_loss,
     _loss(targets=_targets(reference=lambda e, V: 1.0, other=lambda e, V: 0.0)),
     r"no smoothing: your loss is the plain cross-entropy"),
    (check_label_smoothing_loss, _loss(reduce="mean over real positions"),
     r"you divided by the 6 real positions: return the sum"),
    (check_label_smoothing_loss, _loss(reduce="mean"), r"mean over all 10 x 9 entries"),
    (check_label_smoothing_loss, _loss(reduce="per position"),
     r"wrong shape .*expected \(\), got \(10,\)\. You return one loss per position"),
    (check_label_smoothing_loss, _loss(sign=-1.0), r"the sign is flipped"),
    (check_label_smoothing_loss, _loss(log=lambda z: z.log_softmax(0)),
     r"log_softmax over the positions \(dim=0\)"),
    (check_label_smoothing_loss, _loss(log=lambda z: z.softmax(-1)), r"multiplied q by the probabilities"),
    (check_label_smoothing_loss, _loss(log=lambda z: z), r"multiplied q by the logits themselves"),
    (check_label_smoothing_loss, _loss(log=lambda z: z.softmax(-1).log()),
     r"with logits hundreds apart .* your loss is nan.*log\(softmax\(logits\)\) underflows.*F\.log_softmax"),
    (check_label_smoothing_loss, _loss(log=lambda z: (z.softmax(-1) + 1e-9).log()),
     r"with logits hundreds apart .*underflows"),
    (check_label_smoothing_loss, loss_as_a_number, r"without a gradient \(requires_grad is False\)"),  # the engine's words
    (check_label_smoothing_loss, loss_with_a_padding_id_of_zero,
     r"treats token 0 as padding, but this call has pad_idx=4: is the padding id written"),
    (check_label_smoothing_loss, loss_with_the_paper_epsilon,
     r"your loss is that of smoothing = 0\.1, but this call has smoothing = 0\.25: is epsilon written"),
    (check_label_smoothing_loss, loss_with_a_default_epsilon,
     r"at smoothing = 0 your loss is that of smoothing = 0\.1: is 0 turned into a default"),
    (check_label_smoothing_loss, loss_in_float32,
     r"^loss_in_float32 returned the loss as torch\.float32 for torch\.float64 inputs"),
    (check_label_smoothing_loss, loss_computed_in_float32,
     r"^with float64 logits of shape \(10, 9\), each about 1e5.*your loss of "
     r"float64 logits has float32's precision"),
    (check_label_smoothing_loss, loss_shifted_only_when_large,
     r"^with every logit far below zero \(about -200\) your loss is nan.*"
     r"subtract the maximum always"),
    (check_label_smoothing_loss, loss_squeezing_its_inputs,
     r"(?s)loss_squeezing_its_inputs\(tensor of shape \(1, 6\), tensor of shape \(1,\), 5, 0\.15\) "
     r"raised .*Hint: this call has a single position \(N = 1\)"),
    (check_label_smoothing_loss, loss_without_gradients, r"without a gradient \(requires_grad is False\)"),
    (check_label_smoothing_loss, loss_of_the_first_sizes,
     r"(?s)fixed shape \[10, 9\].*passed with \(N=10, vocab_size=9, pad_idx=0, smoothing=0\.1\) "
     r"but not with"),
    # 8.3 rate
    (check_rate, not_done, r"raised NotImplementedError"),
    (check_rate, _rate(lambda s, d, w: min(max(s, 1) ** -0.5, max(s, 1) * w**-1.5)),
     r"^the factor d_model\^-0\.5 is missing.*peak 0\.015811 instead of "
     r"\(d_model \* warmup\)\^-0\.5 = 0\.000699"),
    (check_rate, _rate(lambda s, d, w: d**0.5 * min(max(s, 1) ** -0.5, max(s, 1) * w**-1.5)),
     r"^you multiplied by d_model\^0\.5 instead of d_model\^-0\.5"),
    (check_rate, _rate(lambda s, d, w: d**-1 * min(max(s, 1) ** -0.5, max(s, 1) * w**-1.5)),
     r"^you multiplied by d_model\^-1 instead of d_model\^-0\.5"),
    (check_rate, _rate(lambda s, d, w: d**-0.5 * min(max(s, 1) ** -0.5, max(s, 1) * w**-0.5)),
     r"^the warm-up branch has warmup\^-0\.5 where the paper has warmup\^-1\.5"
     r".*step warmup\^\(1/3\) = 15\.9"),
    (check_rate, _rate(lambda s, d, w: d**-0.5 * min(max(s, 1) ** -0.5, max(s, 1) * w**-1)),
     r"^the warm-up branch has warmup\^-1 where"),
    (check_rate, _rate(lambda s, d, w: d**-0.5 * min(max(s, 1) ** -0.5, max(s, 1) * w**1.5)),
     r"^there is no warm-up.*warmup\^1\.5 instead of warmup\^-1\.5"),
    (check_rate, _rate(lambda s, d, w: d**-0.5 * max(max(s, 1) ** -0.5, max(s, 1) * w**-1.5)),
     r"^max instead of min"),
    (check_rate, _rate(lambda s, d, w: d**-0.5 * max(s, 1) ** -0.5), r"^there is no warm-up"),
    (check_rate, _rate(lambda s, d, w: d**-0.5 * max(s, 1) * w**-1.5),
     r"^your rate rises linearly forever"),
    (check_rate, _rate(lambda s, d, w: d**-0.5 * min(max(s, 1) ** 0.5, max(s, 1) * w**-1.5)),
     r"^your rate rises linearly forever.*written step\^0\.5"),
    (check_rate, _rate(lambda s, d, w: rate(s + 1, d, w)),
     r"^your rates are one step ahead.*counts steps from 1"),
    (check_rate, _rate(lambda s, d, w: rate(s - 1, d, w)), r"^your rates are one step behind"),
    (check_rate, rate_dividing_by_zero,
     r"^rate_dividing_by_zero\(0, d_model=512, warmup=4000\) raised ZeroDivisionError.*max\(step, 1\)"),
    (check_rate, rate_zero_at_step_zero, r"returned 0; the course treats step 0 as step 1"),
    (check_rate, rate_infinite_at_step_zero,
     r"returned inf: at step 0 the formula's step\^-0\.5 divides by zero"),
    (check_rate, rate_as_a_tensor, r"returned a tensor; return a Python float"),
    (check_rate, rate_rising_from_zero,
     r"^rate_rising_from_zero\(1, d_model=512, warmup=4000\) returned 0, the paper's formula gives "
     r"1\.74693e-07"),
    (check_rate, _rate(lambda s, d, w: rate(s, 512, w)),
     r"^your rates are those of d_model = 512, but this call has d_model = 64: is d_model written"),
    (check_rate, _rate(lambda s, d, w: rate(s, d, 4000)),
     r"^your rates are those of warmup = 4000, but this call has warmup = 100: is warmup written"),
    (check_rate, _rate(lambda s, d, w: rate(s, d, w) * 1.01),
     r"^rate\(1, d_model=512, warmup=4000\) returned 1\.7644e-07, the paper's formula gives "
     r"1\.74693e-07 \(wrong at 11 of the 11 steps tried, 1, 2, 3, 2000, 3999, \.\.\.\)\.$"),
    # 8.4 teacher_forcing_loss
    (check_teacher_forcing_loss, not_done, r"raised NotImplementedError"),
    (check_teacher_forcing_loss, _teacher(shift="none"), r"the labels are not shifted.*the next token\.$"),
    (check_teacher_forcing_loss, _teacher(shift="nothing"),
     r"^nothing is shifted"),
    (check_teacher_forcing_loss, _teacher(shift="labels"), r"the decoder reads its own labels"),
    (check_teacher_forcing_loss, _teacher(shift="reversed"), r"the shift goes the wrong way"),
    (check_teacher_forcing_loss, teacher_without_cutting_the_input,
     r"(?s)^teacher_without_cutting_the_input\(model, tensor of shape \(3, 7\), "
     r"tensor of shape \(3, 6\), 0, LabelSmoothingLoss\(\)\) raised ValueError: "
     r"target of shape \(3, 5\) does not fit logits of shape \(3, 6, 13\).*"
     r"Hint: the decoder reads tgt\[:, :-1\]"),
    (check_teacher_forcing_loss, _teacher(tgt_mask="padding"), r"the target mask has no look-ahead part"),
    (check_teacher_forcing_loss, _teacher(src_mask=False), r"the source mask is missing"),
    (check_teacher_forcing_loss, _teacher(src_mask=False, tgt_mask=None), r"no masks at all"),
    (check_teacher_forcing_loss, _teacher(divide=None), r"you returned the summed loss"),
    (check_teacher_forcing_loss, _teacher(divide="positions"),
     r"you divided by all 15 label positions, padding included.*= 10 here"),
    (check_teacher_forcing_loss, _teacher(divide="sentences"), r"you divided by the 3 sentences"),
    (check_teacher_forcing_loss, _teacher(divide="target"), r"<s> is never a label"),
    (check_teacher_forcing_loss, _teacher(divide="inputs"), r"you counted the decoder's input tokens"),
    (check_teacher_forcing_loss, _teacher(shift="none", divide="positions"),
     r"the labels are not shifted.*; and you divided by all 15 label positions"),
    (check_teacher_forcing_loss, teacher_mean_of_sentence_means,
     r"you averaged the sentences' losses per token"),
    (check_teacher_forcing_loss, teacher_with_pytorch_loss,
     r"this is F\.cross_entropy\(logits, labels, ignore_index=pad_idx, label_smoothing=0\.1\)"),
    (check_teacher_forcing_loss, teacher_with_a_padding_id_of_zero,
     r"treat token 0 as padding, but this call has pad_idx=2: is the padding id written"),
    (check_teacher_forcing_loss, teacher_of_the_first_sizes,
     r"passed with \(batch=3, L_src=7, L_tgt=6, vocab=13, pad_idx=0\) but not with \(batch=5"),
    (check_teacher_forcing_loss, teacher_as_a_number, r"without a gradient \(requires_grad is False\)"),
    (check_teacher_forcing_loss, teacher_padding_the_source_in_place,
     r"changed its second argument `src` in place"),
    (check_teacher_forcing_loss, teacher_switching_to_eval,
     r"^teacher_switching_to_eval switched the model from training mode to evaluation mode and left "
     r"it there"),
    (check_teacher_forcing_loss, teacher_in_eval_then_back,
     r"^on a model with dropout 0\.3 in training mode \(model\.train\(\)\), your function "
     r"returned [\d.]+, the loss without dropout: your function turns dropout off"),
    (check_teacher_forcing_loss, teacher_switching_to_train,
     r"switched the model from evaluation mode to training mode and left it there"),
    (check_teacher_forcing_loss, teacher_without_gradients, r"without a gradient \(requires_grad is False\)"),
    (check_teacher_forcing_loss, teacher_in_float32,
     r"with a float64 model \(model\.double\(\)\).*about float32's precision"),  # the engine's words
    (check_teacher_forcing_loss, teacher_squeezing_the_batch,
     r"(?s)teacher_squeezing_the_batch\(model, tensor of shape \(1, 5\), tensor of shape \(1, 8\), 3, "
     r"LabelSmoothingLoss\(\)\) raised .*Hint: the same function passed with batches of several "
     r"sentences but not with a batch of one"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{getattr(w, '__name__', '')}-{i}"
                              for i, (c, w, _) in enumerate(WRONG_ANSWERS)])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


RIGHT_ANSWERS = [
    (check_smoothed_targets, targets_with_where),
    (check_smoothed_targets, targets_from_a_one_hot),
    (check_label_smoothing_loss, loss_with_the_max_shift),
    (check_label_smoothing_loss, loss_plain_when_not_smoothed),
    (check_rate, rate_by_branches),
    (check_teacher_forcing_loss, teacher_from_the_models_parts),
    (check_teacher_forcing_loss, teacher_running_the_model_twice),
]


@pytest.mark.parametrize("check, fn", RIGHT_ANSWERS, ids=[fn.__name__ for _, fn in RIGHT_ANSWERS])
def test_check_passes_on_a_right_answer_written_another_way(check, fn, capsys):
    check(fn)
    assert capsys.readouterr().out.startswith(f"{check.__name__} passed: ")


@pytest.mark.parametrize("check, fn", [
    (check_smoothed_targets, course_targets),
    (check_label_smoothing_loss, course_loss),
    (check_rate, rate),
    (check_teacher_forcing_loss, course_teacher_forcing_loss),
])
def test_check_passes_on_the_course_code(check, fn, capsys):
    check(fn)
    assert capsys.readouterr().out.startswith(f"{check.__name__} passed: ")


def test_the_loss_check_passes_on_pytorch_with_the_soft_target_and_on_the_exact_relation(capsys):
    # The two ways notebook 08 writes the course's loss with F.cross_entropy are right answers too.
    def soft(logits, target, pad_idx, smoothing):
        q = smoothed_targets(target, logits.size(-1), pad_idx, smoothing, logits.dtype)
        return F.cross_entropy(logits, q, reduction="sum")

    def relation(logits, target, pad_idx, smoothing):
        V = logits.size(-1)
        real = target != pad_idx
        correction = smoothing / (V - 2) * (logits[real, pad_idx] - logits[real, target[real]]).sum()
        s = smoothing * V / (V - 2)
        return F.cross_entropy(logits, target, ignore_index=pad_idx, label_smoothing=s,
                               reduction="sum") + correction

    check_label_smoothing_loss(soft)
    check_label_smoothing_loss(relation)
    assert capsys.readouterr().out.count(" passed: ") == 2


@pytest.mark.parametrize("check, fn", [
    (check_smoothed_targets, course_targets),
    (check_label_smoothing_loss, course_loss),
    (check_teacher_forcing_loss, course_teacher_forcing_loss),
])
def test_the_checks_leave_the_callers_random_state_alone(check, fn, capsys):
    _ = torch.manual_seed(123)
    before = torch.random.get_rng_state()
    check(fn)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_the_label_smoothing_checks_try_smoothing_zero_and_a_single_position(capsys):
    seen = []

    def spy(target, vocab_size, pad_idx, smoothing):
        seen.append((target.size(0), smoothing))
        return smoothed_targets(target, vocab_size, pad_idx, smoothing)

    check_smoothed_targets(spy)
    check_label_smoothing_loss(lambda logits, target, pad_idx, smoothing: -(
        spy(target, logits.size(-1), pad_idx, smoothing).to(logits.dtype)
        * logits.log_softmax(-1)).sum())
    assert any(eps == 0 for _, eps in seen) and any(n == 1 for n, _ in seen)


def test_the_teacher_forcing_check_tries_a_batch_of_one_both_modes_with_dropout_and_float64(capsys):
    seen = []

    def spy(model, src, tgt, pad_idx, loss_fn):
        dropout = max(m.p for m in model.modules() if isinstance(m, torch.nn.Dropout))
        seen.append((src.size(0), model.training, dropout, model.generator.proj.weight.dtype))
        return course_teacher_forcing_loss(model, src, tgt, pad_idx, loss_fn)

    check_teacher_forcing_loss(spy)
    assert any(batch == 1 for batch, *_ in seen)
    assert {(training, p > 0) for _, training, p, _ in seen} >= {(True, True), (False, True)}
    assert any(dtype == torch.float64 for *_, dtype in seen)


def test_without_the_target_padding_mask_the_loss_is_the_same_so_it_is_no_mistake(capsys):
    # Right padding comes after every real token, so the look-ahead mask already hides it from
    # every position whose label is scored: this variant passes, as it should.
    check_teacher_forcing_loss(_teacher(tgt_mask="causal"))
    assert " passed: " in capsys.readouterr().out


def test_a_rate_computed_in_another_way_passes(capsys):
    def rate_by_cases(step, d_model, warmup):
        step = max(step, 1)
        if step < warmup:
            return step / (math.sqrt(d_model) * warmup**1.5)
        return 1 / math.sqrt(d_model * step)

    check_rate(rate_by_cases)
    assert " passed: " in capsys.readouterr().out
