"""Notebook 04's new checks, the whole forward pass and each head's share through W^O: they
pass on the course's module, and name the mistake of each typical wrong answer. (The split
and merge checks' wrong answers are in tests/test_exercises.py; tests/test_exercises.py
collects WRONG_ANSWERS of this file too.)"""

import math

import pytest
import torch

from annotated.attention import scaled_dot_product_attention
from annotated.support.grading import (
    ExerciseFailed,
    check_head_contributions,
    check_multi_head_attention,
)
from annotated.support.grading.multi_head import _course_module


def course_multi_head(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    """The course's MultiHeadAttention holding the matrices (both of its paths)."""
    module = _course_module((W_Q, W_K, W_V, W_O), h)
    with torch.no_grad():
        explicit = module(query, key, value, mask)
        module.fast = True
        torch.testing.assert_close(module(query, key, value, mask), explicit)
    return explicit


def course_contributions(heads, W_O):
    """Head i's output through its rows of W^O, with the course's module's W_O layer."""
    h, d_k = heads.size(1), heads.size(3)
    module = _course_module((W_O,) * 4, h)
    with torch.no_grad():
        return torch.stack([module.W_O(torch.nn.functional.pad(
            heads[:, i], (i * d_k, (h - 1 - i) * d_k))) for i in range(h)], dim=1)


def test_check_passes_on_the_course_code(capsys):
    check_head_contributions(course_contributions)
    out = capsys.readouterr().out
    assert out.count(" passed: ") == 1 and out.startswith("check_head_contributions passed: ")


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- wrong forward passes


def _multi_head(scale=lambda d_k, d_model: math.sqrt(d_k), split="transpose", merge="transpose",
                with_W_O=True, transposed=False, inputs="given", mask_mode="heads", zero_fill=True,
                returns="output"):
    """A configurable multi-head attention, to write each usual wrong answer in one line."""
    def multi_head_attention(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
        if transposed:
            W_Q, W_K, W_V, W_O = W_Q.T, W_K.T, W_V.T, W_O.T
        if inputs == "query":
            key = value = query
        elif inputs == "key as value":
            value = key
        batch, L_q, d_model = query.shape
        d_k = d_model // h

        def split_heads(x):
            b, length, _ = x.shape
            if split == "view":
                return x.view(b, h, length, d_k)
            return x.view(b, length, h, d_k).transpose(1, 2)

        q, k, v = split_heads(query @ W_Q), split_heads(key @ W_K), split_heads(value @ W_V)
        scores = q @ k.transpose(-2, -1) / scale(d_k, d_model)
        if mask is not None and mask_mode not in ("ignored", "after softmax"):
            allowed = {"heads": mask.unsqueeze(1), "no head axis": mask,
                       "inverted": ~mask.unsqueeze(1)}[mask_mode]
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = scores.softmax(dim=-1)
        if mask is not None and mask_mode == "after softmax":
            weights = weights.masked_fill(~mask.unsqueeze(1), 0.0)
            allowed = mask.unsqueeze(1)
        if mask is not None and mask_mode != "ignored" and zero_fill:
            weights = weights.masked_fill(~allowed, 0.0)
        heads = weights @ v  # (batch, h, L_q, d_k)
        if returns == "heads":
            return heads
        if merge == "view":
            concat = heads.reshape(batch, L_q, d_model)
        else:
            concat = heads.transpose(1, 2).reshape(batch, L_q, d_model)
        return concat @ W_O if with_W_O else concat
    return multi_head_attention


def multi_head_mask_to_the_course_attention(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    batch, L_q, d_model = query.shape
    d_k = d_model // h
    q, k, v = ((x @ W).view(x.size(0), x.size(1), h, d_k).transpose(1, 2)
               for x, W in ((query, W_Q), (key, W_K), (value, W_V)))
    heads, _ = scaled_dot_product_attention(q, k, v, mask)  # the 3-D mask, no head axis
    return heads.transpose(1, 2).reshape(batch, L_q, d_model) @ W_O


def multi_head_hard_coded_h(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    batch, L_q, d_model = query.shape
    q, k, v = ((x @ W).view(x.size(0), x.size(1), 4, d_model // 4).transpose(1, 2)  # h = 4
               for x, W in ((query, W_Q), (key, W_K), (value, W_V)))
    heads, _ = scaled_dot_product_attention(q, k, v, None if mask is None else mask.unsqueeze(1))
    return heads.transpose(1, 2).reshape(batch, L_q, d_model) @ W_O


def multi_head_hard_coded_d_k(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    batch, L_q, d_model = query.shape
    q, k, v = ((x @ W).view(x.size(0), x.size(1), h, 6).transpose(1, 2)  # d_k of the first sizes
               for x, W in ((query, W_Q), (key, W_K), (value, W_V)))
    heads, _ = scaled_dot_product_attention(q, k, v, None if mask is None else mask.unsqueeze(1))
    return heads.transpose(1, 2).reshape(batch, L_q, d_model) @ W_O


def multi_head_with_a_module(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    # Loads W into nn.Linear without the transpose: the layer then computes x @ W.T.
    module = _course_module((W_Q.T, W_K.T, W_V.T, W_O.T), h)
    with torch.no_grad():
        return module(query, key, value, mask)


# ---------------------------------------------------------------- wrong contributions


def _contributions(rows=lambda W_O, i, h, d_k: W_O[i * d_k : (i + 1) * d_k], divide=1):
    def head_contributions(heads, W_O):
        h, d_k = heads.size(1), heads.size(3)
        return torch.stack([heads[:, i] @ rows(W_O, i, h, d_k) for i in range(h)], dim=1) / divide
    return head_contributions


def contributions_summed(heads, W_O):
    batch, h, length, d_k = heads.shape
    return heads.transpose(1, 2).reshape(batch, length, h * d_k) @ W_O


def contributions_in_slots(heads, W_O):
    batch, h, length, d_k = heads.shape
    out = heads.new_zeros(batch, h, length, h * d_k)
    for i in range(h):
        out[:, i, :, i * d_k : (i + 1) * d_k] = heads[:, i]
    return out


def contributions_shared_equally(heads, W_O):
    total = contributions_summed(heads, W_O)
    return total.unsqueeze(1).expand(-1, heads.size(1), -1, -1) / heads.size(1)


def contributions_hard_coded(heads, W_O):
    return heads @ W_O.view(2, 5, 10)  # the first sizes the check runs


WRONG_ANSWERS = [
    # 4.3 multi_head_attention
    (check_multi_head_attention, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_multi_head_attention, _multi_head(with_W_O=False), r"you left out W\^O"),
    (check_multi_head_attention, _multi_head(scale=lambda d_k, d_model: math.sqrt(d_model)),
     r"divided the scores by sqrt\(d_model\) = 4\.899 instead of sqrt\(d_k\) = 2\.449"),
    (check_multi_head_attention, _multi_head(scale=lambda d_k, d_model: 1.0),
     r"forgot the 1/sqrt\(d_k\) scaling"),
    (check_multi_head_attention, _multi_head(scale=lambda d_k, d_model: d_k),
     r"divided the scores by d_k = 6 instead of sqrt\(d_k\)"),
    (check_multi_head_attention, _multi_head(split="view", merge="view"),
     r"split without a transpose.*the merge by view back undoes it"),
    (check_multi_head_attention, _multi_head(split="view"),
     r"split without a transpose: view\(batch, h, L, d_k\) straight from \(batch, L, d_model\) has "
     r"the right shape"),
    (check_multi_head_attention, _multi_head(merge="view"), r"merged without transposing back"),
    (check_multi_head_attention, _multi_head(transposed=True), r"transposes of the matrices, x @ W\.T"),
    (check_multi_head_attention, multi_head_with_a_module, r"transposes of the matrices, x @ W\.T"),
    (check_multi_head_attention, _multi_head(inputs="query"), r"ignores the key and value arguments"),
    (check_multi_head_attention, _multi_head(inputs="key as value"),
     r"your values are projected from the key"),
    (check_multi_head_attention, _multi_head(mask_mode="ignored"), r"the mask was ignored"),
    (check_multi_head_attention, _multi_head(mask_mode="inverted"), r"your mask is inverted"),
    (check_multi_head_attention, _multi_head(mask_mode="no head axis"),
     r"(?s)raised RuntimeError: The size of tensor .*\nHint: the mask is 3-D.*mask\.unsqueeze\(1\)"),
    (check_multi_head_attention, multi_head_mask_to_the_course_attention,
     r"raised ValueError: mask of shape \(2, 1, 5\) has 3 dimensions, the attention scores of "
     r"shape \(2, 4, 3, 5\).*mask\.unsqueeze\(-3\)"),
    (check_multi_head_attention, _multi_head(zero_fill=False), r"all masked gets NaN"),
    # A mistake the check does not know (the mask applied after the softmax): the differences.
    (check_multi_head_attention, _multi_head(mask_mode="after softmax"),
     r"mismatch in the output with a padding mask \(batch, 1, L_k\), compared with the reference"),
    (check_multi_head_attention, _multi_head(returns="heads"),
     r"expected \(2, 3, 24\), got \(2, 4, 3, 6\)\. You returned the heads"),
    (check_multi_head_attention, multi_head_hard_coded_h,
     r"(?s)raised RuntimeError: shape '\[4, 6, 4, 3\]' is invalid.*\nHint: the same function passed "
     r"with \(batch=2, L_q=3, L_k=5, h=4, d_k=6\) but not with \(batch=4, L_q=6, L_k=2, h=3, d_k=5\)"),
    (check_multi_head_attention, multi_head_hard_coded_d_k,
     r"fixed shape \[4, 6, 3, 6\].*\nHint: the same function passed with \(batch=2, L_q=3, L_k=5, "
     r"h=4, d_k=6\)"),
    (check_multi_head_attention, lambda *args: course_multi_head(*args).double(),
     r"the output as torch\.float64 for torch\.float32 inputs"),
    (check_multi_head_attention, lambda *args: (course_multi_head(*args), None),
     r"got tuple of length 2: return the tensor itself"),
    # 4.4 head_contributions
    (check_head_contributions, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_head_contributions, contributions_summed,
     r"expected \(3, 2, 4, 10\), got \(3, 4, 10\)\. That is the sum over the heads"),
    (check_head_contributions, lambda heads, W_O: course_contributions(heads, W_O).transpose(0, 1),
     r"got \(2, 3, 4, 10\)\. The head axis comes second"),
    (check_head_contributions, _contributions(rows=lambda W_O, i, h, d_k: W_O[:, i * d_k : (i + 1) * d_k].T),
     r"head i's block of columns of W_O \(transposed\)"),
    (check_head_contributions, _contributions(rows=lambda W_O, i, h, d_k: W_O[i::h]),
     r"every h-th row of W_O"),
    (check_head_contributions, _contributions(divide=2), r"1/h = 1/2 of the right ones"),
    (check_head_contributions, contributions_in_slots, r"heads placed in their own slots"),
    (check_head_contributions, contributions_shared_equally,
     r"add up to the output, Concat\(\.\.\.\) W\^O, but they are not each head's own"),
    (check_head_contributions, contributions_hard_coded,
     r"(?s)fixed shape \[2, 5, 10\].*\nHint: the same function passed with \(batch=3, L=4, h=2, "
     r"d_k=5\) but not with \(batch=2, L=6, h=3, d_k=7\)"),
    (check_head_contributions, lambda heads, W_O: None, r"returned None"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


def test_the_forward_check_passes_on_the_course_module_with_its_masks_and_a_cross_attention(capsys):
    from annotated.support.grading.multi_head import MULTI_HEAD_SIZES
    seen = []

    def spy(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
        seen.append((query.size(1), key.size(1), None if mask is None else tuple(mask.shape)))
        return course_multi_head(query, key, value, W_Q, W_K, W_V, W_O, h, mask)

    check_multi_head_attention(spy)
    out = capsys.readouterr().out
    assert out.count(" passed: ") == 1 and out.startswith("check_multi_head_attention passed: ")
    assert all(s["batch"] != s["h"] and s["L_q"] != s["L_k"] for s in MULTI_HEAD_SIZES)
    assert any(L_q != L_k for L_q, L_k, _ in seen)  # cross-attention
    shapes = {mask for _, _, mask in seen if mask is not None}
    assert all(len(shape) == 3 for shape in shapes)  # the module's 3-D masks, no head axis
    first = MULTI_HEAD_SIZES[0]
    assert (first["batch"], 1, first["L_k"]) in shapes and (1, first["L_q"], first["L_q"]) in shapes
