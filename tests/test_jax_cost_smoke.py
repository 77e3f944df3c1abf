"""Smoke test of benchmarks/jax_cost.py (issue 38, item 6): ``--quick`` on 8 forced CPU
devices, in a subprocess (the script sets ``KERAS_BACKEND=jax`` before Keras is imported)
where TensorFlow cannot be imported, as on the GPU machine it is prepared for. Skipped where
JAX is not installed."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Runs the benchmark's main with every ``tensorflow`` import failing.
RUN_WITHOUT_TENSORFLOW = """
import runpy, sys


class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError("TensorFlow is blocked in this test: " + name)
        return None


sys.meta_path.insert(0, _NoTensorFlow())
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@unittest.skipIf(importlib.util.find_spec("jax") is None, "JAX is not installed")
class JaxCostSmokeTest(unittest.TestCase):
    def test_quick_run_reports_ratios_and_passes_without_tensorflow(self):
        out = os.path.join(tempfile.mkdtemp(), "jax_cost.json")
        env = dict(os.environ, PYTHONPATH=REPO)
        for name in ("KERAS_BACKEND", "XLA_FLAGS", "TF_USE_LEGACY_KERAS", "JAX_PLATFORMS"):
            env.pop(name, None)
        script = os.path.join(REPO, "benchmarks", "jax_cost.py")
        proc = subprocess.run(
            [sys.executable, "-c", RUN_WITHOUT_TENSORFLOW, script, "--quick", f"--out={out}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        with open(out) as f:
            doc = json.load(f)
        self.assertTrue(doc["complete"])
        self.assertFalse(doc["provenance"]["tensorflow_imported"])
        self.assertEqual(doc["provenance"]["device_count"], 8)
        self.assertEqual([r["model"] for r in doc["end_to_end"]], ["bert", "cnn"])
        for row in doc["end_to_end"]:
            self.assertEqual((row["samples"], row["devices"], row["groups_per_device"]), (8, 8, 1))
            self.assertGreater(row["time_ratio"]["median"], 0.0)
            self.assertGreater(row["memory_ratio"]["total"], 0.0)
        passes = doc["passes"]
        self.assertEqual(passes["elements"], 2000 * 32 + 32 * 32 + 32 + 64 * 16)
        self.assertGreater(passes["median"]["vrgd_passes"], 0.0)
        self.assertLess(passes["mean_factor"], 1.0)  # the VR step acted
        self.assertIn("GSNR part:", proc.stdout)


if __name__ == "__main__":
    unittest.main()
