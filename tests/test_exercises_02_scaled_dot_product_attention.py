"""The checks of notebook 02's exercises 2.2 and 2.3 (those of 2.1, check_attention, are in
tests/test_exercises.py): each passes on the course's code and names the mistake of typical
wrong answers (collected with the others by tests/test_exercises.py)."""

import math

import pytest
import torch
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.support.grading import ExerciseFailed, check_attention_loops, check_hard_lookup


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- attention_loops


def _loops(scale="sqrt", normalize="keys", stable=True, average="values", weights_layout="rows",
           L_q_fixed=None):
    """Attention with loops over the queries and keys, with one usual mistake at a time."""
    def attention_loops(query, key, value):
        L_q = L_q_fixed or query.size(0)
        L_k, d_k = key.size(0), query.size(-1)
        c = {"sqrt": math.sqrt(d_k), "none": 1.0, "d_k": d_k, "sqrt(6)": math.sqrt(6)}[scale]
        scores = torch.zeros(L_q, L_k)
        for i in range(L_q):
            for j in range(L_k):
                scores[i, j] = (query[i] * key[j]).sum() / c
        if normalize == "queries":  # each key's scores over the queries
            e = torch.exp(scores - scores.amax(dim=0, keepdim=True))
            weights = e / e.sum(dim=0, keepdim=True)
        else:
            weights = torch.zeros(L_q, L_k)
            for i in range(L_q):
                e = torch.exp(scores[i] - scores[i].max()) if stable else torch.exp(scores[i])
                weights[i] = e / e.sum() if normalize == "keys" else e
        rows = key if average == "keys" else value
        output = torch.zeros(L_q, rows.size(-1))
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
    (check_attention_loops, _loops(average="keys"), r"shape \(3, 6\), \(L_q, d_k\): you averaged the keys"),
    (check_attention_loops, _loops(average="unweighted"), r"plain sum of the values"),
    (check_attention_loops, _loops(average="mean"), r"plain mean of the values"),
    (check_attention_loops, _loops(weights_layout="transposed"),
     r"expected \(3, 5\), got \(5, 3\)\. Your weights are transposed"),
    (check_attention_loops, _loops(L_q_fixed=3),
     r"(?s)expected \(5, 2\), got \(3, 2\).*passed with \(L_q=3, L_k=5, d_k=6, d_v=2\) but not with "
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
    (check_hard_lookup, hard_lookup_reference),
    (check_hard_lookup, hard_lookup_with_one_hot),
    (check_hard_lookup, hard_lookup_as_a_large_multiple),
], ids=["course attention", "loops per query", "loops per pair", "gather", "one_hot",
        "attention of 1e6 q"])
def test_check_passes_on_the_course_code_and_equivalent_answers(check, fn, capsys):
    check(fn)
    assert capsys.readouterr().out.startswith(f"{check.__name__} passed: ")


def test_the_hard_lookup_is_the_limit_of_attention_with_a_growing_query():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 6, generator=g), torch.randn(2, 5, 7, generator=g)
    gaps = [(scaled_dot_product_attention(c * q, k, v)[0] - hard_lookup_reference(q, k, v)).abs().max()
            for c in (1, 20, 1000)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-5
