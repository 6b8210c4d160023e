"""Text to token ids and back, as a trained model needs it: whole words or byte-pair pieces.

``annotated.data`` (spaCy's words) and ``annotated.bpe`` (byte-pair pieces) are what
notebook 10 teaches; this module bundles them with the vocabularies of one model, so that
training (``python -m annotated.train``), the shipped model (``annotated.load_pretrained``)
and the ``translate`` command tokenize the same way.
"""

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from annotated.bpe import BytePairEncoder, bpe_tokenizer, learn_bpe
from annotated.bpe import detokenize as join_pieces
from annotated.data import tokenizer, word_splitter
from annotated.evaluation import ids_to_tokens
from annotated.support.words import detokenize_words as detokenize
from annotated.vocab import BOS, EOS, PAD, UNK, Vocab, build_vocab_from_iterator

@dataclass
class Text:
    """How a recipe turns text into tokens and back: the tokenizers of both languages, the
    detokenizer of the target, and the byte-pair merges (None for whole words)."""

    tokenize_de: Callable[[str], list[str]]
    tokenize_en: Callable[[str], list[str]]
    detokenize: Callable[[list[str]], str]
    merges: list[list[str]] | None = None


def make_text(bpe_merges: int, train: list[tuple[str, str]], merges: list[list[str]] | None = None) -> Text:
    """Whole words (``bpe_merges`` 0), or byte-pair pieces: ``merges`` saved with a checkpoint, else
    ``bpe_merges`` merges learned from the words of both sides of ``train`` (§5.1)."""
    if not bpe_merges:
        return Text(tokenizer("de"), tokenizer("en"), detokenize)
    split_de, split_en = word_splitter("de"), word_splitter("en")
    if merges is None:
        counts = Counter()
        for src, tgt in train:
            counts.update(split_de(src)[0])
            counts.update(split_en(tgt)[0])
        merges = [list(pair) for pair in learn_bpe(counts, bpe_merges)]
    bpe = BytePairEncoder(merges)
    return Text(bpe_tokenizer(bpe, split_de), bpe_tokenizer(bpe, split_en), join_pieces, merges)


def build_vocabs(min_freq: int, train: list[tuple[str, str]], text: Text) -> tuple[Vocab, Vocab]:
    """The vocabularies, from the training split only (§5.1: nothing of the test set leaks in):
    one shared by both languages for byte-pair pieces (every piece seen), else one per language."""
    if text.merges is not None:
        joint = build_vocab_from_iterator(itertools.chain.from_iterable(
            (text.tokenize_de(src), text.tokenize_en(tgt)) for src, tgt in train))
        return joint, joint
    return (build_vocab_from_iterator((text.tokenize_de(s) for s, _ in train), min_freq=min_freq),
            build_vocab_from_iterator((text.tokenize_en(t) for _, t in train), min_freq=min_freq))


class Tokenizer:
    """A model's way from German text to source ids and from target ids to English text.

    >>> model, tokenizer = annotated.load_pretrained()
    >>> tokenizer.encode("Zwei Hunde.")          # [<s>, pieces..., </s>] as ids
    >>> tokenizer.decode(ids)                    # ids of the output -> English text
    """

    def __init__(self, src_vocab: Vocab, tgt_vocab: Vocab, merges: list[list[str]] | None = None):
        check_vocab(src_vocab, "src_vocab")
        check_vocab(tgt_vocab, "tgt_vocab")
        check_merges(merges)
        self.src_vocab, self.tgt_vocab, self.merges = src_vocab, tgt_vocab, merges
        self.text = make_text(len(merges) if merges is not None else 0, [], merges)
        for vocab in (src_vocab, tgt_vocab):
            vocab.set_default_index(vocab[UNK])

    @property
    def shared(self) -> bool:
        """One vocabulary of byte-pair pieces for both languages."""
        return self.merges is not None

    def tokenize(self, text: str) -> list[str]:
        """German text -> its tokens (byte-pair pieces, or words)."""
        check_text(text, "text")
        return self.text.tokenize_de(text)

    def encode(self, text: str) -> list[int]:
        """German text -> source ids, wrapped in <s> ... </s> as in training."""
        return [self.src_vocab[BOS], *self.src_vocab.lookup_indices(self.tokenize(text)), self.src_vocab[EOS]]

    def encode_pair(self, german: str, english: str) -> tuple[list[int], list[int]]:
        """A sentence pair -> (source ids, target ids), each wrapped in <s> ... </s> as in training."""
        check_text(english, "english")
        target = self.tgt_vocab.lookup_indices(self.text.tokenize_en(english))
        return self.encode(german), [self.tgt_vocab[BOS], *target, self.tgt_vocab[EOS]]

    def detokenize(self, tokens: list[str]) -> str:
        """English tokens -> text."""
        return self.text.detokenize(tokens)

    def decode(self, ids: list[int]) -> str:
        """Target ids (a decoded row: <s>, tokens, </s>, padding) -> English text."""
        return self.text.detokenize(ids_to_tokens(row_of_ids(ids), self.tgt_vocab))


def check_text(text, name: str) -> None:
    """``text`` is one sentence: a str (a list would be taken for a sentence, bytes are not text)."""
    if not isinstance(text, str):
        fix = ("decode bytes first (text.decode('utf-8'))" if isinstance(text, (bytes, bytearray)) else
               "give one sentence at a time" if isinstance(text, (list, tuple)) else "give a str")
        raise TypeError(f"{name} must be one sentence (a str), got a {type(text).__name__}; {fix}")


def row_of_ids(ids) -> list[int]:
    """One decoded row as a list of ints: from a list, a tuple or a 1-D tensor; else a TypeError naming
    what was given (a batch is decoded a row at a time)."""
    if hasattr(ids, "dim") and hasattr(ids, "tolist"):  # a tensor
        if ids.dim() != 1:
            raise TypeError(f"ids must be one decoded row (1-D), got a tensor of shape {tuple(ids.shape)}; decode "
                            f"each row: [tokenizer.decode(row) for row in out.tolist()]")
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (list, tuple)):
        raise TypeError(f"ids must be one decoded row of token ids (a list of int), got a {type(ids).__name__}; "
                        f"tokenizer.decode turns ids into text (tokenizer.detokenize turns tokens)")
    bad = next((i for i in ids if isinstance(i, bool) or not isinstance(i, int)), None)
    if bad is not None:
        raise TypeError(f"ids must be token ids (int), found {bad!r}; decode each row of a batch on its own")
    return list(ids)


def check_vocab(vocab, name: str) -> None:
    """A vocabulary of this course's Vocab class, with the special tokens encoding and decoding need."""
    if not isinstance(vocab, Vocab):
        raise TypeError(f"{name} must be a Vocab (annotated.vocab), got a {type(vocab).__name__}; build one with "
                        f"build_vocab_from_iterator, or take a model's with load_pretrained()")
    missing = [token for token in (PAD, UNK, BOS, EOS) if token not in vocab]
    if missing:
        raise ValueError(f"{name} lacks the special token(s) {', '.join(missing)}; build it with "
                         f"build_vocab_from_iterator, which adds them")


def check_merges(merges) -> None:
    """None (whole words) or the byte-pair merges, each a pair of non-empty pieces (left, right)."""
    if merges is None:
        return
    if isinstance(merges, (str, bytes)) or not isinstance(merges, (list, tuple)):
        raise TypeError(f"merges must be None (whole words) or a list of [left, right] byte-pair merges, got a "
                        f"{type(merges).__name__}")
    for i, pair in enumerate(merges):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(p, str) and p for p in pair)):
            raise ValueError(f"merge {i + 1} of merges is {pair!r}, not a pair of pieces [left, right]; give the "
                             f"merges learned with the vocabularies (learn_bpe, or a checkpoint's bpe_merges)")
