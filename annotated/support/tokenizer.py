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
from annotated.vocab import BOS, EOS, UNK, Vocab, build_vocab_from_iterator

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
        return self.text.tokenize_de(text)

    def encode(self, text: str) -> list[int]:
        """German text -> source ids, wrapped in <s> ... </s> as in training."""
        return [self.src_vocab[BOS], *self.src_vocab.lookup_indices(self.tokenize(text)), self.src_vocab[EOS]]

    def encode_pair(self, german: str, english: str) -> tuple[list[int], list[int]]:
        """A sentence pair -> (source ids, target ids), each wrapped in <s> ... </s> as in training."""
        target = self.tgt_vocab.lookup_indices(self.text.tokenize_en(english))
        return self.encode(german), [self.tgt_vocab[BOS], *target, self.tgt_vocab[EOS]]

    def detokenize(self, tokens: list[str]) -> str:
        """English tokens -> text."""
        return self.text.detokenize(tokens)

    def decode(self, ids: list[int]) -> str:
        """Target ids (a decoded row: <s>, tokens, </s>, padding) -> English text."""
        return self.text.detokenize(ids_to_tokens(list(ids), self.tgt_vocab))
