"""Citations of the spec point at docs/spec.md and at sections it has; the ``>>>`` examples of
the library's docstrings run and print what they show."""

import doctest
import importlib
import io
import os
import pkgutil
import re

import tensorflow as tf

import vrgd_tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIRS = (
    "vrgd_tf",
    "examples",
    "tests",
    "official_configs",
    "docs",
    "benchmarks",
    "studies",
    "tpu_scripts",
)
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


#: Modules that only raise ImportError (moved out of the library; tests/test_layout.py).
MOVED = ("vrgd_tf.data", "vrgd_tf.demo", "vrgd_tf.model_garden.prepare_data")


def _library_modules():
    yield vrgd_tf
    for info in pkgutil.walk_packages(vrgd_tf.__path__, "vrgd_tf."):
        if not info.name.startswith(MOVED):
            yield importlib.import_module(info.name)


class DocstringExamplesTest(tf.test.TestCase):
    def test_docstring_examples_run(self):
        """Every ``>>>`` example in vrgd_tf/ (doctest, in this process: 8 logical CPUs)."""
        import util

        if not util.HAS_TF_KERAS:
            self.skipTest("The GSNRAggregator example uses tf_keras.")
        finder = doctest.DocTestFinder(exclude_empty=True)
        flags = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
        examples = {}
        for module in _library_modules():
            for test in finder.find(module):
                out = io.StringIO()
                result = doctest.DocTestRunner(optionflags=flags).run(test, out=out.write)
                self.assertEqual(result.failed, 0, out.getvalue())
                examples[test.name] = result.attempted
        self.assertGreaterEqual(examples.get("vrgd_tf.aggregator.GSNRAggregator", 0), 16)


if __name__ == "__main__":
    tf.test.main()
