"""Helpers shared by the cost report's sections: the results directory, labels, the rendering
context, loading, the plotting backend, and the studies' blocks the report keeps.

Nothing here writes Markdown; the section modules do (see ``benchmarks/report/__init__.py``).
"""

import dataclasses
import os

import harness  # noqa: F401  (puts studies/ on sys.path for shared)

# isort: split
from shared import load_json as load  # noqa: F401  (the sections' name for it)
from shared import load_result

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(REPO, "benchmarks", "results")

PAIR_LABEL = {"momentum": "Momentum", "adam": "Adam", "lamb": "LAMB", "lars": "LARS"}
VARIANT_LABEL = {
    "base": "base X",
    "base_allreduce": "X summed by ReplicaContext.all_reduce (tf_keras only)",
    "sq": "X + all-reduce of squares (a)",
    "vr_nostats": "VR-X, statistics_interval=0 (no diagnostics)",
    "vr": "VR-X, diagnostics every step (statistics_interval=1, the default)",
    "vr_beta3_0": "VR-X with beta_3=0 (no factor state), diagnostics every step",
    "vr_nostats_beta3_0": "VR-X with beta_3=0, statistics_interval=0",
}


@dataclasses.dataclass
class Context:
    """What one rendering of the cost report shares between its sections.

    Attributes:
      inputs: ``{stem: loaded JSON or None}`` of the results files (``"overhead"``,
        ``"groups"``, ``"loopback"``, ...); see :meth:`result`.
      quick: rendering the ``--quick`` results.
      out_md: path of the Markdown being written.
      img_dir: directory the PNGs go to; ``img_rel`` is it relative to ``out_md``.
      headline_ov: filled by the overhead section (step-time ratios) for the summary and
        the README block.
      readme_lines: further Markdown lines for the README block, from any section.
    """

    inputs: dict
    quick: bool
    out_md: str
    img_dir: str
    img_rel: str
    headline_ov: list = dataclasses.field(default_factory=list)
    readme_lines: list = dataclasses.field(default_factory=list)

    def result(self, stem):
        """The JSON of ``stem`` given on the command line, else
        ``benchmarks/results/<stem>.json`` (``<stem>_quick.json`` with ``--quick``), or None
        if there is no such file."""
        if stem not in self.inputs:
            self.inputs[stem] = load_result(RESULTS, stem, self.quick)
        return self.inputs[stem]


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
