"""Support code the course uses but does not teach line by line: data downloads,
checkpoints, the command line, plotting helpers, notebook checks and exercise grading.

The lesson is in the other modules of ``annotated``; each of those appears verbatim in
the notebook that teaches it (see ``annotated.support.course``).
"""
