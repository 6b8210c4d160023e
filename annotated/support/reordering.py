"""Where the model reorders (notebook 12, section 5, "Where the model reorders"): the model's own
translations as teacher-forced batches, the rules that find German sentences whose verb or verb
particle comes last, and the pick of one example per group.

Bookkeeping and word lists for the notebook; the course does not teach them. The notebook states
every rule in words; the crossing count and the length-matched comparison stay in its cells.
"""

from collections.abc import Callable

import sacrebleu
import torch

from annotated.batching import Batch, collate
from annotated.decoding import greedy_decode
from annotated.heads import until_eos
from annotated.model import EncoderDecoder
from annotated.support.tokenizer import Tokenizer
from annotated.vocab import BOS, EOS, PAD

SUBORDINATORS = {"der", "die", "das", "während", "weil", "dass", "wenn", "als", "wo", "nachdem"}
PARTICLES = {"an", "auf", "aus", "ab", "ein", "mit", "vor", "zu", "zurück", "los", "weg", "fest", "vorbei", "herum"}
AUXILIARIES = {"ist", "sind", "hat", "haben", "wird", "werden", "wurde", "wurden", "kann", "können", "will",
               "wollen", "muss", "müssen"}
PUNCTUATION = {".", "!", "?", ","}


@torch.no_grad()
def own_translations(model: EncoderDecoder, tokenizer: Tokenizer, batches: list[Batch]) -> list[Batch]:
    """The same sources, teacher-forced on the model's own greedy translations (one per sentence,
    up to and with its first ``</s>``)."""
    vocab = tokenizer.tgt_vocab
    result = []
    for batch in batches:
        ys = greedy_decode(model.eval(), batch.src, batch.src_mask, 2 * batch.src.size(1) + 10, vocab[BOS],
                           vocab[EOS], pad_idx=vocab[PAD]).tolist()
        examples = [(batch.src[b][batch.src_mask[b, 0]].tolist(), until_eos(row, vocab[EOS])) for b, row in enumerate(ys)]
        result.append(collate(examples, vocab[PAD]))
    return result


def verb_final(de: list[str]) -> bool:
    """A comma followed by a relative pronoun or a subordinating conjunction."""
    return any(w == "," and nxt in SUBORDINATORS for w, nxt in zip(de, de[1:]))


def separable(de: list[str]) -> bool:
    """The last word before the final punctuation is a separable particle."""
    content = [w for w in de if w not in PUNCTUATION]
    return bool(content) and content[-1] in PARTICLES and de[-1] in PUNCTUATION


def verb_bracket(de: list[str]) -> bool:
    """An auxiliary or modal verb before a last word that looks like a participle or an infinitive."""
    content = [w for w in de if w not in PUNCTUATION]
    return (len(content) > 1 and any(w in AUXILIARIES for w in content[:-1]) and content[-1] not in AUXILIARIES
            and (content[-1].startswith("ge") or content[-1].endswith("en")))


GROUPS: dict[str, Callable[[list[str]], bool]] = {
    "verb-final clause": verb_final, "separable verb": separable, "verb bracket": verb_bracket}


def last_word(de: list[str]) -> int:
    """The position of the last German word that is not punctuation."""
    return max(i for i, w in enumerate(de) if w not in PUNCTUATION)


def sentence_bleu(tokenizer: Tokenizer, s: dict, reference: str) -> float:
    """Sentence BLEU (lowercased) of the English that sentence ``s`` produced, against ``reference``."""
    return sacrebleu.sentence_bleu(tokenizer.detokenize(s["produced"][:-1]), [reference], lowercase=True).score


def pick_example(members: list[dict], score: Callable[[dict], int], bleu: Callable[[dict], float],
                 max_words: int = 12, min_bleu: float = 30.0) -> dict:
    """Among ``members`` of at most ``max_words`` German words translated with a sentence BLEU of
    at least ``min_bleu``, the one with the highest ``score``; the first of them on a tie."""
    short = [s for s in members if len(s["german"]) <= max_words and bleu(s) >= min_bleu]
    return max(short, key=score)


def plot_crossing_by_length(ax, sentences: list[dict], crossed: Callable[[dict], bool],
                            groups: dict[str, Callable[[list[str]], bool]], lengths: tuple[int, int]) -> None:
    """The share of sentences whose links cross, by number of German words (pooled beyond
    ``lengths``): every test sentence as a line, each group's sentences as points."""
    def curve(members):
        xs = list(range(lengths[0], lengths[1] + 1))
        bins = {x: [crossed(s) for s in members if min(max(len(s["german"]), lengths[0]), lengths[1]) == x] for x in xs}
        return [x for x in xs if bins[x]], [100 * sum(bins[x]) / len(bins[x]) for x in xs if bins[x]], \
               [len(bins[x]) for x in xs if bins[x]]

    x, y, _ = curve(sentences)
    ax.plot(x, y, "k-", label="all test sentences")
    for (name, rule), marker in zip(groups.items(), "osD"):
        x, y, n = curve([s for s in sentences if rule(s["german"])])
        ax.scatter(x, y, s=[8 + 6 * k for k in n], marker=marker, alpha=0.7, label=f"{name} (size: sentences)")
    ax.set(xlabel=f"German words ({lengths[0]} or fewer, ..., {lengths[1]} or more)", ylabel="sentences with crossing links (%)",
           title="crossing rises with length", ylim=(0, 102))
    ax.legend(fontsize=7, loc="lower right")
