"""Which heads of the shipped model matter: each head masked alone, then heads pruned in order.

    python benchmarks/head_importance.py [--threads 2] [--fine 12] [--step 4] [--top 5] [--out benchmarks/results/head_importance.json]

1. Every head of every kind (encoder self-attention, decoder self-attention, encoder-decoder
   attention: 3 x 3 x 8 = 72) is masked alone (its output zeroed before W^O,
   ``annotated.heads.heads_masked``) and the validation loss is measured: the mean
   cross-entropy per target piece on the 1,014 validation pairs, teacher-forced, without
   label smoothing. A head's importance is how much the loss rises without it, measured.
   This departs from Michel et al. (2019, "Are Sixteen Heads Really Better than One?", §4.1),
   who estimate that rise from gradients, I_h = E_x |Att_h(x)^T dL/dAtt_h(x)|, normalize the
   scores within each layer, and prune greedily, a step of heads at a time: here every head is
   masked and measured once, the scores are not normalized, and the ranking is fixed before
   pruning starts.
2. The ``--top`` heads whose loss rises most are masked alone again and scored with BLEU
   on the validation set (beam 4, alpha 0.6, the shipped model's decoder); the other heads get
   a loss only.
3. Heads are pruned in order of least importance (the ranking of step 1, fixed in advance):
   validation BLEU is measured after each of the first ``--fine`` heads removed, then every
   ``--step`` heads.
4. The most heads that can go, every count on the way costing less than 0.5 validation BLEU,
   is read off the curve; that pruned model, and only it, is scored once on the test set.

Notebook 12 plots the file this writes and checks two of its numbers again.
"""

import argparse
import json
import time

import torch
import torch.nn as nn

from annotated.data import load_pairs
from annotated.evaluation import corpus_bleu
from annotated.heads import KINDS, heads_masked, teacher_forced_batches
from annotated.support.errors import CourseError, run_command
from annotated.support.files import check_output_file, write_text
from annotated.support.options import thread_count
from annotated.support.pretrained import PRETRAINED_DIR, load_pretrained, sha256
from annotated.training import evaluate_loss
from annotated.translate import translate
from annotated.vocab import PAD


def validation_loss(model, batches, pad) -> float:
    with torch.no_grad():
        return evaluate_loss(model, batches, nn.CrossEntropyLoss(ignore_index=pad, reduction="sum"))


def bleu(model, tokenizer, pairs) -> float:
    hypotheses = translate([de for de, _ in pairs], model, tokenizer, beam=4, alpha=0.6)
    return round(corpus_bleu(hypotheses, [en for _, en in pairs]).score, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=thread_count, default=2)
    parser.add_argument("--fine", type=int, default=12, help="BLEU after each of the first FINE heads pruned")
    parser.add_argument("--step", type=int, default=4, help="then every STEP heads")
    parser.add_argument("--top", type=int, default=5, help="most important heads scored with BLEU alone")
    parser.add_argument("--out", default="benchmarks/results/head_importance.json")
    args = parser.parse_args()
    try:  # before the hour of work: never the model it reads, a link, a course file, a folder that cannot be written
        check_output_file(args.out, inputs=[PRETRAINED_DIR / "model.safetensors"], force_option=None)
    except CourseError as error:
        parser.error(str(error))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    start = time.perf_counter()
    model, tokenizer = load_pretrained()
    val, test = load_pairs("val"), load_pairs("test_2016_flickr")
    pad = tokenizer.tgt_vocab[PAD]
    batches = teacher_forced_batches(tokenizer, val)
    base_loss = validation_loss(model, batches, pad)
    heads = [(kind, layer, head) for kind in KINDS for layer in range(len(model.encoder.layers))
             for head in range(model.encoder.layers[0].self_attn.h)]
    delta = {}
    for head in heads:
        with heads_masked(model, [head]):
            delta[head] = validation_loss(model, batches, pad) - base_loss
        print(head, f"{delta[head]:+.4f}", flush=True)
    ranking = sorted(heads, key=lambda hd: delta[hd], reverse=True)  # most important first
    base_bleu = bleu(model, tokenizer, val)
    top = []
    for head in ranking[: args.top]:
        with heads_masked(model, [head]):
            top.append({"head": list(head), "val_bleu": bleu(model, tokenizer, val)})
        print("alone", top[-1], flush=True)
    curve = []
    counts = sorted(set(range(args.fine + 1)) | set(range(0, len(heads), args.step)) | {len(heads)})
    for removed in counts:
        with heads_masked(model, ranking[len(heads) - removed :]):
            curve.append({"heads_kept": len(heads) - removed, "val_bleu": bleu(model, tokenizer, val)})
        print("pruned", curve[-1], flush=True)
    best = curve[0]
    for point in curve:  # in order of heads removed: stop at the first that costs 0.5 BLEU or more
        if point["val_bleu"] <= base_bleu - 0.5:
            break
        best = point
    with heads_masked(model, ranking[best["heads_kept"] :]):
        pruned_test = bleu(model, tokenizer, test)
    record = {
        "model_sha256": sha256(PRETRAINED_DIR / "model.safetensors"),
        "command": "python benchmarks/head_importance.py " + f"--threads {args.threads} --fine {args.fine} --step {args.step} --top {args.top}",
        "validation_pairs": len(val),
        "base_val_loss": round(base_loss, 5),
        "base_val_bleu": base_bleu,
        "delta_val_loss": [{"head": list(hd), "delta": round(delta[hd], 5)} for hd in heads],
        "ranking": [list(hd) for hd in ranking],
        "top_heads_alone": top,
        "pruning": curve,
        "fewest_heads_within_0.5_bleu": best["heads_kept"],
        "test_bleu_full": bleu(model, tokenizer, test),
        "test_bleu_pruned": pruned_test,
        "seconds": round(time.perf_counter() - start),
    }
    write_text(args.out, json.dumps(record, indent=1) + "\n")  # whole, or the earlier record as it was
    print(json.dumps({k: v for k, v in record.items() if k not in ("delta_val_loss", "ranking")}, indent=1))


if __name__ == "__main__":  # a missing model or data set: one line naming the fix, no traceback
    raise SystemExit(run_command(lambda: main() or 0, "head_importance.py"))
