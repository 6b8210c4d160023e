"""``python -m annotated.translate``: German -> English with the course's trained model.

    python -m annotated.translate "Zwei Hunde spielen im Schnee."
    python -m annotated.translate < german.txt > english.txt      # one sentence per line
    python -m annotated.translate --beam 1 "Ein Mann fährt Fahrrad."   # greedy decoding
    python -m annotated.translate --checkpoint runs/cpu.pt "..."     # a model of one's own

Sentences are read from the command line, else from stdin, one per line; they are translated
in batches, and each translation is printed on its own line, in order. An empty line gives an
empty line; a line too long for the model, or with no letter to translate, gives an empty line
and a message on stderr. Input is checked before the model sees it
(``annotated.support.input_text``): stdin must be UTF-8 (UTF-16 and UTF-32 with a byte-order
mark are converted, with a note; ``--encoding`` reads another), and control or invisible
characters (NUL, ESC, zero-width spaces) are removed with a note.

In Python, ``translate(sentences, model, tokenizer)`` does the same with a model from
``annotated.load_pretrained()`` (both, or neither for the shipped model).

The command's output can go to a pipe that closes early (``| head -1``): it then stops quietly,
with the exit status of a program that SIGPIPE ended (141), as other Unix tools do. With stdin
closed and no sentences as arguments, or stdout closed, it says so instead of printing nothing.
"""

import argparse
import codecs
import sys
import warnings
from pathlib import Path

import torch

from annotated.evaluation import translate as translate_batch
from annotated.model import EncoderDecoder
from annotated.support.cli import check_beam_fits
from annotated.support.errors import UsageError, run_command
from annotated.support.input_text import check_no_undecodable, decode_input
from annotated.support.options import MAX_BEAM, beam_width, length_penalty, positive_int, thread_count
from annotated.support.pipes import quiet_on_closed_pipe
from annotated.support.pretrained import CheckpointError, check_model_path, load_pretrained
from annotated.support.tokenizer import Tokenizer
from annotated.support.translation_guards import MAX_OUTPUT_TOKENS, MAX_SOURCE_TOKENS, prepared, translate_call_inputs


def translate(sentences: list[str], model: EncoderDecoder | None = None, tokenizer: Tokenizer | None = None,
              beam: int = 4, alpha: float = 0.6, batch_size: int = 64) -> list[str]:
    """English translations of German ``sentences`` (the shipped model unless one is given):
    beam search with the paper's beam 4 and length penalty 0.6 (§6.1); ``beam=1`` is greedy.

    Control and invisible characters are removed first, and a sentence with no letter gets ""
    (each with a warning)."""
    sentences = translate_call_inputs(sentences, model, tokenizer, beam, alpha, batch_size)  # or a one-line error
    if model is None:
        model, tokenizer = load_pretrained()
    if beam > len(tokenizer.tgt_vocab):
        raise ValueError(f"beam={beam} is wider than the target vocabulary of {len(tokenizer.tgt_vocab)} tokens")
    sentences = [prepared(s, f"sentence {i + 1}") for i, s in enumerate(sentences)]
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


def read_stdin(encoding: str | None = None) -> list[str]:
    """The lines of stdin, decoded by ``annotated.support.input_text.decode_input``: UTF-8 (or the
    encoding its byte-order mark names, with a note on stderr, or ``encoding``); anything else stops
    the command with the line and the fix."""
    if sys.stdin is None:  # Python's stdin when file descriptor 0 is closed (<&-)
        raise UsageError("stdin is closed and no sentences were given; give them as arguments, or from a file: "
                         "python -m annotated.translate < german.txt")
    if sys.stdin.isatty():
        print("Type German sentences, one per line; end with Ctrl-D (Ctrl-Z then Enter on Windows).", file=sys.stderr)
    text, notes = decode_input(sys.stdin.buffer.read(), "stdin", encoding)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.rstrip("\r") for line in lines]


def encoding_name(text: str) -> str:
    """An argparse type: a text encoding Python knows (latin-1, cp1252, utf-16, ...)."""
    try:
        info = codecs.lookup(text)
    except LookupError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an encoding Python knows; e.g. latin-1, cp1252, "
                                         f"utf-16") from None
    if not getattr(info, "_is_text_encoding", True):
        raise argparse.ArgumentTypeError(f"{text!r} is not a text encoding")
    return info.name


def model_path(text: str) -> str:
    """An argparse type: a folder or a file that exists, not a pipe or a device, which would wait for a
    writer (what it holds is checked when the model loads)."""
    if not text.strip():  # Path("") is the current folder
        raise argparse.ArgumentTypeError("an empty path; give a .pt checkpoint of python -m annotated.train, or a "
                                         "folder written by python -m annotated.support.pretrained export")
    try:
        check_model_path(Path(text))
    except CheckpointError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m annotated.translate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sentences", nargs="*", help="German sentences (default: read stdin, one per line)")
    p.add_argument("--beam", type=beam_width, default=4,
                   help=f"beam size (default 4, the paper's; at most {MAX_BEAM}); 1 is greedy")
    p.add_argument("--alpha", type=length_penalty, default=0.6,
                   help="length penalty of beam search, 0 to 10 (default 0.6, the paper's)")
    p.add_argument("--checkpoint", type=model_path,
                   help="a model of one's own: a .pt checkpoint of python -m annotated.train, "
                        "or a folder in the shipped format (default: the shipped model)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="sentences translated together")
    p.add_argument("--threads", type=thread_count, help="torch CPU threads, at most the machine's cores "
                                                        "(default: torch's choice)")
    p.add_argument("--encoding", type=encoding_name, help="the encoding of stdin (default: UTF-8, or UTF-16/32 "
                                                          "with a byte-order mark), e.g. latin-1")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        if sys.stdout is None:  # Python's stdout when file descriptor 1 is closed (>&-)
            raise UsageError("stdout is closed, so the translations would be lost; send them to a file or a "
                             "pipe: python -m annotated.translate ... > english.txt")
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        if args.sentences:
            for i, sentence in enumerate(args.sentences):
                check_no_undecodable(sentence, f"argument {i + 1}")
        sentences = args.sentences or read_stdin(args.encoding)
        what = "argument" if args.sentences else "line"

        def report(message: str) -> None:
            print(message, file=sys.stderr)

        sentences = [prepared(s, f"{what} {i + 1}", report) for i, s in enumerate(sentences)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model, tokenizer = load_pretrained(args.checkpoint)
        for warning in caught:  # one line each (a model folder whose parts cannot be checked), no source line
            print(f"{parser.prog}: note: {warning.message}", file=sys.stderr)
        check_beam_fits(args.beam, len(tokenizer.tgt_vocab), "--beam")
        lengths = [len(tokenizer.tokenize(s)) for s in sentences]
        for i, n in enumerate(lengths):
            if n > MAX_SOURCE_TOKENS:
                print(f"line {i + 1}: {n} tokens, more than the {MAX_SOURCE_TOKENS} this command translates at "
                      f"once; split it into sentences (an empty line is printed in its place)", file=sys.stderr)
        fits = [s if n <= MAX_SOURCE_TOKENS else "" for s, n in zip(sentences, lengths)]
        for line in translate(fits, model, tokenizer, args.beam, args.alpha, args.batch_size):
            print(line)
        return 0

    return run_command(quiet_on_closed_pipe(body), parser.prog)


if __name__ == "__main__":
    raise SystemExit(main())
