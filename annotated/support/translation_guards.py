"""The input guards of notebooks 09–12's modules, kept out of the code the notebook teaches.

A program needs its functions to refuse bad input with one clear line (a string where a list of
sentences belongs would be translated letter by letter; ``batch_size=0`` would loop forever); a
lesson reads better without those lines. So the taught functions and methods of
``annotated.data``, ``annotated.vocab``, ``annotated.bpe``, ``annotated.beam_search``,
``annotated.evaluation`` and ``annotated.heads`` (``sentence_attention``) hold no guard, and each of
those modules ends by wrapping them with :func:`guarded` and the matching check below. Whoever
imports the package (the command line, ``annotated.translate``, the tests) gets the guarded
versions; the notebook's cells define the plain ones, which give the same results on valid input.
The checks of ``annotated.translate.translate`` are here too, shared with ``sentence_attention``.
"""

import functools
import inspect
import math
import numbers
import warnings
from collections import Counter
from collections.abc import Callable, Iterable

import torch

from annotated.support.checks import (
    check_beam_arguments, check_decoding_inputs, check_finite_weights, check_not_text, check_sizes, check_tokens,
)
from annotated.support.input_text import clean_sentence, untranslatable

MAX_SOURCE_TOKENS = 200  # longer sentences are refused: Multi30k's sentences have at most about 80 tokens
MAX_OUTPUT_TOKENS = 250  # the same for every sentence, so that batching cannot change a translation
MAX_ALPHA = 10.0  # the length penalty's range, as the command line's --alpha


def guarded(function: Callable, check: Callable, by_name: bool = True) -> Callable:
    """``function``, calling ``check(**arguments)`` first with every argument by name (defaults
    included). ``check`` raises on bad input; it may return a dict of arguments to replace (a
    one-pass iterator it had to read, as a list). ``by_name=False``: ``check(*args, **kwargs)`` as
    given, for a function called so often (a word at a time) that binding names would slow it."""
    signature = inspect.signature(function)
    if not by_name:
        @functools.wraps(function)
        def checked_fast(*args, **kwargs):
            check(*args, **kwargs)
            return function(*args, **kwargs)

        return checked_fast

    @functools.wraps(function)
    def checked(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        replaced = check(**bound.arguments)
        if replaced:
            bound.arguments.update(replaced)
        return function(*bound.args, **bound.kwargs)

    return checked


# ------------------------------------------------------------------------ annotated.data

def load_pairs_inputs(split, data_dir, *, splits: tuple[str, ...], read_lines: Callable, **_):
    """A known split, and two files whose line i translates each other: the same number of lines,
    none empty (else a DataError naming the file and the line). Reads the two files once more than
    ``load_pairs`` itself (tens of milliseconds) so that a bad file gets its clear message.

    ``splits`` and ``read_lines`` are annotated.data's, given by that module when it wraps
    ``load_pairs`` (``functools.partial``): it imports this module, so this one does not import it."""
    from annotated.support.download import check_aligned, resolve_data_dir

    if split not in splits:
        raise ValueError(f"unknown split {split!r}; choose one of {splits}")
    directory = resolve_data_dir(data_dir)
    german_path, english_path = directory / f"{split}.de.gz", directory / f"{split}.en.gz"
    check_aligned(german_path, read_lines(german_path), english_path, read_lines(english_path))
    return {"data_dir": directory}


# ----------------------------------------------------------------------- annotated.vocab

def vocab_inputs(itos, default_index, **_):
    check_not_text(itos, "itos", "a list of tokens")
    other = next((token for token in itos if not isinstance(token, str)), None)
    if other is not None:  # an int token would be found by the int, never by text
        raise TypeError(f"every token of itos must be a str, got {other!r} ({type(other).__name__}); "
                        f"give the tokens as text, e.g. [str(t) for t in tokens]")
    if len(set(itos)) != len(itos):
        repeated = sorted(t for t, n in Counter(itos).items() if n > 1)[:5]
        raise ValueError(f"tokens must be unique, found {repeated} more than once")
    default_index_inputs(itos, default_index)


def default_index_inputs(itos, index):
    if index is not None and (isinstance(index, bool) or not isinstance(index, numbers.Integral)):
        raise TypeError(f"default index must be an integer id (e.g. vocab['<unk>']) or None, got {index!r}")
    if index is not None and not 0 <= index < len(itos):
        raise ValueError(f"default index {index} is outside the vocabulary 0..{len(itos) - 1}")


def set_default_index_inputs(self, index, **_):
    default_index_inputs(self.itos, index)


def lookup_indices_inputs(tokens, **_):
    check_not_text(tokens, "tokens", "a list of tokens")  # a str would be looked up letter by letter


def lookup_tokens_inputs(self, indices, **_):
    indices = list(indices)
    for index in indices:
        if not 0 <= index < len(self.itos):  # a negative id would silently count from the end
            raise IndexError(f"id {index} is outside the vocabulary (0..{len(self.itos) - 1})")
    return {"indices": indices}


def build_vocab_inputs(iterator, min_freq, specials, **_):
    # NaN compared False with every count: the vocabulary silently held the specials alone
    if isinstance(min_freq, bool) or not isinstance(min_freq, numbers.Real) or not min_freq >= 1:
        raise ValueError(f"min_freq must be a number of at least 1, got {min_freq!r}")
    check_not_text(specials, "specials", "a list of tokens")  # '<unk>' became '<', 'u', 'n', 'k', '>'
    return {"iterator": [check_tokens(tokens) for tokens in iterator]}  # read once, checked


# ------------------------------------------------------------------------- annotated.bpe

def learn_bpe_inputs(num_merges, **_):
    check_sizes(allow_zero=True, num_merges=num_merges)


def segment_inputs(self, word):
    if not word:
        raise ValueError("cannot segment an empty word; split the text into words first")


def encode_inputs(words, spaces, **_):
    check_not_text(words, "words", "a list of words")
    if len(spaces) != len(words):
        raise ValueError(f"got {len(words)} words but {len(spaces)} space flags; give one flag per word")


def detokenize_inputs(pieces, **_):
    check_not_text(pieces, "pieces", "a list of pieces")


# ----------------------------------------------------------------------- annotated.masks

def padding_mask_inputs(tokens, pad_idx, **_):
    """A tensor of token ids and an integer padding id: a list gave 'bool' object has no attribute
    'unsqueeze', and pad_idx=None or '0' compared nothing (no position was padding)."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"tokens must be a tensor of token ids (batch, length), got {type(tokens).__name__}; "
                        f"e.g. torch.tensor(ids)")
    if isinstance(pad_idx, bool) or not isinstance(pad_idx, numbers.Integral):
        raise TypeError(f"pad_idx must be the integer id of <pad> (e.g. vocab['<pad>']), got {pad_idx!r}")


# ----------------------------------------------------------------------- annotated.heads

def teacher_forced_batches_inputs(pairs, batch_size, **_):
    """(German, English) pairs and a positive batch size: 0 failed in range(), a str of pairs with
    'not enough values to unpack'."""
    check_not_text(pairs, "pairs", "a list of (German, English) sentence pairs")
    check_sizes(batch_size=batch_size)
    pairs = list(pairs)
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise TypeError(f"pairs[{i}] must be a (German, English) pair of str, got {pair!r:.80}; "
                            f"e.g. annotated.data.load_pairs('val')")
    return {"pairs": pairs}


def labels_inputs(self, kind, **_):
    if kind not in ("encoder", "decoder", "cross"):  # was a bare KeyError: 'bad'
        raise ValueError(f"unknown kind of attention {kind!r}; choose one of ('encoder', 'decoder', 'cross')")


# -------------------------------------------------------------------- annotated.decoding

def greedy_decode_inputs(src, max_len, **_):
    """The taught greedy decoders' ``src`` and ``max_len``: max_len 0 or below returned <s> alone,
    silently, and a float one failed inside range(); a float src failed in the embedding."""
    if not isinstance(src, torch.Tensor) or src.dim() != 2 or src.dtype not in (torch.int64, torch.int32):
        shape = f"{tuple(src.shape)} {src.dtype}" if isinstance(src, torch.Tensor) else type(src).__name__
        raise ValueError(f"src must be a (batch, L_src) tensor of token ids (int64), got {shape}; "
                         f"a single sentence needs unsqueeze(0)")
    if isinstance(max_len, bool) or not isinstance(max_len, numbers.Integral) or max_len < 1:
        raise ValueError(f"max_len must be a positive integer (the output length, <s> included), got {max_len!r}")


# ----------------------------------------------------------------- annotated.beam_search

def beam_search_inputs(model, src, src_mask, beam_size, max_len, length_penalty, bos_idx, eos_idx, pad_idx, **_):
    check_decoding_inputs(model, src, src_mask, max_len, bos_idx, eos_idx, pad_idx)  # or a clear error
    check_beam_arguments(beam_size, length_penalty)


# ------------------------------------------------------------------ annotated.evaluation

def translate_inputs(model, sentences, max_len, batch_size, **_):
    check_not_text(sentences, "sentences")  # a str would be translated character by character
    check_sizes(max_len=max_len, batch_size=batch_size)
    check_finite_weights(model)  # greedy decoding (beam_size None or 1) is not guarded by beam_search_inputs


def corpus_bleu_inputs(hypotheses, references, lowercase, **_):
    if not isinstance(lowercase, bool):  # lowercase='no' is true: the score would ignore case silently
        raise TypeError(f"lowercase must be True or False, got {lowercase!r}")
    check_not_text(hypotheses, "hypotheses")
    check_not_text(references, "references")
    if not hypotheses:
        raise ValueError("BLEU of an empty corpus is undefined: give at least one hypothesis and its reference")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"got {len(hypotheses)} hypotheses but {len(references)} references; "
            f"BLEU needs one reference per hypothesis, in the same order"
        )


def cache_in_step(model, memory, src_mask, ys, cache=None) -> None:
    """``next_token_logits``'s cache must hold every position of ``ys`` but the newest."""
    held = cache[0]["self_k"].size(2) if cache and "self_k" in cache[0] else 0
    if cache and held != ys.size(1) - 1:
        raise ValueError(f"the cache holds {held} positions but ys has {ys.size(1)} tokens; it must hold "
                         f"all but the newest: call next_token_logits once per new token, from init_cache")


# ----------------------------------------------- annotated.translate.translate and annotated.heads

def prepared(sentence: str, where: str, report: Callable[[str], None] | None = None) -> str:
    """``sentence`` without control or invisible characters, or "" when it has no letter to translate;
    what was changed goes to ``report(message)`` (default: a warning, shown at the caller's caller)."""
    report = report or (lambda message: warnings.warn(message, stacklevel=4))
    cleaned, notes = clean_sentence(sentence)
    for note in notes:
        report(f"{where}: {note}")
    reason = untranslatable(cleaned)  # no letter, or only letters of a script the model never saw
    if reason:
        report(f"{where} {reason}; the model translates German sentences, so an empty line stands for it")
        return ""
    return cleaned


def _is_model(value) -> bool:
    import torch

    return isinstance(value, torch.nn.Module) and all(hasattr(value, name) for name in ("encode", "decode",
                                                                                         "generator"))


def _is_tokenizer(value) -> bool:
    """Whether ``value`` works as an annotated.support.tokenizer.Tokenizer (not imported here: it
    imports the modules these guards wrap)."""
    return all(hasattr(value, name) for name in ("src_vocab", "tgt_vocab", "tokenize", "detokenize", "text"))


def check_model_and_tokenizer(model, tokenizer, call: str) -> None:
    """``model`` is a Transformer of this course and ``tokenizer`` a Tokenizer whose vocabularies fit
    its embeddings (one of another model would index out of range, or silently mean other words).
    ``call`` is how the function is called, for the fix."""
    unpack = "model, tokenizer = load_pretrained()  (or load_pretrained(path) for a model of one's own)"
    if isinstance(model, tuple) and len(model) == 2 and tokenizer is None:
        raise TypeError(f"model is a tuple, what load_pretrained() returns; unpack it: {unpack}, then {call}")
    if _is_tokenizer(model) and _is_model(tokenizer):
        raise TypeError(f"model and tokenizer are swapped: the model comes first, {call}")
    if not _is_model(model):
        raise TypeError(f"model must be a Transformer of this course (an EncoderDecoder, from load_pretrained() or "
                        f"make_model), got a {type(model).__name__}; {unpack}")
    if not _is_tokenizer(tokenizer):
        raise TypeError(f"tokenizer must be the Tokenizer of the model (load_pretrained() returns both), got a "
                        f"{type(tokenizer).__name__}; {unpack}")
    try:
        sizes = model.src_embed[0].lut.num_embeddings, model.generator.proj.out_features
    except (AttributeError, IndexError, TypeError):
        return  # a model built another way: its sizes are checked where the ids meet the embeddings
    if (len(tokenizer.src_vocab), len(tokenizer.tgt_vocab)) != sizes:
        raise ValueError(f"the tokenizer's vocabularies ({len(tokenizer.src_vocab)} source and "
                         f"{len(tokenizer.tgt_vocab)} target tokens) do not fit the model, built for {sizes[0]} "
                         f"and {sizes[1]}: the tokenizer belongs to another model; pass the one loaded with this "
                         f"model, {unpack}")


def translate_call_inputs(sentences, model, tokenizer, beam, alpha, batch_size) -> list[str]:
    """The arguments of ``annotated.translate.translate`` checked before any work; the sentences as
    a list (an iterator is read once)."""
    check_not_text(sentences, "sentences", "a list of German sentences")  # a str would be 1 sentence per character
    if not isinstance(sentences, Iterable):
        raise TypeError(f"sentences must be a list of German sentences, got a {type(sentences).__name__}")
    sentences = list(sentences)
    for i, s in enumerate(sentences):
        if not isinstance(s, str):
            fix = "decode bytes first (s.decode('utf-8'))" if isinstance(s, (bytes, bytearray)) else \
                "give each sentence as a str"
            raise TypeError(f"sentence {i + 1} is a {type(s).__name__}, not a str; {fix}")
    call = "translate(sentences, model, tokenizer)"
    if model is not None and tokenizer is None and not isinstance(model, tuple):
        raise TypeError(f"translate() got a model but no tokenizer, and would have used the shipped model "
                        f"instead of yours; pass the tokenizer loaded with it: model, tokenizer = "
                        f"load_pretrained(path); {call}")
    if model is None and tokenizer is not None:
        raise TypeError(f"translate() got a tokenizer but no model; pass the model loaded with it: model, "
                        f"tokenizer = load_pretrained(path); {call} (or neither, for the shipped model)")
    if model is not None:
        check_model_and_tokenizer(model, tokenizer, call)
    if isinstance(beam, bool) or not isinstance(beam, numbers.Integral) or beam < 1:
        raise ValueError(f"beam must be a positive integer, got {beam!r}; beam=1 is greedy decoding, the paper "
                         f"uses 4")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha) \
            or not 0 <= alpha <= MAX_ALPHA:
        raise ValueError(f"alpha (the length penalty) must be a number from 0 to {MAX_ALPHA:g}, got {alpha!r}; "
                         f"0 turns it off, the paper uses 0.6")
    check_sizes(batch_size=batch_size)
    return sentences


def sentence_attention_inputs(model, tokenizer, german, english=None, **_):
    """The checks ``translate`` makes, for one sentence pair: a model and its tokenizer, a German
    sentence (control and invisible characters removed, with a warning) with a letter to translate and
    no more than MAX_SOURCE_TOKENS tokens, and an English one likewise when it is given. An empty
    sentence would get the attention maps of a sentence the model made up."""
    call = "sentence_attention(model, tokenizer, german)"
    if model is None or tokenizer is None:
        raise TypeError(f"sentence_attention needs a model and its tokenizer: model, tokenizer = "
                        f"load_pretrained(); {call}")
    check_model_and_tokenizer(model, tokenizer, call)
    replaced = {}
    for name, text, tokenize, limit in (("german", german, tokenizer.tokenize, MAX_SOURCE_TOKENS),
                                        ("english", english, tokenizer.text.tokenize_en, MAX_OUTPUT_TOKENS)):
        if text is None and name == "english":
            continue
        if not isinstance(text, str):
            if isinstance(text, (list, tuple)):
                fix = "call sentence_attention once per sentence"
            elif isinstance(text, (bytes, bytearray)):
                fix = "decode bytes first (s.decode('utf-8'))"
            else:
                fix = "give one sentence as a str"
            raise TypeError(f"{name} must be one sentence (a str), got a {type(text).__name__}; {fix}")
        cleaned, notes = clean_sentence(text)
        for note in notes:
            warnings.warn(f"{name}: {note}", stacklevel=3)  # at the caller of sentence_attention
        if not cleaned.strip():
            other = "leave english out (None) to see the model's own translation" if name == "english" else \
                "e.g. 'Zwei Hunde spielen im Schnee.'"
            raise ValueError(f"{name} is empty{' once control characters are removed' if text.strip() else ''}: "
                             f"the maps would be those of a sentence the model made up; give a sentence, {other}")
        reason = untranslatable(cleaned)
        if reason:
            raise ValueError(f"{name} {reason}: the model reads German and writes English; give a sentence in "
                             f"those languages")
        n = len(tokenize(cleaned))
        if n > limit:
            raise ValueError(f"{name} has {n} tokens, more than the {limit} translate() accepts; give one sentence")
        replaced[name] = cleaned
    check_finite_weights(model)
    return replaced
