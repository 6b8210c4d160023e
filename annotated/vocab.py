"""A vocabulary: the table between tokens and the integer ids the embeddings look up (paper §3.4).

Built from the training split only, so the model never sees a word of the test set
during training; words seen fewer than ``min_freq`` times map to ``<unk>``. The interface
follows ``torchtext.vocab`` (``build_vocab_from_iterator``, ``lookup_indices``,
``set_default_index``, ...), so code written against it reads the same.

Notebook: ``10_data_and_byte_pairs.ipynb``.
"""

from collections import Counter
from collections.abc import Iterable

from annotated.support import translation_guards as guards
from annotated.support.translation_guards import guarded
from annotated.support.vocab_names import TorchtextNames

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]  # ids 0, 1, 2, 3


class Vocab(TorchtextNames):  # get_itos, get_stoi, state_dict, ...: annotated/support/vocab_names.py
    """Tokens <-> ids. ``vocab[token]`` gives the default index for an unknown token, once set."""

    def __init__(self, itos: list[str], default_index: int | None = None):
        self.itos = list(itos)  # index -> token
        self.stoi = {token: index for index, token in enumerate(self.itos)}  # token -> index
        self.default_index = default_index

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __getitem__(self, token: str) -> int:
        index = self.stoi.get(token, self.default_index)
        if index is None:
            raise RuntimeError(
                f"token {token!r} is not in the vocabulary and no default index is set; "
                f"call vocab.set_default_index(vocab[{UNK!r}]) to map unknown tokens to {UNK}"
            )
        return index

    def set_default_index(self, index: int | None) -> None:
        """The id returned for tokens not in the vocabulary (None: raise instead)."""
        self.default_index = index

    def lookup_indices(self, tokens: Iterable[str]) -> list[int]:
        return [self[token] for token in tokens]

    def lookup_tokens(self, indices: Iterable[int]) -> list[str]:
        return [self.itos[index] for index in indices]


def build_vocab_from_iterator(
    iterator: Iterable[Iterable[str]], min_freq: int = 1, specials: list[str] = SPECIALS
) -> Vocab:
    """A Vocab of the specials, then every token seen at least ``min_freq`` times.

    Tokens are ordered by descending frequency, ties alphabetically, as torchtext does;
    the default index is left unset (call ``set_default_index``).
    """
    counts = Counter(token for tokens in iterator for token in tokens)
    for special in specials:
        counts.pop(special, None)  # a special keeps its fixed place at the front
    by_frequency = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return Vocab(list(specials) + [token for token, n in by_frequency if n >= min_freq])


# The input guards (annotated/support/translation_guards.py), which the notebook's cells leave out:
# a string where a list of tokens belongs, repeated tokens, ids and a default index outside the table.
Vocab.__init__ = guarded(Vocab.__init__, guards.vocab_inputs)
Vocab.set_default_index = guarded(Vocab.set_default_index, guards.set_default_index_inputs)
Vocab.lookup_indices = guarded(Vocab.lookup_indices, guards.lookup_indices_inputs)
Vocab.lookup_tokens = guarded(Vocab.lookup_tokens, guards.lookup_tokens_inputs)
build_vocab_from_iterator = guarded(build_vocab_from_iterator, guards.build_vocab_inputs)
