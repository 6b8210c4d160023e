"""How fast the shipped model translates: the 1,000 test sentences, beam 4 against greedy.

    python benchmarks/bench_translate.py [--repeats 1] [--threads 2] [--batch-size 64] [--checkpoint PATH]

Both decoders run batched (``annotated.translate.translate``: sentences sorted by length,
64 per batch), encode each batch once and keep every key and value in a cache
(``tests/test_beam_search.py`` proves both). Runs alternate, greedy then beam, so both see the same
machine load; the median of ``--repeats`` is reported, in sentences per second, with the BLEU of
the translations as a check that both decoded the real thing.
"""

import argparse
import statistics
import time

import torch

from annotated.data import load_pairs
from annotated.evaluation import corpus_bleu
from annotated.support.errors import run_command
from annotated.support.options import positive_int, thread_count
from annotated.support.pretrained import load_pretrained
from annotated.translate import translate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=positive_int, default=1)
    parser.add_argument("--threads", type=thread_count, default=2)
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--checkpoint", help="default: the shipped model")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_pretrained(args.checkpoint)
    pairs = load_pairs("test_2016_flickr")
    sources, references = [de for de, _ in pairs], [en for _, en in pairs]
    translate(sources[:16], model, tokenizer, beam=4)  # warm-up: first calls allocate memory
    times: dict[int, list[float]] = {1: [], 4: []}
    outputs: dict[int, list[str]] = {}
    for _ in range(args.repeats):
        for beam in (1, 4):
            start = time.perf_counter()
            outputs[beam] = translate(sources, model, tokenizer, beam=beam, batch_size=args.batch_size)
            times[beam].append(time.perf_counter() - start)
    print(f"{len(sources)} test sentences, batches of {args.batch_size}, {args.threads} thread(s), "
          f"median of {args.repeats}")
    print("| decoder | seconds | sentences/s | BLEU |")
    print("|---|---|---|---|")
    for beam, name in ((1, "greedy"), (4, "beam 4, alpha 0.6")):
        seconds = statistics.median(times[beam])
        bleu = corpus_bleu(outputs[beam], references).score
        print(f"| {name} | {seconds:.1f} | {len(sources) / seconds:.1f} | {bleu:.2f} |")
    print(f"beam 4 takes {statistics.median(times[4]) / statistics.median(times[1]):.2f}x greedy's time")


if __name__ == "__main__":  # a missing model or data set: one line naming the fix, no traceback
    raise SystemExit(run_command(lambda: main() or 0, "bench_translate.py"))
