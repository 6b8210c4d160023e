"""The checks of notebook 02's exercises: each passes on the course's code and names the
mistake of typical wrong answers (collected with the others by tests/test_exercises.py). The
first wrong answers of 2.1, check_attention, are in tests/test_exercises.py; those here are the
ones of the shapes, ranges, dtypes, repeated calls and gradients every set of sizes leaves out."""

import functools
import math

import pytest
import torch
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.support.grading import ExerciseFailed, check_attention, check_attention_loops, check_hard_lookup


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- attention_loops


def _loops(scale="sqrt", normalize="keys", stable=True, average="values", weights_layout="rows",
           L_q_fixed=None, dtype="query's"):
    """Attention with loops over the queries and keys, with one usual mistake at a time."""
    def attention_loops(query, key, value):
        L_q = L_q_fixed or query.size(0)
        L_k, d_k = key.size(0), query.size(-1)
        c = {"sqrt": math.sqrt(d_k), "none": 1.0, "d_k": d_k, "sqrt(6)": math.sqrt(6)}[scale]
        # The tensors filled below: of the query's dtype, as the exercise asks, or float32.
        zeros = functools.partial(torch.zeros, dtype=query.dtype if dtype == "query's" else None)
        scores = zeros(L_q, L_k)
        for i in range(L_q):
            for j in range(L_k):
                scores[i, j] = (query[i] * key[j]).sum() / c
        if normalize == "queries":  # each key's scores over the queries
            e = torch.exp(scores - scores.amax(dim=0, keepdim=True))
            weights = e / e.sum(dim=0, keepdim=True)
        else:
            weights = zeros(L_q, L_k)
            for i in range(L_q):
                e = torch.exp(scores[i] - scores[i].max()) if stable else torch.exp(scores[i])
                weights[i] = e / e.sum() if normalize == "keys" else e
        rows = key if average == "keys" else value
        output = zeros(L_q, rows.size(-1))
        for i in range(L_q):
            for j in range(L_k):
                w = 1.0 if average == "unweighted" else weights[i, j]
                output[i] = output[i] + w * rows[j]
        if average == "mean":
            output = value.mean(0).expand(L_q, -1)
        return output, (weights.T if weights_layout == "transposed" else weights)
    return attention_loops


def loops_returning_the_output_only(query, key, value):
    return scaled_dot_product_attention(query, key, value)[0]


def loops_scaling_the_query_in_place(query, key, value):
    query /= math.sqrt(query.size(-1))  # changes the caller's query
    weights = (query @ key.T).softmax(dim=-1)
    return weights @ value, weights


def loops_shifted_when_large(query, key, value):
    d_k = query.size(-1)
    outputs, rows = [], []
    for q in query:
        scores = torch.stack([(q * k).sum() for k in key]) / math.sqrt(d_k)
        if scores.max() > 80:  # shifts only when exp could overflow: 0 / 0 far below zero
            scores = scores - scores.max()
        weights = torch.exp(scores) / torch.exp(scores).sum()
        outputs.append(sum(w * v for w, v in zip(weights, value)))
        rows.append(weights)
    return torch.stack(outputs), torch.stack(rows)


def loops_in_python_floats(query, key, value):
    d_k = query.size(-1)
    weights, outputs = [], []
    for q in query:
        scores = [float((q * k).sum()) / math.sqrt(d_k) for k in key]
        e = [math.exp(s - max(scores)) for s in scores]
        weights.append([x / sum(e) for x in e])
        outputs.append([sum(w * float(v[c]) for w, v in zip(weights[-1], value))
                        for c in range(value.size(-1))])
    return torch.tensor(outputs), torch.tensor(weights)  # float32 whatever the inputs


def loops_squeezed(query, key, value):
    output, weights = loops_as_in_the_notebook(query, key, value)
    return output.squeeze(), weights.squeeze()  # a single query loses its dimension


_BUFFERS = {}


def loops_into_a_global_buffer(query, key, value):
    output, weights = loops_as_in_the_notebook(query, key, value)
    kept = _BUFFERS.setdefault(("loops", tuple(weights.shape), weights.dtype), torch.empty_like(weights))
    kept.copy_(weights)  # every call returns the same tensor
    return output, kept


def loops_scaled_by_a_float32_tensor(query, key, value):
    d_k = torch.tensor(query.size(-1))
    weights = torch.zeros(query.size(0), key.size(0), dtype=query.dtype)
    for i in range(query.size(0)):
        for j in range(key.size(0)):
            weights[i, j] = (query[i] * key[j]).sum() / torch.sqrt(d_k)  # a float32 sqrt
        weights[i] = torch.exp(weights[i] - weights[i].max())
        weights[i] = weights[i] / weights[i].sum()
    return weights @ value, weights


def loops_into_lists_of_its_own(query, key, value):
    L_q, L_k = query.size(0), key.size(0)
    scale = query.size(-1) ** -0.5
    weights = torch.empty(L_q, L_k, dtype=query.dtype)  # new on every call, the inputs' dtype
    for i in range(L_q):
        for j in range(L_k):
            weights[i, j] = torch.dot(query[i], key[j]) * scale
        weights[i] = (weights[i] - weights[i].max()).exp()
        weights[i] = weights[i] / weights[i].sum()
    output = torch.stack([sum(weights[i, j] * value[j] for j in range(L_k)) for i in range(L_q)])
    return output, weights


# ---------------------------------------------------------------- attention


def _attention(fill=float("-inf"), post="masked_fill", softmax="library", cast=None, squeeze=False,
               buffer=False):
    """The exercise's attention, with one usual mistake at a time."""
    def attention(query, key, value, mask=None):
        if cast == "float":
            query, key, value = query.float(), key.float(), value.float()  # "for safety"
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, fill)
        if softmax == "library":
            weights = scores.softmax(dim=-1)
        elif softmax == "no shift":
            weights = scores.exp() / scores.exp().sum(-1, keepdim=True)
        elif softmax == "shift when large":
            if scores.max() > 80:
                scores = scores - scores.amax(dim=-1, keepdim=True)
            weights = scores.exp() / scores.exp().sum(-1, keepdim=True)
        if mask is not None and post == "masked_fill":
            weights = weights.masked_fill(~mask, 0.0)
        elif mask is not None and post == "in place":
            weights.masked_fill_(~mask, 0.0)  # the softmax's backward needs its output unchanged
        elif mask is not None and post == "times mask":
            weights = weights * mask
        if cast == "detach":
            weights = weights.detach()
        output = weights @ value
        if buffer:
            kept = _BUFFERS.setdefault(("attention", tuple(output.shape), output.dtype),
                                       torch.empty_like(output))
            output = kept.copy_(output)  # every call returns the same tensor
        if squeeze:
            return output.squeeze(), weights.squeeze()
        return output, weights
    return attention


@torch.no_grad()
def attention_without_gradients(query, key, value, mask=None):
    return scaled_dot_product_attention(query, key, value, mask)


def attention_scaled_by_a_float32_tensor(query, key, value, mask=None):
    # A float32 constant in float64 scores: the result stays float64, with float32's precision.
    scores = query @ key.transpose(-2, -1) / torch.sqrt(torch.tensor(query.size(-1), dtype=torch.float32))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(mask == 0, 0.0)
    return weights @ value, weights


def attention_with_einsum_and_where(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / query.shape[-1] ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = torch.where(mask, weights, 0.0)
    return torch.matmul(weights, value), weights


# ---------------------------------------------------------------- hard_lookup


def _pick(value, index):
    return torch.gather(value, -2, index.unsqueeze(-1).expand(*index.shape, value.size(-1)))


def hard_lookup_reference(query, key, value):
    return _pick(value, (query @ key.transpose(-2, -1)).argmax(dim=-1))


def hard_lookup_with_one_hot(query, key, value):
    index = (query @ key.transpose(-2, -1)).argmax(dim=-1)
    return F.one_hot(index, key.size(-2)).to(value.dtype) @ value


def hard_lookup_as_a_large_multiple(query, key, value):
    return scaled_dot_product_attention(1e6 * query, key, value)[0]  # one-hot in float32


def hard_lookup_soft(query, key, value):
    return scaled_dot_product_attention(query, key, value)[0]


def hard_lookup_times_20(query, key, value):
    return scaled_dot_product_attention(20 * query, key, value)[0]


def hard_lookup_lowest(query, key, value):
    return _pick(value, (query @ key.transpose(-2, -1)).argmin(dim=-1))


def hard_lookup_nearest(query, key, value):
    distance = (query.unsqueeze(-2) - key.unsqueeze(-3)).norm(dim=-1)  # (..., L_q, L_k)
    return _pick(value, distance.argmin(dim=-1))


def hard_lookup_cosine(query, key, value):
    cosine = F.normalize(query, dim=-1) @ F.normalize(key, dim=-1).transpose(-2, -1)
    return _pick(value, cosine.argmax(dim=-1))


def hard_lookup_keys(query, key, value):
    return _pick(key, (query @ key.transpose(-2, -1)).argmax(dim=-1))


def hard_lookup_gather_unexpanded(query, key, value):
    index = (query @ key.transpose(-2, -1)).argmax(dim=-1)
    return torch.gather(value, -2, index.unsqueeze(-1))


def hard_lookup_over_the_queries(query, key, value):
    index = (query @ key.transpose(-2, -1)).argmax(dim=-2)  # (..., L_k): best query per key
    return _pick(value, index)


def hard_lookup_indexing_the_batch(query, key, value):
    return value[(query @ key.transpose(-2, -1)).argmax(dim=-1)]


def hard_lookup_with_a_batch_range(query, key, value):
    index = (query @ key.transpose(-2, -1)).argmax(dim=-1)  # (batch, L_q)
    return value[torch.arange(value.size(0))[:, None], index]  # 3-D inputs only


def hard_lookup_with_key_T(query, key, value):
    return _pick(value, (query @ key.T).argmax(dim=-1))


def hard_lookup_hard_coded(query, key, value):
    index = (query @ key.transpose(-2, -1)).argmax(dim=-1)
    return torch.gather(value, -2, index.unsqueeze(-1).expand(2, 3, 7))  # the first set's sizes


def hard_lookup_returning_a_pair(query, key, value):
    return hard_lookup_reference(query, key, value), None


def hard_lookup_by_equal_to_max(query, key, value):
    scores = query @ key.transpose(-2, -1)
    one_hot = (scores == scores.amax(-1, keepdim=True)).to(value.dtype)  # every tied key is 1
    return one_hot @ value


def hard_lookup_with_a_float_one_hot(query, key, value):
    index = (query @ key.transpose(-2, -1)).argmax(dim=-1)
    return F.one_hot(index, key.size(-2)).float() @ value.float()  # float32 for float64 inputs


def hard_lookup_into_zeros(query, key, value):
    index = (query @ key.transpose(-2, -1)).argmax(dim=-1)
    out = torch.zeros(*index.shape, value.size(-1))  # float32 whatever the inputs
    out[...] = _pick(value, index)
    return out


def hard_lookup_squeezed(query, key, value):
    return hard_lookup_reference(query, key, value).squeeze()


def hard_lookup_into_a_global_buffer(query, key, value):
    out = hard_lookup_reference(query, key, value)
    kept = _BUFFERS.setdefault(("hard", tuple(out.shape), out.dtype), torch.empty_like(out))
    return kept.copy_(out)


def hard_lookup_of_the_last_tied_key(query, key, value):
    scores = query @ key.transpose(-2, -1)
    index = scores.size(-1) - 1 - scores.flip(-1).argmax(dim=-1)
    return _pick(value, index)


def hard_lookup_averaging_the_tied_keys(query, key, value):
    scores = query @ key.transpose(-2, -1)
    best = (scores == scores.amax(-1, keepdim=True)).to(value.dtype)
    return (best / best.sum(-1, keepdim=True)) @ value  # the limit of attention on a tie


def hard_lookup_with_take_along_dim(query, key, value):
    index = torch.matmul(query, key.mT).argmax(dim=-1, keepdim=True)  # (..., L_q, 1)
    return torch.take_along_dim(value, index, dim=-2)


def hard_lookup_off_by_one(query, key, value):
    index = (query @ key.transpose(-2, -1)).argmax(dim=-1)
    return _pick(value, (index + 1) % key.size(-2))


def loops_as_in_the_notebook(query, key, value):
    """The four steps of notebook 02 for one query at a time."""
    d_k = query.size(-1)
    outputs, rows = [], []
    for q in query:  # one query (d_k,)
        scores = torch.stack([(q * k).sum() for k in key]) / math.sqrt(d_k)  # (L_k,)
        e = torch.exp(scores - scores.max())
        weights = e / e.sum()
        outputs.append(sum(w * v for w, v in zip(weights, value)))
        rows.append(weights)
    return torch.stack(outputs), torch.stack(rows)


WRONG_ANSWERS = [
    # (check, wrong answer, what the message must say)
    (check_attention_loops, not_done, r"raised NotImplementedError"),
    (check_attention_loops, _loops(scale="none"), r"forgot the 1/sqrt\(d_k\) scaling"),
    (check_attention_loops, _loops(scale="d_k"), r"divided the scores by d_k = 6 instead of sqrt\(d_k\)"),
    (check_attention_loops, _loops(scale="sqrt(6)"),
     r"divided the scores by 2\.449, but here d_k = 7, so sqrt\(d_k\) = 2\.646: is d_k .*written "
     r"into your code"),
    (check_attention_loops, _loops(normalize="queries"),
     r"each column of your weights sums to 1: you normalized each key's scores over the queries"),
    (check_attention_loops, _loops(normalize="none"), r"exponentials of the scaled scores not divided"),
    (check_attention_loops, _loops(stable=False),
     r"NaN or inf when a scaled score reaches 300.*subtract the largest of its scores"),
    (check_attention_loops, _loops(average="keys"), r"got \(3, 6\)\. That is \(3, 6\), \(L_q, d_k\): you averaged the keys"),
    (check_attention_loops, _loops(average="unweighted"), r"plain sum of the values"),
    (check_attention_loops, _loops(average="mean"), r"plain mean of the values"),
    (check_attention_loops, _loops(weights_layout="transposed"),
     r"expected \(3, 5\), got \(5, 3\)\. Your weights are transposed"),
    (check_attention_loops, _loops(L_q_fixed=3),
     r"(?s)expected \(5, 3\), got \(3, 3\).*passed with \(L_q=3, L_k=5, d_k=6, d_v=2\) but not with "
     r"\(L_q=5, L_k=2, d_k=7, d_v=3\): is a size written into your code"),
    (check_attention_loops, loops_returning_the_output_only,
     r"should return a pair \(output, weights\), got one tensor of shape \(3, 2\)"),
    (check_attention_loops, loops_scaling_the_query_in_place,
     r"changed its first argument `query` in place: 18 of its 18 numbers changed"),
    (check_hard_lookup, not_done, r"raised NotImplementedError"),
    (check_hard_lookup, hard_lookup_soft, r"your output is the soft average"),
    (check_hard_lookup, hard_lookup_times_20,
     r"query 0 of sequence \(0,\) is none of the values but a mix of them.*near tie"),
    (check_hard_lookup, hard_lookup_lowest, r"the key with the lowest score"),
    (check_hard_lookup, hard_lookup_nearest, r"the key nearest to the query"),
    (check_hard_lookup, hard_lookup_cosine, r"highest cosine similarity"),
    (check_hard_lookup, hard_lookup_off_by_one,
     r"one of the values, but not always the value of the best-scoring key: for query 0 of "
     r"sequence \(0,\) the highest score q\.k is key 1's, and your row is the value of key 2"),
    (check_hard_lookup, hard_lookup_keys, r"got \(2, 3, 6\)\. That is \(\.\.\., L_q, d_k\): you returned keys"),
    (check_hard_lookup, hard_lookup_gather_unexpanded,
     r"got \(2, 3, 1\)\. torch\.gather returns one number per index: expand the index"),
    (check_hard_lookup, hard_lookup_over_the_queries, r"got \(2, 5, 7\)\. One row per key"),
    (check_hard_lookup, hard_lookup_indexing_the_batch,
     r"(?s)raised IndexError.*\nHint: value\[index\] indexes the first dimension of value, the batch"),
    (check_hard_lookup, hard_lookup_with_a_batch_range,
     r"works for \(batch, L, d\) inputs but not for \(batch, h, L, d\)"),
    (check_hard_lookup, hard_lookup_with_key_T, r"\.T on a tensor with more than two dimensions"),
    (check_hard_lookup, hard_lookup_hard_coded,
     r"(?s)passed with \(lead=\(2,\), L_q=3, L_k=5, d_k=6, d_v=7\) but not with \(lead=\(3,\), "
     r"L_q=7, L_k=4, d_k=10, d_v=5\): is a size written into your code"),
    (check_hard_lookup, hard_lookup_returning_a_pair, r"got tuple of length 2: return the tensor itself"),
    (check_hard_lookup, hard_lookup_by_equal_to_max,
     r"when two keys tie for the highest score, your output is the sum of their values: a one-hot "
     r"made with scores == scores\.max"),
    (check_hard_lookup, hard_lookup_with_a_float_one_hot,
     r"as torch\.float32 for torch\.float64 inputs.*one-hot or mask turned into numbers with "
     r"\.float\(\)"),
    (check_hard_lookup, hard_lookup_into_zeros,
     r"as torch\.float32 for torch\.float64 inputs.*tensor created without dtype="),
    (check_hard_lookup, hard_lookup_squeezed,
     r"for a batch of one sentence with one query, \(1, 1, d_k\): expected \(1, 1, 3\), got \(3,\)\. "
     r"Your result lost dimensions of size 1"),
    (check_hard_lookup, hard_lookup_into_a_global_buffer,
     r"a second call of hard_lookup_into_a_global_buffer, on other inputs, changed the output"),
    (check_attention_loops, _loops(dtype=None),
     r"attention_loops returned the output as torch\.float32 for torch\.float64 inputs.*tensor "
     r"created without dtype="),
    (check_attention_loops, loops_in_python_floats,
     r"returned the output as torch\.float32 for torch\.float64 inputs"),
    (check_attention_loops, loops_shifted_when_large,
     r"NaN or weights that vanish when every scaled score is about -3e4.*subtracted only when the "
     r"scores are large"),
    (check_attention_loops, loops_squeezed,
     r"the output weights @ value for a single query, \(1, L_k\): expected \(1, 2\), got \(2,\)\. Your "
     r"result lost dimensions of size 1"),
    (check_attention_loops, loops_into_a_global_buffer,
     r"a second call of loops_into_a_global_buffer, on other inputs, changed the output and weights"),
    (check_attention, _attention(fill=-1e4),
     r"every scaled score is about -3e4 .*the weights of the keys it may see vanished.*filled with "
     r"a finite number \(such as -1e4\)"),
    (check_attention, _attention(softmax="no shift"),
     r"NaN or inf when a scaled score reaches 300.*without subtracting the maximum"),
    (check_attention, _attention(softmax="shift when large"),
     r"NaN when every scaled score is about -3e4.*subtracted only when the scores are large"),
    (check_attention, _attention(cast="float"),
     r"returned the output as torch\.float32 for torch\.float64 inputs.*\.float\(\)"),
    (check_attention, _attention(squeeze=True),
     r"one query, \(1, 1, d_k\): expected \(1, 1, 3\), got \(3,\)\. Your result lost dimensions"),
    (check_attention, _attention(buffer=True),
     r"a second call of attention, on other inputs, changed the output and weights that the first"),
    (check_attention, attention_without_gradients,
     r"returned the output and weights without a gradient.*@torch\.no_grad\(\)"),
    (check_attention, _attention(cast="detach"),
     r"no gradient reaches query through the output and weights of attention"),
    (check_attention, _attention(post="in place"),
     r"the backward pass through the output and weights of attention fails.*changed in place"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:30]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


@pytest.mark.parametrize("check, fn", [
    (check_attention_loops, scaled_dot_product_attention),
    (check_attention_loops, loops_as_in_the_notebook),
    (check_attention_loops, _loops()),
    (check_attention_loops, loops_into_lists_of_its_own),
    (check_attention_loops, loops_scaled_by_a_float32_tensor),
    (check_attention, scaled_dot_product_attention),
    (check_attention, _attention()),
    (check_attention, _attention(fill=-1e9, post="times mask")),
    (check_attention, attention_with_einsum_and_where),
    (check_attention, attention_scaled_by_a_float32_tensor),
    (check_hard_lookup, hard_lookup_reference),
    (check_hard_lookup, hard_lookup_with_one_hot),
    (check_hard_lookup, hard_lookup_as_a_large_multiple),
    (check_hard_lookup, hard_lookup_of_the_last_tied_key),
    (check_hard_lookup, hard_lookup_averaging_the_tied_keys),
    (check_hard_lookup, hard_lookup_with_take_along_dim),
], ids=["course attention", "loops per query", "loops per pair", "loops into its own tensor",
        "loops with a float32 sqrt", "course attention (2.1)", "attention", "fill -1e9 times mask",
        "einsum and where", "float32 sqrt",
        "gather", "one_hot", "attention of 1e6 q", "last tied key", "mean of tied keys",
        "take_along_dim"])
def test_check_passes_on_the_course_code_and_equivalent_answers(check, fn, capsys):
    check(fn)
    assert capsys.readouterr().out.startswith(f"{check.__name__} passed: ")


def test_the_hard_lookup_is_the_limit_of_attention_with_a_growing_query():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 6, generator=g), torch.randn(2, 5, 7, generator=g)
    gaps = [(scaled_dot_product_attention(c * q, k, v)[0] - hard_lookup_reference(q, k, v)).abs().max()
            for c in (1, 20, 1000)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-5
