"""The study's sections of docs/results.md (written by ``studies/render.py`` between the
``<!-- evidence:begin -->`` and ``<!-- evidence:end -->`` markers): :mod:`report.round3`,
:mod:`report.round2`, and :mod:`report.verdict` (the README's few lines)."""
