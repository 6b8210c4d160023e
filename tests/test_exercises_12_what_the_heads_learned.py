"""The checks of notebook 10's exercises (annotated.support.grading.heads): each passes on the
course's own code and names the mistake of typical wrong answers."""

import contextlib
import io
import math

import pytest
import torch

from annotated.heads import head_statistics
from annotated.heads import to_words as course_to_words
from annotated.support.grading import (
    ExerciseFailed,
    check_em_step,
    check_normalized_entropy,
    check_previous_token_share,
    check_to_words,
)
from annotated.support.grading.heads import _em_reference


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- the course's own answers


def course_normalized_entropy(weights, mask, query_valid):
    sums = head_statistics(weights, mask, query_valid, {})
    return sums["entropy"] / sums["uniform"]


def course_previous_token_share(weights, query_valid):
    L = weights.size(-1)
    sums = head_statistics(weights, torch.ones(1, 1, L, dtype=torch.bool), query_valid, {}, max_offset=1)
    return (sums["offset"][:, 0] / sums["rows"]).to(weights.dtype)  # head_statistics counts in float32


def course_em_step(t, pairs):
    return _em_reference(t, pairs).to(t.dtype)


@pytest.mark.parametrize("check, answer", [
    (check_to_words, course_to_words),
    (check_normalized_entropy, course_normalized_entropy),
    (check_previous_token_share, course_previous_token_share),
    (check_em_step, course_em_step),
], ids=lambda x: getattr(x, "__name__", ""))
def test_each_check_passes_on_the_courses_own_code_and_prints_one_line(check, answer):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        check(answer)
    lines = printed.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{check.__name__} passed: ")


# ---------------------------------------------------------------- pieces -> words


def _word_ids(pieces, join_at_start=False):
    ids, word = [], 0
    for i, piece in enumerate(pieces):
        if i > 0 and not pieces[i - 1].endswith("@@") and not (join_at_start and piece.startswith("@@")):
            word += 1
        ids.append(word)
    return torch.tensor(ids)


def _to_words(rows="mean", columns="sum", join_at_start=False, one_hot_dtype=True):
    def to_words(weights, query_pieces, key_pieces):
        cast = (lambda m: m.to(weights.dtype)) if one_hot_dtype else (lambda m: m)
        to_word = cast(torch.nn.functional.one_hot(_word_ids(key_pieces, join_at_start)))  # (L_k, W_k)
        from_word = cast(torch.nn.functional.one_hot(_word_ids(query_pieces, join_at_start))).T  # (W_q, L_q)
        if rows == "mean":
            from_word = from_word / from_word.sum(dim=1, keepdim=True)
        if columns == "mean":
            to_word = to_word / to_word.sum(dim=0, keepdim=True)
        return from_word @ weights @ to_word
    return to_words


def _to_words_one_piece(which):
    """A word's row taken from one of its pieces (its first or its last)."""
    def to_words(weights, query_pieces, key_pieces):
        ids = _word_ids(query_pieces)
        pick = [int((ids == w).nonzero()[which]) for w in range(int(ids.max()) + 1)]
        to_word = torch.nn.functional.one_hot(_word_ids(key_pieces)).to(weights.dtype)
        return weights[..., pick, :] @ to_word
    return to_words


def to_words_for_one_batch_of_three(weights, query_pieces, key_pieces):
    return course_to_words(weights.reshape(3, len(query_pieces), len(key_pieces)), query_pieces, key_pieces)


# ---------------------------------------------------------------- entropy / log n


def _entropy(log=torch.log, log_n=torch.log, zero_safe=True, valid_rows="both", n_from="mask", sign=-1,
             normalize=True, per_row=False, per_sentence=False, over_keys="sum"):
    def normalized_entropy(weights, mask, query_valid):
        batch, h, L_q, L_k = weights.shape
        p_log_p = weights * (log(weights.clamp_min(1e-12)) if zero_safe else log(weights))
        entropy = sign * (p_log_p.sum(-1) if over_keys == "sum" else p_log_p.mean(-1))  # (batch, h, L_q)
        n = mask.sum(-1).expand(batch, L_q) if n_from == "mask" else torch.full((batch, L_q), L_k)
        uniform = log_n(n.to(weights.dtype))[:, None, :].expand(batch, h, L_q)
        if not normalize:
            uniform = torch.ones_like(uniform)
        rows = query_valid[:, None, :].expand(batch, h, L_q).to(weights.dtype)
        top = rows if valid_rows in ("both", "top") else torch.ones_like(rows)
        bottom = rows if valid_rows in ("both", "bottom") else torch.ones_like(rows)
        if per_row:
            return (entropy / uniform * rows).sum((0, 2)) / rows.sum((0, 2))
        if per_sentence:
            return ((entropy * top).sum(2) / (uniform * bottom).sum(2)).mean(0)
        return (entropy * top).sum((0, 2)) / (uniform * bottom).sum((0, 2))
    return normalized_entropy


def entropy_one_number_per_sentence(weights, mask, query_valid):
    batch, h, L_q, _ = weights.shape
    entropy = -torch.special.xlogy(weights, weights).sum(-1)
    log_n = mask.sum(-1).to(weights.dtype).log().expand(batch, L_q)[:, None, :]
    rows = query_valid[:, None, :].to(weights.dtype)
    return (entropy * rows).sum(2) / (log_n * rows).sum(2)  # (batch, h)


def entropy_with_the_mask_sum_without_heads(weights, mask, query_valid):
    entropy = -torch.special.xlogy(weights, weights).sum(-1)  # (batch, h, L_q)
    log_n = mask.sum(-1).to(weights.dtype).log().expand_as(entropy)  # (batch, 1) has no head dimension
    rows = query_valid[:, None, :].to(weights.dtype)
    return (entropy * rows).sum((0, 2)) / (log_n * rows).sum((0, 2))


def entropy_for_five_heads(weights, mask, query_valid):
    batch, _, L_q, L_k = weights.shape
    entropy = -torch.special.xlogy(weights, weights).sum(-1).view(batch, 5, L_q)
    log_n = mask.sum(-1).to(weights.dtype).log().expand(batch, L_q)[:, None, :]
    rows = query_valid[:, None, :].to(weights.dtype)
    return (entropy * rows).sum((0, 2)) / (log_n * rows).sum((0, 2))


# ---------------------------------------------------------------- the previous-token head


def _previous(offset=-1, wrap=False, first_row="counted", rows="valid", dim=-1, result="share",
              per_sentence=False):
    def previous_token_share(weights, query_valid):
        batch, h, L, _ = weights.shape
        i = torch.arange(L)
        target = (i + offset) % L if wrap else i + offset
        hits = weights.argmax(dim) == target  # (batch, h, L)
        valid = query_valid[:, None, :].expand(batch, h, L)
        # rows: "valid", "all", or padded rows counted only "top" (above) or "bottom" (below the bar)
        counted = valid if rows in ("valid", "bottom") else torch.ones_like(valid)
        below = valid if rows in ("valid", "top") else torch.ones_like(valid)
        if first_row == "left out":
            below = below & (i >= 1)
        if result == "count":
            return (hits & counted).sum((0, 2)).to(weights.dtype)
        if per_sentence:
            return ((hits & counted).sum(2) / below.sum(2)).mean(0).to(weights.dtype)
        share = (hits & counted).sum((0, 2)).to(weights.dtype) / below.sum((0, 2))
        return 100 * share if result == "percent" else share
    return previous_token_share


def previous_mean_weight(weights, query_valid):
    i = torch.arange(1, weights.size(-1))
    on_previous = weights[..., i, i - 1]  # (batch, h, L - 1)
    valid = query_valid[:, None, :].to(weights.dtype)
    return (on_previous * valid[..., 1:]).sum((0, 2)) / valid.sum((0, 2))


def previous_per_row(weights, query_valid):
    return (weights.argmax(-1) == torch.arange(weights.size(-1)) - 1).to(weights.dtype)  # (batch, h, L)


def previous_for_three_sentences(weights, query_valid):
    hits = weights.argmax(-1) == torch.arange(weights.size(-1)) - 1
    valid = query_valid[:, None, :]
    return torch.stack([(hits[b] & valid[b]).sum(-1) for b in range(3)]).sum(0) / valid[:3].sum((0, 2))


# ---------------------------------------------------------------- IBM Model 1


def _em(null=True, posterior_over="german", repeats="counted", normalize="columns"):
    def em_step(t, pairs):
        return _em_reference(t, pairs, null, posterior_over, repeats, normalize)
    return em_step


def em_dividing_in_place(t, pairs):
    counts = _em_reference(t, pairs, normalize="none")
    t.copy_(counts)  # overwrites the caller's table
    return t / t.sum(0, keepdim=True)


def em_in_float32(t, pairs):
    return _em_reference(t, pairs).float()


def em_from_the_uniform_table(t, pairs):
    return _em_reference(torch.ones_like(t) / t.size(0), pairs)


def em_transposed(t, pairs):
    return _em_reference(t, pairs).T


def em_for_nine_english_words(t, pairs):
    counts = torch.zeros(9, t.size(1), dtype=t.dtype)
    for german, english in pairs:
        fs = torch.cat([german.new_zeros(1), german])
        block = t[english][:, fs]
        posterior = block / block.sum(1, keepdim=True)
        counts.index_put_((english[:, None].expand_as(posterior), fs.expand_as(posterior)), posterior,
                          accumulate=True)
    return counts / counts.sum(0, keepdim=True)


# ---------------------------------------------------------------- the classes of wrong answer every check meets
# (numerical range, shapes the signature allows, dtype, state, edge values, ties, text)


def _word_matrices(weights, query_pieces, key_pieces, make=lambda m, weights: m.to(weights.dtype)):
    to_word = make(torch.nn.functional.one_hot(_word_ids(key_pieces)), weights)  # (L_k, W_k)
    from_word = make(torch.nn.functional.one_hot(_word_ids(query_pieces)), weights).T  # (W_q, L_q)
    return from_word / from_word.sum(dim=1, keepdim=True), to_word


def to_words_with_float_one_hots(weights, query_pieces, key_pieces):
    from_word, to_word = _word_matrices(weights, query_pieces, key_pieces, lambda m, w: m.float())
    return from_word @ weights @ to_word  # float64 weights meet float32 matrices


def to_words_with_zeros_without_dtype(weights, query_pieces, key_pieces):
    q_ids, k_ids = _word_ids(query_pieces), _word_ids(key_pieces)
    to_word = torch.zeros(len(key_pieces), int(k_ids.max()) + 1)  # float32 whatever the weights
    to_word[torch.arange(len(key_pieces)), k_ids] = 1.0
    from_word = torch.zeros(int(q_ids.max()) + 1, len(query_pieces))
    from_word[q_ids, torch.arange(len(query_pieces))] = 1.0
    return (from_word / from_word.sum(1, keepdim=True)) @ weights.float() @ to_word


def to_words_squeezed(weights, query_pieces, key_pieces):
    return course_to_words(weights, query_pieces, key_pieces).squeeze()


def to_words_counting_the_pieces_that_end_a_word(weights, query_pieces, key_pieces):
    def one_hot(pieces):  # the number of words = the pieces that do not end in '@@'
        words = sum(1 for piece in pieces if not piece.endswith("@@"))
        return torch.nn.functional.one_hot(_word_ids(pieces), words).to(weights.dtype)
    from_word = one_hot(query_pieces).T
    return (from_word / from_word.sum(1, keepdim=True)) @ weights @ one_hot(key_pieces)


_BUFFERS = {}


def _into_a_global_buffer(fn):
    """``fn``'s result copied into a buffer kept between calls, one per shape and dtype."""
    def wrapped(*args):
        result = fn(*args)
        buffer = _BUFFERS.setdefault((fn.__name__, result.shape, result.dtype), torch.empty_like(result))
        return buffer.copy_(result)
    wrapped.__name__ = fn.__name__
    return wrapped


def to_words_by_index_add(weights, query_pieces, key_pieces):  # right: no matrices at all
    q_ids, k_ids = _word_ids(query_pieces), _word_ids(key_pieces)
    columns = torch.zeros(*weights.shape[:-1], int(k_ids.max()) + 1, dtype=weights.dtype).index_add(-1, k_ids, weights)
    rows = torch.zeros(*weights.shape[:-2], int(q_ids.max()) + 1, columns.size(-1), dtype=weights.dtype)
    rows = rows.index_add(-2, q_ids, columns)
    return rows / torch.bincount(q_ids).to(weights.dtype)[:, None]


def to_words_from_word_starts(weights, query_pieces, key_pieces):  # right: ids from where words start
    def one_hot(pieces):
        starts = torch.tensor([i == 0 or not pieces[i - 1].endswith("@@") for i in range(len(pieces))])
        return torch.nn.functional.one_hot(starts.long().cumsum(0) - 1).to(weights.dtype)
    from_word = one_hot(query_pieces).T
    return (from_word / from_word.sum(1, keepdim=True)) @ weights @ one_hot(key_pieces)


def entropy_with_n_from_nonzero_weights(weights, mask, query_valid):
    entropy = -torch.special.xlogy(weights, weights).sum(-1)  # (batch, h, L_q)
    log_n = (weights > 0).sum(-1).to(weights.dtype).log()  # the keys the head uses, not those it may see
    rows = query_valid[:, None, :].to(weights.dtype)
    return (entropy * rows).sum((0, 2)) / (log_n * rows).sum((0, 2))


def entropy_averaging_the_ratios_of_rows_with_several_keys(weights, mask, query_valid):
    batch, h, L_q, _ = weights.shape
    entropy = -torch.special.xlogy(weights, weights).sum(-1)
    log_n = mask.sum(-1).to(weights.dtype).log().expand(batch, L_q)[:, None, :].expand(batch, h, L_q)
    ratio = entropy / log_n  # 0 / 0 = NaN on a row that sees one key
    rows = query_valid[:, None, :].expand(batch, h, L_q) & (log_n > 0)
    return (ratio.nan_to_num() * rows).sum((0, 2)) / rows.sum((0, 2))


def entropy_in_float32(weights, mask, query_valid):
    return course_normalized_entropy(weights.float(), mask, query_valid)


def entropy_summed_into_zeros(weights, mask, query_valid):
    batch, h, L_q, _ = weights.shape
    entropy = -torch.special.xlogy(weights, weights).sum(-1)
    log_n = mask.sum(-1).to(weights.dtype).log().expand(batch, L_q)
    result = torch.zeros(h)  # float32 whatever the weights
    for head in range(h):
        result[head] = (entropy[:, head] * query_valid).sum() / (log_n * query_valid).sum()
    return result


def entropy_squeezing_the_valid_rows(weights, mask, query_valid):
    batch, h, L_q, _ = weights.shape
    entropy = -torch.special.xlogy(weights, weights).sum(-1)
    log_n = mask.sum(-1).to(weights.dtype).log().expand(batch, L_q)
    rows = query_valid.squeeze().to(weights.dtype)  # (batch, L_q) ... or (L_q,) for one sentence
    return (entropy * rows[:, None, :]).sum((0, 2)) / (log_n * rows).sum() * torch.ones(h, dtype=weights.dtype)


def entropy_row_by_row(weights, mask, query_valid):  # right: loops over the valid rows
    batch, h, L_q, L_k = weights.shape
    visible = mask.expand(batch, L_q, L_k)
    entropy, log_n = torch.zeros(h, dtype=weights.dtype), 0.0
    for b in range(batch):
        for i in range(L_q):
            if query_valid[b, i]:
                p = weights[b, :, i][:, visible[b, i]]
                entropy = entropy - torch.where(p > 0, p * p.log(), torch.zeros_like(p)).sum(-1)
                log_n += math.log(int(visible[b, i].sum()))
    return entropy / log_n


def entropy_with_nansum(weights, mask, query_valid):  # right: 0 * log 0 = NaN, left out by nansum
    batch, h, L_q, _ = weights.shape
    entropy = -(weights * weights.log()).nansum(-1)
    log_n = mask.sum(-1, keepdim=True).to(weights.dtype).log().expand(batch, L_q, 1).squeeze(-1)
    rows = query_valid[:, None, :].to(weights.dtype)
    return (entropy * rows).sum((0, 2)) / (log_n[:, None, :] * rows).sum((0, 2))


def _previous_on(hit):
    def previous_token_share(weights, query_valid):
        L = weights.size(-1)
        i = torch.arange(L)
        on_previous = hit(weights, i)  # (batch, h, L)
        rows = query_valid[:, None, :]
        return (on_previous & rows).sum((0, 2)).to(weights.dtype) / rows.sum((0, 2)).to(weights.dtype)
    return previous_token_share


def _weight_on_previous_is_the_max(weights, i):
    on_previous = torch.cat([torch.zeros_like(weights[..., :1, 0]), weights[..., i[1:], i[1:] - 1]], -1)
    return (on_previous == weights.amax(-1)) & (i >= 1)


previous_counting_every_tie = _previous_on(_weight_on_previous_is_the_max)
previous_by_topk = _previous_on(lambda weights, i: weights.topk(1, dim=-1).indices[..., 0] == i - 1)
previous_by_the_last_maximum = _previous_on(
    lambda weights, i: weights.size(-1) - 1 - weights.flip(-1).argmax(-1) == i - 1)
previous_by_max_indices = _previous_on(lambda weights, i: weights.max(dim=-1).indices == i - 1)  # right


def previous_in_float32(weights, query_valid):
    on_previous = weights.argmax(-1) == torch.arange(weights.size(-1)) - 1
    rows = query_valid[:, None, :]
    return (on_previous & rows).sum((0, 2)).float() / rows.sum((0, 2))


def previous_into_zeros(weights, query_valid):
    on_previous = weights.argmax(-1) == torch.arange(weights.size(-1)) - 1
    share = torch.zeros(weights.size(1))  # float32 whatever the weights
    for head in range(weights.size(1)):
        share[head] = (on_previous[:, head] & query_valid).sum() / query_valid.sum()
    return share


def previous_squeezing_the_valid_rows(weights, query_valid):
    on_previous = weights.argmax(-1) == torch.arange(weights.size(-1)) - 1
    rows = query_valid.squeeze()[:, None, :]  # (batch, 1, L) ... or an error for one sentence
    return (on_previous & rows).sum((0, 2)).to(weights.dtype) / rows.sum((0, 2)).to(weights.dtype)


def _em_with(eps=0.0, float32=False, clamp=None):
    def em_step(t, pairs):
        table = t.float() if float32 else t
        table = table.clamp_min(clamp) if clamp else table
        counts = torch.zeros_like(table)
        for german, english in pairs:
            fs = torch.cat([german.new_zeros(1), german])
            block = table[english][:, fs]
            posterior = block / (block.sum(1, keepdim=True) + eps)
            counts = counts.index_put((english[:, None].expand_as(posterior), fs[None, :].expand_as(posterior)),
                                      posterior, accumulate=True)
        return (counts / counts.sum(0, keepdim=True)).to(t.dtype)
    return em_step


def em_counting_into_float32_zeros(t, pairs):
    counts = torch.zeros(t.shape)  # float32: the counts lose digits
    for german, english in pairs:
        fs = torch.cat([german.new_zeros(1), german])
        block = t[english][:, fs]
        posterior = block / block.sum(1, keepdim=True)
        counts.index_put_((english[:, None].expand_as(posterior), fs[None, :].expand_as(posterior)),
                          posterior.float(), accumulate=True)
    return (counts / counts.sum(0, keepdim=True)).to(t.dtype)


def em_without_dtype_for_the_counts(t, pairs):
    counts = torch.zeros(t.shape)
    for german, english in pairs:
        fs = torch.cat([german.new_zeros(1), german])
        block = t[english][:, fs]
        posterior = block / block.sum(1, keepdim=True)
        counts.index_put_((english[:, None].expand_as(posterior), fs[None, :].expand_as(posterior)),
                          posterior, accumulate=True)  # float64 values into float32 counts: an error
    return counts / counts.sum(0, keepdim=True)


def em_squeezing_the_posterior(t, pairs):
    counts = torch.zeros_like(t)
    for german, english in pairs:
        fs = torch.cat([german.new_zeros(1), german])
        block = t[english][:, fs]
        posterior = (block / block.sum(1, keepdim=True)).squeeze()  # one English word: a row no more
        for j, e in enumerate(english.tolist()):
            counts[e].index_add_(0, fs, posterior[j])
    return counts / counts.sum(0, keepdim=True)


def em_dividing_a_global_buffer(t, pairs):
    counts = _BUFFERS.setdefault(("em", t.shape), torch.zeros_like(t))
    counts.zero_()
    for german, english in pairs:
        fs = torch.cat([german.new_zeros(1), german])
        block = t[english][:, fs]
        posterior = block / block.sum(1, keepdim=True)
        counts.index_put_((english[:, None].expand_as(posterior), fs[None, :].expand_as(posterior)), posterior,
                          accumulate=True)
    counts /= counts.sum(0, keepdim=True)  # the buffer itself is the result
    return counts


def em_with_python_loops(t, pairs):  # right: word by word, Python sums
    counts = torch.zeros_like(t)
    for german, english in pairs:
        fs = [0, *german.tolist()]
        for e in english.tolist():
            total = sum(t[e, f] for f in fs)
            for f in fs:
                counts[e, f] += t[e, f] / total
    return counts / counts.sum(0)


def em_in_log_space(t, pairs):  # right: the posterior from log-probabilities
    counts = torch.zeros_like(t)
    for german, english in pairs:
        fs = torch.cat([german.new_zeros(1), german])
        log_block = t[english][:, fs].log()
        posterior = (log_block - log_block.logsumexp(1, keepdim=True)).exp()
        counts.index_put_((english[:, None].expand_as(posterior), fs[None, :].expand_as(posterior)), posterior,
                          accumulate=True)
    return counts / counts.sum(0, keepdim=True)


def em_squeezing_each_sentence(t, pairs):  # right: squeezes, and views one word as a sentence again
    counts = torch.zeros_like(t)
    for german, english in pairs:
        german, english = german.squeeze().view(-1), english.squeeze().view(-1)
        fs = torch.cat([german.new_zeros(1), german])
        block = t[english][:, fs]
        posterior = block / block.sum(-1, keepdim=True)
        counts = counts.index_put((english[:, None].expand_as(posterior), fs[None, :].expand_as(posterior)),
                                  posterior, accumulate=True)
    return counts / counts.sum(0, keepdim=True)


RIGHT_ANSWERS = [
    (check_to_words, to_words_by_index_add),
    (check_to_words, to_words_from_word_starts),
    (check_normalized_entropy, entropy_row_by_row),
    (check_normalized_entropy, entropy_with_nansum),
    (check_previous_token_share, previous_by_max_indices),
    (check_em_step, em_with_python_loops),
    (check_em_step, em_in_log_space),
    (check_em_step, em_squeezing_each_sentence),
]


@pytest.mark.parametrize("check, answer", RIGHT_ANSWERS, ids=[a.__name__ for _, a in RIGHT_ANSWERS])
def test_each_check_passes_on_other_right_answers(check, answer):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        check(answer)
    assert printed.getvalue().startswith(f"{check.__name__} passed: ")


CLASS_WRONG_ANSWERS = [
    # dtype: float64 attention given back in float32
    (check_to_words, to_words_with_float_one_hots,
     r"(?s)expected scalar type.*one_hot gives int64 numbers.*This is on float64 inputs"),
    (check_to_words, to_words_with_zeros_without_dtype, r"as torch\.float32 for torch\.float64 inputs"),
    # shapes: a batch of one sentence and a single query piece, squeezed away
    (check_to_words, to_words_squeezed, r"expected \(1, 1, \d+\), got \(\d+,\)\. A dimension of size 1 is gone"),
    # text: key pieces that stop inside a word ("... ka@@ lo@@")
    (check_to_words, to_words_counting_the_pieces_that_end_a_word,
     r"(?s)num_classes.*the key pieces stop inside a word.*count the words from the word ids"),
    # state: a result that lives in a global buffer
    (check_to_words, _into_a_global_buffer(course_to_words), r"a second call of to_words, on other inputs, changed"),
    # edge values: rows that put exactly 0 on keys the mask allows
    (check_normalized_entropy, entropy_with_n_from_nonzero_weights, r"your n counts the keys of nonzero weight"),
    # rows with a single allowed key (log 1 = 0), left out of a mean of ratios
    (check_normalized_entropy, entropy_averaging_the_ratios_of_rows_with_several_keys,
     r"divided row by row and averaged the ratios"),
    (check_normalized_entropy, entropy_in_float32, r"as torch\.float32 for torch\.float64 inputs"),
    (check_normalized_entropy, entropy_summed_into_zeros, r"as torch\.float32 for torch\.float64 inputs"),
    (check_normalized_entropy, entropy_squeezing_the_valid_rows,
     r"(?s)raised IndexError.*This is on a batch of one sentence \(batch=1, h=3, L_q=7, L_k=9\)"),
    (check_normalized_entropy, _into_a_global_buffer(course_normalized_entropy),
     r"a second call of course_normalized_entropy, on other inputs, changed"),
    # ties: a "previous token" counted on a tie
    (check_previous_token_share, previous_counting_every_tie, r"share the largest weight exactly.*FIRST of the tied"),
    (check_previous_token_share, previous_by_topk, r"share the largest weight exactly.*topk, sort"),
    (check_previous_token_share, previous_by_the_last_maximum, r"share the largest weight exactly"),
    (check_previous_token_share, previous_in_float32, r"as torch\.float32 for torch\.float64 inputs"),
    (check_previous_token_share, previous_into_zeros, r"as torch\.float32 for torch\.float64 inputs"),
    (check_previous_token_share, previous_squeezing_the_valid_rows,
     r"(?s)raised IndexError.*This is on a batch of one sentence \(batch=1, h=4, L=8\)"),
    (check_previous_token_share, _into_a_global_buffer(course_previous_token_share),
     r"a second call of course_previous_token_share, on other inputs, changed"),
    # numerical range: probabilities below float32's range
    (check_em_step, _em_with(eps=1e-12), r"probabilities below|below 1e-60 under every German word"),
    (check_em_step, _em_with(clamp=1e-12), r"below 1e-60 under every German word.*clamped"),
    (check_em_step, _em_with(float32=True), r"about float32's precision"),  # the engine's words
    (check_em_step, em_counting_into_float32_zeros, r"about float32's precision.*tensor created without dtype="),
    (check_em_step, em_without_dtype_for_the_counts, r"(?s)Index put requires.*torch\.zeros_like\(t\)"),
    # shapes: a sentence of one word squeezed into no sentence
    (check_em_step, em_squeezing_the_posterior, r"\(tensor\(\[1\]\), tensor\(\[0\]\)\).*raised IndexError"),
    (check_em_step, em_dividing_a_global_buffer, r"a second call of em_dividing_a_global_buffer, on other inputs, changed"),
]


@pytest.mark.parametrize("check, wrong, message", CLASS_WRONG_ANSWERS,
                         ids=[getattr(w, "__name__", "lambda") for _, w, _ in CLASS_WRONG_ANSWERS])
def test_check_rejects_a_wrong_answer_of_each_class(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        with contextlib.redirect_stdout(io.StringIO()):
            check(wrong)


WRONG_ANSWERS = [
    # (check, wrong answer, what the message must say)
    (check_to_words, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_to_words, _to_words(rows="sum"), r"summed over the pieces of the query word as well"),
    (check_to_words, _to_words(columns="mean"), r"averaged over the pieces of the key word as well"),
    (check_to_words, _to_words(rows="sum", columns="mean"), r"sum and mean are swapped"),
    (check_to_words, _to_words_one_piece(0), r"row of its FIRST piece only"),
    (check_to_words, _to_words_one_piece(-1), r"row of its LAST piece only"),
    (check_to_words, _to_words(join_at_start=True), r"(?s)wrong shape.*STARTS with '@@' \(such as '@@\.'\)"),
    (check_to_words, lambda weights, query_pieces, key_pieces: weights.clone(),
     r"(?s)expected \(3, \d+, \d+\), got \(3, 7, 9\)\. That is the shape of the pieces"),
    (check_to_words, lambda weights, q, k: course_to_words(weights, q, k).transpose(-2, -1),
     r"Your result is transposed"),
    (check_to_words, _to_words(one_hot_dtype=False), r"one_hot gives int64 numbers"),
    (check_to_words, to_words_for_one_batch_of_three,
     r"(?s)fixed shape \[3, 10, 6\].*passed with \(lead=\(3,\), L_q=7, L_k=9\) but not with "
     r"\(lead=\(2, 4\), L_q=10, L_k=6\)"),
    (check_to_words, lambda weights, q, k: course_to_words(weights, q, k).double(),
     r"as torch\.float64 for torch\.float32 inputs"),
    (check_normalized_entropy, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_normalized_entropy, _entropy(normalize=False), r"the mean entropy, not normalized"),
    (check_normalized_entropy, _entropy(sign=1), r"ratio is negative: the entropy is MINUS"),
    (check_normalized_entropy, _entropy(over_keys="mean"), r"averaged -p log p over the keys \(mean\(-1\)\)"),
    (check_normalized_entropy, _entropy(log=torch.log2), r"entropy in bits \(log2\) and log n in nats"),
    (check_normalized_entropy, _entropy(log_n=torch.log2), r"entropy in nats \(natural log\) and log n in bits"),
    (check_normalized_entropy, _entropy(log=torch.log10), r"entropy in log10 and log n in natural log"),
    (check_normalized_entropy, _entropy(log=torch.log2, log_n=torch.log2), None),  # one base: right
    (check_normalized_entropy, _entropy(zero_safe=False), r"NaN where weights are exactly 0.*xlogy"),
    (check_normalized_entropy, _entropy(n_from="L_k"), r"divided by log L_k = log 8, the length of the key axis"),
    (check_normalized_entropy, _entropy(valid_rows="none"), r"counted the padded query rows too"),
    (check_normalized_entropy, _entropy(valid_rows="top"), r"padded query rows in the sum of log n"),
    (check_normalized_entropy, _entropy(valid_rows="bottom"), r"padded query rows in the sum of the entropies"),
    (check_normalized_entropy, _entropy(per_row=True), r"divided row by row and averaged the ratios"),
    (check_normalized_entropy, _entropy(per_sentence=True), r"took the ratio of each sentence first"),
    (check_normalized_entropy, entropy_one_number_per_sentence,
     r"expected \(5,\), got \(3, 5\)\. You kept one number per sentence"),
    (check_normalized_entropy, entropy_with_the_mask_sum_without_heads,
     r"mask\.sum\(-1\) is \(batch, 1\) or \(batch, L_q\), without the head dimension"),
    (check_normalized_entropy, entropy_for_five_heads,
     r"(?s)fixed shape \[4, 5, 9\].*passed with \(batch=3, h=5, L_q=6, L_k=8\) but not with "
     r"\(batch=4, h=2, L_q=9, L_k=7\)"),
    (check_previous_token_share, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_previous_token_share, _previous(offset=1), r"maximum is on i \+ 1, the NEXT token"),
    (check_previous_token_share, _previous(offset=0), r"maximum is on i, the token itself"),
    (check_previous_token_share, _previous(wrap=True),
     r"first row \(i = 0\) is counted when its maximum is on the LAST key"),
    (check_previous_token_share, _previous(first_row="left out"), r"left the first row out of the count"),
    (check_previous_token_share, _previous(rows="all"), r"counted the padded rows too"),
    (check_previous_token_share, _previous(rows="top"), r"counted padded rows whose maximum is on i - 1"),
    (check_previous_token_share, _previous(rows="bottom"), r"divided by all the rows, padded ones included"),
    (check_previous_token_share, previous_mean_weight, r"mean WEIGHT on the previous token"),
    (check_previous_token_share, _previous(dim=-2), r"maximum over the queries \(dim=-2\)"),
    (check_previous_token_share, _previous(result="count"), r"the NUMBER of rows whose maximum is on i - 1"),
    (check_previous_token_share, _previous(result="percent"), r"that is a percentage"),
    (check_previous_token_share, _previous(per_sentence=True), r"share of each sentence first"),
    (check_previous_token_share, previous_per_row, r"expected \(5,\), got \(3, 5, 7\)\. You kept one number per row"),
    (check_previous_token_share, previous_for_three_sentences,
     r"(?s)mismatch in the share of rows whose maximum is on i - 1 \(the reference: "
     r"annotated\.heads\.head_statistics; weights \(5, 2, 9, 9\) torch\.float32\), compared with the "
     r"reference.*passed with "
     r"\(batch=3, h=5, L=7\) but not with \(batch=5, h=2, L=9\).*size written into your code"),
    (check_em_step, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_em_step, _em(null=False), r"E-step without NULL"),
    (check_em_step, _em(normalize="rows"), r"M-step normalized each ROW"),
    (check_em_step, _em(normalize="none"), r"returned the expected counts"),
    (check_em_step, _em(posterior_over="english"), r"E-step normalized over the English words of the pair"),
    (check_em_step, _em(posterior_over="sentence"), r"divided by the sum over the whole sentence pair"),
    (check_em_step, _em(repeats="once"), r"counted once: `counts\[e_ids, f_ids\] \+= posterior`"),
    (check_em_step, _em(repeats="set"), r"each sentence's words as a set"),
    (check_em_step, em_from_the_uniform_table, r"step from the uniform table whatever t it is given"),
    (check_em_step, em_dividing_in_place, r"changed its first argument `t` in place"),
    (check_em_step, em_in_float32, r"as torch\.float32 for torch\.float64 inputs"),
    (check_em_step, em_transposed, r"expected \(9, 8\), got \(8, 9\)\. Rows are English words"),
    (check_em_step, em_for_nine_english_words,
     r"(?s)passed with \(V_e=9, V_f=8, pairs=5, L_de=4, L_en=3\) but not with \(V_e=6, V_f=11, "
     r"pairs=7, L_de=5, L_en=8\)"),
]
WRONG_ANSWERS = [(check, wrong, message) for check, wrong, message in WRONG_ANSWERS if message is not None]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:40]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


def test_the_entropy_ratio_is_the_same_in_any_base_used_for_both():
    with contextlib.redirect_stdout(io.StringIO()):
        check_normalized_entropy(_entropy(log=torch.log2, log_n=torch.log2))


def test_a_failure_on_the_shipped_model_says_so_after_the_random_shapes_passed():
    def right_except_with_eight_heads(weights, query_valid):  # the shipped model has h = 8
        share = course_previous_token_share(weights, query_valid)
        return share + 0.5 if weights.size(1) == 8 else share
    with pytest.raises(ExerciseFailed, match=r"(?s)mismatch.*This is on the shipped model's encoder "
                       r"self-attention, layer 1; every random shape passed before it"):
        check_previous_token_share(right_except_with_eight_heads)


def test_the_em_reference_of_the_check_is_one_step_of_the_courses_model_1():
    from annotated.support.grading.heads import EM_SIZES, _random_pairs
    from tests.test_declarations_08_12 import course_em

    sizes = EM_SIZES[0]
    pairs = _random_pairs(sizes, torch.Generator().manual_seed(0))
    uniform = torch.full((sizes["V_e"], sizes["V_f"]), 1 / sizes["V_e"], dtype=torch.float64)
    twice = _em_reference(_em_reference(uniform, pairs), pairs)
    torch.testing.assert_close(twice, course_em(pairs, sizes["V_e"], sizes["V_f"], 2))
    assert math.isclose(float(twice[:, 3].sum()), 1.0)
