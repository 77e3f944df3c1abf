"""Helpers shared by the cost report's sections: the results directory, labels, the rendering
context, loading, the plotting backend, and the studies' blocks the report keeps.

Nothing here writes Markdown; the section modules do (see ``benchmarks/report/__init__.py``).
"""

import dataclasses
import os

import harness  # noqa: F401  (puts studies/ on sys.path for shared)

# isort: split
from shared import PAIR_LABEL, ReportContext, load_average  # noqa: F401  (PAIR_LABEL: the sections')
from shared import load_json as load  # noqa: F401  (the sections' name for it)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(REPO, "benchmarks", "results")

VARIANT_LABEL = {
    "base": "base X",
    "base_allreduce": "X summed by ReplicaContext.all_reduce (tf_keras only)",
    "sq": "X + all-reduce of squares (a)",
    "vr_nostats": "VR-X, statistics_interval=0 (no diagnostics)",
    "vr": "VR-X, diagnostics every step (statistics_interval=1)",
    "vr_default": "VR-X with its defaults (diagnostics every 100 steps)",
    "vr_unclustered": 'VR-X with its defaults and xla_cluster="never" (the GSNR math op by op)',
    "vr_unpacked": "VR-X as `vr` with pack_limit=0 (no small variables packed: the step "
    "before the pack)",
    "vr_beta3_0": "VR-X with beta_3=0 (no factor state), diagnostics every step",
    "vr_nostats_beta3_0": "VR-X with beta_3=0, statistics_interval=0",
}


@dataclasses.dataclass
class Context(ReportContext):
    """What one rendering of the cost report shares between its sections: the fields of
    ``studies/shared.py``'s ``ReportContext`` (results from ``benchmarks/results``), and

    Attributes:
      headline_ov: filled by the overhead section (step-time ratios) for the summary and
        the README block.
      readme_lines: further Markdown lines for the full list in docs/results.md (the
        summary), from any section.
      readme_short: further Markdown lines for the README block itself, from any section.
      readme_memory: text appended to the README block's peak-memory bullet (the tensors'
        own peak, where a section has it), or "".
    """

    RESULTS = RESULTS

    headline_ov: list = dataclasses.field(default_factory=list)
    readme_lines: list = dataclasses.field(default_factory=list)
    readme_short: list = dataclasses.field(default_factory=list)
    readme_memory: str = ""


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "figure.dpi": 110})
    return plt


#: The studies' blocks of docs/results.md (``studies/render.py`` writes them), in order.
STUDY_BLOCKS = ("evidence", "sweeps")


def study_blocks(text):
    """Lines: each of the studies' blocks of ``text`` (the previous docs/results.md), from its
    ``<!-- name:begin -->`` to its ``<!-- name:end -->`` marker, verbatim, then an empty line;
    a placeholder block for one that is not there."""
    lines = []
    for name in STUDY_BLOCKS:
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        if begin in text and end in text:
            lines.append(text[text.index(begin) : text.index(end) + len(end)])
        else:
            lines.append(f"{begin}\n(The {name} block: run `python3 studies/render.py`.)\n{end}")
        lines.append("")
    return lines
