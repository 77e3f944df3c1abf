"""The documentation's checkable parts: citations of the spec point at docs/spec.md and at
sections it has; the ``>>>`` examples of the library's docstrings run and print what they
show; every Python block of README.md and docs/*.md parses, and runs unless the line before
it marks it as a fragment (``<!-- fragment ... -->``)."""

import ast
import contextlib
import doctest
import glob
import importlib
import io
import os
import pkgutil
import re

import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf

import util

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


def _library_modules():
    yield vrgd_tf
    for info in pkgutil.walk_packages(vrgd_tf.__path__, "vrgd_tf."):
        yield importlib.import_module(info.name)


class DocstringExamplesTest(tf.test.TestCase):
    def test_docstring_examples_run(self):
        """Every ``>>>`` example in vrgd_tf/ (doctest, in this process: 8 logical CPUs)."""
        import util

        if not util.HAS_TF_KERAS:
            self.skipTest("vrgd_tf.tf_keras and vrgd_tf.model_garden import tf_keras.")
        finder = doctest.DocTestFinder(exclude_empty=True)
        flags = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
        examples = {}
        for module in _library_modules():
            for test in finder.find(module):
                out = io.StringIO()
                result = doctest.DocTestRunner(optionflags=flags).run(test, out=out.write)
                self.assertEqual(result.failed, 0, out.getvalue())
                examples[test.name] = result.attempted
        self.assertGreaterEqual(examples.get("vrgd_tf.aggregator.GSNRAggregator", 0), 12)
        self.assertGreaterEqual(examples.get("vrgd_tf.gsnr.factors.FactorContext", 0), 8)


_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
_FRAGMENT = "<!-- fragment"
# Imports that need the model_garden extra (tf-keras, tf-models-official).
_NEEDS_TF_KERAS = re.compile(
    r"^\s*(import|from) (tf_keras|official|vrgd_tf\.(tf_keras|model_garden))\b", re.M
)


def python_blocks():
    """``(name, code, is_fragment)`` for each ```python block of README.md and docs/*.md;
    ``name`` is ``path:line`` of the opening fence."""
    paths = ["README.md"] + sorted(
        os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md"))
    )
    blocks = []
    for rel in paths:
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            text = f.read()
        for match in _FENCE.finditer(text):
            if match.group(1) not in ("python", "py"):
                continue
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            blocks.append((f"{rel}:{line}", match.group(2), before.startswith(_FRAGMENT)))
    return blocks


BLOCKS = python_blocks()


def _run_elsewhere():
    """The README's blocks that test_readme.py runs, with assertions on what they did:
    here they only parse (the suite's time)."""
    from test_readme import readme_block

    return {readme_block("Quick start"), readme_block("One device: micro-batch groups")}


RUN_ELSEWHERE = _run_elsewhere()


class DocsPythonBlocksTest(tf.test.TestCase, parameterized.TestCase):
    def test_blocks_found(self):
        self.assertGreaterEqual(len(BLOCKS), 5)
        self.assertGreaterEqual(sum(not fragment for _, _, fragment in BLOCKS), 3)
        # Each block run elsewhere is one of these, not a fragment.
        runnable = {code for _, code, fragment in BLOCKS if not fragment}
        self.assertLen(RUN_ELSEWHERE, 2)
        self.assertTrue(RUN_ELSEWHERE <= runnable)

    @parameterized.named_parameters(*[(name, code) for name, code, _ in BLOCKS])
    def test_parses(self, code):
        ast.parse(code)

    @parameterized.named_parameters(
        *[
            (name, code)
            for name, code, fragment in BLOCKS
            if not fragment and code not in RUN_ELSEWHERE
        ]
    )
    def test_runs(self, code):
        if _NEEDS_TF_KERAS.search(code):
            util.skip_without_tf_keras(self)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, "<docs block>", "exec"), {"__name__": "docs_block"})


if __name__ == "__main__":
    tf.test.main()
