"""Runs the JAX path's tests (``tests_jax/``) in their own process: Keras 3 on JAX needs
``KERAS_BACKEND=jax`` before Keras is imported, and 8 CPU devices forced with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``. Part of the README's one test
command; skipped where JAX is not installed (``pip install -e ".[dev]"`` installs it)."""

import importlib.util
import os
import subprocess
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@unittest.skipIf(importlib.util.find_spec("jax") is None, "JAX is not installed")
class JaxBackendTest(unittest.TestCase):
    def test_the_jax_tests_pass(self):
        env = dict(
            os.environ,
            KERAS_BACKEND="jax",
            XLA_FLAGS="--xla_force_host_platform_device_count=8",
            PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
        )
        env.pop("TF_USE_LEGACY_KERAS", None)
        cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
        out = subprocess.run(
            cmd + [os.path.join(REPO, "tests_jax")],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        summary = out.stdout.strip().splitlines()[-1:] or ["(no output)"]
        print("tests_jax:", summary[0])
        self.assertEqual(out.returncode, 0, out.stdout[-6000:] + out.stderr[-3000:])
