"""The cost sections of ``docs/results.md``, one module each, in report order (the earlier
sweeps' sections are ``studies/report/sweeps/``).

Each section module has ``render(ctx, lines)``: it reads its results JSON through
``ctx.result(stem)`` (:class:`report.common.Context`), returns at once if there is none, and
otherwise appends its Markdown lines to ``lines`` and writes its PNGs to ``ctx.img_dir``.
A section may define its own absl flags. ``benchmarks/render.py`` calls the sections in the
order of :data:`SECTION_NAMES`; to add a section, write ``report/<name>.py`` and add
``"<name>"`` to that tuple.
"""

import importlib

SECTION_NAMES = (
    "overhead",
    "packing",
    "sparse",
    "groups",
    "loopback",
    "gsnr_passes",
    "jax_passes",
)
SECTIONS = tuple(importlib.import_module(f"report.{name}") for name in SECTION_NAMES)
