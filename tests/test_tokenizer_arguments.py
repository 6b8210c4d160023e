"""``annotated.support.tokenizer.Tokenizer``: what it is given is checked where it enters, with one
line naming the argument and the fix (a list taken for a sentence, bytes, a batch given to decode)."""

import pytest
import torch

from annotated.support.pretrained import load_pretrained
from annotated.support.tokenizer import Tokenizer
from annotated.vocab import Vocab


@pytest.fixture(scope="module")
def tokenizer(tiny_bpe_checkpoint):
    return load_pretrained(tiny_bpe_checkpoint)[1]


@pytest.mark.parametrize("call, error, message", [
    (lambda t: t.encode(["Ein Mann."]), TypeError, r"^text must be one sentence \(a str\), got a list; give one "
                                                    r"sentence at a time$"),
    (lambda t: t.tokenize(b"Ein Mann."), TypeError, r"^text must be one sentence \(a str\), got a bytes; decode bytes"),
    (lambda t: t.encode_pair("Ein Mann.", None), TypeError, r"^english must be one sentence \(a str\), got a "
                                                            r"NoneType"),
    (lambda t: t.decode("a man"), TypeError, r"^ids must be one decoded row of token ids \(a list of int\), got a "
                                             r"str"),
    (lambda t: t.decode(torch.zeros(2, 3, dtype=torch.long)), TypeError, r"^ids must be one decoded row \(1-D\), got "
                                                                         r"a tensor of shape \(2, 3\); decode each row"),
    (lambda t: t.decode([[2, 5, 3]]), TypeError, r"^ids must be token ids \(int\), found \[2, 5, 3\]"),
    (lambda t: Tokenizer(t.src_vocab.get_itos(), t.tgt_vocab, t.merges), TypeError,
     r"^src_vocab must be a Vocab \(annotated.vocab\), got a list"),
    (lambda t: Tokenizer(t.src_vocab, Vocab(["a", "b"]), t.merges), ValueError,
     r"^tgt_vocab lacks the special token\(s\) <pad>, <unk>, <s>, </s>"),
    (lambda t: Tokenizer(t.src_vocab, t.tgt_vocab, "merges.txt"), TypeError,
     r"^merges must be None \(whole words\) or a list of \[left, right\] byte-pair merges, got a str"),
    (lambda t: Tokenizer(t.src_vocab, t.tgt_vocab, [["e", "i"], ["ein"]]), ValueError,
     r"^merge 2 of merges is \['ein'\], not a pair of pieces \[left, right\]"),
])
def test_each_argument_is_checked_with_its_name_and_the_fix(tokenizer, call, error, message):
    with pytest.raises(error, match=message):
        call(tokenizer)


def test_valid_arguments_give_what_they_gave_before(tokenizer):
    ids = tokenizer.encode("ein mann")
    assert tokenizer.decode(ids) == tokenizer.decode(tuple(ids)) == tokenizer.decode(torch.tensor(ids))
    assert Tokenizer(tokenizer.src_vocab, tokenizer.tgt_vocab, [tuple(p) for p in tokenizer.merges]).encode(
        "ein mann") == ids
