"""Notebook 04's new checks, the whole forward pass and each head's share through W^O: they
pass on the course's module, and name the mistake of each typical wrong answer. (The split
and merge checks' wrong answers are in tests/test_exercises.py; tests/test_exercises.py
collects WRONG_ANSWERS of this file too.)"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from annotated.attention import scaled_dot_product_attention
from annotated.multi_head import MultiHeadAttention
from annotated.support.grading import (
    ExerciseFailed,
    check_head_contributions,
    check_merge_heads,
    check_multi_head_attention,
    check_split_heads,
)
from annotated.support.grading.multi_head import _course_module


def course_multi_head(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    """The course's MultiHeadAttention holding the matrices (both of its paths), called with
    them as its parameters, so that it keeps their dtype and lets gradients reach them."""
    module = MultiHeadAttention(W_Q.size(0), h, fast=False).eval().to(query.dtype)
    zero = torch.zeros(W_Q.size(0), dtype=query.dtype)
    params = {}
    for layer, W in zip(("W_Q", "W_K", "W_V", "W_O"), (W_Q, W_K, W_V, W_O)):
        params |= {f"{layer}.weight": W.T, f"{layer}.bias": zero}  # nn.Linear: x @ weight.T
    explicit = functional_call(module, params, (query, key, value, mask))
    module.fast = True
    torch.testing.assert_close(functional_call(module, params, (query, key, value, mask)), explicit)
    return explicit


def course_contributions(heads, W_O):
    """Head i's output through its rows of W^O: the head in its slot of the concatenation,
    through the output projection (F.linear, as the course's W_O layer, without its bias)."""
    h, d_k = heads.size(1), heads.size(3)
    return torch.stack([F.linear(F.pad(heads[:, i], (i * d_k, (h - 1 - i) * d_k)), W_O.T)
                        for i in range(h)], dim=1)


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


# ---------------------------------------------------------------- wrong answers of other classes
# float64 made float32, no gradient, a batch of one dropped by a .squeeze(), a softmax without
# its max shift, a finite fill of the masked scores, a W^O that is not square.


def split_into_zeros(x, h):  # torch.zeros without dtype=: float32
    batch, L, d_model = x.shape
    d_k = d_model // h
    out = torch.zeros(batch, h, L, d_k)
    for i in range(h):
        out[:, i] = x[:, :, i * d_k : (i + 1) * d_k]
    return out


def split_as_float(x, h):  # .float() "for safety"
    batch, L, d_model = x.shape
    return x.float().view(batch, L, h, d_model // h).transpose(1, 2)


@torch.no_grad()
def split_without_gradients(x, h):
    batch, L, d_model = x.shape
    return x.view(batch, L, h, d_model // h).transpose(1, 2)


def split_of_the_data(x, h):
    batch, L, d_model = x.shape
    return x.data.view(batch, L, h, d_model // h).transpose(1, 2)


def split_squeezed(x, h):
    return torch.stack(x.chunk(h, dim=-1), dim=1).squeeze()


def merge_into_zeros(x):
    batch, h, L, d_k = x.shape
    out = torch.zeros(batch, L, h * d_k)
    for i in range(h):
        out[:, :, i * d_k : (i + 1) * d_k] = x[:, i]
    return out


def merge_detached(x):
    batch, h, L, d_k = x.shape
    return x.detach().transpose(1, 2).reshape(batch, L, h * d_k)


def merge_squeezed(x):
    return torch.cat(x.unbind(1), dim=-1).squeeze()


def _attention_by_hand(softmax="shifted", fill=float("-inf"), zero_fill=True, shift_above=None,
                       squeeze=False, detach=False, as_float=False):
    """Multi-head attention with its own softmax and masking, to write each wrong answer of a
    numerical range, of the dtype or of the gradients in one line."""
    def multi_head_attention(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
        dtype = query.dtype
        if as_float:  # every step in float32, converted back at the end
            query, key, value, W_Q, W_K, W_V, W_O = (t.float() for t in (query, key, value, W_Q, W_K, W_V, W_O))
        batch, L_q, d_model = query.shape
        d_k = d_model // h
        q, k, v = ((x @ W).view(x.size(0), x.size(1), h, d_k).transpose(1, 2)
                   for x, W in ((query, W_Q), (key, W_K), (value, W_V)))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
        allowed = None if mask is None else mask.unsqueeze(1)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, fill)
        if softmax == "torch":
            weights = scores.softmax(dim=-1)
        else:
            if softmax == "shifted" or (shift_above is not None and scores.max() > shift_above):
                scores = scores - scores.amax(dim=-1, keepdim=True)
            e = scores.exp()
            weights = e / e.sum(dim=-1, keepdim=True)
        if allowed is not None and zero_fill:
            weights = weights.masked_fill(~allowed, 0.0)
        if detach:  # "the weights are only for looking at"
            weights = weights.detach()
        out = (weights @ v).transpose(1, 2).reshape(batch, L_q, d_model) @ W_O
        return out.squeeze() if squeeze else out.to(dtype)
    return multi_head_attention


def multi_head_into_zeros(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    batch, L_q, d_model = query.shape
    d_k = d_model // h
    concat = torch.zeros(batch, L_q, d_model)  # float32
    for i in range(h):
        cols = slice(i * d_k, (i + 1) * d_k)
        head, _ = scaled_dot_product_attention(query @ W_Q[:, cols], key @ W_K[:, cols],
                                               value @ W_V[:, cols], mask)
        concat[:, :, cols] = head
    return concat @ W_O


def contributions_for_a_square_W_O(heads, W_O):
    batch, h, L, d_k = heads.shape
    return heads @ W_O.view(h, d_k, h * d_k)  # d_model taken for h * d_k


def contributions_into_zeros(heads, W_O):
    batch, h, L, d_k = heads.shape
    out = torch.zeros(batch, h, L, W_O.size(-1))
    for i in range(h):
        out[:, i] = heads[:, i] @ W_O[i * d_k : (i + 1) * d_k]
    return out


def contributions_squeezed(heads, W_O):
    batch, h, L, d_k = heads.shape
    rows = W_O.view(h, d_k, -1)
    return (heads.unsqueeze(-2) @ rows[None, :, None]).squeeze()


_KEPT = {}


def contributions_into_a_kept_buffer(heads, W_O):
    batch, h, L, d_k = heads.shape
    out = _KEPT.setdefault((heads.shape, W_O.shape, heads.dtype),
                           heads.new_empty(batch, h, L, W_O.size(-1)))
    torch.matmul(heads, W_O.view(h, d_k, -1), out=out)
    return out


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
    # float64 inputs returned, or computed, in float32
    (check_split_heads, split_into_zeros, r"the split tensor as torch\.float32 for torch\.float64 inputs"),
    (check_split_heads, split_as_float, r"as torch\.float32 for torch\.float64 inputs.*\.float\(\)"),
    (check_merge_heads, merge_into_zeros,
     r"the merged tensor as torch\.float32 for torch\.float64 inputs.*created without dtype="),
    (check_multi_head_attention, _attention_by_hand(as_float=True),
     r"for float64 inputs, the float64 reference and the output .* differ by up to .*about "
     r"float32's precision"),
    (check_multi_head_attention, multi_head_into_zeros,
     r"(?s)raised RuntimeError: expected m1 and m2 to have the same dtype.*\nHint: the inputs here "
     r"are float64"),
    (check_head_contributions, contributions_into_zeros,
     r"the contributions as torch\.float32 for torch\.float64 inputs"),
    # no gradient in a training path
    (check_split_heads, split_without_gradients, r"no gradient reaches x through the split tensor"),
    (check_split_heads, split_of_the_data, r"without a gradient \(requires_grad is False\)"),
    (check_merge_heads, merge_detached, r"without a gradient.*remove @torch\.no_grad\(\)"),
    (check_multi_head_attention, torch.no_grad()(_attention_by_hand()),
     r"returned the output without a gradient"),
    (check_multi_head_attention, _attention_by_hand(detach=True),
     r"no gradient reaches query through the output"),
    # a batch of one, dropped by a .squeeze()
    (check_split_heads, split_squeezed,
     r"\(batch=1, L=5, d_model=6\), h=3\): expected \(1, 3, 5, 2\), got \(3, 5, 2\)\. Your result "
     r"lost dimensions of size 1"),
    (check_merge_heads, merge_squeezed, r"expected \(1, 5, 6\), got \(5, 6\)\. Your result lost"),
    (check_multi_head_attention, _attention_by_hand(squeeze=True),
     r"expected \(1, 4, 6\), got \(4, 6\)\. Your result lost dimensions of size 1"),
    (check_head_contributions, contributions_squeezed,
     r"expected \(1, 4, 3, 9\), got \(4, 3, 9\)\. Your result lost dimensions of size 1"),
    # scores far from zero: a softmax without its max shift, a finite fill of the masked scores
    (check_multi_head_attention, _attention_by_hand(softmax="plain"),
     r"scores far below zero .*holds NaN or inf: a softmax computed as exp\(s\) / sum\(exp\(s\)\) "
     r"without subtracting each row's maximum underflows"),
    (check_multi_head_attention, _attention_by_hand(softmax="plain", shift_above=50.0),
     r"without subtracting each row's maximum underflows.*not only when the scores look large"),
    (check_multi_head_attention, _attention_by_hand(fill=-1e4),
     r"scores far below zero .* and a padding mask .*the masked keys took the weight.*finite "
     r"number \(such as -1e4\)"),
    (check_multi_head_attention, _attention_by_hand(softmax="torch", fill=-1e4, zero_fill=True),
     r"the masked keys took the weight"),
    # a W^O that is not square, (h * d_k, d_model)
    (check_head_contributions, contributions_for_a_square_W_O,
     r"(?s)\(tensor of shape \(1, 4, 3, 2\), tensor of shape \(8, 9\)\) raised RuntimeError.*"
     r"Hint: here W_O is \(8, 9\), not square"),
    # a result kept between calls
    (check_head_contributions, contributions_into_a_kept_buffer,
     r"a second call of contributions_into_a_kept_buffer, on other inputs, changed the contributions"),
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


def test_the_forward_check_runs_scores_far_from_zero_float64_and_gradients():
    seen = []

    def spy(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
        seen.append((query.dtype, query.requires_grad, float(query.detach().norm())))
        return course_multi_head(query, key, value, W_Q, W_K, W_V, W_O, h, mask)

    check_multi_head_attention(spy)
    assert (torch.float64, True) in {(dtype, grad) for dtype, grad, _ in seen}
    assert max(norm for _, _, norm in seen) > 1000  # the queries of scores far from zero


def split_by_chunks(x, h):
    return torch.stack(x.chunk(h, dim=-1), dim=1)


def split_into_new_zeros(x, h):
    batch, L, d_model = x.shape
    d_k = d_model // h
    out = x.new_zeros(batch, h, L, d_k)  # the input's dtype
    for i in range(h):
        out[:, i] = x[:, :, i * d_k : (i + 1) * d_k]
    return out


def multi_head_loop_over_heads(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    d_k = query.size(-1) // h
    heads = []
    for i in range(h):  # W_i^Q is the block of columns of head i
        cols = slice(i * d_k, (i + 1) * d_k)
        head, _ = scaled_dot_product_attention(query @ W_Q[:, cols], key @ W_K[:, cols],
                                               value @ W_V[:, cols], mask)
        heads.append(head)
    return torch.cat(heads, dim=-1) @ W_O


def multi_head_by_einsum(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    d_k = query.size(-1) // h
    q, k, v = (torch.einsum("bld,de->ble", x, W).unflatten(-1, (h, d_k))
               for x, W in ((query, W_Q), (key, W_K), (value, W_V)))
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / d_k ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    weights = torch.nan_to_num(F.softmax(scores, dim=-1))  # a row of -inf: NaN -> 0
    return torch.einsum("bhqk,bkhd->bqhd", weights, v).flatten(2) @ W_O


def multi_head_scaled_by_a_float32_constant(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    batch, L_q, d_model = query.shape
    d_k = d_model // h
    q, k, v = ((x @ W).view(x.size(0), x.size(1), h, d_k).transpose(1, 2)
               for x, W in ((query, W_Q), (key, W_K), (value, W_V)))
    scores = q @ k.transpose(-2, -1) / torch.sqrt(torch.tensor(d_k))  # a float32 constant
    if mask is not None:
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.unsqueeze(1), 0.0)
    return (weights @ v).transpose(1, 2).reshape(batch, L_q, d_model) @ W_O


def multi_head_with_the_lowest_float(query, key, value, W_Q, W_K, W_V, W_O, h, mask=None):
    lowest = torch.finfo(query.dtype).min  # below any score, unlike -1e4
    return _attention_by_hand(softmax="torch", fill=lowest)(query, key, value, W_Q, W_K, W_V,
                                                           W_O, h, mask)


@pytest.mark.parametrize("check, right", [
    (check_split_heads, split_by_chunks),
    (check_split_heads, lambda x, h: x.unflatten(-1, (h, -1)).permute(0, 2, 1, 3)),
    (check_split_heads, split_into_new_zeros),
    (check_merge_heads, lambda x: torch.cat(x.unbind(1), dim=-1)),
    (check_merge_heads, lambda x: x.permute(0, 2, 1, 3).flatten(2)),
    (check_merge_heads, lambda x: x.transpose(1, 2).contiguous().view(x.size(0), x.size(2), -1)),
    (check_multi_head_attention, course_multi_head),
    (check_multi_head_attention, _attention_by_hand()),  # its own softmax, shifted by the max
    (check_multi_head_attention, multi_head_loop_over_heads),
    (check_multi_head_attention, multi_head_by_einsum),
    (check_multi_head_attention, multi_head_with_the_lowest_float),
    (check_multi_head_attention, multi_head_scaled_by_a_float32_constant),
    (check_head_contributions, lambda heads, W_O: torch.einsum(
        "bhld,hdm->bhlm", heads, W_O.view(heads.size(1), heads.size(3), -1))),
    (check_head_contributions, _contributions()),
    (check_head_contributions, lambda heads, W_O: heads @ W_O.unflatten(0, (heads.size(1), -1))),
], ids=lambda f: getattr(f, "__name__", ""))
def test_right_answers_written_other_ways_pass(check, right, capsys):
    check(right)
    assert capsys.readouterr().out.startswith(f"{check.__name__} passed: ")


def test_the_checks_leave_the_global_random_generator_as_it_was(capsys):
    before = torch.random.get_rng_state()
    check_split_heads(split_by_chunks)
    check_merge_heads(lambda x: torch.cat(x.unbind(1), dim=-1))
    check_multi_head_attention(multi_head_loop_over_heads)
    check_head_contributions(_contributions())
    assert torch.equal(torch.random.get_rng_state(), before)
