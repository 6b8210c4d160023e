"""Checks of notebook 12 as declarations (``engine``): pieces brought to words, a head's entropy and its previous-token
share (against ``annotated.heads``), one EM step of IBM Model 1 (``annotated.alignment.train_ibm_model1``); the three
about attention end on the shipped model's own attention of four sentences (loaded once per process)."""

import functools
import math
from collections.abc import Callable

import torch

from annotated.bpe import JOIN
from annotated.heads import collect_attention, sentence_attention, teacher_forced_batches, to_words, word_ids
from annotated.support.grading.core import _hard_coded_hint
from annotated.support.grading.engine import Declaration, Mistake, Probe, Tensor, _equal, check
from annotated.vocab import PAD

# Within a set all sizes differ, and every one changes from set to set. lead: the dimensions in front of (L_q, L_k).
WORDS_SIZES = [dict(lead=(3,), L_q=7, L_k=9), dict(lead=(2, 4), L_q=10, L_k=6), dict(lead=(), L_q=5, L_k=8)]
WORDS_EDGES = [(dict(lead=(1,), L_q=1, L_k=11), "a batch of one sentence whose single query piece is <s>"),
               (dict(lead=(5, 2), L_q=8, L_k=7, cut=True), "key pieces that stop inside a word")]
# normalized_entropy: attention (batch, h, L_q, L_k); previous_token_share: self-attention (batch, h, L, L).
ENTROPY_SIZES = [dict(batch=3, h=5, L_q=6, L_k=8), dict(batch=4, h=2, L_q=9, L_k=7),
                 dict(batch=2, h=6, L_q=5, L_k=10)]
ENTROPY_EDGES = [(dict(batch=1, h=3, L_q=7, L_k=9), "a batch of one sentence")]
PREVIOUS_SIZES = [dict(batch=3, h=5, L=7), dict(batch=5, h=2, L=9), dict(batch=2, h=6, L=5)]
PREVIOUS_EDGES = [(dict(batch=1, h=4, L=8), "a batch of one sentence")]
# em_step: V_e English and V_f German words (NULL included), sentence pairs of at most L_de and L_en words.
EM_SIZES = [dict(V_e=9, V_f=8, pairs=5, L_de=4, L_en=3), dict(V_e=6, V_f=11, pairs=7, L_de=5, L_en=8),
            dict(V_e=12, V_f=7, pairs=9, L_de=6, L_en=5)]
SIZE_SETS = {"check_to_words": WORDS_SIZES, "check_normalized_entropy": ENTROPY_SIZES,
             "check_previous_token_share": PREVIOUS_SIZES, "check_em_step": EM_SIZES}

# The sentences the shipped model reads: of different lengths (padding), some with words split in pieces.
SENTENCES = [
    ("Zwei Hunde spielen im Schnee.", "Two dogs play in the snow."),
    ("Ein Taucher fotografiert eine Schildkröte unter Wasser.", "A diver photographs a turtle under water."),
    ("Eine Seiltänzerin jongliert mit Fackeln.", "A tightrope walker juggles with torches."),
    ("Ein Junge balanciert auf einem Skateboard.", "A boy balances on a skateboard."),
]


@functools.lru_cache(maxsize=1)
def _shipped() -> tuple[dict, object]:
    """The shipped model's teacher-forced attention on ``SENTENCES``, kind -> (weights (layers, batch, h, L_q, L_k),
    mask, query_valid), and the ``SentenceAttention`` of the sentence with split words."""
    from annotated import load_pretrained  # loads spaCy: only when a check needs the model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small model on four sentences: faster on one thread, above all on a busy machine
    try:
        model, tokenizer = load_pretrained()
        batch = teacher_forced_batches(tokenizer, SENTENCES)[0]
        weights, sentence = collect_attention(model, batch), sentence_attention(model, tokenizer, *SENTENCES[2])
    finally:
        torch.set_num_threads(threads)
    src_valid, tgt_valid = batch.src_mask[:, 0], batch.tgt_y != tokenizer.src_vocab[PAD]  # (batch, L): rows that count
    return {"encoder": (weights["encoder"], batch.src_mask, src_valid), "decoder": (weights["decoder"], batch.tgt_mask,
            tgt_valid), "cross": (weights["cross"], batch.src_mask, tgt_valid)}, sentence


_NOT_A_SET = {  # what a probe that is not a set of sizes is, by its tag
    "_model": "\nThis is on {_model}; every random shape passed before it, so look for what your code assumes that the "
              "model's attention does not keep to: a size (h = 8 heads), or its masks.",
    "_float64": "\nThis is on float64 inputs; every float32 shape passed before it: keep every step in the inputs' "
                "dtype (no .float(), and dtype=... or *_like for a tensor you create).",
    "cut": "\nHere the key pieces stop inside a word (a sentence cut at a maximum length): count the words from the "
           "word ids (the last id + 1), not from the pieces that do not end in '@@'.",
    "_edge": "\nThis is on {_edge} ({shown}); every set of sizes passed before it, so look for what your code assumes "
             "about it."}


def _sizes_fix(how: str) -> Callable:
    """The hint of a failure no known mistake explains, after whole sets of sizes passed."""
    def fix(passed: list, sizes: dict, message: str) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in sizes.items() if not k.startswith("_"))
        tag = next((tag for tag in _NOT_A_SET if sizes.get(tag)), None)
        if tag is None:
            return _hard_coded_hint(passed, sizes, message, how)
        return _NOT_A_SET[tag].format(shown=shown, **sizes)
    return fix


def _sets(sizes: list, edges: list, make: Callable) -> list[Probe]:
    """make(sizes, the probes' sizes, dtype) -> probes, on each set of sizes, each edge case, then float64."""
    return ([p for s in sizes for p in make(s, s)] + [p for s, what in edges for p in make(s, dict(s, _edge=what))]
            + make(sizes[0], dict(sizes[0], _float64=True), torch.float64))


def _per_head_shape(kept: str) -> tuple:
    """The shape mistakes of a statistic per head: one number per sentence, per row, for the block."""
    rows = "sum over the valid rows, then divide" if kept == "sum" else "count the rows"
    return (
        Mistake(f"You kept one number per sentence: {kept} over the sentences (dim 0) as well as the rows.",
                "one number per sentence", stage="shape", shape=lambda p: p.args[0].shape[:2],
                example=lambda w, *rest: w.sum((2, 3))),
        Mistake("", "one number per row", stage="shape", example=lambda w, *rest: w.sum(-1),
                find=lambda found, p: (f"You kept one number per row: {rows}." if tuple(found["shape"]) in (
                    tuple(p.args[0].shape[:3]), tuple(p.args[0].shape[1:3])) else None)),
        Mistake(f"You {'averaged' if kept == 'sum' else 'counted'} over the heads too: keep one number per head.",
                "one number for the block", stage="shape", shape=lambda p: (), example=lambda w, *rest: w.sum()),
    )


# ---------------------------------------------------------------- 12.1 pieces -> words

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ber", "gen", "hut", "stein", "wehr")


def _random_pieces(length: int, g: torch.Generator, end: bool, cut: bool = False) -> list[str]:
    """<s>, words of one to three pieces (one at least of several), maybe a '@@,', a final '@@.', </s> if ``end``;
    with ``cut``, the last two pieces end in '@@' instead; ``length`` 1 is <s> alone."""
    if length == 1:
        return ["<s>"]
    if cut:  # without the final '@@.' and the piece before it
        pieces = _random_pieces(length, g, end=False)[:-2]
        a, b = torch.randint(len(_SYLLABLES), (2,), generator=g).tolist()
        return [*pieces, _SYLLABLES[a] + JOIN, _SYLLABLES[b] + JOIN]
    n, sizes, pieces = length - 2 - end, [], ["<s>"]  # n: the pieces between <s> and the final '@@.'
    while sum(sizes) < n:
        sizes.append(min(int(torch.randint(1, 4, (1,), generator=g)), n - sum(sizes)))
    if max(sizes) < 2:  # make sure one word is split into pieces
        sizes = [*sizes[:-2], sizes[-2] + sizes[-1]]
    for k, size in enumerate(sizes):
        pick = torch.randint(len(_SYLLABLES), (size,), generator=g).tolist()
        if size == 1 and k > 0 and int(torch.randint(3, (1,), generator=g)) == 0:
            pieces.append(JOIN + ",")  # punctuation: no space before it, but a word of its own
        else:
            pieces += [_SYLLABLES[p] + JOIN for p in pick[:-1]] + [_SYLLABLES[pick[-1]]]
    return [*pieces, JOIN + "."] + (["</s>"] if end else [])


def _joined_ids(pieces: list[str]) -> list[int]:
    """Word ids if a piece that starts with '@@' were joined to the previous one (a mistake)."""
    return word_ids([p + JOIN if after.startswith(JOIN) else p for p, after in zip(pieces, [*pieces[1:], ""])])


def _grouping(pieces: list[str], how: str, ids: Callable = word_ids) -> torch.Tensor:
    """(L, W) float64 matrix of the pieces of each word: "sum" (one-hot), "mean", "first", "last"."""
    ids = torch.tensor(ids(pieces))
    one_hot = torch.nn.functional.one_hot(ids).double()  # (L, W)
    if how in ("first", "last"):
        at = [int((ids == w).nonzero()[0 if how == "first" else -1]) for w in range(one_hot.size(1))]
        return torch.nn.functional.one_hot(torch.tensor(at), len(pieces)).double().T
    return one_hot / one_hot.sum(0) if how == "mean" else one_hot


def _words(rows: str = "mean", columns: str = "sum", ids: Callable = word_ids) -> Callable:
    """A to_words whose query words take their pieces' rows by ``rows``, key words the columns by ``columns``."""
    return lambda weights, query_pieces, key_pieces: (_grouping(query_pieces, rows, ids).T @ weights.double()
                                                      @ _grouping(key_pieces, columns, ids)).to(weights.dtype)


def _word_counts(args: tuple) -> tuple:
    """The numbers of query and key words of to_words's arguments."""
    return word_ids(args[1])[-1] + 1, word_ids(args[2])[-1] + 1


def _words_probes(device: str | None) -> list[Probe]:
    g = torch.Generator().manual_seed(10)

    def inputs(sizes: dict, dtype: torch.dtype = torch.float32):
        L_q, L_k = sizes["L_q"], sizes["L_k"]
        while True:  # word counts that tell every wrong shape apart; queries as a decoder reads them (no </s>)
            queries, keys = _random_pieces(L_q, g, end=False), _random_pieces(L_k, g, True, sizes.get("cut", False))
            W, joined = _word_counts((None, queries, keys)), (max(_joined_ids(queries)) + 1, max(_joined_ids(keys)) + 1)
            if len({W, W[::-1], (L_q, L_k), joined}) == 4:
                break
        return torch.randn(*sizes["lead"], L_q, L_k, generator=g, dtype=dtype).mul(2).softmax(-1), queries, keys

    def probe(args: tuple, sizes: dict | None, **options) -> Probe:
        (weights, queries, keys), (W_q, W_k) = args, _word_counts(args)
        return Probe(args, f"{{what}} of {{name}}(weights of shape {tuple(weights.shape)}, {len(queries)} query pieces "
                     f"in {W_q} words, {len(keys)} key pieces in {W_k} words)", sizes=sizes, **options,
                     hints=((r"expected (m1 and m2|both arguments|scalar type)|same dtype", "\nHint: one_hot gives "
                             "int64 numbers; convert them to the weights' dtype (.to(weights.dtype)) before "
                             "multiplying."),))

    probes = _sets(WORDS_SIZES, WORDS_EDGES, lambda s, tagged, dtype=torch.float32: [probe(inputs(s, dtype), tagged)])
    weights, queries, keys = inputs(WORDS_SIZES[1])
    other = torch.randn(weights.shape, generator=g).softmax(-1)  # the same pieces, other weights
    probes.append(probe((weights, queries, keys), None, again=(other, list(queries), list(keys))))
    sentence = _shipped()[1]
    for kind in ("cross", "decoder"):
        where = f"the shipped model's {kind} attention of '{SENTENCES[2][0]}'"
        probes.append(probe((sentence.weights[kind].clone(), *map(list, sentence.labels(kind))), {"_model": where}))
    return probes


def _squeezed_words(found: dict, p: Probe) -> str | None:
    shape = (*p.args[0].shape[:-2], *_word_counts(p.args))
    if math.prod(found["shape"]) == math.prod(shape) and 1 in shape and len(found["shape"]) < len(shape):
        return ("A dimension of size 1 is gone (a .squeeze() drops every one: a batch of one sentence, a "
                "single query word): keep them all, or squeeze only the dimension you mean.")
    return None


_BOTH = (" Attention TO a word (columns, keys) is the SUM over its pieces, attention FROM a word (rows, queries) the "
         "MEAN of its pieces' rows.")
WORDS_MISTAKES = (
    Mistake(lambda p: ("That is the shape of the pieces: {} query pieces make {} words and {} key pieces make {}; a "
                       "piece that ends in '@@' is continued by the next one.").format(
                           len(p.args[1]), _word_counts(p.args)[0], len(p.args[2]), _word_counts(p.args)[1]),
            "the pieces not grouped", stage="shape", shape=lambda p: p.args[0].shape,
            example=lambda weights, q, k: weights.clone()),
    Mistake("Your result is transposed: rows are the query words, columns the key words.", "transposed",
            stage="shape", shape=lambda p: (*p.args[0].shape[:-2], *_word_counts(p.args)[::-1]),
            example=lambda weights, q, k: to_words(weights, q, k).transpose(-2, -1)),
    Mistake("", "'@@.' joined to the previous word", stage="shape", example=_words(ids=_joined_ids),
            find=lambda found, p: (
                "You have fewer words: a piece that STARTS with '@@' (such as '@@.') was joined to the previous word; "
                "it only means 'no space before it'. A new word starts after every piece that does not END in '@@'."
            ) if tuple(found["shape"][-2:]) == tuple(max(_joined_ids(pieces)) + 1 for pieces in p.args[1:]) else None),
    Mistake("", "a dimension of size 1 squeezed", stage="shape", find=_squeezed_words,
            example=lambda weights, q, k: to_words(weights, q, k).squeeze()),
    *(Mistake(message + _BOTH, name, like=_words(rows, columns)) for name, rows, columns, message in [
        ("sums on both sides", "sum", "sum", "you summed over the pieces of the query word as well: a row of a word "
         "in k pieces then sums to k."),
        ("means on both sides", "mean", "mean", "you averaged over the pieces of the key word as well, so the rows "
         "no longer sum to 1."),
        ("sum and mean swapped", "sum", "mean", "sum and mean are swapped: you averaged over the key pieces and "
         "summed over the query pieces.")]),
    *(Mistake(f"each word's row is the row of its {which.upper()} piece only; Clark et al. (2019), as notebook 12, "
              "take the MEAN of the rows of all its pieces.", f"the {which} piece's row", like=_words(which))
      for which in ("first", "last")),
)

WORDS = Declaration(
    check="check_to_words", function="to_words", roles=("weights", "query_pieces", "key_pieces"),
    reference=to_words, probes=_words_probes, returns=Tensor("the word-level attention"), mistakes=WORDS_MISTAKES,
    sizes_fix=_sizes_fix("Read the lengths from the piece lists and keep whatever dimensions come in front of "
                         "the last two."),
    passed=(f"check_to_words passed: {{name}} sums the attention to each word's pieces and averages the rows of "
            f"each word's pieces, as annotated.heads.to_words, on random attention of {len(WORDS_SIZES)} shapes, "
            "a batch of one, a sentence cut inside a word and float64, and on the shipped model's cross- and "
            "decoder self-attention."),
)


def check_to_words(to_words_fn: Callable) -> None:
    """Check ``to_words(weights, query_pieces, key_pieces)``: (..., L_q, L_k) pieces -> (..., W_q, W_k) words.

    Diagnoses: an input changed in place, a result of another kind (dtype, device, not a tensor), the pieces not
    grouped, a transposed result, '@@.' joined to the previous word, sums on both sides, means on both sides, sum and
    mean swapped, a word's row taken from its first or its last piece, int64 one-hot matrices, float32 one-hot matrices
    or results for float64 attention, a dimension of size 1 squeezed away, the last word lost when the pieces end inside
    a word, a result that a second call overwrites, and sizes written into the code.
    """
    check(WORDS, to_words_fn)


# ---------------------------------------------------------------- 12.2 entropy / log n


def _key_lengths(batch: int, L: int) -> torch.Tensor:
    """Sequence b keeps L - b positions (at least 2): the first is full, the others padded."""
    return torch.tensor([max(2, L - b) for b in range(batch)])


def _entropy_inputs(sizes: dict, case: str, g: torch.Generator, dtype: torch.dtype = torch.float32):
    """(weights, mask, query_valid): 'full' (no padding), 'padding' (mask (batch, 1, L_k)) or 'causal' (mask (batch,
    L_q, L_k)). The last head gives exactly 0 to about a third of the keys its mask allows."""
    batch, h, L_q, L_k = sizes["batch"], sizes["h"], sizes["L_q"], sizes["L_k"]
    keys = torch.arange(L_k) < _key_lengths(batch, L_k)[:, None]  # (batch, L_k)
    query_valid = torch.arange(L_q) < _key_lengths(batch, L_q)[:, None]  # (batch, L_q)
    if case == "full":
        keys, query_valid = torch.ones_like(keys), torch.ones_like(query_valid)
    mask = keys[:, None, :] & (torch.ones(L_q, L_k, dtype=torch.bool).tril() if case == "causal" else True)
    # Heads from diffuse to sharp; padded query rows sharper still, so that counting them shows.
    sharpness = torch.linspace(0.3, 3.0, h)[None, :, None, None] * torch.where(query_valid, 1.0, 4.0)[:, None, :, None]
    scores = torch.randn(batch, h, L_q, L_k, generator=g, dtype=dtype) * sharpness
    hard = torch.rand(batch, L_q, L_k, generator=g) < 1 / 3  # keys the last head gives exactly 0
    hard[..., 0] = False
    scores[:, -1] = scores[:, -1].masked_fill(hard, float("-inf"))
    return scores.masked_fill(~mask[:, None], float("-inf")).softmax(-1), mask, query_valid


def _entropy(f: Callable) -> Callable:
    """A normalized_entropy: f(entropy in nats, log n, rows that count, weights), per row, in float64."""
    def normalized_entropy(weights, mask, query_valid):
        w = weights.double()
        batch, h, L_q, _ = w.shape
        log_n = mask.sum(-1).double().log().expand(batch, L_q)[:, None, :].expand(batch, h, L_q)
        rows = query_valid[:, None, :].expand(batch, h, L_q).double()
        return f(-torch.special.xlogy(w, w).sum(-1), log_n, rows, weights).to(weights.dtype)  # 0 log 0 = 0
    return normalized_entropy


def _heads(x: torch.Tensor, rows) -> torch.Tensor:
    return (x * rows).sum((0, 2))  # (h,)


def _ratio(e, n, r, w):
    return _heads(e, r) / _heads(n, r)


course_normalized_entropy = _entropy(_ratio)  # head_statistics' entropy / uniform, per head


def _entropy_probes(device: str | None) -> list[Probe]:
    g = torch.Generator().manual_seed(11)
    cases = {"full": "no mask and no padding", "padding": "padded keys and queries, mask (batch, 1, L_k)",
             "causal": "a causal mask (batch, L_q, L_k) and padding"}

    def probe(args: tuple, case: str, sizes: dict | None, **options) -> Probe:
        return Probe(args, f"{{what}} (weights {tuple(args[0].shape)} {args[0].dtype}, mask {tuple(args[1].shape)}; "
                     f"{cases[case]}; the reference: annotated.heads.head_statistics)", sizes=sizes, **options,
                     tags=dict(case=case), hints=((r"must match the (existing )?size|cannot be broadcast|shape "
                                                   r"mismatch", "\nHint: mask.sum(-1) is (batch, 1) or (batch, L_q), "
                                                   "without the head dimension: expand it to (batch, L_q) and insert "
                                                   "the heads, [:, None, :]."),))

    probes = _sets(ENTROPY_SIZES, ENTROPY_EDGES, lambda s, tagged, dtype=torch.float32: [
        probe(_entropy_inputs(s, case, g, dtype), case, tagged) for case in cases])
    first = _entropy_inputs(ENTROPY_SIZES[0], "padding", g)
    probes.append(probe(first, "padding", None, again=_entropy_inputs(ENTROPY_SIZES[0], "padding", g)))
    for kind, (weights, mask, query_valid) in _shipped()[0].items():
        for layer in range(weights.size(0)):
            probes.append(probe((weights[layer].clone(), mask.clone(), query_valid.clone()),
                                "causal" if kind == "decoder" else "padding",
                                {"_model": f"the shipped model's {kind} attention, layer {layer + 1}"}))
    return probes


_PADDED = "you counted the padded query rows {}: only rows where query_valid is True count, in both sums."
_FIRST = "you {} first, then {}: sum over all the valid rows of the block at once, so that every row weighs the same."
ENTROPY_MISTAKES = (
    *_per_head_shape("sum"),
    Mistake("", "NaN from 0 log 0", find=lambda found, p: (
        "your result is NaN where weights are exactly 0: weights.log() is -inf there, and 0 * -inf is NaN. The entropy "
        "counts 0 log 0 as 0: torch.special.xlogy(p, p), or the log of weights.clamp_min(1e-12)."
    ) if found["values"] is not None and found["values"].isnan().any() and (p.args[0] == 0).any() else None,
            example=_entropy(lambda e, n, r, w: _heads(-(w.double() * w.double().log()).sum(-1), r) / _heads(n, r))),
    *(Mistake(message, name, like=_entropy(f)) for name, f, message in [
        ("n from nonzero weights", lambda e, n, r, w: _heads(e, r) / _heads((w > 0).sum(-1).double().log(), r),
         "your n counts the keys of nonzero weight (weights > 0); n is the number of keys the MASK lets the row see, "
         "mask.sum(-1), whether the head gives them weight or not."),
        ("not normalized", lambda e, n, r, w: _heads(e, r) / r.sum((0, 2)), "your result is the mean entropy, not "
         "normalized: divide it by the mean of log n, n the number of keys each row may see."),
        ("a mean over the keys", lambda e, n, r, w: _ratio(e / w.size(-1), n, r, w), "you averaged -p log p over the "
         "keys (mean(-1)): the entropy is the SUM over the keys, -sum_j p_j log p_j."),
        ("the sign", lambda e, n, r, w: -_ratio(e, n, r, w),
         "your ratio is negative: the entropy is MINUS sum_j p_j log p_j (each log p_j <= 0)."),
        *((name, lambda *a, f=factor: _ratio(*a) * f, f"you took the entropy in {top} and log n in {bottom}: use one "
           "base for both (notebook 12 uses nats).")
          for name, top, bottom, factor in [("bits over nats", "bits (log2)", "nats (natural log)", 1 / math.log(2)),
                                            ("nats over bits", "nats (natural log)", "bits (log2)", math.log(2)),
                                            ("log10 over nats", "log10", "natural log", 1 / math.log(10)),
                                            ("nats over log10", "natural log", "log10", math.log(10))]),
        ("log L_k", lambda e, n, r, w: _heads(e, r) / (r.sum((0, 2)) * math.log(w.size(-1))),
         lambda p: (f"you divided by log L_k = log {p.args[0].size(-1)}, the length of the key axis, but a row may see "
                    "fewer keys: n is the number of keys its mask allows, mask.sum(-1).")),
        ("padded rows counted", lambda e, n, r, w: _heads(e, 1) / _heads(n, 1), _PADDED.format("too")),
        ("padded rows in log n", lambda e, n, r, w: _heads(e, r) / _heads(n, 1), _PADDED.format("in the sum of log n")),
        ("padded rows in the entropy", lambda e, n, r, w: _heads(e, 1) / _heads(n, r),
         _PADDED.format("in the sum of the entropies")),
        ("ratios averaged", lambda e, n, r, w: _heads(torch.where(n > 0, e / n.clamp_min(1e-300), 0 * e), r)
         / r.sum((0, 2)), "you divided row by row and averaged the ratios: notebook 12 divides the mean entropy by the "
         "mean log n, sum(entropy) / sum(log n) over the valid rows of each head."),
        ("the sentences' ratios averaged", lambda e, n, r, w: ((e * r).sum(2) / (n * r).sum(2)).mean(0),
         _FIRST.format("took the ratio of each sentence", "averaged over the sentences")),
        ("sentences averaged first", lambda e, n, r, w: ((e * r).sum(2) / r.sum(2)).mean(0)
         / ((n * r).sum(2) / r.sum(2)).mean(0), _FIRST.format("averaged each sentence", "the sentences")),
    ]),
)

ENTROPY = Declaration(
    check="check_normalized_entropy", function="normalized_entropy", roles=("weights", "mask", "query_valid"),
    reference=course_normalized_entropy, probes=_entropy_probes, mistakes=ENTROPY_MISTAKES,
    returns=Tensor("the entropy / log n of each head", precision="float32"),  # head_statistics sums in float32
    sizes_fix=_sizes_fix("Read the sizes from weights.shape and n from the mask."),
    passed=(f"check_normalized_entropy passed: {{name}} gives each head's mean entropy over its mean log n, as "
            f"annotated.heads.head_statistics, on random attention of {len(ENTROPY_SIZES)} shapes (no mask, "
            "padding, a causal mask; weights of exactly 0 on keys the mask allows), a batch of one and float64, "
            "and on the shipped model's 9 blocks."),
)


def check_normalized_entropy(normalized_entropy: Callable) -> None:
    """Check ``normalized_entropy(weights, mask, query_valid) -> (h,)``, notebook 12's ``entropy / log n`` per head.

    Diagnoses: an input changed in place, a result of another kind, one number per sentence, per row or for the whole
    block instead of per head, no normalization, a lost minus sign, entropy and log n in two bases (bits, nats, log10),
    log L_k instead of log n, n counted from the keys of nonzero weight instead of the mask, padded rows counted (in
    either sum or both), NaN from 0 log 0, ratios taken row by row and averaged (with or without the rows that see one
    key), sentences averaged first, the mask's missing head dimension, a float32 result for float64 attention, a result
    that a second call overwrites, and sizes written into the code.
    """
    check(ENTROPY, normalized_entropy)


# ---------------------------------------------------------------- 12.3 the previous-token head


def _with_ties(weights: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """``weights`` with about a third of the rows i >= 1 replaced by rows whose largest weight is shared, exactly, by
    key i - 1 and an earlier key (argmax gives that one) or a later one (argmax gives i - 1)."""
    batch, h, L, _ = weights.shape
    i = torch.arange(L)
    values = torch.rand(batch, h, L, L, generator=g, dtype=weights.dtype) * 0.5  # below the tie
    draw = torch.rand(batch, h, L, generator=g, dtype=torch.float64)
    earlier, later = (draw * (i - 1).clamp(min=0)).long(), i + (draw * (L - i)).long()  # 0 .. i - 2; i .. L - 1
    other = torch.where((torch.rand(batch, h, L, generator=g) < 0.5) & (i >= 2), earlier, later.clamp(max=L - 1))
    values = values.scatter(-1, other[..., None], 1.0)
    values[:, :, i[1:], i[1:] - 1] = 1.0  # key i - 1 ties with `other`
    tied = values / values.sum(-1, keepdim=True)  # equal numbers over the same sum: still equal
    rows = (torch.rand(batch, h, L, generator=g) < 1 / 3) & (i >= 1)
    return torch.where(rows[..., None], tied, weights)


def _previous_inputs(sizes: dict, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention (batch, h, L, L) whose rows each have a clear maximum (on i - 1, i, i + 1 or elsewhere, by
    head; row 0 of every other head on the LAST key; padded rows on i - 1), and query_valid (batch, L)."""
    batch, h, L = sizes["batch"], sizes["h"], sizes["L"]
    query_valid, i = torch.arange(L) < _key_lengths(batch, L)[:, None], torch.arange(L)  # (batch, L)
    share_previous = torch.linspace(0.15, 0.8, h)[None, :, None]  # (1, h, 1)
    draw = torch.rand(batch, h, L, generator=g)
    target = torch.randint(L, (batch, h, L), generator=g)  # anywhere, else the next, itself, the previous:
    for above, to in ((0.3, (i + 1).clamp(max=L - 1)), (0.15, i), (0.0, (i - 1).clamp(min=0))):
        target = torch.where(draw < share_previous + above, to, target)
    target[:, ::2, 0] = L - 1  # first row: the last key
    target = torch.where(query_valid[:, None, :] | (i == 0), target, i - 1)  # padded rows: previous
    scores = torch.randn(batch, h, L, L, generator=g) + 6.0 * torch.nn.functional.one_hot(target, L)
    return scores.softmax(-1), query_valid


def _previous(hit: Callable = lambda w, i: w.argmax(-1) == i - 1, above: str = "valid", below: str = "valid",
              how: Callable = lambda hits, rows: hits.sum((0, 2)) / rows.sum((0, 2))) -> Callable:
    """A previous_token_share: ``hit`` (weights, i) -> the rows on i - 1, the rows counted ``above`` and ``below``
    the fraction bar ("valid", "all", "from 1": valid rows but the first), and ``how`` the share is taken."""
    def previous_token_share(weights, query_valid):
        batch, h, L, _ = weights.shape
        i = torch.arange(L)
        valid = query_valid[:, None, :].expand(batch, h, L)
        rows = {"valid": valid, "all": torch.ones_like(valid), "from 1": valid & (i >= 1)}
        return how((hit(weights, i) & rows[above]).double(), rows[below].double()).to(weights.dtype)
    return previous_token_share


course_previous_token_share = _previous()


def _previous_probes(device: str | None) -> list[Probe]:
    g = torch.Generator().manual_seed(12)

    def probe(args: tuple, sizes: dict | None, ties: bool = False, **options) -> Probe:
        return Probe(args, f"{{what}} (the reference: annotated.heads.head_statistics; weights "
                     f"{tuple(args[0].shape)} {args[0].dtype})", sizes=sizes, tags=dict(ties=ties), **options)

    def both(sizes: dict, probe_sizes: dict, dtype: torch.dtype = torch.float32) -> list[Probe]:
        weights, query_valid = _previous_inputs(sizes, g)
        weights = weights.to(dtype)
        return [probe((weights, query_valid), probe_sizes),
                probe((_with_ties(weights, g), query_valid), probe_sizes, ties=True)]

    probes = _sets(PREVIOUS_SIZES, PREVIOUS_EDGES, both)
    first, second = _previous_inputs(PREVIOUS_SIZES[0], g), _previous_inputs(PREVIOUS_SIZES[0], g)
    probes.append(probe(first, None, again=second))
    for kind in ("encoder", "decoder"):
        weights, _, query_valid = _shipped()[0][kind]
        for layer in range(weights.size(0)):
            where = f"the shipped model's {kind} self-attention, layer {layer + 1}"
            probes.append(probe((weights[layer].clone(), query_valid.clone()), {"_model": where}))
    return probes


def _mean_weight_on_previous(weights: torch.Tensor, query_valid: torch.Tensor) -> torch.Tensor:
    i, rows = torch.arange(1, weights.size(-1)), query_valid[:, None, :].expand(weights.shape[:3]).double()
    return ((weights.double()[..., i, i - 1] * rows[..., 1:]).sum((0, 2)) / rows.sum((0, 2))).to(weights.dtype)


PREVIOUS_MISTAKES = (
    *_per_head_shape("count"),
    Mistake("", "ties settled otherwise than argmax", when=lambda p: p.tags["ties"], find=lambda found, p: (
        "your shares are right on rows with one largest weight but not where two keys share the largest weight "
        "exactly. Notebook 12 counts a row as on i - 1 when weights.argmax(-1) == i - 1, and argmax gives the FIRST "
        "of the tied keys; comparing the weight on i - 1 with the row's maximum counts every tie, and topk, sort or "
        "an argmax of the flipped row may give another of the tied keys."),
            example=_previous(lambda w, i: (torch.cat([torch.zeros_like(w[..., :1, 0]), w[..., i[1:], i[1:] - 1]], -1)
                                            == w.amax(-1)) & (i >= 1))),
    *(Mistake(message, name, like=wrong) for name, wrong, message in [
        *((name, _previous(lambda w, i, k=k: w.argmax(-1) == i + k), f"you counted the rows whose maximum is on {on}: "
           "the previous token of row i is key i - 1.")
          for name, on, k in [("the next token", "i + 1, the NEXT token", 1),
                              ("the token itself", "i, the token itself", 0)]),
        ("the first row wrapped around", _previous(lambda w, i: w.argmax(-1) == (i - 1) % w.size(-1)),
         "the first row (i = 0) is counted when its maximum is on the LAST key: an index -1 (or torch.roll, or % L) "
         "wraps around. Compare the argmax with i - 1 itself, never equal at i = 0."),
        ("the first row left out", _previous(below="from 1"), "you left the first row out of the count of rows: "
         "notebook 12 divides by every valid row, the first one included."),
        *((name, _previous(**rows), f"you {what}: only rows where query_valid is True count, above and below the "
           "fraction bar.")
          for name, what, rows in [("padded rows counted", "counted the padded rows too",
                                    dict(above="all", below="all")),
                                   ("padded rows below the bar", "divided by all the rows, padded ones included",
                                    dict(below="all")),
                                   ("padded rows above the bar", "counted padded rows whose maximum is on i - 1",
                                    dict(above="all"))]),
        ("the mean weight on i - 1", _mean_weight_on_previous, "that is the mean WEIGHT on the previous token, not the "
         "share of rows whose LARGEST weight is on it: count the rows where weights.argmax(-1) equals i - 1."),
        ("the maximum over the queries", _previous(lambda w, i: w.argmax(-2) == i - 1), "you took the maximum over the "
         "queries (dim=-2): each row's largest weight is over its keys, weights.argmax(dim=-1)."),
        ("a count", _previous(how=lambda hits, rows: hits.sum((0, 2))), "that is the NUMBER of rows whose maximum is "
         "on i - 1: divide by the number of valid rows of each head for the share."),
        ("a percentage", _previous(how=lambda hits, rows: 100 * hits.sum((0, 2)) / rows.sum((0, 2))),
         "that is a percentage: return the share, between 0 and 1."),
        ("sentences averaged first", _previous(how=lambda hits, rows: (hits.sum(2) / rows.sum(2)).mean(0)),
         "you took the share of each sentence first, then averaged the sentences: count over all the valid rows of "
         "the batch at once, so that every row weighs the same."),
    ]),
)

PREVIOUS = Declaration(
    check="check_previous_token_share", function="previous_token_share", roles=("weights", "query_valid"),
    reference=course_previous_token_share, probes=_previous_probes, mistakes=PREVIOUS_MISTAKES,
    returns=Tensor("the share of rows whose maximum is on i - 1", precision="float32"),
    sizes_fix=_sizes_fix("Read the sizes from weights.shape."),
    passed=(f"check_previous_token_share passed: {{name}} counts, per head, the valid rows whose largest weight "
            f"is on i - 1, as annotated.heads.head_statistics, on random attention of {len(PREVIOUS_SIZES)} "
            "shapes with and without exact ties, a batch of one and float64, and on the shipped model's encoder "
            "and decoder self-attention."),
)


def check_previous_token_share(previous_token_share: Callable) -> None:
    """Check ``previous_token_share(weights, query_valid) -> (h,)``: per head, the share of rows whose max is on i - 1.

    Diagnoses: an input changed in place, a result of another kind, one number per sentence, per row or for the block, i
    + 1 or i instead of i - 1, the first row wrapping around to the last key, the first row left out of the count,
    padded rows counted (above, below or on both sides of the fraction bar), the mean weight on i - 1 instead of the
    share of maxima, the maximum over the queries, a count or a percentage instead of a share, sentences averaged first,
    a tie for the largest weight not settled as argmax settles it (the first of the tied keys), a float32 result for
    float64 attention, a result that a second call overwrites, and sizes written into the code.
    """
    check(PREVIOUS, previous_token_share)


# ---------------------------------------------------------------- 12.4 IBM Model 1, one EM step


def _random_pairs(sizes: dict, g: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``pairs`` sentence pairs (German ids 1 .. V_f - 1, English 0 .. V_e - 1) of about L_de and L_en words, every
    word of both vocabularies in them, a German and an English word twice in the first pair."""
    V_e, V_f, n, L_de, L_en = sizes["V_e"], sizes["V_f"], sizes["pairs"], sizes["L_de"], sizes["L_en"]
    de_lengths, en_lengths = [L_de - k % 2 for k in range(n)], [L_en - (k + 1) % 2 for k in range(n)]
    # Random words first (the whole first pair), then every word once, in a random order.
    german = torch.cat([torch.randint(1, V_f, (sum(de_lengths) - (V_f - 1),), generator=g),
                        torch.randperm(V_f - 1, generator=g) + 1])
    english = torch.cat([torch.randint(V_e, (sum(en_lengths) - V_e,), generator=g), torch.randperm(V_e, generator=g)])
    de, en = list(german.split(de_lengths)), list(english.split(en_lengths))
    de[0], en[0] = de[0].clone(), en[0].clone()
    de[0][-1], en[0][-1] = de[0][0], en[0][0]  # a word twice in one sentence (random words only)
    return list(zip(de, en))


def _em_reference(t: torch.Tensor, pairs: list, null: bool = True, posterior_over: str = "german",
                  repeats: str = "counted", normalize: str = "columns", eps: float = 0.0) -> torch.Tensor:
    """One EM step of IBM Model 1 on a dense table t (V_e, V_f) in float64, or with one mistake switched on."""
    t = t.double()
    counts = torch.zeros_like(t)
    for de, en in pairs:
        if repeats == "set":
            de, en = de.unique(), en.unique()
        fs = torch.cat([de.new_zeros(1), de]) if null else de  # NULL is German word 0
        block = t[en][:, fs]  # (len en, len fs): t(e | f) for each pair of positions
        posterior = block / ({"german": block.sum(1, keepdim=True), "english": block.sum(0, keepdim=True),
                              "sentence": block.sum()}[posterior_over] + eps)
        index = (en[:, None].expand_as(posterior), fs[None, :].expand_as(posterior))
        if repeats == "once":  # counts[index] += posterior: a repeated index is written once
            counts[index] = counts[index] + posterior
        else:
            counts.index_put_(index, posterior, accumulate=True)
    return {"rows": counts / counts.sum(1, keepdim=True), "none": counts,
            "columns": counts / counts.sum(0, keepdim=True)}[normalize]


def course_em_step(t: torch.Tensor, pairs: list) -> torch.Tensor:
    """One EM step, as annotated.alignment.train_ibm_model1 takes it, in t's dtype."""
    return _em_reference(t, pairs).to(t.dtype)


def _em_probes(device: str | None) -> list[Probe]:
    """Per set of sizes: a step from the uniform table, from the first step's (train_ibm_model1 after 1 and 2
    iterations), from a random table and one below 1e-60; then one pair, sentences of one word, a second call."""
    g = torch.Generator().manual_seed(13)

    def probe(t, pairs, what, sizes=None, first=False, tiny=None) -> Probe:
        return Probe((t, pairs), "{what} " + what, sizes=sizes, tags=dict(first=first, tiny=tiny), hints=(
            (r"Index put requires|expected scalar type|dtypes? (match|mismatch)|same dtype", "\nHint: t is float64, "
             "and torch.zeros(V_e, V_f) is float32 unless told otherwise: make the counts with torch.zeros_like(t) (or "
             "dtype=t.dtype)."),))

    probes = []
    for sizes in EM_SIZES:
        pairs = _random_pairs(sizes, g)
        uniform = torch.full((sizes["V_e"], sizes["V_f"]), 1.0 / sizes["V_e"], dtype=torch.float64)
        noisy = torch.rand(sizes["V_e"], sizes["V_f"], generator=g, dtype=torch.float64) + 0.1
        noisy, word = noisy / noisy.sum(0, keepdim=True), int(pairs[0][1][0])
        tiny = noisy.clone()
        tiny[word] = tiny[word] * 1e-60  # the first pair's English word about 1e-61, below float32's 1.4e-45
        probes += [probe(uniform, pairs, "from the uniform table (train_ibm_model1, 1 iteration)", sizes, first=True),
                   probe(course_em_step(uniform, pairs), pairs, "from the table of the first step (train_ibm_model1, "
                         "2 iterations)", sizes), probe(noisy, pairs, "from a random table", sizes),
                   probe(tiny / tiny.sum(0, keepdim=True), pairs, "from a table with probabilities below 1e-60", sizes,
                         tiny=word)]
    one = [(torch.tensor([2, 1, 2]), torch.tensor([1, 0, 2, 1]))]  # 3 German words (NULL included), one English twice
    single = [(torch.tensor([1]), torch.tensor([0])), (torch.tensor([2]), torch.tensor([1])),
              (torch.tensor([1, 2]), torch.tensor([1, 0, 1]))]  # two pairs of one word on both sides
    for V_e, pairs in ((3, one), (2, single)):
        t = torch.rand(V_e, 3, generator=g, dtype=torch.float64) + 0.1
        lengths = ", ".join(f"({len(de)}, {len(en)})" for de, en in pairs)
        probes.append(probe(t / t.sum(0, keepdim=True), pairs,
                            f"on {len(pairs)} pair(s) of (German, English) lengths {lengths}"))
    t1, t2 = torch.rand(2, 3, 3, generator=g, dtype=torch.float64) + 0.1
    probes.append(Probe((t1 / t1.sum(0, keepdim=True), one), "{what} of a first call",
                        again=(t2 / t2.sum(0, keepdim=True), one), tags=dict(first=False, tiny=None)))
    return probes


def _lost_tiny(found: dict, p: Probe) -> str:
    word, nan = p.tags["tiny"], found["values"] is not None and bool(found["values"].isnan().any())
    return (f"your step is right on the other tables but not on one where English word {word} has t({word} | f) "
            "below 1e-60 under every German word f (and NULL): its posteriors are still a distribution (1e-61 / "
            "3e-61 = 1/3)." + (" Your table has NaN: 0 / 0, from probabilities rounded to 0." if nan else "")
            + " Look for float32 (.float(), or torch.zeros without dtype=), which rounds numbers below 1e-45 to 0, "
            "an eps added to the sum, or probabilities clamped to a minimum: compute in t's float64.")


EM_MISTAKES = (
    Mistake("Rows are English words, columns German words.", "transposed", stage="shape",
            shape=lambda p: p.args[0].shape[::-1], example=lambda t, pairs: course_em_step(t, pairs).T),
    Mistake("", "probabilities below float32's range lost", when=lambda p: p.tags["tiny"] is not None,
            find=_lost_tiny, example=functools.partial(_em_reference, eps=1e-12)),
    Mistake("", "NULL left out", example=functools.partial(_em_reference, null=False), find=lambda found, p: (
        "the German words' columns are those of an E-step without NULL: NULL, German word 0, competes for every "
        "English word. Put it in front of each German sentence, torch.cat([german.new_zeros(1), german])."
    ) if found["values"] is not None and _equal(found["values"][:, 1:], _em_reference(*p.args, null=False)[:, 1:])
        else None),
    *(Mistake(message, name, like=functools.partial(_em_reference, **options)) for name, options, message in [
        ("the M-step over rows", dict(normalize="rows"), "your M-step normalized each ROW (each English word e) to sum "
         "1; t(e | f) is a distribution over the English words for each German word f: counts / counts.sum(0, "
         "keepdim=True)."),
        ("no M-step", dict(normalize="none"), "you returned the expected counts: the M-step divides them, t(e | f) = "
         "count(e, f) / count(f), each column by its sum."),
        ("the E-step over English words", dict(posterior_over="english"), "your E-step normalized over the English "
         "words of the pair: the posterior is over which German word (or NULL) wrote a given English word e, t(e | f) "
         "/ sum over f' of t(e | f')."),
        ("the E-step over the pair", dict(posterior_over="sentence"), "your E-step divided by the sum over the whole "
         "sentence pair: each English word is shared among the German words (and NULL) separately, t(e | f) / sum "
         "over f' of t(e | f')."),
        ("repeated indices written once", dict(repeats="once"), "a word that occurs twice in one sentence is counted "
         "once: `counts[e_ids, f_ids] += posterior` writes a repeated index pair once. Use counts.index_put_((e_ids, "
         "f_ids), posterior, accumulate=True)."),
        ("sentences as sets of words", dict(repeats="set"), "you took each sentence's words as a set, so a word that "
         "occurs twice counts once: Model 1 counts every position."),
    ]),
    Mistake("your function gives the step from the uniform table whatever t it is given: the E-step must use "
            "the t(e | f) it receives, t[e, f].", "the given t ignored", when=lambda p: not p.tags["first"],
            like=lambda t, pairs: _em_reference(torch.ones_like(t) / t.size(0), pairs)),
)

EM = Declaration(
    check="check_em_step", function="em_step", roles=("t", "pairs"), reference=course_em_step,
    probes=_em_probes, returns=Tensor("the new table t(e | f)"), mistakes=EM_MISTAKES,
    sizes_fix=_sizes_fix("Read V_e and V_f from t.shape and the sentences from the pairs."),
    passed=(f"check_em_step passed: two steps of {{name}} from the uniform table give "
            f"annotated.alignment.train_ibm_model1's t(e | f) after 1 and 2 iterations, on {len(EM_SIZES)} sets "
            "of sizes, with NULL and repeated words, and from tables with probabilities below 10^-60, on one "
            "sentence pair and on sentences of one word."),
)


def check_em_step(em_step: Callable) -> None:
    """Check ``em_step(t, pairs) -> t``: one EM step of IBM Model 1 on a dense table t[e, f] = t(e | f), NULL first.

    Diagnoses: an input changed in place (t /= ...), a result of another kind (float32, not a tensor), a transposed
    table, NULL left out, the M-step over rows or missing, the E-step normalized over the English words or over the
    whole pair, a repeated word counted once (`counts[idx] += ...` with repeated indices, or sets of words), the given t
    ignored, probabilities below float32's range lost (float32 counts or steps, an eps added to the sum, probabilities
    clamped), counts made in float32, a result that a second call overwrites, and sizes written into the code.
    """
    check(EM, em_step)


DECLARATIONS = {d.check: d for d in (WORDS, ENTROPY, PREVIOUS, EM)}
