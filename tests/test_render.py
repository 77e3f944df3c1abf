"""benchmarks/report: the learning-rate probe section survives a clone without its JSON; the
README gets a short benchmarks block and docs/results.md the full list it links to."""

import os
import sys
import tempfile

import tensorflow as tf
from absl import flags
from absl.testing import flagsaver

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from report import SECTIONS, lr_probe, readme  # noqa: E402
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


def _ratio(median):
    return {"median": median, "min": median - 0.1, "max": median + 0.1}


_OVERHEAD = [
    {"model": m, "pair": "lamb", "batch": 64, "replicas": 8, "ratio": {"vr": _ratio(r)}}
    for m, r in (("cnn1d", 1.05), ("bert_tiny", 1.5), ("resnet20", 1.2))
]
_MEMORY = [{"model": "cnn1d", "pair": "lamb", "batch": 64, "vr": {"peak_ratio": _ratio(1.3)}}]
_SWEEP = [("digits", "lamb", 1024, [0.1, 0.3, 0.2], [0.0, 0.1, 0.0], 3, [95, 95, 96], [95] * 3)]
_BERT = ["- BERT-tiny MLM (Model Garden): n.s."]
_EXTRA = ["- Cost model: [docs/cost_model.md](docs/cost_model.md#5-memory-per-replica)."]
_DOCS = [{"command": "python benchmarks/overhead.py"}]


class ReadmeBlockTest(tf.test.TestCase):
    def test_readme_block_is_short_and_links_to_the_full_list(self):
        path = os.path.join(self.get_temp_dir(), "README.md")
        with open(path, "w") as f:
            f.write(f"# x\n\n{readme.README_BEGIN}\nold\n{readme.README_END}\n\n## After\n")
        readme.write_readme_block(
            path, _SWEEP, _BERT, _OVERHEAD, _DOCS, self.get_temp_dir(), _MEMORY, _EXTRA
        )
        with open(path) as f:
            text = f.read()
        block = text.split(readme.README_BEGIN)[1].split(readme.README_END)[0]
        self.assertLessEqual(len(block.strip().splitlines()), 8)
        self.assertIn(f"docs/results.md#{readme.SUMMARY_ANCHOR}", block)
        self.assertIn("1 of 1 VR − base test-accuracy differences n.s.", block)
        self.assertIn("median 1.05–1.50 over 3", block)
        self.assertIn("Peak memory VR/base: 1.30–1.30", block)
        self.assertIn(_BERT[0], block)
        self.assertNotIn("old", block)
        self.assertTrue(text.endswith(f"{readme.README_END}\n\n## After\n"))

    def test_full_list_keeps_every_line_with_links_relative_to_docs(self):
        lines = readme.summary_section(
            _SWEEP, _BERT, _OVERHEAD, _DOCS, "images", self.get_temp_dir(), _MEMORY, _EXTRA
        )
        self.assertEqual(lines[0], readme.SUMMARY_HEADING)
        self.assertEqual(readme.SUMMARY_HEADING, "## Other results at a glance")
        text = "\n".join(lines)
        for model in ("cnn1d", "bert_tiny", "resnet20"):
            self.assertIn(f"- Step time VR/base, {model} LAMB, batch 64, 8 CPU replicas", text)
        self.assertIn("| digits | LAMB vs VR-LAMB | 1024 |", text)
        self.assertIn("`python benchmarks/overhead.py`", text)
        self.assertIn("- Peak memory (process RSS) VR/base, cnn1d LAMB, batch 64: 1.300", text)
        self.assertIn("[docs/cost_model.md](cost_model.md#5-memory-per-replica)", text)


if __name__ == "__main__":
    tf.test.main()
