"""The argparse types the command lines share: numbers that are finite and in range, with bounds
taken from what is sensible (the machine's cores, a beam no wider than is useful, a length penalty
that cannot overflow), so that every option fails at parse time with argparse's exit code 2, before
any work. No torch here: the light commands (grade, download) use them too."""

import argparse
import math
import os
from collections.abc import Callable

# The widest beam the command lines accept: the cost of beam search grows with the width (time and
# memory, per sentence of the batch), and beams far wider than the paper's 4 rarely translate better.
MAX_BEAM = 100
# The largest length penalty alpha: lp(Y) = ((5 + |Y|) / 6)^alpha stays a float for any output length
# up to about 10^30 below it, while alpha = 200 overflows at 250 tokens. Wu et al. (2016) tune alpha
# between 0 and 1, the paper uses 0.6; far larger values only make the search prefer long outputs.
MAX_LENGTH_PENALTY = 10.0
MAX_SEED = 2**64 - 1  # torch.manual_seed takes 0 .. 2**64 - 1
MAX_SECONDS = 86_400.0  # a day: longer timeouts overflow the system's timers (socket, zmq)


def _number(kind: type, minimum: float, strict: bool, what: str) -> "Callable[[str], int | float]":
    """An argparse type: ``kind`` (int or float) that is finite and > (or >=) ``minimum``."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what  # argparse names the type in its messages
    return parse


positive_int = _number(int, 0, True, "a positive integer")
natural_int = _number(int, 0, False, "an integer >= 0")
positive_float = _number(float, 0.0, True, "a positive number")
natural_float = _number(float, 0.0, False, "a number >= 0")


def machine_cores() -> int:
    """The CPU cores this process may run on (its affinity, e.g. a batch job's share), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _bounded(parse: "Callable[[str], int | float]", maximum: "Callable[[], int | float]", why: str):
    """An argparse type: ``parse``, then at most ``maximum()``; the message gives ``why``."""
    def bounded(text: str) -> int | float:
        value = parse(text)
        limit = maximum()
        if value > limit:
            shown = f"{limit:g}" if isinstance(limit, float) else str(limit)
            raise argparse.ArgumentTypeError(f"{text!r} is more than {shown}: {why.format(limit=shown)}")
        return value

    bounded.__name__ = parse.__name__
    return bounded


beam_width = _bounded(positive_int, lambda: MAX_BEAM, "beams wider than {limit} cost time and memory in "
                                                       "proportion and rarely translate better (the paper uses 4)")
beam_width_or_greedy = _bounded(natural_int, lambda: MAX_BEAM, "beams wider than {limit} cost time and memory in "
                                                               "proportion and rarely translate better (the paper "
                                                               "uses 4)")
length_penalty = _bounded(natural_float, lambda: MAX_LENGTH_PENALTY,
                          "((5 + |Y|) / 6)^alpha overflows for long outputs; the paper uses 0.6, values between 0 "
                          "and 1 are the usual range")
thread_count = _bounded(positive_int, machine_cores, "this machine gives this process {limit} CPU core(s); more "
                                                     "threads than cores only wait on each other")
seed_value = _bounded(natural_int, lambda: MAX_SEED, "a seed is at most 2**64 - 1, what torch.manual_seed takes")
