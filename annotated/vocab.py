"""A vocabulary: the table between tokens and the integer ids the embeddings look up (paper §3.4).

Built from the training split only, so the model never sees a word of the test set
during training; words seen fewer than ``min_freq`` times map to ``<unk>``. The interface
follows ``torchtext.vocab`` (``build_vocab_from_iterator``, ``lookup_indices``,
``set_default_index``, ...), so code written against it reads the same.

Notebook: ``09_translating_german_to_english.ipynb``.
"""

from collections import Counter
from collections.abc import Iterable

from annotated.support.checks import check_not_text, check_tokens

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]  # ids 0, 1, 2, 3


class Vocab:
    """Tokens <-> ids. ``vocab[token]`` gives the default index for an unknown token, once set."""

    def __init__(self, itos: list[str], default_index: int | None = None):
        check_not_text(itos, "itos", "a list of tokens")
        if len(set(itos)) != len(itos):
            repeated = sorted(t for t, n in Counter(itos).items() if n > 1)[:5]
            raise ValueError(f"tokens must be unique, found {repeated} more than once")
        self.itos = list(itos)  # index -> token
        self.stoi = {token: index for index, token in enumerate(self.itos)}  # token -> index
        self.default_index = None
        self.set_default_index(default_index)

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
        if index is not None and not 0 <= index < len(self):
            raise ValueError(f"default index {index} is outside the vocabulary 0..{len(self) - 1}")
        self.default_index = index

    def get_default_index(self) -> int | None:
        return self.default_index

    def lookup_indices(self, tokens: Iterable[str]) -> list[int]:
        check_not_text(tokens, "tokens", "a list of tokens")  # a str would be looked up letter by letter
        return [self[token] for token in tokens]

    def lookup_tokens(self, indices: Iterable[int]) -> list[str]:
        tokens = []
        for index in indices:
            if not 0 <= index < len(self):
                raise IndexError(f"id {index} is outside the vocabulary (0..{len(self) - 1})")
            tokens.append(self.itos[index])
        return tokens

    def get_itos(self) -> list[str]:
        return list(self.itos)

    def get_stoi(self) -> dict[str, int]:
        return dict(self.stoi)

    def state_dict(self) -> dict:
        """Plain lists and ints, so a checkpoint holding it loads with ``weights_only=True``."""
        return {"itos": list(self.itos), "default_index": self.default_index}

    @classmethod
    def from_state_dict(cls, state: dict) -> "Vocab":
        return cls(state["itos"], state["default_index"])


def build_vocab_from_iterator(
    iterator: Iterable[Iterable[str]], min_freq: int = 1, specials: list[str] = SPECIALS
) -> Vocab:
    """A Vocab of the specials, then every token seen at least ``min_freq`` times.

    Tokens are ordered by descending frequency, ties alphabetically, as torchtext does;
    the default index is left unset (call ``set_default_index``).
    """
    if min_freq < 1:
        raise ValueError(f"min_freq must be at least 1, got {min_freq}")
    counts = Counter(token for tokens in iterator for token in check_tokens(tokens))
    for special in specials:
        counts.pop(special, None)  # a special keeps its fixed place at the front
    by_frequency = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return Vocab(list(specials) + [token for token, n in by_frequency if n >= min_freq])
