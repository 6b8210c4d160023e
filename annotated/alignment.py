"""IBM Model 1: word alignment learned by EM, to check cross-attention against.

Brown et al. (1993), "The Mathematics of Statistical Machine Translation": each English
word e of a sentence pair was written by one German word f of the pair, or by an empty
word NULL, chosen uniformly; the model is one table of translation probabilities t(e | f).
Expectation-maximization learns it from sentence pairs alone:

* **E-step**: for every English word of every pair, the posterior that German word f wrote
  it is t(e | f) / sum over the pair's German words f' of t(e | f');
* **M-step**: t(e | f) = expected count(e, f) / expected count(f), the counts being those
  posteriors summed over the corpus.

Only pairs (e, f) that occur in one sentence pair can get a probability, so the table is
stored sparsely: one entry per co-occurring pair, a few million on Multi30k.

Notebook: ``12_what_the_heads_learned.ipynb``.
"""

import numpy as np

from annotated.support.checks import check_sizes, check_word_pairs

NULL = "<null>"  # the empty German word: English words that translate nothing


class IBMModel1:
    """t(e | f) for the German and English words seen in training."""

    def __init__(self, german: list[str], english: list[str], keys: np.ndarray, t: np.ndarray):
        self.german = {w: i for i, w in enumerate(german)}  # NULL is German word 0
        self.english = {w: i for i, w in enumerate(english)}
        self.keys, self.t = keys, t  # sorted ids e * len(german) + f, and t(e | f) for each

    def prob(self, e: str, f: str) -> float:
        """t(e | f); 0 for a pair never seen together."""
        if e not in self.english or f not in self.german:
            return 0.0
        key = self.english[e] * len(self.german) + self.german[f]
        at = np.searchsorted(self.keys, key)
        return float(self.t[at]) if at < len(self.keys) and self.keys[at] == key else 0.0

    def align(self, german: list[str], english: list[str]) -> list[int | None]:
        """For each English word, the position of its most probable German word in ``german``,
        or None when NULL is more probable than every German word."""
        links = []
        for e in english:
            scores = [self.prob(e, f) for f in [NULL, *german]]
            best = int(np.argmax(scores))
            links.append(best - 1 if best > 0 and scores[best] > 0 else None)
        return links


def train_ibm_model1(pairs: list[tuple[list[str], list[str]]], iterations: int = 5) -> IBMModel1:
    """IBM Model 1 trained by EM on (German words, English words) pairs, from uniform t(e | f)."""
    check_sizes(iterations=iterations)  # a positive integer, or a ValueError naming it
    check_word_pairs(pairs)  # a non-empty list of (list of words, list of words), or a clear error
    german = [NULL, *sorted({f for de, _ in pairs for f in de} - {NULL})]
    english = sorted({e for _, en in pairs for e in en})
    f_id = {w: i for i, w in enumerate(german)}
    e_id = {w: i for i, w in enumerate(english)}
    # One entry per (English word of a pair, German word of that pair or NULL); row says which English word.
    keys, rows, n_rows = [], [], 0
    for de, en in pairs:
        fs = np.array([0, *(f_id[f] for f in de)])
        es = np.array([e_id[e] for e in en], dtype=np.int64)
        keys.append((es[:, None] * len(german) + fs[None, :]).ravel())
        rows.append(np.repeat(np.arange(n_rows, n_rows + len(es)), len(fs)))
        n_rows += len(es)
    pair_keys, pair_of = np.unique(np.concatenate(keys), return_inverse=True)
    rows = np.concatenate(rows)
    f_of_pair = pair_keys % len(german)
    t = np.full(len(pair_keys), 1.0 / len(english))
    for _ in range(iterations):
        posterior = t[pair_of]
        posterior /= np.bincount(rows, weights=posterior, minlength=n_rows)[rows]  # E-step
        count = np.bincount(pair_of, weights=posterior, minlength=len(pair_keys))  # expected count(e, f)
        t = count / np.bincount(f_of_pair, weights=count, minlength=len(german))[f_of_pair]  # M-step
    return IBMModel1(german, english, pair_keys, t)
