"""From token ids back to text, and BLEU (paper §6.1, Table 2).

The paper reports BLEU (Papineni et al., 2002): the geometric mean of the 1- to 4-gram
precisions of the output against a reference translation, times a brevity penalty for
outputs shorter than the references. Scores computed on differently tokenized text
cannot be compared, so the field uses sacrebleu (Post, 2018): it takes plain
detokenized text, tokenizes it the same way every time, and prints a signature naming
every setting. The course lowercases its data, so BLEU here is lowercased too.

Notebook: ``09_translating_german_to_english.ipynb``.
"""

from collections.abc import Callable

import torch
from sacrebleu.metrics import BLEU, BLEUScore

from annotated.beam_search import beam_search
from annotated.decoding import greedy_decode
from annotated.masks import padding_mask
from annotated.model import EncoderDecoder
from annotated.support.checks import check_not_text, check_sizes
from annotated.vocab import BOS, EOS, PAD, Vocab

NO_SPACE_BEFORE = {".", ",", "!", "?", ";", ":", ")", "]", "}", "%", "...", "n't", "-"}
NO_SPACE_AFTER = {"(", "[", "{", "-"}  # "-": the tokenizer splits "t-shirt" into "t", "-", "shirt"


def detokenize(tokens: list[str]) -> str:
    """Join tokens into text: no space before punctuation, closing brackets and clitics
    ("'s", "n't"), none after opening brackets, none around hyphens, and double quotes
    hug what they enclose."""
    check_not_text(tokens, "tokens", "a list of tokens")
    text, glue_next, inside_quotes = "", True, False
    for token in tokens:
        glue = glue_next or token in NO_SPACE_BEFORE or token.startswith("'")
        glue_next = token in NO_SPACE_AFTER
        if token == '"':
            glue = glue or inside_quotes  # a closing quote: glue it to the word before
            glue_next = not inside_quotes  # an opening quote: glue the next word to it
            inside_quotes = not inside_quotes
        text += token if glue else " " + token
    return text


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
    """Translate raw sentences: tokenize, look up ids (wrapped in <s> ... </s>, as in
    training), decode greedily (``beam_size=None``) or with beam search, and detokenize.

    ``src_tokenizer`` is e.g. ``annotated.data.tokenizer("de")`` with ``detokenizer``
    ``detokenize`` (whole words), or ``annotated.bpe.bpe_tokenizer(...)`` with
    ``annotated.bpe.detokenize`` (byte-pair pieces); ``src_vocab`` needs a default index
    for unknown words. The model runs in eval mode and is put back after.
    """
    check_not_text(sentences, "sentences")  # a str would be translated character by character
    check_sizes(max_len=max_len, batch_size=batch_size)
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
    check_not_text(hypotheses, "hypotheses")
    check_not_text(references, "references")
    if not hypotheses:
        raise ValueError("BLEU of an empty corpus is undefined: give at least one hypothesis and its reference")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"got {len(hypotheses)} hypotheses but {len(references)} references; "
            f"BLEU needs one reference per hypothesis, in the same order"
        )
    bleu = BLEU(lowercase=lowercase)
    score = bleu.corpus_score(hypotheses, [references])
    score.signature = str(bleu.get_signature())
    return score
