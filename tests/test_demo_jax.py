"""The digits main job with ``--backend=jax``, at tiny settings.

Runs ``examples/digits/digits_large_batch.py --backend=jax`` as a script in a fresh
interpreter (the backend must be chosen before Keras is imported, which the script does from
its command line), over 8 CPU devices (``DataParallel``, one GSNR sample per device), and
checks what it wrote, and that no TensorFlow module was imported by the end.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "examples", "digits", "digits_large_batch.py")

#: Runs the script as ``__main__`` with the given arguments (as ``python3 SCRIPT ...`` does,
#: its folder first on sys.path), then prints what was imported and the environment it set.
RUN_AS_SCRIPT = """
import json, os, runpy, sys

script = sys.argv[1]
sys.path.insert(0, os.path.dirname(script))
sys.argv = sys.argv[1:]
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as e:
    if e.code not in (None, 0):
        raise
print("RESULT " + json.dumps({
    "tensorflow_modules": sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"),
    "KERAS_BACKEND": os.environ.get("KERAS_BACKEND"),
    "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
}))
"""

EPOCHS = 2


@unittest.skipIf(importlib.util.find_spec("jax") is None, "JAX is not installed")
class DigitsDemoJaxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out_dir = tempfile.mkdtemp(prefix="digits_demo_jax_")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
        for name in ("KERAS_BACKEND", "XLA_FLAGS", "TF_USE_LEGACY_KERAS"):
            env.pop(name, None)  # The script sets the first two itself.
        args = [
            "--backend=jax",
            "--replicas=8",
            "--global_batch=64",
            f"--epochs={EPOCHS}",
            "--warmup_epochs=1",
            "--optimizers=lamb,vrgd_lamb",
            "--hidden_units=32",
            f"--output_dir={cls.out_dir}",
            "--keras_verbose=0",
        ]
        cls.proc = subprocess.run(
            [sys.executable, "-c", RUN_AS_SCRIPT, SCRIPT, *args],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tempfile.gettempdir(),
            env=env,
        )
        lines = [x for x in cls.proc.stdout.splitlines() if x.startswith("RESULT ")]
        cls.process = json.loads(lines[-1][len("RESULT ") :]) if lines else None
        path = os.path.join(cls.out_dir, "results.json")
        cls.payload = json.load(open(path)) if os.path.exists(path) else None

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out_dir, ignore_errors=True)

    def setUp(self):
        self.assertEqual(
            self.proc.returncode, 0, self.proc.stdout[-4000:] + self.proc.stderr[-4000:]
        )
        self.assertIsNotNone(self.payload, self.proc.stdout[-4000:])

    def test_no_tensorflow_module_was_imported(self):
        self.assertEqual(self.process["tensorflow_modules"], [])
        self.assertEqual(self.process["KERAS_BACKEND"], "jax")
        self.assertIn("--xla_force_host_platform_device_count=8", self.process["XLA_FLAGS"])

    def test_results_json_rows_and_backend(self):
        self.assertEqual(self.payload["config"]["backend"], "jax")
        self.assertIn("jax", self.payload["versions"])
        self.assertNotIn("tensorflow", self.payload["versions"])
        rows = self.payload["rows"]
        self.assertEqual([r["optimizer"] for r in rows], ["lamb", "vrgd_lamb"])
        for row in rows:
            for key in ("train_accuracy", "test_accuracy"):
                self.assertGreaterEqual(row[key], 0.0)
                self.assertLessEqual(row[key], 1.0)
            self.assertGreater(row["ms_per_step"], 0.0)
        # 42 steps of batch 64 (LAMB at this length reaches about 0.85 on either backend).
        self.assertGreater(rows[0]["test_accuracy"], 0.6)
        self.assertGreater(rows[1]["test_accuracy"], 0.6)
        self.assertEqual(self.payload["data"]["per_replica_batch"], 8)

    def test_vr_differs_from_the_base_from_the_same_start(self):
        runs = self.payload["runs"]
        self.assertEqual(
            runs["lamb"]["initial_weights_sha256"], runs["vrgd_lamb"]["initial_weights_sha256"]
        )
        self.assertNotEqual(runs["lamb"]["curves"]["loss"], runs["vrgd_lamb"]["curves"]["loss"])
        self.assertIsNone(runs["lamb"]["vrgd_statistics"])
        stats = runs["vrgd_lamb"]["vrgd_statistics"]
        self.assertEqual(len(stats["per_variable"]), 4)  # 2 kernels + 2 biases
        self.assertTrue(all(row["has_gsnr"] for row in stats["per_variable"].values()))
        at_gamma = stats["all_weights"]["frac_at_gamma"]
        self.assertGreater(at_gamma, 0.0)  # VRGD acted: some factors were clipped at gamma
        self.assertLessEqual(at_gamma, 1.0)
        self.assertEqual(len(runs["vrgd_lamb"]["curves"]["frac_at_gamma"]), EPOCHS)
        for run in runs.values():
            self.assertEqual(len(run["curves"]["test_accuracy"]), EPOCHS)

    def test_what_is_not_produced_on_jax_is_said(self):
        self.assertIn("reliability", self.payload["not_produced"])
        self.assertNotIn("reliability", self.payload["runs"]["vrgd_lamb"]["curves"])
        self.assertIn("Not produced on JAX", self.proc.stdout)
        self.assertIn("backend jax", self.proc.stdout)

    def test_png_is_written(self):
        with open(os.path.join(self.out_dir, "test_accuracy.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
