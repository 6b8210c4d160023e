"""Notebook 03's checks: they pass on the course's masks and shift, and name the mistake of
each typical wrong answer (tests/test_exercises.py collects WRONG_ANSWERS too)."""

import functools

import pytest
import torch
import torch.nn as nn

from annotated.batching import Batch
from annotated.masks import padding_mask, subsequent_mask, target_mask
from annotated.support.grading import (
    ExerciseFailed,
    check_decoder_input_and_labels,
    check_padding_mask,
    check_subsequent_mask,
    check_target_mask,
)
from annotated.support.grading import masking


def course_shift(tgt, pad_idx):
    batch = Batch(tgt, tgt, pad_idx)
    return batch.tgt_in, batch.tgt_y, batch.tgt_mask


@pytest.mark.parametrize("check, fn", [
    (check_padding_mask, padding_mask),
    (check_subsequent_mask, subsequent_mask),
    (check_target_mask, target_mask),
    (check_decoder_input_and_labels, course_shift),
])
def test_check_passes_on_the_course_code(check, fn, capsys):
    check(fn)
    out = capsys.readouterr().out
    assert out.count(" passed: ") == 1 and out.startswith(f"{check.__name__} passed: ")


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- wrong padding masks


def padding_hard_coded_zero(tokens, pad_idx):
    return (tokens != 0).unsqueeze(1)


def padding_hard_coded_shape(tokens, pad_idx):
    return (tokens != pad_idx).view(3, 1, 6)  # the first sizes the check runs


def padding_additive(tokens, pad_idx):
    return torch.zeros(tokens.shape).masked_fill(tokens == pad_idx, float("-inf")).unsqueeze(1)


# ---------------------------------------------------------------- wrong look-ahead masks


def _triangle(part, diagonal=0, dtype=torch.bool):
    def subsequent_mask(size, device=None):
        return getattr(torch.ones(size, size, dtype=dtype, device=device), part)(diagonal)
    return subsequent_mask


def look_ahead_without_device(size):
    return torch.ones(size, size, dtype=torch.bool).tril()


def look_ahead_ignoring_the_device(size, device=None):
    return torch.ones(size, size, dtype=torch.bool).tril()


def look_ahead_hard_coded(size, device=None):
    return torch.ones(5, 5, dtype=torch.bool, device=device).tril()


# ---------------------------------------------------------------- wrong target masks


def _target(combine=lambda keys, causal: keys & causal, causal=None):
    def target_mask(tokens, pad_idx):
        L = tokens.size(-1)
        look_ahead = subsequent_mask(L) if causal is None else causal(L)
        return combine(padding_mask(tokens, pad_idx), look_ahead)
    return target_mask


def target_on_the_cpu(tokens, pad_idx):
    return padding_mask(tokens, pad_idx) & subsequent_mask(tokens.size(-1))  # no device


def target_hard_coded_pad(tokens, pad_idx):
    return target_mask(tokens, 0)


def target_hard_coded_length(tokens, pad_idx):
    return padding_mask(tokens, pad_idx) & subsequent_mask(6, tokens.device)


# ---------------------------------------------------------------- wrong shifts


def _shift(tgt_in=lambda t: t[:, :-1], tgt_y=lambda t: t[:, 1:], mask=None):
    def decoder_input_and_labels(tgt, pad_idx):
        x, y = tgt_in(tgt), tgt_y(tgt)
        return x, y, target_mask(x, pad_idx) if mask is None else mask(tgt, x, y, pad_idx)
    return decoder_input_and_labels


def shift_with_two_results(tgt, pad_idx):
    return tgt[:, :-1], tgt[:, 1:]


def shift_hard_coded(tgt, pad_idx):
    tgt_in = tgt[:, :5]  # the first length the check runs, less one
    return tgt_in, tgt[:, 1:], target_mask(tgt_in, pad_idx)


def shift_hard_coded_pad(tgt, pad_idx):
    return tgt[:, :-1], tgt[:, 1:], target_mask(tgt[:, :-1], 0)


# ---------------------------------------------------------------- wrong answers of other classes
# A batch of one sentence (a .squeeze() drops it), a table precomputed at a fixed size, a
# tensor kept between calls, int32 ids converted to int64.


def padding_squeezed(tokens, pad_idx):
    return (tokens.squeeze() != pad_idx).unsqueeze(-2)


_PADDING_BUFFERS = {}


def padding_into_a_kept_buffer(tokens, pad_idx):  # one tensor per shape, refilled by every call
    out = _PADDING_BUFFERS.setdefault(tuple(tokens.shape),
                                      torch.empty(tokens.size(0), 1, tokens.size(1), dtype=torch.bool))
    out.copy_((tokens != pad_idx).unsqueeze(1))
    return out


_TABLE_512 = torch.ones(512, 512, dtype=torch.bool).tril()
_TABLE_5000 = torch.ones(5000, 5000, dtype=torch.bool).tril()


def look_ahead_from_a_table_of_512(size, device=None):
    return _TABLE_512[:size, :size].to(device or "cpu")


def look_ahead_from_a_table_of_5000(size, device=None):
    return _TABLE_5000[:size, :size].to(device or "cpu")


_LOOK_AHEAD_BUFFER = torch.zeros(64, 64, dtype=torch.bool)


def look_ahead_into_a_kept_buffer(size, device=None):  # cleared and refilled by every call
    if size > _LOOK_AHEAD_BUFFER.size(0) or device is not None:  # (the check's GPU pass)
        return torch.ones(size, size, dtype=torch.bool, device=device).tril()
    _LOOK_AHEAD_BUFFER.zero_()
    _LOOK_AHEAD_BUFFER[:size, :size] = torch.ones(size, size, dtype=torch.bool).tril()
    return _LOOK_AHEAD_BUFFER[:size, :size]


_RESIZED = torch.zeros(0, 0, dtype=torch.bool)


def look_ahead_resized(size, device=None):  # the same tensor, resized by every call
    if device is not None:  # (the check's GPU pass)
        return torch.ones(size, size, dtype=torch.bool, device=device).tril()
    _RESIZED.resize_(size, size)
    _RESIZED.fill_(True)
    return _RESIZED.tril_()


def target_from_a_table_of_512(tokens, pad_idx):
    L = tokens.size(-1)
    return padding_mask(tokens, pad_idx) & _TABLE_512[:L, :L].to(tokens.device)


def target_squeezed(tokens, pad_idx):
    keys = padding_mask(tokens, pad_idx).squeeze()  # "(batch, L)"
    return keys.unsqueeze(-2) & subsequent_mask(tokens.size(-1), tokens.device)


_TARGET_BUFFERS = {}


def target_into_a_kept_buffer(tokens, pad_idx):
    batch, L = tokens.shape
    out = _TARGET_BUFFERS.setdefault((batch, L, tokens.device),
                                     torch.empty(batch, L, L, dtype=torch.bool, device=tokens.device))
    torch.logical_and(padding_mask(tokens, pad_idx), subsequent_mask(L, tokens.device), out=out)
    return out


def shift_as_int64_for_the_embedding(tgt, pad_idx):
    tgt_in, tgt_y = tgt[:, :-1].long(), tgt[:, 1:].long()
    return tgt_in, tgt_y, target_mask(tgt_in, pad_idx)


def shift_into_new_tensors(tgt, pad_idx):
    batch, L = tgt.shape
    tgt_in, tgt_y = torch.full((batch, L - 1), pad_idx), torch.full((batch, L - 1), pad_idx)
    tgt_in[:], tgt_y[:] = tgt[:, :-1], tgt[:, 1:]  # torch.full's default dtype: int64
    return tgt_in, tgt_y, target_mask(tgt_in, pad_idx)


def shift_squeezed(tgt, pad_idx):
    t = tgt.squeeze()
    return t[..., :-1], t[..., 1:], target_mask(t[..., :-1], pad_idx)


def shift_with_a_table_of_512(tgt, pad_idx):
    tgt_in = tgt[:, :-1]
    L = tgt_in.size(1)
    return tgt_in, tgt[:, 1:], padding_mask(tgt_in, pad_idx) & _TABLE_512[:L, :L]


_SHIFT_BUFFERS = {}


def shift_into_kept_buffers(tgt, pad_idx):
    batch, L = tgt.shape
    tgt_in, tgt_y = _SHIFT_BUFFERS.setdefault((batch, L), (tgt.new_empty(batch, L - 1),
                                                           tgt.new_empty(batch, L - 1)))
    tgt_in.copy_(tgt[:, :-1])
    tgt_y.copy_(tgt[:, 1:])
    return tgt_in, tgt_y, target_mask(tgt_in, pad_idx)


ones = torch.ones

WRONG_ANSWERS = [
    # 3.1 padding_mask
    (check_padding_mask, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_padding_mask, lambda tokens, pad_idx: (tokens == pad_idx).unsqueeze(1),
     r"padding mask is inverted.*tokens != pad_idx, not =="),
    (check_padding_mask, lambda tokens, pad_idx: tokens != pad_idx,
     r"expected \(3, 1, 6\), got \(3, 6\)\. You have \(batch, L\).*unsqueeze\(-2\)"),
    (check_padding_mask, lambda tokens, pad_idx: (tokens != pad_idx).unsqueeze(-1),
     r"got \(3, 6, 1\)\. You have \(batch, L, 1\): that broadcasts over the keys, not the queries"),
    (check_padding_mask, lambda tokens, pad_idx: (tokens != pad_idx)[:, None, None, :],
     r"got \(3, 1, 1, 6\).*an axis for the heads"),
    (check_padding_mask, lambda tokens, pad_idx: (tokens != pad_idx).unsqueeze(1).expand(-1, 6, -1),
     r"got \(3, 6, 6\)\. You expanded it"),
    (check_padding_mask, lambda tokens, pad_idx: (tokens != pad_idx).unsqueeze(0),
     r"got \(1, 3, 6\).*not unsqueeze\(0\)"),
    (check_padding_mask, padding_hard_coded_zero,
     r"hides the tokens equal to 0, but here pad_idx = 2.*is the pad index written into your code"),
    (check_padding_mask, lambda tokens, pad_idx: (tokens > pad_idx).unsqueeze(1),
     r"keeps only the ids above pad_idx = 2: ids below it \(0 \.\. 1 here"),
    (check_padding_mask, padding_hard_coded_shape,
     r"fixed shape \[3, 1, 6\].*\nHint: the same function passed with \(batch=3, L=6, pad_idx=0\) "
     r"but not with \(batch=4, L=5, pad_idx=2\)"),
    (check_padding_mask, lambda tokens, pad_idx: (tokens != pad_idx).unsqueeze(1).float(),
     r"as a torch\.float32 tensor of 0\.0 and 1\.0.*~ does not work on a float tensor.*drop the "
     r"\.int\(\), \.long\(\) or \.float\(\)"),
    (check_padding_mask, lambda tokens, pad_idx: (tokens != pad_idx).unsqueeze(1).long(),
     r"as a torch\.int64 tensor of 0 and 1.*~1 is -2"),
    (check_padding_mask, padding_additive, r"tensor of 0\.0 and -inf: that is the additive form of a mask"),
    (check_padding_mask, lambda tokens, pad_idx: None, r"returned None: did you forget the `return`"),
    (check_padding_mask, lambda tokens, pad_idx: (tokens != pad_idx).tolist(),
     r"as a bool tensor, got list of length 3"),
    (check_padding_mask, lambda tokens, pad_idx: (tokens != pad_idx).unsqueeze(1).to_sparse(),
     r"as a torch\.sparse_coo tensor; return an ordinary \(dense\) bool tensor"),
    # 3.2 subsequent_mask
    (check_subsequent_mask, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_subsequent_mask, _triangle("tril", -1), r"the diagonal is excluded: query i must see key i"),
    (check_subsequent_mask, _triangle("triu", 1),
     r"look-ahead mask is inverted.*nn\.Transformer's convention \(True = masked out\)"),
    (check_subsequent_mask, _triangle("triu"), r"you built the upper triangle"),
    (check_subsequent_mask, _triangle("tril", 5), r"True everywhere: nothing is hidden"),
    (check_subsequent_mask, lambda size, device=None: nn.Transformer.generate_square_subsequent_mask(size),
     r"torch\.float32 tensor of 0\.0 and -inf: that is the additive form.*nn\.Transformer uses"),
    (check_subsequent_mask, _triangle("tril", dtype=torch.uint8),
     r"torch\.uint8 tensor of 0 and 1.*masked_fill accepts only a bool mask"),
    (check_subsequent_mask, lambda size, device=None: subsequent_mask(size).unsqueeze(0),
     r"expected \(5, 5\), got \(1, 5, 5\)\. \(1, size, size\) is the shape attention takes"),
    (check_subsequent_mask, lambda size, device=None: subsequent_mask(size).float().numpy(),
     r"as a bool tensor, got ndarray: keep to torch operations"),
    (check_subsequent_mask, look_ahead_hard_coded,
     r"expected \(7, 7\), got \(5, 5\).*\nHint: the same function passed with \(size=5\) but not "
     r"with \(size=7\): is a size written into your code\? Build the table from the size argument"),
    # 3.3 target_mask
    (check_target_mask, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_target_mask, _target(lambda keys, causal: keys | causal), r"combined the two masks with \| \(or\)"),
    (check_target_mask, _target(lambda keys, causal: causal.expand(keys.size(0), -1, -1)),
     r"padding keys are not hidden, only the future.*not left padding at all"),
    (check_target_mask, _target(lambda keys, causal: keys.expand(-1, causal.size(0), -1)),
     r"the future is not hidden, only the padding"),
    (check_target_mask, _target(lambda keys, causal: keys.transpose(1, 2) & causal),
     r"padding hides query rows instead of key columns"),
    (check_target_mask, _target(lambda keys, causal: keys.transpose(1, 2) & keys & causal),
     r"also hid the queries at padding positions: their rows are all False"),
    (check_target_mask, _target(causal=lambda L: ones(L, L, dtype=torch.bool).triu(1)),
     r"look-ahead part is inverted"),
    (check_target_mask, _target(causal=lambda L: ones(L, L, dtype=torch.bool).triu()),
     r"look-ahead part is the upper triangle"),
    (check_target_mask, _target(causal=lambda L: ones(L, L, dtype=torch.bool).tril(-1)),
     r"look-ahead part excludes the diagonal"),
    (check_target_mask, lambda tokens, pad_idx: ~target_mask(tokens, pad_idx), r"target mask is inverted"),
    (check_target_mask, lambda tokens, pad_idx: target_mask(tokens, pad_idx).unsqueeze(1),
     r"got \(3, 1, 6, 6\)\. You have \(batch, 1, L, L\), with an axis for the heads"),
    (check_target_mask, lambda tokens, pad_idx: padding_mask(tokens, pad_idx),
     r"got \(3, 1, 6\)\. You have the shape of the padding mask alone"),
    (check_target_mask, lambda tokens, pad_idx: target_mask(tokens, pad_idx)[0] & target_mask(tokens, pad_idx)[1],
     r"got \(6, 6\)\. You have \(L, L\), one table for the whole batch"),
    (check_target_mask, target_hard_coded_pad,
     r"hides the tokens equal to 0, but here pad_idx = 4.*pad index written into your code"),
    (check_target_mask, target_hard_coded_length,
     r"(?s)raised RuntimeError: The size of tensor a \(5\) must match.*\nHint: the same function passed "
     r"with \(batch=3, L=6, pad_idx=0\) but not with \(batch=2, L=5, pad_idx=4\)"),
    (check_target_mask, lambda tokens, pad_idx: target_mask(tokens, pad_idx).int(),
     r"target mask as a torch\.int32 tensor of 0 and 1"),
    # 3.4 decoder_input_and_labels
    (check_decoder_input_and_labels, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_decoder_input_and_labels, _shift(tgt_in=lambda t: t[:, 1:], tgt_y=lambda t: t[:, :-1]),
     r"you shifted the wrong way"),
    (check_decoder_input_and_labels, _shift(tgt_y=lambda t: t[:, :-1]),
     r"your labels are the decoder's input itself.*the model learns to copy"),
    (check_decoder_input_and_labels, _shift(tgt_in=lambda t: t[:, 1:]),
     r"your input and your labels are both tgt\[:, 1:\]: the input lost its <s>"),
    (check_decoder_input_and_labels, _shift(tgt_in=lambda t: t[:, 1:], tgt_y=lambda t: t[:, 2:]),
     r"the labels of .*: expected \(2, 5\), got \(2, 4\)"),
    (check_decoder_input_and_labels, _shift(tgt_in=lambda t: t),
     r"the input of .*: expected \(2, 5\), got \(2, 6\)\. Your input is the whole target, unshifted"),
    (check_decoder_input_and_labels, _shift(tgt_in=lambda t: t.roll(1, dims=1)),
     r"got \(2, 6\)\. torch\.roll moved the last token"),
    (check_decoder_input_and_labels, _shift(tgt_in=lambda t: torch.cat([t[:, :1], t[:, :-1]], dim=1)),
     r"got \(2, 6\)\. You put <s> in front once more"),
    (check_decoder_input_and_labels, _shift(tgt_y=lambda t: t),
     r"the labels of .*got \(2, 6\)\. Your labels are the whole target: drop its first token"),
    (check_decoder_input_and_labels, _shift(tgt_y=lambda t: torch.cat([t[:, 1:], t[:, -1:]], dim=1)),
     r"got \(2, 6\)\. You added a position at the end"),
    (check_decoder_input_and_labels, _shift(mask=lambda tgt, x, y, pad: target_mask(tgt, pad)),
     r"expected \(2, 5, 5\), got \(2, 6, 6\)\. That is the mask of the whole target"),
    (check_decoder_input_and_labels, _shift(mask=lambda tgt, x, y, pad: target_mask(y, pad)),
     r"your mask is built from the labels"),
    (check_decoder_input_and_labels,
     _shift(mask=lambda tgt, x, y, pad: subsequent_mask(x.size(1)).expand(x.size(0), -1, -1)),
     r"in tgt_mask, the padding keys are not hidden"),
    (check_decoder_input_and_labels, _shift(mask=lambda tgt, x, y, pad: padding_mask(x, pad)),
     r"the target mask of .*: expected \(2, 5, 5\), got \(2, 1, 5\)"),
    (check_decoder_input_and_labels, shift_with_two_results,
     r"should return the triple \(tgt_in, tgt_y, tgt_mask\).*got a tuple of 2 items \(Tensor, Tensor\)"),
    (check_decoder_input_and_labels, _shift(tgt_in=lambda t: t[:, :-1].float()),
     r"the decoder's input tgt_in as torch\.float32; it holds token ids.*torch\.int64"),
    (check_decoder_input_and_labels, shift_hard_coded,
     r"Your input is the whole target, unshifted.*\nHint: the same function passed with "
     r"\(batch=2, L=6, pad_idx=0\) but not with \(batch=3, L=5, pad_idx=7\)"),
    (check_decoder_input_and_labels, shift_hard_coded_pad,
     r"in tgt_mask, your mask hides the tokens equal to 0, but here pad_idx = 7"),
    # a batch of one sentence, dropped by a .squeeze()
    (check_padding_mask, padding_squeezed,
     r"of shape \(1, 8\) int32, pad_idx=5\): expected \(1, 1, 8\), got \(1, 8\)\. Your result "
     r"lost dimensions of size 1: \.squeeze\(\)"),
    (check_target_mask, target_squeezed,
     r"expected \(1, 5001, 5001\), got \(5001, 5001\)\. Your result lost dimensions of size 1"),
    (check_decoder_input_and_labels, shift_squeezed,
     r"the input of .*: expected \(1, 5001\), got \(5001,\)\. Your result lost dimensions of size 1"),
    # a look-ahead table precomputed at a fixed size
    (check_subsequent_mask, look_ahead_from_a_table_of_512,
     r"expected \(5001, 5001\), got \(512, 512\)\. Your mask stops at 512 positions: a table "
     r"precomputed"),
    (check_subsequent_mask, look_ahead_from_a_table_of_5000,
     r"got \(5000, 5000\)\. Your mask stops at 5000 positions"),
    (check_target_mask, target_from_a_table_of_512,
     r"(?s)raised RuntimeError: The size of tensor a \(5001\) must match the size of tensor b "
     r"\(512\).*\nHint: here L = 5001, longer than a table precomputed at a fixed size"),
    (check_decoder_input_and_labels, shift_with_a_table_of_512,
     r"(?s)must match the size of tensor b \(512\).*\nHint: here L = 5001, longer than a table"),
    # a result kept between calls, which the next call overwrites
    (check_padding_mask, padding_into_a_kept_buffer,
     r"a second call of padding_into_a_kept_buffer, on other inputs, changed the padding mask "
     r"that the first call had returned"),
    (check_subsequent_mask, look_ahead_into_a_kept_buffer,
     r"a second call of look_ahead_into_a_kept_buffer, on other inputs, changed the mask of size 5"),
    (check_subsequent_mask, look_ahead_resized,
     r"changed the shape of the mask of size 5 that the first call had returned, from \(5, 5\) "
     r"to \(3, 3\)"),
    (check_target_mask, target_into_a_kept_buffer, r"a second call .* changed the target mask"),
    (check_decoder_input_and_labels, shift_into_kept_buffers,
     r"a second call .* changed the input, labels and mask"),
    # int32 ids that come back int64
    (check_decoder_input_and_labels, shift_as_int64_for_the_embedding,
     r"tgt_in as torch\.int64; .* the target's dtype, torch\.int32: .*int32 ids as well as int64"),
    (check_decoder_input_and_labels, shift_into_new_tensors,
     r"tgt_in as torch\.int64; .*torch\.full\(\.\.\., dtype=tgt\.dtype\)"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


def test_a_mask_that_is_right_but_built_another_way_passes(capsys):
    def look_ahead_by_comparison(size, device=None):
        positions = torch.arange(size, device=device)
        return positions.unsqueeze(0) <= positions.unsqueeze(1)  # key j <= query i

    def shift_by_narrow(tgt, pad_idx):
        L = tgt.size(1)
        tgt_in, tgt_y = tgt.narrow(1, 0, L - 1), tgt.narrow(1, 1, L - 1)
        keys = (tgt_in != pad_idx).unsqueeze(1)
        return tgt_in, tgt_y, keys & look_ahead_by_comparison(L - 1)

    check_subsequent_mask(look_ahead_by_comparison)
    check_decoder_input_and_labels(shift_by_narrow)
    assert capsys.readouterr().out.count(" passed: ") == 2


def padding_by_lengths(tokens, pad_idx):  # right for padding at the end, as the exercise says
    lengths = (tokens != pad_idx).sum(-1, keepdim=True)
    return (torch.arange(tokens.size(-1), device=tokens.device) < lengths).unsqueeze(1)


def look_ahead_the_harvard_way(size, device=None):
    return torch.triu(torch.ones(1, size, size, device=device), diagonal=1)[0] == 0


@functools.lru_cache(maxsize=None)
def look_ahead_cached(size, device=None):  # the same mask for the same size: never refilled
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def look_ahead_row_by_row(size, device=None):
    mask = torch.zeros(size, size, dtype=torch.bool, device=device)
    for i in range(size):
        mask[i, : i + 1] = True
    return mask


def target_by_logical_and(tokens, pad_idx):
    keys = torch.ne(tokens, pad_idx)[:, None, :]
    return torch.logical_and(keys, look_ahead_the_harvard_way(tokens.size(1), tokens.device))


def target_expanded(tokens, pad_idx):
    batch, L = tokens.shape
    keys = (tokens != pad_idx).unsqueeze(1).expand(batch, L, L)
    return keys & torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()


def shift_by_ellipsis_into_copies(tgt, pad_idx):
    tgt_in, tgt_y = tgt[..., :-1].clone(), tgt[..., 1:].clone()
    return tgt_in, tgt_y, target_by_logical_and(tgt_in, pad_idx)


@pytest.mark.parametrize("check, right", [
    (check_padding_mask, lambda tokens, pad_idx: torch.ne(tokens, pad_idx)[:, None, :]),
    (check_padding_mask, lambda tokens, pad_idx: ~(tokens == pad_idx).unsqueeze(1)),
    (check_padding_mask, lambda tokens, pad_idx: (tokens != pad_idx).view(tokens.size(0), 1, -1)),
    (check_padding_mask, padding_by_lengths),
    (check_subsequent_mask, look_ahead_the_harvard_way),
    (check_subsequent_mask, lambda size, device=None: torch.tril(torch.ones(size, size, device=device)).bool()),
    (check_subsequent_mask, look_ahead_cached),
    (check_subsequent_mask, look_ahead_row_by_row),
    (check_target_mask, target_by_logical_and),
    (check_target_mask, target_expanded),
    (check_decoder_input_and_labels, shift_by_ellipsis_into_copies),
], ids=lambda f: getattr(f, "__name__", ""))
def test_right_answers_written_other_ways_pass(check, right, capsys):
    check(right)
    assert capsys.readouterr().out.startswith(f"{check.__name__} passed: ")


def test_the_long_and_single_sentence_sets_are_there():
    # (How long a check takes is measured, not asserted: about 0.2 s for each of these on one thread.)
    assert masking.LOOK_AHEAD_SIZES[-1]["size"] > 5000
    for sizes in (masking.PADDING_SIZES, masking.TARGET_SIZES, masking.SHIFT_SIZES):
        assert sizes[-1]["batch"] == 1 and sizes[-1]["ids"] == "int32"


# On the device 'meta' (which every machine has, unlike a GPU), the device checks run in the
# tests: a mask built on the cpu for another device is named.
@pytest.mark.parametrize("check, wrong, message", [
    (check_subsequent_mask, look_ahead_ignoring_the_device,
     r"returned the look-ahead mask on the device cpu, but the check asked for device='meta'"),
    (check_subsequent_mask, look_ahead_without_device,
     r"takes 1 positional argument but 2 were given\nHint: the check calls "
     r"look_ahead_without_device\(size, device\) here"),
    (check_target_mask, target_on_the_cpu,
     r"with tokens on the device 'meta' .* raised RuntimeError: .*\nHint: a tensor of yours is "
     r"created on the cpu.*subsequent_mask\(L, tokens\.device\)"),
])
def test_a_mask_built_on_the_wrong_device_is_named(monkeypatch, check, wrong, message):
    monkeypatch.setattr(masking, "OTHER_DEVICE", "meta")
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


def test_the_device_checks_pass_on_the_course_code(monkeypatch, capsys):
    monkeypatch.setattr(masking, "OTHER_DEVICE", "meta")
    check_subsequent_mask(subsequent_mask)
    check_target_mask(target_mask)
    assert capsys.readouterr().out.count(" passed: ") == 2


def test_the_checks_batches_have_what_their_diagnoses_need():
    g = torch.Generator().manual_seed(0)
    tokens = masking._tokens(g, 3, 6, 2, pads=[0, 2, 4], left=None)
    assert (tokens == 0).any() and (tokens == 1).any()  # ids other than pad_idx, below it
    assert ((tokens == 2).sum(1) == torch.tensor([0, 2, 4])).all()
    tokens = masking._tokens(g, 2, 5, 4, pads=[1, 2], left=1)
    assert tokens[1, :2].tolist() == [4, 4] and tokens[0, -1] == 4  # left and right padding
    tgt, bos, eos = masking._target_batch(g, 2, 6, 0)
    assert (tgt[:, 0] == bos).all() and (tgt[:, :-1] == 0).any()  # the input holds padding too


def test_the_checks_leave_the_global_random_generator_as_it_was(capsys):
    before = torch.random.get_rng_state()
    check_padding_mask(padding_mask)
    check_subsequent_mask(subsequent_mask)
    check_target_mask(target_mask)
    check_decoder_input_and_labels(course_shift)
    assert torch.equal(torch.random.get_rng_state(), before)
