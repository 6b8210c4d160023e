"""``python -m annotated.doctor``: check that this environment can run the course.

Python and every dependency against the versions the course needs, spaCy's tokenizers, the
Multi30k data, the shipped model and its checksums, the GPU if there is one, the Jupyter
kernel the notebooks use, and write access to the cache. One line per check, ``OK`` or
``FAIL``, with the fix under each ``FAIL``; exit code 0 when all pass, 1 when one fails,
2 for bad options. ``--help`` lists the options; the checks are in ``annotated.support.doctor``.
"""

from annotated.support.doctor import main

if __name__ == "__main__":
    raise SystemExit(main())
