"""benchmarks/report: the learning-rate probe section survives a clone without its JSON."""

import os
import sys
import tempfile

import tensorflow as tf
from absl import flags
from absl.testing import flagsaver

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from report import SECTIONS, lr_probe  # noqa: E402
from report.common import Context  # noqa: E402

_TABLE = [
    "How the base learning rates were chosen: ...",
    "",
    "| data | pair | batch | peak lr | test acc (%) | diverged | file |",
    "|---|---|---:|---:|---:|---|---|",
    "| digits | Adam | 64 | 0.0002 | 94.17 |  | lr_probe.json |",
]


class LrProbeWithoutJsonTest(tf.test.TestCase):
    def _render(self, out_md):
        ctx = Context({}, False, out_md, self.get_temp_dir(), "images")
        lines = []
        with flagsaver.flagsaver():
            flags.FLAGS(["render", "--lr_probes=absent_probe_a.json,absent_probe_b.json"])
            lr_probe.render(ctx, lines)
        return lines

    def test_previous_table_is_kept_verbatim_under_a_note(self):
        with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
            f.write("\n".join(["# report", "", "## Other", "x", "", lr_probe.HEADING, ""]))
            f.write("\n".join(_TABLE) + "\n")
        lines = self._render(f.name)
        self.assertEqual(lines[0], lr_probe.HEADING)
        self.assertIn("absent_probe_a.json, absent_probe_b.json", lines[2])
        self.assertIn("not recomputed", lines[2])
        self.assertEqual(lines[4:-1], _TABLE)
        # Rendering again from its own output gives the same lines (one note, not two).
        with open(f.name, "w") as g:
            g.write("\n".join(["# report", ""] + lines))
        self.assertEqual(self._render(f.name), lines)
        os.unlink(f.name)

    def test_without_a_previous_render_the_section_says_the_json_is_absent(self):
        lines = self._render(os.path.join(self.get_temp_dir(), "missing.md"))
        self.assertEqual(lines[0], lr_probe.HEADING)
        self.assertIn("are not in `benchmarks/results/`", lines[2])
        self.assertLen(lines, 4)

    def test_every_section_has_render(self):
        self.assertIn(lr_probe, SECTIONS)
        for section in SECTIONS:
            self.assertTrue(callable(getattr(section, "render", None)), section.__name__)


if __name__ == "__main__":
    tf.test.main()
