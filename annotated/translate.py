"""``python -m annotated.translate``: German -> English with the course's trained model.

    python -m annotated.translate "Zwei Hunde spielen im Schnee."
    python -m annotated.translate < german.txt > english.txt      # one sentence per line
    python -m annotated.translate --beam 1 "Ein Mann fährt Fahrrad."   # greedy decoding
    python -m annotated.translate --checkpoint runs/cpu.pt "..."     # a model of one's own

Sentences are read from the command line, else from stdin, one per line; they are translated
in batches, and each translation is printed on its own line, in order. An empty line gives an
empty line; a line too long for the model gives an empty line and a message on stderr.

In Python, ``translate(sentences, model, tokenizer)`` does the same with a model from
``annotated.load_pretrained()``.
"""

import argparse
import sys

import torch

from annotated.evaluation import translate as translate_batch
from annotated.model import EncoderDecoder
from annotated.support.cli import natural_float, positive_int
from annotated.support.errors import UsageError, run_command
from annotated.support.pretrained import load_pretrained
from annotated.support.tokenizer import Tokenizer

MAX_SOURCE_TOKENS = 200  # longer lines are refused: Multi30k's sentences have at most about 80 tokens
MAX_OUTPUT_TOKENS = 250  # the same for every sentence, so that batching cannot change a translation


def translate(sentences: list[str], model: EncoderDecoder | None = None, tokenizer: Tokenizer | None = None,
              beam: int = 4, alpha: float = 0.6, batch_size: int = 64) -> list[str]:
    """English translations of German ``sentences`` (the shipped model unless one is given):
    beam search with the paper's beam 4 and length penalty 0.6 (§6.1); ``beam=1`` is greedy."""
    if model is None or tokenizer is None:
        model, tokenizer = load_pretrained()
    lengths = [len(tokenizer.tokenize(s)) for s in sentences]
    too_long = [i for i, n in enumerate(lengths) if n > MAX_SOURCE_TOKENS]
    if too_long:
        i = too_long[0]
        raise UsageError(f"sentence {i + 1} has {lengths[i]} tokens, more than the {MAX_SOURCE_TOKENS} this "
                         f"command translates at once; split it into sentences")
    kept = [i for i, s in enumerate(sentences) if s.strip()]
    out = [""] * len(sentences)
    if kept:
        english = translate_batch(model, [sentences[i] for i in kept], tokenizer.src_vocab, tokenizer.tgt_vocab,
                                  tokenizer.tokenize, beam_size=None if beam == 1 else beam, max_len=MAX_OUTPUT_TOKENS,
                                  length_penalty=alpha, batch_size=batch_size, detokenizer=tokenizer.detokenize)
        for i, text in zip(kept, english):
            out[i] = text
    return out


def read_stdin() -> list[str]:
    """The lines of stdin; bytes that are not UTF-8 become U+FFFD instead of stopping the command."""
    if sys.stdin.isatty():
        print("Type German sentences, one per line; end with Ctrl-D (Ctrl-Z then Enter on Windows).", file=sys.stderr)
    lines = sys.stdin.buffer.read().decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.rstrip("\r") for line in lines]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m annotated.translate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sentences", nargs="*", help="German sentences (default: read stdin, one per line)")
    p.add_argument("--beam", type=positive_int, default=4, help="beam size (default 4, the paper's); 1 is greedy")
    p.add_argument("--alpha", type=natural_float, default=0.6,
                   help="length penalty of beam search (default 0.6, the paper's)")
    p.add_argument("--checkpoint", help="a model of one's own: a .pt checkpoint of python -m annotated.train, "
                                        "or a folder in the shipped format (default: the shipped model)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="sentences translated together")
    p.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's choice)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        sentences = args.sentences or read_stdin()
        model, tokenizer = load_pretrained(args.checkpoint)
        lengths = [len(tokenizer.tokenize(s)) for s in sentences]
        for i, n in enumerate(lengths):
            if n > MAX_SOURCE_TOKENS:
                print(f"line {i + 1}: {n} tokens, more than the {MAX_SOURCE_TOKENS} this command translates at "
                      f"once; split it into sentences (an empty line is printed in its place)", file=sys.stderr)
        fits = [s if n <= MAX_SOURCE_TOKENS else "" for s, n in zip(sentences, lengths)]
        for line in translate(fits, model, tokenizer, args.beam, args.alpha, args.batch_size):
            print(line)
        return 0

    return run_command(body, parser.prog)


if __name__ == "__main__":
    raise SystemExit(main())
