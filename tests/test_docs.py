"""Citations of the spec point at docs/spec.md and at sections it has."""

import os
import re

import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIRS = ("vrgd_tf", "tests", "official_configs", "docs", "benchmarks", "studies", "tpu_scripts")
_EXTS = (".py", ".md", ".yaml", ".yml", ".cfg", ".toml", ".sh")
_CITATION = re.compile(r"docs/spec\.md`{0,2},? sections? (\d+)(?: and (\d+))?")


def _text_files():
    yield os.path.join(REPO, "README.md")
    for top in _DIRS:
        for root, _, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith(_EXTS):
                    yield os.path.join(root, name)


class SpecCitationTest(tf.test.TestCase):
    def test_spec_citations_resolve(self):
        with open(os.path.join(REPO, "docs", "spec.md")) as f:
            sections = set(re.findall(r"^## (\d+)\. ", f.read(), re.M))
        self.assertEqual(sections, {str(i) for i in range(1, 7)})
        missing_doc = "shared/" + "design"  # a design file that is not in the repository
        cited = 0
        for path in _text_files():
            with open(path, encoding="utf-8") as f:
                text = f.read()
            rel = os.path.relpath(path, REPO)
            self.assertFalse(missing_doc in text, f"{rel} cites {missing_doc}")
            for match in _CITATION.finditer(" ".join(text.split())):
                cited += 1
                for number in filter(None, match.groups()):
                    self.assertIn(number, sections, f"{rel}: {match.group(0)}")
        self.assertGreaterEqual(cited, 7)  # configs.py, the demo, five official configs


if __name__ == "__main__":
    tf.test.main()
