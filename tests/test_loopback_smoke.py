"""Smoke test of benchmarks/loopback.py: two MultiWorkerMirroredStrategy workers on
127.0.0.1 train a tiny MLP with base SGD and VRGDSGD with bfloat16 squares (whose squares
travel in an all-reduce call of their own: MultiWorkerMirroredStrategy packs one call's
tensors into one buffer of one dtype), report, and stop."""

import json
import os
import subprocess
import sys
import tempfile

import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LoopbackSmokeTest(tf.test.TestCase):
    def test_two_workers_time_base_and_bf16_vr_and_stop(self):
        out = os.path.join(tempfile.mkdtemp(), "lb.json")
        env = dict(os.environ, PYTHONPATH=REPO)
        proc = subprocess.run(
            [
                sys.executable,
                os.path.join(REPO, "benchmarks", "loopback.py"),
                "--models=mlp",
                "--variants=base,vr_bf16",
                "--reps=1",
                "--steps=1",
                "--mlp_width=32",
                "--timeout=120",
                f"--out={out}",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        with open(out) as f:
            doc = json.load(f)
        self.assertEqual(doc["errors"], [])
        (row,) = doc["timing"]
        self.assertEqual((row["workers"], row["collective"]), (2, "RING"))
        self.assertEqual(set(row["ratio"]), {"base", "vr_bf16"})
        n = row["params"]
        self.assertEqual(n, 2048 * 32 + 32 + 2 * (32 * 32 + 32) + 32 * 10 + 10)
        self.assertEqual(row["allreduce_payload_bytes"], {"base": 4 * n, "vr_bf16": 6 * n})
        for v in ("base", "vr_bf16"):
            self.assertGreater(row["step_ms"][v]["median"], 0.0)


if __name__ == "__main__":
    tf.test.main()
