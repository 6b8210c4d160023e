"""Whole words back into text: the joining rules of the word-level path (``--bpe-merges 0``).

The course's models read and write byte-pair pieces, which ``annotated.bpe.detokenize`` joins by
their ``@@`` marks (notebook 10, section 3). A model trained on whole words (``BPE_MERGES = 0`` in
notebook 11, ``--bpe-merges 0`` on the command line) writes spaCy's word tokens, which carry no such
marks: :func:`detokenize_words` undoes what the English tokenizer split off (punctuation, ``'s``,
``n't``, hyphens, quotes). ``tests/test_evaluation.py`` checks that it gives every test reference
back from its tokens, lowercased.
"""

from annotated.support.checks import check_not_text

NO_SPACE_BEFORE = {".", ",", "!", "?", ";", ":", ")", "]", "}", "%", "...", "n't", "-"}
NO_SPACE_AFTER = {"(", "[", "{", "-"}  # "-": the tokenizer splits "t-shirt" into "t", "-", "shirt"


def detokenize_words(tokens: list[str]) -> str:
    """Join word tokens into text: no space before punctuation, closing brackets and clitics
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
