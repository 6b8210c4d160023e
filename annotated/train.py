"""``python -m annotated.train``: train on Multi30k German -> English and report BLEU.

The command line lives in ``annotated.support.cli``; ``--help`` lists its options.
"""

from annotated.support.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
