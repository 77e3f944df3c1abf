"""The earlier sweeps' block of ``docs/results.md`` (between ``<!-- sweeps:begin -->`` and
``<!-- sweeps:end -->``, written by ``studies/render.py``): the results of
``studies/sweeps/``, one section module each, in report order.

Each section module has ``render(ctx, lines)``: it reads its results JSON through
``ctx.result(stem)`` (:class:`report.sweeps.common.Context`), returns at once if there is none,
and otherwise appends its Markdown lines to ``lines`` and writes its PNGs to ``ctx.img_dir``.
A section may define its own absl flags. :func:`block` calls them in the order of
:data:`SECTION_NAMES` after the head (:mod:`report.sweeps.summary`); to add a section, write
``report/sweeps/<name>.py`` and add ``"<name>"`` to that tuple.
"""

import importlib

from report.sweeps import summary

SECTION_NAMES = ("sweep", "sweep_gsnr", "ablations", "bert", "lr_probe", "bf16")
SECTIONS = tuple(importlib.import_module(f"report.sweeps.{name}") for name in SECTION_NAMES)


def block(ctx):
    """The block's Markdown (without its markers): the head, then every section."""
    body = []
    for section in SECTIONS:
        section.render(ctx, body)
    docs = [ctx.result(stem) for stem in ("sweep", "bert_mlm")]
    head = summary.summary_lines(ctx, [d for d in docs if d])
    return "\n".join(head + body).rstrip() + "\n"
