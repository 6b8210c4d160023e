"""Checks of notebook 11's exercises, as declarations (``engine``): corpus BLEU on toy corpora (``_bleu``, compared
with ``sacrebleu``), the tokens of a decoded row (``annotated.evaluation.ids_to_tokens``; the vocabulary sent as data,
``record.build``) and the length-penalized score s(Y) of decoded outputs under teacher forcing (section 5)."""

import functools
import math
import re
from collections import Counter
from collections.abc import Callable

import torch
from sacrebleu.metrics import BLEU

from annotated.beam_search import lp
from annotated.support import record
from annotated.evaluation import corpus_bleu, ids_to_tokens
from annotated.support.grading.core import _hard_coded_hint
from annotated.support.grading.engine import Declaration, Mistake, Probe, Tensor, Value, check
from annotated.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab

# (hypotheses, references), words without punctuation, so that sacrebleu's 13a tokenizer splits them where
# str.split() does (BLEU is case-sensitive, as sacrebleu's default: corpus_bleu(lowercase=False)).
BLEU_CORPORA = [
    # Shorter than the references (BP < 1); "the cat the cat" repeats bigrams the reference holds once (clipping).
    (["the cat the cat sat on the mat", "a dog runs on the grass"],
     ["the cat sat on the mat today", "a brown dog runs on the green grass"]),
    # Longer than the references (BP = 1, and exp(1 - r/c) > 1).
    (["two men are playing football in a park today", "a girl in a red dress is dancing",
      "a man is riding a bike down a hill"],
     ["two men play football in a park", "a girl in a red dress dances",
      "a man rides a bike down the hill"]),
    # No 4-gram of the outputs is in the references: BLEU is 0 without smoothing.
    (["a woman walks", "people sit on a bench", "the boy jumps high", "a black dog swims"],
     ["a woman is walking", "people sitting on a bench", "the boy is jumping", "a dog swims in the lake"]),
    # Capitals ("A" is not "a"), a double space and spaces around a sentence (str.split(" ") makes empty words), an
    # output of one word (no 2-, 3- or 4-gram) and an empty one.
    (["A man is sleeping on a bench", "children", " a cat on the mat ", "", "A dog runs on  the beach"],
     ["a man is sleeping on the bench", "Children play outside", "a cat sits on the mat",
      "a woman is reading a book", "A dog runs along the beach"]),
    # One output of two words: no 3-gram and no 4-gram, p_3 = p_4 = 0 / 0, and BLEU is 0 (as sacrebleu counts it).
    (["a dog"], ["a dog runs"]),
]


def _bleu_sizes(hypotheses: list[str], references: list[str]) -> dict:
    return dict(sentences=len(hypotheses), hyp_words=sum(len(h.split()) for h in hypotheses),
                ref_words=sum(len(r.split()) for r in references))


# A vocabulary and decoded rows (<s> first) per set: padded rows, a row without </s>, an empty output; tokens after a
# first </s> (eos_idx=None), <pad> or <s> inside a sentence, <unk> (which stays). The specials' ids change per set.
TOKEN_CASES = [
    (SPECIALS + ["a", "dog", "runs", "the", "cat"],
     [[1, 4, 5, 6, 2, 8, 2], [1, 7, 8, 2, 0, 0, 0], [1, 4, 3, 5, 0, 6, 8], [1, 2, 0, 0, 0, 0, 0]]),
    ([UNK, PAD, EOS, BOS, "ein", "hund", "läuft", "im", "park", "zwei", "kinder", "spielen"],
     [[3, 4, 5, 6, 2, 9, 2, 10], [3, 9, 10, 11, 7, 8, 2, 1], [3, 4, 1, 5, 2, 1, 1, 1], [3, 0, 11, 2, 1, 1, 1, 1],
      [3, 2, 4, 5, 2, 1, 1, 1]]),
    ([BOS, EOS, PAD, UNK, "a", "man", "sleeps", "."],
     [[0, 4, 5, 6, 7, 1, 2, 2], [0, 4, 0, 5, 1, 2, 2, 2], [0, 3, 3, 1, 3, 2, 2, 2]]),
]

# Random logits (batch, L - 1, V) and rows ys (batch, L), <s> first, row b shorter by b tokens and padded; the ids of
# <s> and <pad> and alpha change from set to set; a batch of one in the last.
SCORE_SIZES = [dict(batch=3, L=7, vocab=11), dict(batch=4, L=9, vocab=13), dict(batch=1, L=6, vocab=17)]
_SCORE_SETTINGS = [dict(bos=1, pad=0, alpha=0.6), dict(bos=2, pad=1, alpha=1.0), dict(bos=0, pad=3, alpha=0.8)]

SIZE_SETS = {
    "check_bleu": [_bleu_sizes(*corpus) for corpus in BLEU_CORPORA],
    "check_ids_to_tokens": [dict(rows=len(rows), vocab=len(itos)) for itos, rows in TOKEN_CASES],
    "check_sequence_scores": SCORE_SIZES,
}


# ---------------------------------------------------------------- 11.1 BLEU


def _ngrams(words: list[str], n: int) -> Counter:
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def _bleu(hypotheses: list[str], references: list[str], *, clip: bool = True, max_n: int = 4,
          mean: str = "geometric", bp: str = "paper", percent: bool = True, denominator: str = "output",
          level: str = "corpus", words: str = "split", short: str = "counted") -> float:
    """Corpus BLEU as the paper reports it, or with one mistake switched on (named by its keyword)."""
    if level == "sentence":  # the mean of the sentences' own BLEU
        scores = [_bleu([h], [r], clip=clip, max_n=max_n, mean=mean, bp=bp, percent=percent)
                  for h, r in zip(hypotheses, references)]
        return sum(scores) / len(scores)
    split = {"split": str.split, "space": lambda text: text.split(" "),
             "lower": lambda text: text.lower().split()}[words]
    hyps, refs = [split(h) for h in hypotheses], [split(r) for r in references]
    if short == "skipped":
        kept = [(h, r) for h, r in zip(hyps, refs) if len(h) >= max_n]
        hyps, refs = [h for h, _ in kept], [r for _, r in kept]
    matches, totals = [0] * max_n, [0] * max_n
    precisions_per_sentence = [[0.0] * max_n for _ in hyps]
    for s, (hyp, ref) in enumerate(zip(hyps, refs)):
        for n in range(1, max_n + 1):
            h, r = _ngrams(hyp, n), _ngrams(ref, n)
            matched = sum(min(k, r[g]) if clip else (k if g in r else 0) for g, k in h.items())
            total = sum((h if denominator == "output" else r).values())
            if short == "formula":
                total = len(hyp) - n + 1
            elif short == "truncated" and len(hyp) < n:  # the whole output taken as one n-gram
                total, matched = 1, 0
            matches[n - 1] += matched
            totals[n - 1] += total
            precisions_per_sentence[s][n - 1] = matched / total if total else 0.0
    p = ([sum(row[n] for row in precisions_per_sentence) / len(hyps) for n in range(max_n)] if level == "macro"
         else [m / t if t else 0.0 for m, t in zip(matches, totals)])  # "macro": the sentences' precisions averaged
    c, r = sum(map(len, hyps)), sum(map(len, refs))
    if c == 0 or r == 0:  # only empty outputs (or references): nothing matches
        return 0.0
    penalty = {"paper": math.exp(1 - r / c) if c < r else 1.0,
               "inverted": math.exp(1 - c / r) if c < r else 1.0,  # above 1 for short outputs
               "inverted min": min(1.0, math.exp(1 - c / r)),  # 1 for short outputs, below 1 for long
               "no min": math.exp(1 - r / c), "none": 1.0}[bp]
    score = (penalty * sum(p) / max_n if mean == "arithmetic" else
             0.0 if min(p) <= 0 else penalty * math.exp(sum(map(math.log, p)) / max_n))
    return 100 * score if percent else score


def _penalty_message(how: str) -> Callable:
    def message(probe) -> str:
        sizes = _bleu_sizes(*probe.args)
        c, r = sizes["hyp_words"], sizes["ref_words"]
        bp, inverse = f"exp(1 - r/c) = {math.exp(1 - r / c):.3f}", f"exp(1 - c/r) = {math.exp(1 - c / r):.3f}"
        return {"inverted": f"the brevity penalty is inverted: here c = {c} words of output and r = {r} of reference, "
                            f"and BP = {bp}, not {inverse}: the shorter the output, the smaller the penalty.",
                "no min": f"the brevity penalty rewards long outputs: with c = {c} > r = {r}, {bp} is above 1. BP = "
                          "min(1, exp(1 - r/c)).",
                "none": f"the brevity penalty is missing, or inverted and capped at 1: here c = {c} < r = {r}, so BP = "
                        f"{bp} multiplies the geometric mean ({inverse} is above 1, and min(1, ...) makes it 1)."}[how]
    return message


def _nan(found: dict, probe) -> str | None:
    values = found["values"] if found["kind"] == "tensor" else None
    value = float(values.reshape(())) if values is not None and values.numel() == 1 else found.get("value")
    if isinstance(value, float) and math.isnan(value) and found["kind"] in ("tensor", "value"):
        return "your function returned NaN: a log of 0, or 0/0? With no match of some order, BLEU is 0."
    return None


def _through_corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    return corpus_bleu(hypotheses, references, lowercase=False).score  # sacrebleu: not the exercise


def _through_sacrebleu(hypotheses: list[str], references: list[str]) -> float:
    return BLEU(tokenize="none", smooth_method="none").corpus_score(hypotheses, [references]).score


_YOURSELF = ("the exercise is to compute BLEU yourself: count each output's n-grams (n = 1 to 4), clip them, sum over "
             "the corpus, take the geometric mean of the precisions times the brevity penalty.")

_BLEU_SWITCHES = (  # (the switches of _bleu that make it, its name, its message, a wrong answer beyond like)
    (dict(percent=False), "a fraction, not percent",
     "your score is a fraction; BLEU is reported in percent, times 100 (the paper's 27.3, not 0.273).", None),
    (dict(bp="inverted"), "the brevity penalty inverted", _penalty_message("inverted"), None),
    (dict(bp="no min"), "the brevity penalty above 1", _penalty_message("no min"), None),
    (dict(bp="none"), "no brevity penalty", _penalty_message("none"), functools.partial(_bleu, bp="inverted min")),
    (dict(clip=False), "matches not clipped", "the n-gram matches are not clipped: an n-gram of the output counts at "
     "most as often as in the reference, min(count in output, count in reference).", None),
    (dict(mean="arithmetic"), "the arithmetic mean", "you took the arithmetic mean of the four precisions; BLEU takes "
     "their geometric mean, exp((log p_1 + log p_2 + log p_3 + log p_4) / 4).", None),
    (dict(level="sentence"), "the mean of sentence BLEU", "you averaged the BLEU of each sentence; corpus BLEU sums "
     "the matches, n-grams and lengths over all sentences first, then computes one score.", None),
    (dict(level="macro"), "the mean of sentence precisions", "you averaged the precisions of the sentences; corpus "
     "BLEU sums the matches and n-grams over all sentences, then divides once.", None),
    (dict(max_n=3), "n up to 3", "your score uses the 1- to 3-gram precisions; BLEU uses n = 1 to 4 (range(1, 5)).",
     None),
    (dict(denominator="reference"), "the reference's n-grams as denominator", "you divided the matches by the "
     "reference's n-grams: a precision divides by the output's n-grams (the brevity penalty covers what is missing).",
     None),
    (dict(words="lower"), "lowercased", "you lowercased the sentences: BLEU compares the words as they are written, "
     "so 'A' does not match 'a' (sacrebleu's default). Split the sentences as they are, hypothesis.split().", None),
    (dict(words="space"), "split at single spaces", "you split at single spaces, str.split(' '): a double space, or a "
     "space at either end, makes an empty word ''. str.split() splits at any run of spaces and drops them at the "
     "ends.", None),
    (dict(short="skipped"), "short outputs left out", "you left out the outputs shorter than 4 words: they still "
     "count, in c and r and in the precisions of the n-grams they have.", None),
    (dict(short="truncated"), "a short output as one n-gram", "you counted an output shorter than n words as one "
     "n-gram of order n (range(max(1, len(words) - n + 1))): it has no n-gram of that order; range(len(words) - n + "
     "1) is empty then.", None),
    (dict(short="formula"), "a negative count of n-grams", "you counted len(words) - n + 1 n-grams for every output: "
     "below 0 for an output shorter than n words. Count the n-grams you extract, max(0, len(words) - n + 1).", None),
)

BLEU_MISTAKES = (
    Mistake(f"your function calls sacrebleu (corpus_score), directly or through the course's corpus_bleu; {_YOURSELF}",
            "sacrebleu through corpus_bleu", stage="source", source=r"(?s)\bcorpus_bleu\b.*\. score\b",
            example=_through_corpus_bleu),
    Mistake(f"your function calls sacrebleu ({{found}}); {_YOURSELF}", "sacrebleu called", stage="source",
            source=r"\bsacrebleu\b|(?<=\. )(corpus_score|sentence_score|compute_bleu|_compute_score_from_stats)\b",
            example=_through_sacrebleu),
    *(Mistake(message, name, like=functools.partial(_bleu, **switched), example=example)
      for switched, name, message, example in _BLEU_SWITCHES),
    Mistake("", "NaN", find=_nan, example=lambda hypotheses, references: float("nan")),
)

_BLEU_ERRORS = ((r"math domain error", "\nHint: a precision p_n is 0 here, and log(0) is undefined: BLEU is then 0 "
                                       "(no smoothing), return 0.0 before taking the logs."),
                (r"division by zero", "\nHint: the outputs here are shorter than 4 words (or empty), so the corpus "
                                      "holds no n-gram of some order: p_n = 0 / 0, which sacrebleu counts as 0: test "
                                      "the totals before you divide, and return 0.0."))


def _bleu_probes(device: str | None) -> list[Probe]:
    """One probe per toy corpus; where BLEU is 0 without smoothing, corpus_bleu's smoothed score passes too."""
    probes = []
    for hypotheses, references in BLEU_CORPORA:
        accept = None
        if _bleu(hypotheses, references) == 0:
            smoothed = corpus_bleu(hypotheses, references, lowercase=False).score
            accept = lambda values, smoothed=smoothed: values[0] is not None and math.isclose(  # noqa: E731
                values[0], smoothed, rel_tol=1e-6)
        probes.append(Probe((list(hypotheses), list(references)),
                            f"{{what}} of {{name}} on {len(hypotheses)} sentences (sacrebleu's corpus BLEU expected)",
                            sizes=_bleu_sizes(hypotheses, references), hints=_BLEU_ERRORS, accept=accept))
    return probes


_BLEU_NOTES = {  # what a corpus tries that the ones before it do not
    2: "no 4-gram of these outputs is in its reference, so p_4 = 0 and BLEU is 0 without smoothing (corpus_bleu's "
       "smoothed score is accepted too)",
    3: "these sentences hold capitals (BLEU is case-sensitive), a double space and spaces around a sentence, an output "
       "of one word and an empty one",
    4: "this corpus is one output of two words: no 3-gram and no 4-gram, so p_3 and p_4 are 0 and BLEU is 0",
}


def _bleu_hint(passed: list, sizes: dict, message: str) -> str:
    if any(re.search(pattern, message) for pattern, _ in _BLEU_ERRORS):
        return ""  # named by its hint: not a size written in
    hint = _hard_coded_hint(passed, sizes, message,
                            "Loop over every sentence you are given: zip(hypotheses, references).")
    note = _BLEU_NOTES.get(SIZE_SETS["check_bleu"].index(sizes))
    return hint + (f"\nNote: {note}." if note else "")


BLEU_CHECK = Declaration(
    check="check_bleu", function="bleu", roles=("hypotheses", "references"), reference=_bleu, probes=_bleu_probes,
    returns=Value("BLEU", kind="float", numbers=True, precision=1e-4), mistakes=BLEU_MISTAKES, sizes_fix=_bleu_hint,
    passed=(f"check_bleu passed: {{name}} gives sacrebleu's corpus BLEU on {len(BLEU_CORPORA)} toy corpora: outputs "
            "shorter than the references (brevity penalty below 1), longer ones (penalty 1), one without a 4-gram "
            "match (BLEU 0), capitals and stray spaces with a one-word and an empty output, and one without a "
            "3-gram (BLEU 0)."),
)


def check_bleu(bleu: Callable) -> None:
    """Check ``bleu(hypotheses, references) -> float`` against sacrebleu's corpus BLEU (no smoothing, split at
    whitespace, case-sensitive) on ``BLEU_CORPORA``. A function whose code calls sacrebleu fails before it runs.

    Diagnoses: a call to sacrebleu (or the course's corpus_bleu) instead of the computation, a result of another kind or
    NaN, a fraction instead of percent, the brevity penalty inverted, above 1 or missing, counts not clipped, the
    arithmetic mean, the mean of sentence scores or of sentence precisions, three n-gram orders, the reference's n-grams
    as the denominator, lowercased text, str.split(" ") instead of str.split(), outputs shorter than 4 words left out,
    given a negative count of n-grams or counted as one n-gram, log(0), a division by zero where the corpus has no
    n-gram of some order, and code that reads only some of the sentences."""
    check(BLEU_CHECK, bleu)


# ---------------------------------------------------------------- 11.2 from ids to tokens


def _row_tokens(ids: list[int], vocab: Vocab, *, cut: str = "first", keep_eos: bool = False,
                drop: tuple = (BOS, PAD), course_ids: bool = False) -> list[str]:
    """``ids_to_tokens`` written out, or with one mistake switched on (named by its keyword)."""
    bos, eos, pad = (1, 2, 0) if course_ids else (vocab[BOS], vocab[EOS], vocab[PAD])
    stops = [i for i, t in enumerate(ids) if t == eos or (cut == "pad" and t == pad)]
    if stops and cut != "none":
        end = stops[-1] if cut == "last" else stops[0]
        ids = ids[: end + 1] if keep_eos else ids[:end]
    dropped = {bos if s == BOS else pad if s == PAD else vocab[s] for s in drop}
    if cut == "none":
        dropped.add(eos)
    return [vocab.itos[t] for t in ids if t not in dropped]


_AFTER = "what follows the first </s> (a row decoded with eos_idx=None) is not part of the translation"
_TOKEN_MISTAKES = [
    (dict(keep_eos=True), "the output keeps its </s>: the tokens are what lies between <s> and the first </s>, both "
                          "left out (BLEU would count '</s>' as a word)."),
    (dict(cut="last"), f"you cut at the last </s>, not the first: {_AFTER}. Cut at ids.index(eos)."),
    (dict(cut="last", keep_eos=True), "you cut after the last </s>: the translation ends before the first </s>, "
                                      "ids[: ids.index(eos)]."),
    (dict(cut="none"), f"you dropped the </s> tokens but did not cut at the first one: {_AFTER}."),
    (dict(cut="pad"), "you stopped at the first <pad> as well as at </s>: a <pad> inside a sentence is dropped, and "
                      "the sentence goes on to its </s>."),
    (dict(drop=(PAD,)), "the output keeps its <s>: leave out every <s> of the row, the first included."),
    (dict(drop=(BOS,)), "the output keeps <pad> tokens: leave out every <pad> before the first </s>."),
    (dict(drop=()), "the output keeps <s> and <pad>: leave out both."),
    (dict(drop=(BOS, PAD, UNK)), "you dropped <unk> too: it is what the model wrote, and a translation without it "
                                 "would look better than it is. Leave out <s> and <pad> only."),
    (dict(course_ids=True), "the ids of the specials are written into your code (<s> = 1, </s> = 2, <pad> = 0): read "
                            "them from the vocabulary you are given, vocab['</s>'], vocab['<s>'], vocab['<pad>']."),
]


def _tokens_mistake(mistake: dict, message: str) -> Mistake:
    def wrong(ids, vocab):
        return _row_tokens(ids, vocab, **mistake)
    return Mistake(lambda p: f"ids_to_tokens({p.args[0]}, vocab) with the vocabulary {p.args[1].itos} gives "
                   f"{wrong(*p.args)}, where the tokens are {ids_to_tokens(list(p.args[0]), p.args[1])}: {message}",
                   ", ".join(f"{k} {v}" for k, v in mistake.items()).replace("_", " "), like=wrong)


def _tokens_hint(passed: list, sizes: dict, message: str) -> str:
    itos = TOKEN_CASES[SIZE_SETS["check_ids_to_tokens"].index(sizes)][0]
    hint = _hard_coded_hint(passed, sizes, message, "Read the ids of <s>, </s> and <pad> from the vocabulary.")
    return hint + (f"\nNote: in this vocabulary <s> is {itos.index(BOS)}, </s> is {itos.index(EOS)} and <pad> "
                   f"is {itos.index(PAD)}.")


TOKENS = Declaration(
    check="check_ids_to_tokens", function="ids_to_tokens", roles=("ids", "vocab"),
    reference=lambda ids, vocab: ids_to_tokens(list(ids), vocab), sizes_fix=_tokens_hint, consistent=True,
    probes=lambda device: [Probe((list(row), record.build("annotated.vocab.Vocab", itos=itos)),
                                 f"{{what}} of {{name}}({row}, vocab) with the vocabulary {itos}", sizes=sizes)
                           for sizes, (itos, rows) in zip(SIZE_SETS["check_ids_to_tokens"], TOKEN_CASES)
                           for row in rows],
    returns=Value("the tokens", kind="list", sequence=True, other=lambda found, name, what: (
        f"{name} returned the string {found['value']!r}; return the list of tokens (the detokenizer joins them)."
        if found.get("type") == "str" else f"{name} should return a list of tokens, got {found['type']}")),
    in_place="The caller uses the row again: build a new list (a slice, ids[:end]), not remove, pop or del.",
    mistakes=(Mistake("", "ids, not tokens", find=lambda found, p: (
        f"ids_to_tokens returned ids, {list(found['value'])}; return the tokens themselves, vocab.lookup_tokens(ids)."
        if found["value"] and all(isinstance(t, int) and not isinstance(t, bool) for t in found["value"]) else None),
                      example=lambda ids, vocab: [vocab[t] for t in ids_to_tokens(list(ids), vocab)]),
              *(_tokens_mistake(mistake, message) for mistake, message in _TOKEN_MISTAKES)),
    passed=lambda name: (
        f"check_ids_to_tokens passed: {name} gives annotated.evaluation.ids_to_tokens's tokens for "
        f"{sum(len(rows) for _, rows in TOKEN_CASES)} decoded rows of {len(TOKEN_CASES)} vocabularies: cut at the "
        "first </s>, without <s> and <pad>, <unk> kept."),
)


def check_ids_to_tokens(ids_to_tokens_fn: Callable) -> None:
    """Check ``ids_to_tokens(ids, vocab) -> tokens``, the tokens of one decoded row, against
    ``annotated.evaluation.ids_to_tokens`` on the vocabularies and rows of ``TOKEN_CASES``.

    Diagnoses: the ids changed in place, a string, ids or another kind of result, </s> kept, a cut at the last </s> (or
    after it), no cut, a stop at the first <pad>, <s> or <pad> (or both) kept, <unk> dropped, and the ids of the
    specials written into the code."""
    check(TOKENS, ids_to_tokens_fn)


# ---------------------------------------------------------------- 11.3 s(Y) under teacher forcing


def _score_inputs(sizes: dict, settings: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Random logits (batch, L - 1, V) and rows ys (batch, L): <s>, other ids, row b shorter by b tokens, padding."""
    batch, L, vocab = sizes["batch"], sizes["L"], sizes["vocab"]
    bos, pad = settings["bos"], settings["pad"]
    g = torch.Generator().manual_seed(L * vocab)
    logits = 2.0 * torch.randn(batch, L - 1, vocab, generator=g)
    words = torch.tensor([t for t in range(vocab) if t not in (bos, pad)])
    ys = words[torch.randint(len(words), (batch, L), generator=g)]
    ys[:, 0] = bos
    for b in range(batch):
        ys[b, max(3, L - b) :] = pad
    return logits, ys


def _scores(logits: torch.Tensor, ys: torch.Tensor, alpha: float, pad: int, *, normalize: str = "log_softmax",
            shift: bool = True, mask: bool = True, length: str = "real", penalty: str = "divide") -> torch.Tensor:
    """s(Y) = log P(Y | X) / lp(|Y|) of each row, or with one mistake switched on."""
    log_probs = {"log_softmax": lambda: logits.log_softmax(-1), "softmax": lambda: logits.softmax(-1),
                 "positions": lambda: logits.log_softmax(1), "none": lambda: logits}[normalize]()
    labels = ys[:, 1:] if shift else ys[:, :-1]  # (batch, L - 1)
    picked = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (batch, L - 1)
    real = ys[:, 1:] != pad
    log_p = (picked.masked_fill(~real, 0.0) if mask else picked).sum(-1)  # (batch,)
    n = real.sum(-1).to(logits.dtype)
    n = {"real": n, "with <s>": n + 1, "without </s>": n - 1, "padded": torch.full_like(n, ys.size(1) - 1)}[length]
    return {"none": log_p, "mean": log_p / n, "factor": log_p / ((5 + n) / 6 * alpha),
            "multiply": log_p * lp(n, alpha), "divide": log_p / lp(n, alpha)}[penalty]


_LENGTH = "|Y| counts the tokens after <s>, </s> included, (ys[:, 1:] != pad_idx).sum(-1)"
_LP = "lp(|Y|) = ((5 + |Y|) / 6)^alpha"
# (the mistake's name, the switches of _scores that make it, its message; {alpha}: the probe's)
_SCORE_MISTAKES = [
    ("raw logits", dict(normalize="none"), "you summed the raw logits: log P needs log-probabilities, "
     "logits.log_softmax(-1), before picking each label's."),
    ("probabilities", dict(normalize="softmax"), "you summed probabilities, softmax(-1): log P(Y | X) is the sum of "
     "the log-probabilities, log_softmax(-1)."),
    ("a softmax over the positions", dict(normalize="positions"), "you normalized over the positions, "
     "log_softmax(1): each position's logits are a distribution over the vocabulary, log_softmax(-1)."),
    ("labels not shifted", dict(shift=False), "you scored the tokens the decoder reads, ys[:, :-1]: the logits at "
     "position i predict the next token, so the labels are ys[:, 1:]."),
    ("padding scored", dict(mask=False), "the padding was scored too: keep only the positions where ys[:, 1:] != "
     "pad_idx."),
    ("|Y| with <s>", dict(length="with <s>"), f"|Y| counted <s>: {_LENGTH}."),
    ("|Y| without </s>", dict(length="without </s>"), f"|Y| left out </s>: {_LENGTH}."),
    ("|Y| the padded length", dict(length="padded"), f"every row got the same |Y|, the padded length: {_LENGTH}."),
    ("no length penalty", dict(penalty="none"), "the length penalty is missing: s(Y) = log P(Y | X) / lp(|Y|), with "
     "lp(|Y|) = ((5 + |Y|) / 6)^alpha and alpha = {alpha} here."),
    ("the penalty multiplied", dict(penalty="multiply"), "you multiplied log P by lp(|Y|): s(Y) divides by it."),
    ("divided by |Y|", dict(penalty="mean"), f"you divided by |Y|, the mean log-probability per token: the length "
     f"penalty divides by {_LP}."),
    ("alpha as a factor", dict(penalty="factor"), "you computed lp(|Y|) as ((5 + |Y|) / 6) * alpha: alpha is an "
     "exponent, ((5 + |Y|) / 6) ** alpha."),
]
SCORE_MISTAKES = tuple(Mistake(lambda p, m=message: m.replace("{alpha}", str(p.args[2])), name,
                               like=functools.partial(_scores, **switched))
                       for name, switched, message in _SCORE_MISTAKES)


def _score_probes(device: str | None) -> list[Probe]:
    return [Probe((*_score_inputs(sizes, s), s["alpha"], s["pad"]), f"{{what}} of {{name}}(logits of shape "
                  f"({sizes['batch']}, {sizes['L'] - 1}, {sizes['vocab']}), ys of shape ({sizes['batch']}, "
                  f"{sizes['L']}), alpha={s['alpha']}, pad_idx={s['pad']})", sizes=sizes)
            for sizes, s in zip(SCORE_SIZES, _SCORE_SETTINGS)]


def _scores_hint(passed: list, sizes: dict, message: str) -> str:
    settings = _SCORE_SETTINGS[SCORE_SIZES.index(sizes)]
    hint = _hard_coded_hint(passed, sizes, message, "Read the sizes from the inputs, and use the pad_idx and alpha "
                                                    "you are given.")
    one = "\nNote: the batch here is one row: a squeeze() drops its dimension." if sizes["batch"] == 1 else ""
    return hint + f"\nNote: here <pad> is {settings['pad']} and alpha is {settings['alpha']}.{one}"


SCORES = Declaration(
    check="check_sequence_scores", function="sequence_scores", roles=("logits", "ys", "alpha", "pad_idx"),
    reference=_scores, probes=_score_probes, returns=Tensor("the scores"), mistakes=SCORE_MISTAKES,
    sizes_fix=_scores_hint,
    passed=("check_sequence_scores passed: {name} gives s(Y) = log P(Y | X) / lp(|Y|) of every row, its "
            f"log-probabilities summed over the tokens after <s> up to the padding, on {len(SCORE_SIZES)} random "
            "batches (rows of different lengths, a batch of one)."),
)


def check_sequence_scores(sequence_scores: Callable) -> None:
    """Check ``sequence_scores(logits, ys, alpha, pad_idx) -> (batch,)``, s(Y) = log P(Y | X) / lp(|Y|) of decoded
    rows ys from teacher-forced logits, against the course's formula (``_scores``) on the inputs of ``SCORE_SIZES``.

    Diagnoses: an input changed in place, a result of another dtype, kind or shape (a batch of one squeezed away), raw
    logits, probabilities or a softmax over the positions, the labels not shifted, padding scored, |Y| counted with <s>,
    without </s> or as the padded length, the length penalty missing, multiplied, replaced by the length or with alpha
    as a factor, and sizes or a padding id written into the code."""
    check(SCORES, sequence_scores)


DECLARATIONS = {"check_bleu": BLEU_CHECK, "check_ids_to_tokens": TOKENS, "check_sequence_scores": SCORES}
