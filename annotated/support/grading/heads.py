"""Checks of notebook 12's exercises: pieces brought to words, the entropy of a head, the
previous-token statistic, and one EM step of IBM Model 1.

Each check runs the learner's function on random attention (or random sentence pairs) of
several shapes, so that a size written into the code fails, and compares it with the
course's own code: ``annotated.heads.to_words`` and ``head_statistics``, and
``annotated.alignment.train_ibm_model1``. The three checks about attention then run it on
the shipped model's own attention of four sentences, in one padded batch, as notebook 12
measures it (the model is loaded once per process, in about two seconds).
"""

import functools
import math
from collections.abc import Callable

import torch

from annotated.alignment import NULL, train_ibm_model1
from annotated.bpe import JOIN
from annotated.heads import (
    collect_attention, head_statistics, sentence_attention, teacher_forced_batches, to_words, word_ids,
)
from annotated.support.grading.core import (
    ExerciseFailed, _aliasing, _assert_close, _call, _function, _hard_coded_hint, _run_on_all_sizes, _same,
    _shape, _tensor,
)
from annotated.vocab import PAD

# Sizes of each check: within a set all differ, from one set to the next every one changes.
# to_words: lead = the dimensions in front of (L_q, L_k) (none, (batch,) or (batch, h)).
WORDS_SIZES = [dict(lead=(3,), L_q=7, L_k=9), dict(lead=(2, 4), L_q=10, L_k=6), dict(lead=(), L_q=5, L_k=8)]
# Edge cases after the sizes, each with what it tries: a batch of one whose decoder has read
# only <s> (L_q = 1), and key pieces cut off inside a word (the last two pieces end in '@@', as
# in a sentence truncated to a maximum length).
WORDS_EDGES = [(dict(lead=(1,), L_q=1, L_k=11), "a batch of one sentence whose single query piece is <s>"),
               (dict(lead=(5, 2), L_q=8, L_k=7, cut=True), "key pieces that stop inside a word")]
# normalized_entropy: attention (batch, h, L_q, L_k), as one block of the model gives it; then
# a batch of one sentence.
ENTROPY_SIZES = [dict(batch=3, h=5, L_q=6, L_k=8), dict(batch=4, h=2, L_q=9, L_k=7),
                 dict(batch=2, h=6, L_q=5, L_k=10)]
ENTROPY_EDGES = [(dict(batch=1, h=3, L_q=7, L_k=9), "a batch of one sentence")]
# previous_token_share: self-attention (batch, h, L, L); then a batch of one sentence.
PREVIOUS_SIZES = [dict(batch=3, h=5, L=7), dict(batch=5, h=2, L=9), dict(batch=2, h=6, L=5)]
PREVIOUS_EDGES = [(dict(batch=1, h=4, L=8), "a batch of one sentence")]
# em_step: V_e English and V_f German words (NULL included), `pairs` sentence pairs of at most
# L_de German and L_en English words.
EM_SIZES = [dict(V_e=9, V_f=8, pairs=5, L_de=4, L_en=3), dict(V_e=6, V_f=11, pairs=7, L_de=5, L_en=8),
            dict(V_e=12, V_f=7, pairs=9, L_de=6, L_en=5)]
SIZE_SETS = {"check_to_words": WORDS_SIZES, "check_normalized_entropy": ENTROPY_SIZES,
             "check_previous_token_share": PREVIOUS_SIZES, "check_em_step": EM_SIZES}

# The sentences the shipped model is read on: of different lengths (so the batch has padding),
# some with words that byte-pair encoding splits ("seil@@ tänzerin", "ti@@ gh@@ tro@@ pe").
SENTENCES = [
    ("Zwei Hunde spielen im Schnee.", "Two dogs play in the snow."),
    ("Ein Taucher fotografiert eine Schildkröte unter Wasser.", "A diver photographs a turtle under water."),
    ("Eine Seiltänzerin jongliert mit Fackeln.", "A tightrope walker juggles with torches."),
    ("Ein Junge balanciert auf einem Skateboard.", "A boy balances on a skateboard."),
]

_LN2, _LN10 = math.log(2), math.log(10)


@functools.lru_cache(maxsize=1)
def _shipped() -> tuple[dict, object]:
    """The shipped model's attention on ``SENTENCES``, teacher-forced on their translations:
    kind -> (weights (layers, batch, h, L_q, L_k), mask, query_valid) as ``attention_statistics``
    reads them, and one sentence's ``SentenceAttention`` (the one with split words)."""
    from annotated import load_pretrained  # loads spaCy: only when a check needs the model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small model on four sentences: faster on one thread, above all on a busy machine
    try:
        model, tokenizer = load_pretrained()
        batch = teacher_forced_batches(tokenizer, SENTENCES)[0]
        weights = collect_attention(model, batch)
        sentence = sentence_attention(model, tokenizer, *SENTENCES[2])
    finally:
        torch.set_num_threads(threads)
    src_valid = batch.src_mask[:, 0]  # (batch, L_src)
    tgt_valid = batch.tgt_y != tokenizer.src_vocab[PAD]  # (batch, L_tgt): rows that predict a token
    blocks = {"encoder": (weights["encoder"], batch.src_mask, src_valid),
              "decoder": (weights["decoder"], batch.tgt_mask, tgt_valid),
              "cross": (weights["cross"], batch.src_mask, tgt_valid)}
    return blocks, sentence


def _alias_check(fn: Callable, name: str, first_args: tuple, second_args: tuple, roles: tuple, call: str) -> None:
    """Call ``fn`` twice on inputs of the same shapes and different values: the first result
    must come out of the second call as it was (not a view of a buffer the function reuses)."""
    first = _call(fn, *first_args, roles=roles)
    _aliasing(lambda: _call(fn, *second_args, roles=roles), first, name, f"the result of {call}")


def _on_edges(check_once: Callable, edges: list) -> None:
    """Run ``check_once(sizes)`` on each edge case (sizes, what it tries), after the size sets
    passed; a failure no known mistake explains says which edge case it is."""
    for sizes, what in edges:
        try:
            check_once(sizes)
        except ExerciseFailed as err:
            if not getattr(err, "generic", False):
                raise
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
            raise ExerciseFailed(f"{err}\nThis is on {what} ({shown}); every set of sizes passed before "
                                 "it, so look for what your code assumes about it.") from None


def _in_float64(err: ExerciseFailed) -> ExerciseFailed:
    """A failure on float64 inputs, after every float32 shape passed."""
    if "for torch.float64 inputs" in str(err):  # the dtype message says it all
        return err
    return ExerciseFailed(f"{err}\nThis is on float64 inputs; every float32 shape passed before it: keep "
                          "every step in the dtype of the inputs (no .float(), and dtype=... or *_like for "
                          "a tensor you create).")


def _on_the_model(err: ExerciseFailed, where: str) -> ExerciseFailed:
    """A failure on the shipped model's attention, after every random shape passed."""
    return ExerciseFailed(
        f"{err}\nThis is on {where}; every random shape passed before it, so look for what your "
        "code assumes that the model's attention does not keep to: a size (the model has h = 8 "
        "heads), or the form of its masks and padding."
    )


# ---------------------------------------------------------------- pieces -> words

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ber", "gen", "hut", "stein", "wehr")


def _random_pieces(length: int, g: torch.Generator, end: bool, cut: bool = False) -> list[str]:
    """``length`` byte-pair pieces: <s>, words of one to three pieces (at least one word of
    several), maybe a '@@,', a final '@@.', and </s> when ``end``; with ``cut``, the sentence
    stops inside a word instead: its last two pieces end in '@@' (no '@@.', no </s>).
    ``length`` 1 is <s> alone (a decoder that has read nothing else)."""
    if length == 1:
        return ["<s>"]
    if cut:
        pieces = _random_pieces(length, g, end=False)[:-1]  # without the final '@@.'
        pick = torch.randint(len(_SYLLABLES), (2,), generator=g).tolist()
        return [*pieces[:-1], _SYLLABLES[pick[0]] + JOIN, _SYLLABLES[pick[1]] + JOIN]
    n = length - 2 - end  # pieces between <s> and the final '@@.'
    sizes: list[int] = []
    while sum(sizes) < n:
        sizes.append(min(int(torch.randint(1, 4, (1,), generator=g)), n - sum(sizes)))
    if max(sizes) < 2:  # make sure one word is split into pieces
        sizes = [*sizes[:-2], sizes[-2] + sizes[-1]]
    pieces = ["<s>"]
    for k, size in enumerate(sizes):
        pick = torch.randint(len(_SYLLABLES), (size,), generator=g).tolist()
        if size == 1 and k > 0 and int(torch.randint(3, (1,), generator=g)) == 0:
            pieces.append(JOIN + ",")  # punctuation: no space before it, but a word of its own
        else:
            pieces += [_SYLLABLES[p] + JOIN for p in pick[:-1]] + [_SYLLABLES[pick[-1]]]
    pieces.append(JOIN + ".")
    return [*pieces, "</s>"] if end else pieces


def _ids_joining_at_both_ends(pieces: list[str]) -> list[int]:
    """Words if a piece that starts with '@@' were joined to the previous one (a mistake)."""
    ids, word = [], 0
    for i, piece in enumerate(pieces):
        if i > 0 and not pieces[i - 1].endswith(JOIN) and not piece.startswith(JOIN):
            word += 1
        ids.append(word)
    return ids


def _grouping(pieces: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(L, W) matrices of the pieces of each word, in float64: one-hot, mean, first, last."""
    ids = torch.tensor(word_ids(pieces))
    one_hot = torch.nn.functional.one_hot(ids).double()  # (L, W)
    mean = one_hot / one_hot.sum(0)
    first = torch.zeros_like(one_hot)
    last = torch.zeros_like(one_hot)
    for w in range(one_hot.size(1)):
        at = (ids == w).nonzero().flatten()
        first[at[0], w], last[at[-1], w] = 1.0, 1.0
    return one_hot, mean, first, last


def _words_mistake(got: torch.Tensor, weights: torch.Tensor, queries: list[str], keys: list[str]) -> str | None:
    """Name the convention a wrong word-level result follows, if it is a known one."""
    w = weights.double()
    q_sum, q_mean, q_first, q_last = _grouping(queries)
    k_sum, k_mean, _, _ = _grouping(keys)
    mistakes = [
        (q_sum.T @ w @ k_sum,
         "you summed over the pieces of the query word as well: a row of a word in k pieces then "
         "sums to k. Attention FROM a word is the MEAN of its pieces' rows (each piece's row is a "
         "distribution; their mean is one too); attention TO a word is the SUM over its pieces."),
        (q_mean.T @ w @ k_mean,
         "you averaged over the pieces of the key word as well, so the rows no longer sum to 1: "
         "attention TO a word is the SUM of the attention to its pieces (the weight it gets in "
         "all), attention FROM a word the MEAN of its pieces' rows."),
        (q_sum.T @ w @ k_mean,
         "sum and mean are swapped: you averaged over the key pieces and summed over the query "
         "pieces. Attention TO a word (columns, keys) is the SUM over its pieces, attention FROM a "
         "word (rows, queries) the MEAN."),
        (q_first.T @ w @ k_sum,
         "each word's row is the row of its FIRST piece only; Clark et al. (2019), as notebook 12, "
         "take the MEAN of the rows of all its pieces."),
        (q_last.T @ w @ k_sum,
         "each word's row is the row of its LAST piece only; Clark et al. (2019), as notebook 12, "
         "take the MEAN of the rows of all its pieces."),
    ]
    for candidate, message in mistakes:
        if _same(got, candidate):
            return message
    return None


def _check_words_on(fn: Callable, name: str, weights: torch.Tensor, queries: list[str], keys: list[str]) -> None:
    """One call of the learner's to_words, diagnosed."""
    expected = to_words(weights, queries, keys)  # the course's (..., W_q, W_k)
    result = _call(fn, weights, list(queries), list(keys), roles=("weights", "query_pieces", "key_pieces"),
                   hints=((r"expected (m1 and m2|both arguments|scalar type)|same dtype",
                           "\nHint: one_hot gives int64 numbers; convert them to the weights' dtype "
                           "(.to(weights.dtype)) before multiplying."),))
    got = _tensor(result, name, "the word-level attention", like=weights)
    lead = tuple(weights.shape[:-2])
    L_q, L_k = weights.shape[-2:]
    W_q, W_k = expected.shape[-2:]
    shape = tuple(got.shape)
    hint = ""
    if shape == (*lead, L_q, L_k):
        hint = (f" That is the shape of the pieces: {L_q} query pieces make {W_q} words and {L_k} key "
                f"pieces make {W_k}; a piece that ends in '@@' is continued by the next one.")
    elif shape == (*lead, W_k, W_q):
        hint = " Your result is transposed: rows are the query words, columns the key words."
    elif shape[-2:] == (max(_ids_joining_at_both_ends(queries)) + 1, max(_ids_joining_at_both_ends(keys)) + 1):
        hint = (" You have fewer words: a piece that STARTS with '@@' (such as '@@.') was joined to "
                "the previous word. In notebook 12, '@@' at the start only means 'no space before "
                "it': '@@.' is a word of its own. Only a piece that ENDS in '@@' is continued by the "
                "next one: a new word starts after every piece that does not end in '@@'.")
    elif got.numel() == expected.numel() and 1 in (*lead, W_q, W_k):
        hint = (" A dimension of size 1 is gone (a .squeeze() drops every one: a batch of one "
                "sentence, a single query word): keep them all, or squeeze only the dimension you mean.")
    _shape(got, (*lead, W_q, W_k), f"{name}(weights of shape {tuple(weights.shape)}, {L_q} query "
           f"pieces in {W_q} words, {L_k} key pieces in {W_k} words), (..., W_q, W_k)", hint)
    if _same(got, expected):
        return
    message = _words_mistake(got, weights, queries, keys)
    if message:
        raise ExerciseFailed(message)
    _assert_close(got, expected, f"the word-level attention of {name} (the reference: annotated.heads.to_words)")


def _words_inputs(sizes: dict, g: torch.Generator, dtype: torch.dtype = torch.float32):
    lead, L_q, L_k = tuple(sizes["lead"]), sizes["L_q"], sizes["L_k"]
    while True:  # word counts that tell every wrong shape apart
        queries = _random_pieces(L_q, g, end=False)  # as a decoder reads: <s> ... (no </s>)
        keys = _random_pieces(L_k, g, end=True, cut=sizes.get("cut", False))  # as the encoder reads: <s> ... </s>
        W_q, W_k = word_ids(queries)[-1] + 1, word_ids(keys)[-1] + 1
        joined = (max(_ids_joining_at_both_ends(queries)) + 1, max(_ids_joining_at_both_ends(keys)) + 1)
        if len({(W_q, W_k), (W_k, W_q), (L_q, L_k), joined}) == 4:
            break
    weights = torch.randn(*lead, L_q, L_k, generator=g, dtype=dtype).mul(2).softmax(-1)
    return weights, queries, keys


def _check_words_once(fn: Callable, name: str, sizes: dict, g: torch.Generator,
                      dtype: torch.dtype = torch.float32) -> None:
    weights, queries, keys = _words_inputs(sizes, g, dtype)
    try:
        _check_words_on(fn, name, weights, queries, keys)
    except ExerciseFailed as err:
        if not (sizes.get("cut") and getattr(err, "generic", False)):
            raise
        raise ExerciseFailed(
            f"{err}\nHere the key pieces stop inside a word, {keys[-3:]}: a sentence cut off at a "
            "maximum length. The pieces that end in '@@' at the end still make one word with the "
            "pieces before them: count the words from the word ids (the last id + 1), not from the "
            "pieces that do not end in '@@'.") from None


def _words_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message, "Read the lengths from the piece lists and keep "
                            "whatever dimensions come in front of the last two.")


def check_to_words(to_words_fn: Callable) -> None:
    """Check ``to_words(weights, query_pieces, key_pieces)``: piece-level attention
    (..., L_q, L_k) -> word-level (..., W_q, W_k), attention to a word summed over its pieces,
    from a word averaged over them (Clark et al., 2019), on random attention with no, one and
    two dimensions in front (``WORDS_SIZES``), then a batch of one with the single query piece <s>
    and key pieces cut off inside a word (``WORDS_EDGES``), on float64 attention, twice in a row (the first result must
    survive the second call), then on the shipped model's cross-attention and decoder
    self-attention of one sentence.

    Diagnoses: an input changed in place, a result of another kind (dtype, device, not a
    tensor), the pieces not grouped, a transposed result, '@@.' joined to the previous word,
    sums on both sides, means on both sides, sum and mean swapped, a word's row taken from its
    first or its last piece, int64 one-hot matrices, float32 one-hot matrices or results for
    float64 attention, a dimension of size 1 squeezed away, the last word lost when the pieces
    end inside a word, a result that a second call overwrites, and sizes written into the code.
    """
    name = _function(to_words_fn, "check_to_words", "to_words")
    g = torch.Generator().manual_seed(10)
    _run_on_all_sizes(lambda sizes: _check_words_once(to_words_fn, name, sizes, g), WORDS_SIZES, _words_hint)
    _on_edges(lambda sizes: _check_words_once(to_words_fn, name, sizes, g), WORDS_EDGES)
    try:
        _check_words_once(to_words_fn, name, WORDS_SIZES[0], g, torch.float64)
    except ExerciseFailed as err:
        raise _in_float64(err) from None
    weights, queries, keys = _words_inputs(WORDS_SIZES[1], g)
    other = torch.randn(weights.shape, generator=g).softmax(-1)  # the same pieces, other weights
    _alias_check(to_words_fn, name, (weights, queries, keys), (other, list(queries), list(keys)),
                 ("weights", "query_pieces", "key_pieces"), f"{name}(weights of shape {tuple(weights.shape)}, ...)")
    _, sentence = _shipped()
    for kind in ("cross", "decoder"):
        queries, keys = sentence.labels(kind)
        try:
            _check_words_on(to_words_fn, name, sentence.weights[kind].clone(), queries, keys)
        except ExerciseFailed as err:
            raise _on_the_model(err, f"the shipped model's {kind} attention of '{SENTENCES[2][0]}'") from None
    print(
        f"check_to_words passed: {name} sums the attention to each word's pieces and averages the "
        f"rows of each word's pieces, as annotated.heads.to_words, on random attention of "
        f"{len(WORDS_SIZES)} shapes, a batch of one, a sentence cut inside a word and float64, and on "
        "the shipped model's cross- and decoder self-attention."
    )


# ---------------------------------------------------------------- entropy / log n


def _key_lengths(batch: int, L: int) -> torch.Tensor:
    """Sequence b keeps L - b positions (at least 2): the first is full, the others padded."""
    return torch.tensor([max(2, L - b) for b in range(batch)])


def _entropy_inputs(sizes: dict, case: str, g: torch.Generator, dtype: torch.dtype = torch.float32):
    """(weights, mask, query_valid) of random attention: 'full' (every key visible, no padding),
    'padding' (keys and queries padded, mask (batch, 1, L_k)) or 'causal' (a mask
    (batch, L_q, L_k): query i sees keys 0 .. i that are not padding). The last head is the
    sharpest: it gives exactly 0 to about a third of the keys its mask allows (key 0 never), as
    a sharp head does where the exponential underflows."""
    batch, h, L_q, L_k = sizes["batch"], sizes["h"], sizes["L_q"], sizes["L_k"]
    keys = torch.arange(L_k) < _key_lengths(batch, L_k)[:, None]  # (batch, L_k)
    query_valid = torch.arange(L_q) < _key_lengths(batch, L_q)[:, None]  # (batch, L_q)
    if case == "full":
        keys, query_valid = torch.ones_like(keys), torch.ones_like(query_valid)
    mask = keys[:, None, :]  # (batch, 1, L_k)
    if case == "causal":
        mask = mask & torch.ones(L_q, L_k, dtype=torch.bool).tril()  # (batch, L_q, L_k)
    # Heads from diffuse to sharp; padded query rows sharper still, so that counting them shows.
    sharpness = torch.linspace(0.3, 3.0, h)[None, :, None, None]
    sharpness = sharpness * torch.where(query_valid, 1.0, 4.0)[:, None, :, None]
    scores = torch.randn(batch, h, L_q, L_k, generator=g, dtype=dtype) * sharpness
    hard = torch.rand(batch, L_q, L_k, generator=g) < 1 / 3  # keys the last head gives exactly 0
    hard[..., 0] = False
    scores[:, -1] = scores[:, -1].masked_fill(hard, float("-inf"))
    weights = scores.masked_fill(~mask[:, None], float("-inf")).softmax(-1)  # masked keys: exactly 0
    return weights, mask, query_valid


def _entropy_parts(weights: torch.Tensor, mask: torch.Tensor, query_valid: torch.Tensor):
    """Per row, in float64: entropy in nats (batch, h, L_q), log n (batch, h, L_q), and which
    rows count (batch, h, L_q)."""
    w = weights.double()
    batch, h, L_q, _ = w.shape
    entropy = -torch.special.xlogy(w, w).sum(-1)  # 0 log 0 = 0
    log_n = mask.sum(-1).double().log().expand(batch, L_q)[:, None, :].expand(batch, h, L_q)
    rows = query_valid[:, None, :].expand(batch, h, L_q).double()
    return entropy, log_n, rows


def _entropy_mistake(got: torch.Tensor, weights, mask, query_valid, case: str) -> str | None:
    entropy, log_n, rows = _entropy_parts(weights, mask, query_valid)
    L_k = weights.size(-1)
    per_head = lambda x, r=rows: (x * r).sum((0, 2))  # noqa: E731  (h,)
    ratio = per_head(entropy) / per_head(log_n)
    if got.isnan().any() and (weights == 0).any():
        return ("your result is NaN where weights are exactly 0 (the keys the mask hides, and keys a "
                "sharp head gives no weight at all): weights.log() is -inf there, and 0 * -inf is "
                "NaN. The entropy counts 0 log 0 as 0: compute p * log(p) with "
                "torch.special.xlogy(p, p), or take the log of weights.clamp_min(1e-12), as "
                "head_statistics does.")
    per_row = torch.where(log_n > 0, entropy / log_n.clamp_min(1e-300), torch.zeros_like(entropy))
    nonzero = (weights > 0).sum(-1).double().log()  # (batch, h, L_q): log of the keys of nonzero weight
    sentence_ratio = (entropy * rows).sum(2) / (log_n * rows).sum(2)  # (batch, h)
    sentence_rows = rows.sum(2)  # (batch, h)
    mistakes = [
        (per_head(entropy) / per_head(nonzero),
         "your n counts the keys of nonzero weight (weights > 0); n is the number of keys the MASK "
         "lets the row see, mask.sum(-1), whether the head gives them weight or not: a sharp head "
         "can put exactly 0 on a key it may see, and a row on one key of n has entropy 0 of log n."),
        (per_head(entropy) / per_head(torch.ones_like(entropy)),
         "your result is the mean entropy, not normalized: divide it by the mean of log n, where "
         "n is the number of keys each row may see (log n is the most entropy a row can have)."),
        (per_head(entropy / L_k) / per_head(log_n),
         "you averaged -p log p over the keys (mean(-1)): the entropy is the SUM over the keys, "
         "-sum_j p_j log p_j."),
        (-ratio, "your ratio is negative: the entropy is MINUS sum_j p_j log p_j (each log p_j <= 0)."),
        (ratio / _LN2, "you took the entropy in bits (log2) and log n in nats (natural log): use one "
                       "base for both (the ratio is then the same in any base; notebook 12 uses nats)."),
        (ratio * _LN2, "you took the entropy in nats (natural log) and log n in bits (log2): use one "
                       "base for both (the ratio is then the same in any base; notebook 12 uses nats)."),
        (ratio / _LN10, "you took the entropy in log10 and log n in natural log: use one base for both."),
        (ratio * _LN10, "you took the entropy in natural log and log n in log10: use one base for both."),
        (per_head(entropy) / (per_head(torch.ones_like(entropy)) * math.log(L_k)),
         f"you divided by log L_k = log {L_k}, the length of the key axis, but a row may see "
         "fewer keys (padding, the causal mask): n is the number of keys its mask allows, "
         "mask.sum(-1), row by row."),
        (per_head(entropy, 1) / per_head(log_n, 1),
         "you counted the padded query rows too: only rows where query_valid is True count, in "
         "both sums (a padded position is not a word; notebook 12 leaves its rows out)."),
        (per_head(entropy) / per_head(log_n, 1),
         "you counted the padded query rows in the sum of log n: only rows where query_valid is "
         "True count, in both sums."),
        (per_head(entropy, 1) / per_head(log_n),
         "you counted the padded query rows in the sum of the entropies: only rows where "
         "query_valid is True count, in both sums."),
        ((per_row * rows).sum((0, 2)) / rows.sum((0, 2)),
         "you divided row by row and averaged the ratios: notebook 12 divides the mean entropy by "
         "the mean log n, sum(entropy) / sum(log n) over the valid rows of each head (a row that "
         "sees one key has 0 / 0; leaving such rows out of the mean of ratios does not make it "
         "the ratio of the sums)."),

        (sentence_ratio.mean(0),
         "you took the ratio of each sentence first, then averaged over the sentences: sum over "
         "all the valid rows of the block at once, so that every row weighs the same (long "
         "sentences have more rows)."),
        (((entropy * rows).sum(2) / sentence_rows).mean(0) / ((log_n * rows).sum(2) / sentence_rows).mean(0),
         "you averaged each sentence first, then the sentences: sum over all the valid rows of "
         "the block at once, so that every row weighs the same (long sentences have more rows)."),
    ]
    for candidate, message in mistakes:
        if _same(got, candidate.float()):
            return message
    return None


def _check_entropy_on(fn: Callable, name: str, weights, mask, query_valid, case: str) -> None:
    batch, h, L_q, _ = weights.shape
    sums = head_statistics(weights, mask, query_valid, {})
    expected = sums["entropy"] / sums["uniform"]  # the course's, (h,)
    entropy, log_n, rows = _entropy_parts(weights, mask, query_valid)
    assert _same(expected, (entropy * rows).sum((0, 2)) / (log_n * rows).sum((0, 2))), "the references differ"
    result = _call(fn, weights, mask, query_valid, roles=("weights", "mask", "query_valid"), hints=(
        (r"must match the (existing )?size|cannot be broadcast|shape mismatch",
         "\nHint: mask.sum(-1) is (batch, 1) or (batch, L_q), without the head dimension: "
         "expand it to (batch, L_q) and insert the heads, [:, None, :], before combining it with "
         "an entropy of shape (batch, h, L_q)."),))
    got = _tensor(result, name, "the entropy / log n of each head", like=weights)
    hint = ""
    if tuple(got.shape) == (batch, h):
        hint = " You kept one number per sentence: sum over the sentences (dim 0) as well as the rows."
    elif tuple(got.shape) == (h, L_q) or tuple(got.shape) == (batch, h, L_q):
        hint = " You kept one number per row: sum over the valid rows, then divide."
    elif got.dim() == 0:
        hint = " You averaged over the heads too: keep one number per head."
    _shape(got, (h,), f"{name}(weights of shape {tuple(weights.shape)}, ...), one number per head", hint)
    if _same(got, expected):
        return
    message = _entropy_mistake(got, weights, mask, query_valid, case)
    if message:
        raise ExerciseFailed(message)
    _assert_close(got, expected, f"the entropy / log n of each head (weights {tuple(weights.shape)} "
                  f"{weights.dtype}, mask {tuple(mask.shape)}; {_ENTROPY_CASES[case]}; the reference: "
                  "annotated.heads.head_statistics)")


_ENTROPY_CASES = {"full": "no mask and no padding", "padding": "padded keys and queries, mask (batch, 1, L_k)",
                  "causal": "a causal mask (batch, L_q, L_k) and padding"}


def _check_entropy_once(fn: Callable, name: str, sizes: dict, g: torch.Generator,
                        dtype: torch.dtype = torch.float32) -> None:
    for case in _ENTROPY_CASES:
        weights, mask, query_valid = _entropy_inputs(sizes, case, g, dtype)
        _check_entropy_on(fn, name, weights, mask, query_valid, case)


def _entropy_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message, "Read the sizes from weights.shape and n from the mask.")


def check_normalized_entropy(normalized_entropy: Callable) -> None:
    """Check ``normalized_entropy(weights, mask, query_valid) -> (h,)``: per head, the mean
    entropy of the valid rows over their mean log n, as notebook 12's ``entropy / log n``, on
    random attention of the sizes of ``ENTROPY_SIZES`` (each without padding, with padded keys
    and queries, and with a causal mask; one head with exact zeros on keys its mask allows),
    a batch of one (``ENTROPY_EDGES``), in float64, twice in a row (the first result must survive the second call),
    then on the shipped model's nine blocks of four sentences.

    Diagnoses: an input changed in place, a result of another kind, one number per sentence,
    per row or for the whole block instead of per head, no normalization, a lost minus sign,
    entropy and log n in two bases (bits, nats, log10), log L_k instead of log n, n counted
    from the keys of nonzero weight instead of the mask, padded rows counted (in either sum or
    both), NaN from 0 log 0, ratios taken row by row and averaged (with or without the rows
    that see one key), sentences averaged first, the mask's missing head dimension, a float32
    result for float64 attention, a result that a second call overwrites, and sizes written
    into the code.
    """
    name = _function(normalized_entropy, "check_normalized_entropy", "normalized_entropy")
    g = torch.Generator().manual_seed(11)
    _run_on_all_sizes(lambda sizes: _check_entropy_once(normalized_entropy, name, sizes, g),
                      ENTROPY_SIZES, _entropy_hint)
    _on_edges(lambda sizes: _check_entropy_once(normalized_entropy, name, sizes, g), ENTROPY_EDGES)
    try:
        _check_entropy_once(normalized_entropy, name, ENTROPY_SIZES[0], g, torch.float64)
    except ExerciseFailed as err:
        raise _in_float64(err) from None
    first = _entropy_inputs(ENTROPY_SIZES[0], "padding", g)
    second = _entropy_inputs(ENTROPY_SIZES[0], "padding", g)
    _alias_check(normalized_entropy, name, first, second, ("weights", "mask", "query_valid"),
                 f"{name}(weights of shape {tuple(first[0].shape)}, ...)")
    blocks, _ = _shipped()
    case = {"encoder": "padding", "decoder": "causal", "cross": "padding"}
    for kind, (weights, mask, query_valid) in blocks.items():
        for layer in range(weights.size(0)):
            try:
                _check_entropy_on(normalized_entropy, name, weights[layer].clone(), mask.clone(),
                                  query_valid.clone(), case[kind])
            except ExerciseFailed as err:
                raise _on_the_model(err, f"the shipped model's {kind} attention, layer {layer + 1}") from None
    print(
        f"check_normalized_entropy passed: {name} gives each head's mean entropy over its mean "
        f"log n, as annotated.heads.head_statistics, on random attention of {len(ENTROPY_SIZES)} "
        "shapes (no mask, padding, a causal mask; weights of exactly 0 on keys the mask allows), a batch "
        "of one and float64, and on the shipped model's 9 blocks."
    )


# ---------------------------------------------------------------- the previous-token head


def _with_ties(weights: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """``weights`` with about a third of the rows i >= 1 replaced by rows whose largest weight is
    shared, exactly, by key i - 1 and one other key: an earlier one (argmax gives that one, not
    i - 1) or, in row 1 and in about half of the others, a later one (argmax gives i - 1)."""
    batch, h, L, _ = weights.shape
    i = torch.arange(L)
    values = torch.rand(batch, h, L, L, generator=g, dtype=weights.dtype) * 0.5  # below the tie
    draw = torch.rand(batch, h, L, generator=g, dtype=torch.float64)
    earlier = (draw * (i - 1).clamp(min=0)).long()  # 0 .. i - 2
    later = i + (draw * (L - i)).long()  # i .. L - 1
    other = torch.where((torch.rand(batch, h, L, generator=g) < 0.5) & (i >= 2), earlier, later.clamp(max=L - 1))
    values = values.scatter(-1, other[..., None], 1.0)
    values[:, :, i[1:], i[1:] - 1] = 1.0  # key i - 1 ties with `other`
    tied = values / values.sum(-1, keepdim=True)  # equal numbers over the same sum: still equal
    rows = (torch.rand(batch, h, L, generator=g) < 1 / 3) & (i >= 1)
    return torch.where(rows[..., None], tied, weights)


def _previous_inputs(sizes: dict, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention (batch, h, L, L) whose rows each have a clear maximum: on i - 1, i, i + 1
    or elsewhere, in proportions that differ by head; the first row of every other head on the
    LAST key (where i - 1 = -1 wraps to); padded rows always on i - 1. And query_valid (batch, L)."""
    batch, h, L = sizes["batch"], sizes["h"], sizes["L"]
    query_valid = torch.arange(L) < _key_lengths(batch, L)[:, None]  # (batch, L)
    i = torch.arange(L)
    share_previous = torch.linspace(0.15, 0.8, h)[None, :, None]  # (1, h, 1)
    draw = torch.rand(batch, h, L, generator=g)
    target = torch.randint(L, (batch, h, L), generator=g)  # anywhere
    target = torch.where(draw < share_previous + 0.3, (i + 1).clamp(max=L - 1), target)  # next
    target = torch.where(draw < share_previous + 0.15, i, target)  # itself
    target = torch.where(draw < share_previous, (i - 1).clamp(min=0), target)  # previous
    target[:, ::2, 0] = L - 1  # first row: the last key
    target = torch.where(query_valid[:, None, :] | (i == 0), target, i - 1)  # padded rows: previous
    scores = torch.randn(batch, h, L, L, generator=g)
    scores = scores + 6.0 * torch.nn.functional.one_hot(target, L)
    return scores.softmax(-1), query_valid


def _previous_reference(weights: torch.Tensor, query_valid: torch.Tensor) -> torch.Tensor:
    """The course's: head_statistics' share of valid rows whose largest weight is at j - i = -1."""
    L = weights.size(-1)
    sums = head_statistics(weights, torch.ones(1, 1, L, dtype=torch.bool), query_valid, {}, max_offset=1)
    return sums["offset"][:, 0] / sums["rows"]  # offsets -1, 0, 1: column 0 is i - 1


def _previous_mistake(got: torch.Tensor, weights: torch.Tensor, query_valid: torch.Tensor) -> str | None:
    batch, h, L, _ = weights.shape
    i = torch.arange(L)
    top = weights.argmax(-1)  # (batch, h, L)
    rows = query_valid[:, None, :].expand(batch, h, L)
    every = torch.ones_like(rows)
    share = lambda hits, r=rows, counted=None: (hits & r).sum((0, 2)).double() / (  # noqa: E731
        (r if counted is None else counted).sum((0, 2)))
    previous = top == i - 1
    on_previous = weights.double()[..., i[1:], i[1:] - 1]  # (batch, h, L - 1): the weight on i - 1
    mistakes = [
        (share(top == i + 1), "you counted the rows whose maximum is on i + 1, the NEXT token: the "
                              "previous token of row i is key i - 1."),
        (share(top == i), "you counted the rows whose maximum is on i, the token itself: the "
                          "previous token of row i is key i - 1."),
        (share(top == (i - 1) % L),
         "the first row (i = 0) is counted when its maximum is on the LAST key: i - 1 = -1, and an "
         "index -1 (or torch.roll, or % L) wraps around to the end. The first token has no "
         "previous token: compare the argmax with i - 1 itself, which is never equal at i = 0."),
        (share(previous, counted=rows & (i >= 1)),
         "you left the first row out of the count of rows: notebook 12 divides by every valid row, "
         "the first one included (it just can never be on i - 1)."),
        (share(previous, every),
         "you counted the padded rows too: only rows where query_valid is True count, above and "
         "below the fraction bar."),
        (share(previous, rows, every),
         "you divided by all the rows, padded ones included: only rows where query_valid is True "
         "count, above and below the fraction bar."),
        (share(previous, every, rows),
         "you counted padded rows whose maximum is on i - 1: only rows where query_valid is True "
         "count, above and below the fraction bar."),
        ((on_previous * rows[..., 1:]).sum((0, 2)) / rows.sum((0, 2)),
         "that is the mean WEIGHT on the previous token (notebook 12's 'previous' statistic), not "
         "the share of rows whose LARGEST weight is on it: take weights.argmax(-1) and count the "
         "rows where it equals i - 1."),
        (share(weights.argmax(-2) == i - 1),
         "you took the maximum over the queries (dim=-2): each row's largest weight is over its "
         "keys, weights.argmax(dim=-1)."),
        ((previous & rows).sum((0, 2)).double(),
         "that is the NUMBER of rows whose maximum is on i - 1: divide by the number of valid rows "
         "of each head for the share."),
        (100 * share(previous), "that is a percentage: return the share, between 0 and 1."),
        (((previous & rows).sum(2) / rows.sum(2)).mean(0),
         "you took the share of each sentence first, then averaged the sentences: count over all "
         "the valid rows of the batch at once, so that every row weighs the same."),
    ]
    for candidate, message in mistakes:
        if _same(got, candidate.float()):
            return message
    return None


def _check_previous_on(fn: Callable, name: str, weights: torch.Tensor, query_valid: torch.Tensor,
                       ties: bool = False) -> None:
    batch, h, L, _ = weights.shape
    expected = _previous_reference(weights, query_valid)
    result = _call(fn, weights, query_valid, roles=("weights", "query_valid"))
    got = _tensor(result, name, "the share of each head", like=weights)
    hint = ""
    if tuple(got.shape) == (batch, h):
        hint = " You kept one number per sentence: count over the sentences (dim 0) as well as the rows."
    elif tuple(got.shape) in ((batch, h, L), (h, L)):
        hint = " You kept one number per row: count the rows."
    elif got.dim() == 0:
        hint = " You counted over the heads too: keep one number per head."
    _shape(got, (h,), f"{name}(weights of shape {tuple(weights.shape)}, ...), one number per head", hint)
    if _same(got, expected):
        return
    if ties:  # the same sizes passed without ties
        raise ExerciseFailed(
            f"your shares are right on rows with one largest weight but not on rows where two keys "
            f"share the largest weight exactly (weights of shape {tuple(weights.shape)}: ties of key "
            "i - 1 with an earlier or a later key). Notebook 12 counts a row as on i - 1 when "
            "weights.argmax(-1) == i - 1: argmax gives the FIRST of the tied keys, so a tie with an "
            "earlier key is not on i - 1 and a tie with a later key is. Comparing the weight on i - 1 "
            "with the row's maximum counts every tie; topk, sort and an argmax of the flipped row may "
            "give another of the tied keys.")
    message = _previous_mistake(got, weights, query_valid)
    if message:
        raise ExerciseFailed(message)
    _assert_close(got, expected, "the share of rows whose maximum is on i - 1 (the reference: "
                  f"annotated.heads.head_statistics; weights {tuple(weights.shape)} {weights.dtype})")


def _check_previous_once(fn: Callable, name: str, sizes: dict, g: torch.Generator,
                         dtype: torch.dtype = torch.float32) -> None:
    weights, query_valid = _previous_inputs(sizes, g)
    weights = weights.to(dtype)
    _check_previous_on(fn, name, weights, query_valid)
    _check_previous_on(fn, name, _with_ties(weights, g), query_valid, ties=True)


def _previous_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message, "Read the sizes from weights.shape.")


def check_previous_token_share(previous_token_share: Callable) -> None:
    """Check ``previous_token_share(weights, query_valid) -> (h,)``: per head, the share of
    valid query rows whose largest weight is on key i - 1 (notebook 12's offset -1), on random
    self-attention of the sizes of ``PREVIOUS_SIZES`` and a batch of one (``PREVIOUS_EDGES``),
    each without and with exact ties for the largest weight, in float64, twice in a row (the first result must
    survive the second call), then on the shipped model's encoder and decoder self-attention of
    four sentences.

    Diagnoses: an input changed in place, a result of another kind, one number per sentence,
    per row or for the block, i + 1 or i instead of i - 1, the first row wrapping around to the
    last key, the first row left out of the count, padded rows counted (above, below or on both
    sides of the fraction bar), the mean weight on i - 1 instead of the share of maxima, the
    maximum over the queries, a count or a percentage instead of a share, sentences averaged
    first, a tie for the largest weight not settled as argmax settles it (the first of the tied
    keys), a float32 result for float64 attention, a result that a second call overwrites, and
    sizes written into the code.
    """
    name = _function(previous_token_share, "check_previous_token_share", "previous_token_share")
    g = torch.Generator().manual_seed(12)
    _run_on_all_sizes(lambda sizes: _check_previous_once(previous_token_share, name, sizes, g),
                      PREVIOUS_SIZES, _previous_hint)
    _on_edges(lambda sizes: _check_previous_once(previous_token_share, name, sizes, g), PREVIOUS_EDGES)
    try:
        _check_previous_once(previous_token_share, name, PREVIOUS_SIZES[0], g, torch.float64)
    except ExerciseFailed as err:
        raise _in_float64(err) from None
    first, second = _previous_inputs(PREVIOUS_SIZES[0], g), _previous_inputs(PREVIOUS_SIZES[0], g)
    _alias_check(previous_token_share, name, first, second, ("weights", "query_valid"),
                 f"{name}(weights of shape {tuple(first[0].shape)}, ...)")
    blocks, _ = _shipped()
    for kind in ("encoder", "decoder"):
        weights, _, query_valid = blocks[kind]
        for layer in range(weights.size(0)):
            try:
                _check_previous_on(previous_token_share, name, weights[layer].clone(), query_valid.clone())
            except ExerciseFailed as err:
                raise _on_the_model(err, f"the shipped model's {kind} self-attention, layer {layer + 1}") from None
    print(
        f"check_previous_token_share passed: {name} counts, per head, the valid rows whose largest "
        f"weight is on i - 1, as annotated.heads.head_statistics, on random attention of "
        f"{len(PREVIOUS_SIZES)} shapes with and without exact ties, a batch of one and float64, and on the "
        "shipped model's encoder and decoder self-attention."
    )


# ---------------------------------------------------------------- IBM Model 1, one EM step


def _random_pairs(sizes: dict, g: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``pairs`` sentence pairs (German ids 1 .. V_f - 1, English ids 0 .. V_e - 1) of L_de - 1
    or L_de German and L_en - 1 or L_en English words, in which every word of both vocabularies
    occurs and the first pair repeats a German word and an English word."""
    V_e, V_f, n, L_de, L_en = sizes["V_e"], sizes["V_f"], sizes["pairs"], sizes["L_de"], sizes["L_en"]
    de_lengths = [L_de - k % 2 for k in range(n)]
    en_lengths = [L_en - (k + 1) % 2 for k in range(n)]
    # Random words first (the whole first pair), then every word once, in a random order.
    german = torch.cat([torch.randint(1, V_f, (sum(de_lengths) - (V_f - 1),), generator=g),
                        torch.randperm(V_f - 1, generator=g) + 1])
    english = torch.cat([torch.randint(V_e, (sum(en_lengths) - V_e,), generator=g),
                         torch.randperm(V_e, generator=g)])
    de = list(german.split(de_lengths))
    en = list(english.split(en_lengths))
    de[0], en[0] = de[0].clone(), en[0].clone()
    de[0][-1], en[0][-1] = de[0][0], en[0][0]  # a word twice in one sentence (random words only)
    return list(zip(de, en))


def _em_reference(t: torch.Tensor, pairs: list, null: bool = True, posterior_over: str = "german",
                  repeats: str = "counted", normalize: str = "columns") -> torch.Tensor:
    """One EM step of IBM Model 1 on a dense table t (V_e, V_f) in float64, and the variants
    that make the mistakes: NULL left out, the E-step normalized over other words, repeated
    words counted once, the M-step normalized over rows or not at all."""
    t = t.double()
    counts = torch.zeros_like(t)
    for de, en in pairs:
        if repeats == "set":
            de, en = de.unique(), en.unique()
        fs = torch.cat([de.new_zeros(1), de]) if null else de  # NULL is German word 0
        block = t[en][:, fs]  # (len en, len fs): t(e | f) for each pair of positions
        divide = {"german": block.sum(1, keepdim=True), "english": block.sum(0, keepdim=True),
                  "sentence": block.sum()}[posterior_over]
        posterior = block / divide
        index = (en[:, None].expand_as(posterior), fs[None, :].expand_as(posterior))
        if repeats == "once":  # counts[index] += posterior: a repeated index is written once
            counts[index] = counts[index] + posterior
        else:
            counts.index_put_(index, posterior, accumulate=True)
    if normalize == "rows":
        return counts / counts.sum(1, keepdim=True)
    if normalize == "none":
        return counts
    return counts / counts.sum(0, keepdim=True)


def _course_em(pairs: list, V_e: int, V_f: int, iterations: int) -> torch.Tensor:
    """annotated.alignment.train_ibm_model1 after ``iterations`` steps, as a dense (V_e, V_f) table."""
    model = train_ibm_model1([([f"f{f}" for f in de.tolist()], [f"e{e}" for e in en.tolist()]) for de, en in pairs],
                             iterations=iterations)
    german = [NULL, *(f"f{f}" for f in range(1, V_f))]
    return torch.tensor([[model.prob(f"e{e}", f) for f in german] for e in range(V_e)], dtype=torch.float64)


def _em_mistake(got: torch.Tensor, t: torch.Tensor, pairs: list, first_step: bool) -> str | None:
    if _same(got[:, 1:], _em_reference(t, pairs, null=False)[:, 1:]):
        return ("the German words' columns are those of an E-step without NULL: NULL, German word "
                "0, competes for every English word of every pair. Put it in front of each German "
                "sentence, torch.cat([german.new_zeros(1), german]), before the E-step.")
    mistakes = [
        (_em_reference(t, pairs, normalize="rows"),
         "your M-step normalized each ROW (each English word e) to sum 1 over the German words; "
         "t(e | f) is a distribution over the English words for each German word f: divide each "
         "COLUMN of the counts by its sum, counts / counts.sum(0, keepdim=True)."),
        (_em_reference(t, pairs, normalize="none"),
         "you returned the expected counts: the M-step divides them, t(e | f) = count(e, f) / "
         "count(f), each column by its sum."),
        (_em_reference(t, pairs, posterior_over="english"),
         "your E-step normalized over the English words of the pair: the posterior is over which "
         "German word (or NULL) wrote a given English word e, t(e | f) / sum over the pair's "
         "German words f' and NULL of t(e | f'): each English word's row of the pair sums to 1."),
        (_em_reference(t, pairs, posterior_over="sentence"),
         "your E-step divided by the sum over the whole sentence pair: each English word is "
         "shared among the German words (and NULL) separately, t(e | f) / sum over f' of t(e | f')."),
        (_em_reference(t, pairs, repeats="once"),
         "a word that occurs twice in one sentence is counted once: `counts[e_ids, f_ids] += "
         "posterior` with repeated index pairs writes each of them once, it does not add them up. "
         "Use counts.index_put_((e_ids, f_ids), posterior, accumulate=True) (or loop over the "
         "words): Model 1 counts every position."),
        (_em_reference(t, pairs, repeats="set"),
         "you took each sentence's words as a set, so a word that occurs twice counts once: Model "
         "1 counts every position, in the E-step's sums and in the counts."),
    ]
    for candidate, message in mistakes:
        if _same(got, candidate):
            return message
    if not first_step and _same(got, _em_reference(torch.ones_like(t) / t.size(0), pairs)):
        return ("your function gives the step from the uniform table whatever t it is given: the "
                "E-step must use the t(e | f) it receives, t[e, f].")
    return None


def _check_em_on(fn: Callable, name: str, t: torch.Tensor, pairs: list, expected: torch.Tensor,
                 what: str, first_step: bool, tiny: int | None = None) -> None:
    result = _call(fn, t, pairs, roles=("t", "pairs"), hints=(
        (r"Index put requires|expected scalar type|dtypes? (match|mismatch)|same dtype",
         "\nHint: t is float64, and torch.zeros(V_e, V_f) is float32 unless told otherwise: make the "
         "counts with torch.zeros_like(t) (or dtype=t.dtype)."),))
    got = _tensor(result, name, "the new table t(e | f)", like=t)
    V_e, V_f = t.shape
    hint = " Rows are English words, columns German words." if tuple(got.shape) == (V_f, V_e) else ""
    _shape(got, (V_e, V_f), f"{name}(t of shape (V_e={V_e}, V_f={V_f}), ...)", hint)
    if torch.allclose(got, expected.to(got.dtype), rtol=1e-9, atol=1e-12):  # float64 throughout: ~1e-15
        return
    if tiny is not None:  # every other table passed: the tiny probabilities are what fails
        raise ExerciseFailed(
            f"your step is right on the other tables but not on one where English word {tiny} has "
            f"t({tiny} | f) below 1e-60 under every German word f (and NULL): in a pair, its posteriors "
            "are still t / sum over the pair's German words, a distribution (1e-61 / 3e-61 = 1/3), and "
            "its counts are as large as any word's."
            + (" Your table has NaN: 0 / 0, from probabilities rounded to 0." if got.isnan().any() else "")
            + " Look for float32 (.float(), or counts made with torch.zeros without dtype=), which "
            "rounds numbers below 1e-45 to 0; for an eps added to the sum; or for probabilities "
            "clamped to a minimum. Compute in t's float64, and divide by the sum itself.")
    message = _em_mistake(got, t, pairs, first_step)
    if message:
        raise ExerciseFailed(message)
    if _same(got, expected, atol=1e-6):
        worst = float(((got - expected).abs() / expected.abs().clamp_min(1e-12)).max())
        raise ExerciseFailed(
            f"your table {what} agrees with the course's to about 7 digits only (relative differences "
            f"up to {worst:.0e}; float64 steps agree to 1e-15): part of your step runs in float32 (counts "
            "made with torch.zeros without dtype=, a .float() on the way) and is turned back into float64. "
            "Keep every step in t's float64: torch.zeros_like(t) for the counts.")
    _assert_close(got, expected, f"the table after one EM step {what}", atol=1e-9)


def _check_em_once(fn: Callable, name: str, sizes: dict, g: torch.Generator) -> None:
    V_e, V_f = sizes["V_e"], sizes["V_f"]
    pairs = _random_pairs(sizes, g)
    uniform = torch.full((V_e, V_f), 1.0 / V_e, dtype=torch.float64)
    first, second = _course_em(pairs, V_e, V_f, 1), _course_em(pairs, V_e, V_f, 2)
    assert _same(_em_reference(uniform, pairs), first, atol=1e-12), "the check's reference is not the course's"
    _check_em_on(fn, name, uniform, pairs, first, "from the uniform table (train_ibm_model1, 1 iteration)", True)
    _check_em_on(fn, name, first, pairs, second, "from the table of the first step (train_ibm_model1, "
                 "2 iterations)", False)
    noisy = torch.rand(V_e, V_f, generator=g, dtype=torch.float64) + 0.1
    noisy = noisy / noisy.sum(0, keepdim=True)
    _check_em_on(fn, name, noisy, pairs, _em_reference(noisy, pairs), "from a random table", False)
    tiny, word = _tiny_table(noisy, pairs)
    _check_em_on(fn, name, tiny, pairs, _em_reference(tiny, pairs), "from a table with probabilities below "
                 "1e-60", False, tiny=word)


def _tiny_table(t: torch.Tensor, pairs: list) -> tuple[torch.Tensor, int]:
    """``t`` with the English word of the first pair scaled down to about 1e-61 under every German
    word (below float32's smallest number, 1.4e-45), columns summing to 1 again; and that word."""
    word = int(pairs[0][1][0])
    tiny = t.clone()
    tiny[word] = tiny[word] * 1e-60
    return tiny / tiny.sum(0, keepdim=True), word


def _em_small_inputs(g: torch.Generator) -> list[tuple[torch.Tensor, list]]:
    """A table and a list of ONE sentence pair (3 German words, NULL included; 3 English words,
    one of them twice), and a table and pairs of which two are one word long on both sides."""
    one = [(torch.tensor([2, 1, 2]), torch.tensor([1, 0, 2, 1]))]
    single = [(torch.tensor([1]), torch.tensor([0])), (torch.tensor([2]), torch.tensor([1])),
              (torch.tensor([1, 2]), torch.tensor([1, 0, 1]))]
    cases = []
    for V_e, pairs in ((3, one), (2, single)):
        t = torch.rand(V_e, 3, generator=g, dtype=torch.float64) + 0.1
        cases.append((t / t.sum(0, keepdim=True), pairs))
    return cases


def _em_hint(passed: list, sizes: dict, message: str) -> str:
    return _hard_coded_hint(passed, sizes, message, "Read V_e and V_f from t.shape and the sentences "
                            "from the pairs.")


def check_em_step(em_step: Callable) -> None:
    """Check ``em_step(t, pairs) -> t``: one E-step and one M-step of IBM Model 1 on a dense
    table t[e, f] = t(e | f) (column 0 is NULL), on random sentence pairs of the sizes of
    ``EM_SIZES``: from the uniform table and from the first step's table, against
    ``annotated.alignment.train_ibm_model1`` after 1 and 2 iterations, and from a random table.

    Diagnoses: an input changed in place (t /= ...), a result of another kind (float32, not a
    tensor), a transposed table, NULL left out, the M-step over rows or missing, the E-step
    normalized over the English words or over the whole pair, a repeated word counted once
    (`counts[idx] += ...` with repeated indices, or sets of words), the given t ignored,
    probabilities below float32's range lost (float32 counts or steps, an eps added to the sum,
    probabilities clamped), counts made in float32, a result that a second call overwrites,
    and sizes written into the code.
    """
    name = _function(em_step, "check_em_step", "em_step")
    g = torch.Generator().manual_seed(13)
    _run_on_all_sizes(lambda sizes: _check_em_once(em_step, name, sizes, g), EM_SIZES, _em_hint)
    for t, pairs in _em_small_inputs(g):
        lengths = ", ".join(f"({len(de)}, {len(en)})" for de, en in pairs)
        _check_em_on(em_step, name, t, pairs, _em_reference(t, pairs),
                     f"on {len(pairs)} pair(s) of (German, English) lengths {lengths}", False)
    t1, pairs = _em_small_inputs(g)[0]
    t2 = torch.rand(t1.shape, generator=g, dtype=torch.float64) + 0.1
    _alias_check(em_step, name, (t1, pairs), (t2 / t2.sum(0, keepdim=True), pairs), ("t", "pairs"),
                 f"{name}(t of shape {tuple(t1.shape)}, ...)")
    print(
        f"check_em_step passed: two steps of {name} from the uniform table give "
        f"annotated.alignment.train_ibm_model1's t(e | f) after 1 and 2 iterations, on "
        f"{len(EM_SIZES)} sets of sizes, with NULL and repeated words, and from tables with probabilities "
        "below 10^-60, on one sentence pair and on sentences of one word."
    )
