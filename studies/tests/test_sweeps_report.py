"""studies/report/sweeps: the learning-rate probe section survives a clone without its JSON, the
block's head tables the sweep's largest batches, and ``studies/render.py`` puts the block
after the evidence block (and replaces it in place the next time)."""

import os
import tempfile

import tensorflow as tf
from absl import flags
from absl.testing import flagsaver
from report import sweeps
from report.sweeps import lr_probe, summary
from report.sweeps.common import Context

import render

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
        self.assertIn("are not in `studies/sweeps/results/`", lines[2])
        self.assertLen(lines, 4)

    def test_every_section_has_render(self):
        self.assertIn(lr_probe, sweeps.SECTIONS)
        for section in sweeps.SECTIONS:
            self.assertTrue(callable(getattr(section, "render", None)), section.__name__)


_SWEEP = [
    ("digits", "lamb", 1024, [0.1, 0.3, 0.2], [0.0, 0.1, 0.0], 3, [0.95, 0.95, 0.96], [0.95] * 3)
]
_BERT = ["- BERT-tiny MLM (Model Garden): n.s."]
_DOCS = [
    {"command": "python benchmarks/sweep.py --seeds=3", "environment": {"cpu_count": 2}},
    {"command": "python3 studies/sweeps/bert_mlm.py"},
]


class SummaryTest(tf.test.TestCase):
    def test_head_tables_the_largest_batches_and_says_where_the_scripts_are(self):
        ctx = Context({}, False, "results.md", self.get_temp_dir(), "images")
        ctx.headline[:] = _SWEEP
        ctx.bert_headline[:] = _BERT
        text = "\n".join(summary.summary_lines(ctx, _DOCS))
        self.assertTrue(text.startswith(summary.HEADING + "\n"))
        self.assertIn("| digits | LAMB vs VR-LAMB | 1024 | 95.33 ± 0.58 | 95.00 ± 0.00 |", text)
        self.assertIn("| 20.00 ± 10.00 | n.s. |", text)
        self.assertIn(_BERT[0], text)
        self.assertIn("`python3 studies/sweeps/bert_mlm.py`", text)
        self.assertIn("they are in `studies/sweeps/` now", text)
        self.assertIn(", 2 CPU cores,", text)
        self.assertNotIn("--quick", text)


class BlockPlacementTest(tf.test.TestCase):
    def test_sweeps_block_goes_after_the_evidence_block_then_is_replaced_in_place(self):
        text = "# VRGD results\n\n<!-- evidence:begin -->\nE\n<!-- evidence:end -->\n\n## Cost\n"
        where = render._line_after(text, render.END)
        once = render.replace_block(text, render.SWEEPS_BEGIN, render.SWEEPS_END, "S1", where)
        self.assertIn("<!-- evidence:end -->\n<!-- sweeps:begin -->\nS1\n<!-- sweeps:end -->", once)
        self.assertTrue(once.endswith("\n## Cost\n"))
        twice = render.replace_block(once, render.SWEEPS_BEGIN, render.SWEEPS_END, "S2", where)
        self.assertEqual(twice, once.replace("S1", "S2"))


if __name__ == "__main__":
    tf.test.main()
