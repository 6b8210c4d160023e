"""From token ids back to text, and BLEU (paper §6.1, Table 2).

The paper reports BLEU (Papineni et al., 2002): the geometric mean of the 1- to 4-gram
precisions of the output against a reference translation, times a brevity penalty for
outputs shorter than the references. Scores computed on differently tokenized text
cannot be compared, so the field uses sacrebleu (Post, 2018): it takes plain
detokenized text, tokenizes it the same way every time, and prints a signature naming
every setting. The course lowercases its data, so BLEU here is lowercased too.

Notebook: ``11_translating_german_to_english.ipynb``.
"""

from collections.abc import Callable

import torch
from sacrebleu.metrics import BLEU, BLEUScore

from annotated.beam_search import beam_search
from annotated.bpe import detokenize
from annotated.decoding import greedy_decode
from annotated.masks import padding_mask
from annotated.model import EncoderDecoder
from annotated.support import translation_guards as guards
from annotated.support.translation_guards import guarded
from annotated.vocab import BOS, EOS, PAD, Vocab


def ids_to_tokens(ids: list[int], vocab: Vocab) -> list[str]:
    """The tokens of one decoded row: what lies between <s> and the first </s>, no padding."""
    if vocab[EOS] in ids:
        ids = ids[: ids.index(vocab[EOS])]
    return [token for token in vocab.lookup_tokens(ids) if token not in (BOS, PAD)]


@torch.no_grad()
def translate(model: EncoderDecoder, sentences: list[str], src_vocab: Vocab, tgt_vocab: Vocab,
              src_tokenizer: Callable[[str], list[str]], beam_size: int | None = None, max_len: int = 100,
              length_penalty: float = 0.6, batch_size: int = 64,
              detokenizer: Callable[[list[str]], str] = detokenize) -> list[str]:
    """Translate raw sentences: tokenize, look up ids (wrapped in <s> ... </s>, as in training), decode
    greedily (``beam_size=None``) or with beam search, and join the tokens back into text.

    ``src_tokenizer`` is e.g. ``annotated.bpe.bpe_tokenizer(...)``, whose pieces ``detokenize`` joins;
    ``src_vocab`` needs a default index for unknown tokens. The model is put back in its mode after.
    """
    device = next(model.parameters()).device
    pad = src_vocab[PAD]
    ids = [[src_vocab[BOS], *src_vocab.lookup_indices(src_tokenizer(s)), src_vocab[EOS]] for s in sentences]
    # Sentences of similar length share a batch, so little time goes into padding.
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    specials = {"bos_idx": tgt_vocab[BOS], "eos_idx": tgt_vocab[EOS], "pad_idx": tgt_vocab[PAD]}
    translations = [""] * len(ids)
    was_training = model.training
    model.eval()
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        longest = max(len(ids[i]) for i in chunk)
        src = torch.tensor([ids[i] + [pad] * (longest - len(ids[i])) for i in chunk], device=device)
        src_mask = padding_mask(src, pad)  # (batch, 1, L_src)
        if beam_size is None:
            out = greedy_decode(model, src, src_mask, max_len, **specials)
        else:
            out = beam_search(model, src, src_mask, beam_size, max_len, length_penalty, **specials)
        for i, row in zip(chunk, out.tolist()):
            translations[i] = detokenizer(ids_to_tokens(row, tgt_vocab))
    model.train(was_training)
    return translations


def corpus_bleu(hypotheses: list[str], references: list[str], lowercase: bool = True) -> BLEUScore:
    """sacrebleu's corpus BLEU of detokenized ``hypotheses`` against one reference each.

    The score's ``signature`` attribute holds sacrebleu's signature string (settings and
    version), which only exists once a corpus has been scored; report it with the score.
    """
    bleu = BLEU(lowercase=lowercase)
    score = bleu.corpus_score(hypotheses, [references])
    score.signature = str(bleu.get_signature())
    return score


# The input guards (annotated/support/translation_guards.py), which the notebook's cells leave out:
# a string where a list of sentences belongs, sizes below 1, an empty corpus, one reference per output.
translate = guarded(translate, guards.translate_inputs)
corpus_bleu = guarded(corpus_bleu, guards.corpus_bleu_inputs)
