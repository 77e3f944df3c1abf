"""The README as a new user reads it: its quick start and its one-device example run as they
are and do VRGD (k = 8 GSNR samples: 8 replicas, or 1 replica x 8 micro-batch groups); it
stays short; every relative link of README.md and docs/*.md reaches a file and a heading."""

import contextlib
import glob
import io
import os
import re

import numpy as np
import tensorflow as tf

import vrgd_tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")
#: About 200 lines (issue 21); the generated blocks may grow a little.
MAX_README_LINES = 220
_FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def readme_block(heading):
    """The first ```python block of the README section titled ``heading``."""
    text = _read(README)
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    match = _FENCE.search(section)
    assert match, f"no python block under '## {heading}'"
    return match.group(1)


def run_block(code):
    """Executes ``code`` as a script in a fresh namespace, its prints swallowed."""
    namespace = {"__name__": "readme_block"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<README block>", "exec"), namespace)
    return namespace


def slug(heading):
    """GitHub's anchor of a Markdown heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    text = re.sub(r"^```.*?^```", "", _read(path), flags=re.M | re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


class ReadmeExamplesTest(tf.test.TestCase):
    def _assert_vrgd_ran(self, optimizer):
        stats = vrgd_tf.vrgd_statistics(optimizer)
        self.assertNotEmpty(stats)
        for name, row in stats.items():
            # has_gsnr is False and the row zeros when k = 1 (no noise estimate).
            self.assertTrue(row["has_gsnr"], name)
            self.assertBetween(row["mean_factor"], 0.1, 1.0)
        self.assertLess(min(row["mean_factor"] for row in stats.values()), 0.99)

    def test_quick_start_runs_on_8_replicas(self):
        ns = run_block(readme_block("Quick start"))
        self.assertEqual(ns["strategy"].num_replicas_in_sync, 8)
        self._assert_vrgd_ran(ns["model"].optimizer)
        logged = ns["history"].history["vrgd/mean/mean_factor"]
        self.assertLen(logged, 2)
        self.assertTrue(np.all(np.isfinite(logged)))

    def test_one_device_example_runs_with_8_groups(self):
        ns = run_block(readme_block("One device: micro-batch groups"))
        self.assertEqual(ns["model"].distribute_strategy.num_replicas_in_sync, 1)
        self._assert_vrgd_ran(ns["model"].optimizer)


class ReadmeShapeTest(tf.test.TestCase):
    def test_readme_is_short_and_keeps_its_two_commands(self):
        text = _read(README)
        self.assertLessEqual(len(text.splitlines()), MAX_README_LINES)
        for command in (
            'python3 -m pip install -e ".[examples]" && python3 examples/digits/digits_large_batch.py',
            'python3 -m pip install -e ".[dev]" && python3 -m pytest -q',
        ):
            self.assertIn(f"```bash\n{command}\n```", text)
        for marker in ("results", "benchmarks"):
            self.assertIn(f"<!-- {marker}:begin -->", text)
            self.assertIn(f"<!-- {marker}:end -->", text)

    def test_relative_links_reach_a_file_and_a_heading(self):
        checked = 0
        for path in [README] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
            rel = os.path.relpath(path, REPO)
            for target in _LINK.findall(_read(path)):
                if re.match(r"[a-z]+:", target):
                    continue  # https:, mailto:
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                if not file_part:
                    dest = path
                self.assertTrue(os.path.exists(dest), f"{rel}: {target}")
                if anchor:
                    self.assertIn(anchor, anchors(dest), f"{rel}: {target}")
                checked += 1
        self.assertGreaterEqual(checked, 30)


if __name__ == "__main__":
    tf.test.main()
