"""The library stands alone: nothing in vrgd_tf/ imports the examples, benchmarks, studies or
tests; benchmarks/ and studies/ share one module (``studies/shared.py``); and the script
folders that share one ``sys.path`` in this suite (``tests/conftest.py``, the benchmarks'
tests) have distinct module names."""

import ast
import glob
import os

import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Folders of scripts imported by file name (their folder on ``sys.path``), not packages.
SCRIPT_FOLDERS = (
    "examples/digits",
    "examples/data",
    "benchmarks",
    "studies",
    "studies/evidence",
    "studies/sweeps",
)
#: The folders on ``sys.path`` together in this suite's process (``studies/tests`` is another).
SHARED_PATH = ("examples/digits", "examples/data", "benchmarks", "tests")


def _module_names(folder):
    return {
        os.path.splitext(os.path.basename(p))[0]
        for p in glob.glob(os.path.join(REPO, folder, "*.py"))
    }


def _imported_top_names(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


class LayoutTest(tf.test.TestCase):
    def test_the_library_imports_nothing_outside_it(self):
        outside = {"examples", "benchmarks", "studies", "tests"}
        for folder in SCRIPT_FOLDERS + ("tests", "studies/tests"):
            outside |= _module_names(folder)
        self.assertIn("digits_large_batch", outside)
        self.assertIn("prepare_model_garden_data", outside)
        checked = 0
        for path in glob.glob(os.path.join(REPO, "vrgd_tf", "**", "*.py"), recursive=True):
            checked += 1
            bad = sorted(set(_imported_top_names(path)) & outside)
            self.assertEqual(bad, [], os.path.relpath(path, REPO))
        self.assertGreater(checked, 20)

    def test_benchmarks_and_studies_share_only_studies_shared(self):
        """benchmarks/ imports one module of studies/, ``shared`` (``benchmarks/harness.py``);
        studies/ imports nothing of benchmarks/. Names in both folders (``render``, the
        ``report`` packages) are each folder's own."""
        bench = _module_names("benchmarks") | {"report"}
        study = {"report"}
        for folder in ("studies", "studies/evidence", "studies/sweeps", "studies/tests"):
            study |= _module_names(folder)
        self.assertIn("shared", study)
        self.assertIn("harness", bench)
        for top, others, allowed in (
            ("benchmarks", study - bench, {"shared"}),
            ("studies", bench - study, set()),
        ):
            checked = 0
            for path in glob.glob(os.path.join(REPO, top, "**", "*.py"), recursive=True):
                checked += 1
                bad = sorted((set(_imported_top_names(path)) & others) - allowed)
                self.assertEqual(bad, [], os.path.relpath(path, REPO))
            self.assertGreater(checked, 10)

    def test_script_module_names_are_unique_across_folders(self):
        seen = {}
        for folder in SHARED_PATH:
            for name in _module_names(folder) - {"__init__", "conftest"}:
                self.assertNotIn(name, seen, f"{folder}/{name}.py and {seen.get(name)}/")
                seen[name] = folder


if __name__ == "__main__":
    tf.test.main()
