"""studies/provenance.py: an imported module of the repository that is not the commit's (here
an untracked file) makes the process dirty, and enters the imported-sources hash."""

import importlib
import os
import sys

import provenance
import tensorflow as tf


class ProvenanceTest(tf.test.TestCase):
    def test_untracked_imported_module_is_dirty(self):
        before = provenance.snapshot()
        self.assertEqual(len(before["git_commit"] or ""), 40)
        self.assertGreater(before["imported_modules"], 0)
        name = f"_provenance_probe_{os.getpid()}"
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
        with open(path, "w") as f:
            f.write("VALUE = 1\n")
        try:
            sys.path.insert(0, os.path.dirname(path))
            importlib.import_module(name)
            after = provenance.snapshot()
        finally:
            os.unlink(path)
            sys.path.remove(os.path.dirname(path))
            sys.modules.pop(name, None)
        rel = os.path.relpath(path, provenance.REPO)
        self.assertIn(rel, after["changed"])
        self.assertTrue(after["dirty"])
        self.assertEqual(after["imported_modules"], before["imported_modules"] + 1)
        self.assertNotEqual(after["imported_sha256"], before["imported_sha256"])
        self.assertEqual(after["git_commit"], before["git_commit"])  # the start's commit


if __name__ == "__main__":
    tf.test.main()
