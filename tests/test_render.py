"""benchmarks/report: the studies' blocks of docs/results.md are kept verbatim, the cost
sections each render, the README gets a short cost block and docs/results.md the full list it
links to. (The earlier sweeps' sections are tested in
``studies/tests/test_sweeps_report.py``.)"""

import os
import sys

import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from report import SECTION_NAMES, SECTIONS, common, readme  # noqa: E402


class StudyBlocksTest(tf.test.TestCase):
    def test_the_studies_blocks_are_kept_verbatim_and_the_rest_dropped(self):
        evidence = "<!-- evidence:begin -->\n## Evidence\n| a | b |\n<!-- evidence:end -->"
        sweeps = "<!-- sweeps:begin -->\n## Earlier sweeps\ntext\n<!-- sweeps:end -->"
        previous = f"# VRGD results\n\n{evidence}\n\n{sweeps}\n\n## Cost at a glance\nold\n"
        self.assertEqual(common.study_blocks(previous), [evidence, "", sweeps, ""])

    def test_a_missing_block_gets_a_placeholder(self):
        lines = common.study_blocks("# VRGD results\n")
        self.assertLen(lines, 4)
        self.assertTrue(lines[2].startswith("<!-- sweeps:begin -->\n"))
        self.assertTrue(lines[2].endswith("\n<!-- sweeps:end -->"))
        self.assertIn("studies/render.py", lines[0])

    def test_every_section_has_render(self):
        self.assertEqual([s.__name__ for s in SECTIONS], [f"report.{n}" for n in SECTION_NAMES])
        for section in SECTIONS:
            self.assertTrue(callable(getattr(section, "render", None)), section.__name__)


def _ratio(median):
    return {"median": median, "min": median - 0.1, "max": median + 0.1}


_OVERHEAD = [
    {"model": m, "pair": "lamb", "batch": 64, "replicas": 8, "ratio": {"vr": _ratio(r)}}
    for m, r in (("cnn1d", 1.05), ("bert_tiny", 1.5), ("resnet20", 1.2))
]
_MEMORY = [{"model": "cnn1d", "pair": "lamb", "batch": 64, "vr": {"peak_ratio": _ratio(1.3)}}]
_EXTRA = ["- Cost model: [docs/cost_model.md](docs/cost_model.md#5-memory-per-replica)."]
_DOCS = [{"command": "python benchmarks/overhead.py"}]


class ReadmeBlockTest(tf.test.TestCase):
    def test_readme_block_is_short_and_links_to_the_full_list(self):
        path = os.path.join(self.get_temp_dir(), "README.md")
        with open(path, "w") as f:
            f.write(f"# x\n\n{readme.README_BEGIN}\nold\n{readme.README_END}\n\n## After\n")
        readme.write_readme_block(path, _OVERHEAD, _MEMORY)
        with open(path) as f:
            text = f.read()
        block = text.split(readme.README_BEGIN)[1].split(readme.README_END)[0]
        self.assertLessEqual(len(block.strip().splitlines()), 6)
        self.assertIn(f"docs/results.md#{readme.SUMMARY_ANCHOR}", block)
        self.assertIn("median 1.05–1.50 over 3", block)
        self.assertIn("Peak memory VR/base (process RSS, diagnostics every step): 1.30–1.30", block)
        self.assertNotIn("old", block)
        self.assertTrue(text.endswith(f"{readme.README_END}\n\n## After\n"))

    def test_full_list_keeps_every_line_with_links_relative_to_docs(self):
        intro = ["Cost rendered with ...", ""]
        lines = readme.summary_section(
            _OVERHEAD, _DOCS, "images", self.get_temp_dir(), _MEMORY, _EXTRA, intro
        )
        self.assertEqual(lines[:4], [readme.SUMMARY_HEADING, ""] + intro)
        self.assertEqual(readme.SUMMARY_HEADING, "## Cost at a glance")
        text = "\n".join(lines)
        for model in ("cnn1d", "bert_tiny", "resnet20"):
            self.assertIn(f"- Step time VR/base, {model} LAMB, batch 64, 8 CPU replicas", text)
        self.assertIn("`python benchmarks/overhead.py`", text)
        self.assertIn("- Peak memory (process RSS) VR/base, cnn1d LAMB, batch 64: 1.300", text)
        self.assertIn("[docs/cost_model.md](cost_model.md#5-memory-per-replica)", text)


if __name__ == "__main__":
    tf.test.main()
