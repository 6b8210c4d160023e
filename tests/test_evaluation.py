import os

import pytest
import sacrebleu
import torch
import torch.nn as nn

from annotated.data import load_pairs, tokenizer
from annotated.evaluation import corpus_bleu, ids_to_tokens, translate
from annotated.model import TransformerConfig, make_model
from annotated.support.words import detokenize_words as detokenize
from annotated.vocab import UNK, build_vocab_from_iterator


@pytest.mark.parametrize(
    "tokens, text",
    [
        (["a", "man", ",", "a", "dog", "."], "a man, a dog."),
        (["what", "?", "yes", "!", "no", ";", "so", ":", "ok"], "what? yes! no; so: ok"),
        (["a", "dog", "(", "brown", ")", "runs"], "a dog (brown) runs"),
        (["he", "says", '"', "hi", '"', "."], 'he says "hi".'),
        (["the", "dog", "'s", "ball", "is", "n't", "red"], "the dog's ball isn't red"),
        (["the", "dogs", "'", "bowls"], "the dogs' bowls"),
        (["a", "t", "-", "shirt"], "a t-shirt"),
        ([], ""),
    ],
    ids=["comma-period", "other-punctuation", "brackets", "quotes", "clitics", "apostrophe", "hyphen", "empty"],
)
def test_detokenize_attaches_punctuation_brackets_and_quotes(tokens, text):
    assert detokenize(tokens) == text


def test_detokenize_undoes_the_english_tokenizer_up_to_case():
    english = tokenizer("en")
    for sentence in ['A girl in a pink t-shirt, "smiling", jumps (high) off the dog\'s ramp!',
                     "Two men don't see the sun; they sit: one reads."]:
        assert detokenize(english(sentence)) == sentence.lower()


@pytest.mark.skipif("ANNOTATED_DATA_DIR" not in os.environ, reason="set ANNOTATED_DATA_DIR to the Multi30k files")
def test_detokenized_test_references_score_100_bleu_against_the_raw_ones():
    references = [english for _, english in load_pairs("test_2016_flickr")]
    english = tokenizer("en")
    assert corpus_bleu([detokenize(english(r)) for r in references], references).score == pytest.approx(100.0)


def test_identical_hypotheses_score_100():
    references = ["A man rides a bike.", "Two dogs play in the snow."]
    assert corpus_bleu(references, references).score == pytest.approx(100.0)


def test_corpus_bleu_equals_sacrebleus_own_corpus_bleu():
    hypotheses = ["a man is riding a bike down a hill.", "two dogs are playing in snow.", "a woman sings."]
    references = ["A man rides a bike down the hill.", "Two dogs play in the snow.", "A woman is singing on stage."]
    ours = corpus_bleu(hypotheses, references)
    theirs = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True)
    assert 0 < ours.score < 100
    assert ours.score == pytest.approx(theirs.score)
    assert ours.counts == theirs.counts and ours.totals == theirs.totals


def test_bleu_is_lowercased_by_default_and_says_so_in_its_signature():
    ours = corpus_bleu(["a man rides."], ["A Man Rides."])
    assert ours.score == pytest.approx(100.0)
    assert "case:lc" in ours.signature and "nrefs:1" in ours.signature
    assert f"version:{sacrebleu.__version__}" in ours.signature
    cased = corpus_bleu(["a man rides."], ["A Man Rides."], lowercase=False)
    assert cased.score < 100 and "case:mixed" in cased.signature


def test_corpus_bleu_rejects_a_different_number_of_references():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(["a", "b"], ["a"])


def test_ids_to_tokens_keeps_what_lies_between_bos_and_the_first_eos():
    vocab = build_vocab_from_iterator([["a", "dog"]])  # <pad> <s> </s> <unk> a dog
    assert ids_to_tokens([1, 4, 3, 5, 2, 4, 0, 0], vocab) == ["a", UNK, "dog"]
    assert ids_to_tokens([1, 5, 5], vocab) == ["dog", "dog"]  # never ended: all of it


def tiny_translator():
    german = build_vocab_from_iterator([["ein", "hund", "zwei", "katzen", "."]])
    english = build_vocab_from_iterator([["a", "dog", "two", "cats", ".", "the"]])
    german.set_default_index(german[UNK])
    torch.manual_seed(0)
    model = make_model(TransformerConfig(len(german), len(english), N=1, d_model=32, d_ff=64, h=4))
    model.generator.proj.weight = nn.Parameter(torch.randn(len(english), 32))  # varied outputs
    with torch.no_grad():
        model.generator.proj.bias[2] = 1.0  # so that translations end
    return model, german, english


@pytest.mark.parametrize("beam_size", [None, 2], ids=["greedy", "beam"])
def test_translate_returns_detokenized_text_in_the_order_of_the_input(beam_size):
    model, german, english = tiny_translator()
    model.train()
    sentences = ["Ein Hund.", "Zwei Katzen und ein Hund .", "Katzen", "ein unbekanntes Wort", "Hund Hund Hund Hund"]
    de = tokenizer("de")
    together = translate(model, sentences, german, english, de, beam_size=beam_size, max_len=8)
    one_by_one = [translate(model, [s], german, english, de, beam_size=beam_size, max_len=8)[0] for s in sentences]
    assert together == one_by_one
    assert len(set(together)) > 1, "every sentence got the same translation: a weak test"
    assert model.training, "translate must put the model back in training mode"
    for text in together:
        assert "<" not in text and "  " not in text
        assert set(text.replace(".", " ").split()) <= set(english.get_itos())


def test_a_single_string_where_a_list_is_expected_is_an_error_not_one_result_per_character():
    with pytest.raises(TypeError, match=r"hypotheses must be a list of sentences, got a single string 'a cat'"):
        corpus_bleu("a cat", "a cat")
    with pytest.raises(TypeError, match="references must be a list"):
        corpus_bleu(["a cat"], "a cat")
    with pytest.raises(TypeError, match="tokens must be a list of tokens"):
        detokenize("a cat .")
    vocab = build_vocab_from_iterator([["ein", "mann"]])
    vocab.set_default_index(vocab[UNK])
    model = make_model(TransformerConfig(len(vocab), len(vocab), N=1, d_model=8, d_ff=8, h=2))
    with pytest.raises(TypeError, match=r"sentences must be a list of sentences.*\['Ein Mann'\]"):
        translate(model, "Ein Mann", vocab, vocab, str.split)


def test_bleu_of_an_empty_corpus_is_a_clear_error():
    with pytest.raises(ValueError, match="BLEU of an empty corpus is undefined"):
        corpus_bleu([], [])
