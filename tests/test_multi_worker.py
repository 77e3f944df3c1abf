"""Multi-worker: two processes on 127.0.0.1 (one CPU replica each, k = 2) train with
VRGDLamb (each family) and agree with the NumPy reference and with each other."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from vrgd_tf import devices

import numpy_reference as ref
import util

HERE = os.path.dirname(os.path.abspath(__file__))


class MultiWorkerTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters("keras3", "tf_keras")
    def test_two_workers_match_reference(self, family):
        if family == "tf_keras":
            util.skip_without_tf_keras(self)
        rng = np.random.RandomState(0)
        steps, k, n = 3, 2, 10
        noise = rng.randn(steps, k, n)
        noise = (noise - noise.mean(1, keepdims=True)) / noise.std(1, keepdims=True)
        grads = (np.clip(rng.randn(n), -2, 2) + np.exp(rng.uniform(-1, 2, n)) * noise) / k
        grads = grads.astype(np.float32)
        init = rng.randn(n).astype(np.float32)
        tmp = tempfile.mkdtemp()
        np.save(os.path.join(tmp, "g.npy"), grads)
        np.save(os.path.join(tmp, "w.npy"), init)
        workers = devices.local_worker_addresses(2)
        procs = []
        for i in range(2):
            env = dict(
                os.environ,
                TF_CONFIG=json.dumps(
                    {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
                ),
                # The workers import this checkout, installed or not.
                PYTHONPATH=os.pathsep.join(
                    [os.path.dirname(HERE)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
                ),
            )
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        os.path.join(HERE, "multi_worker_main.py"),
                        os.path.join(tmp, "g.npy"),
                        os.path.join(tmp, "w.npy"),
                        family,
                    ],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outs = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            self.assertEqual(p.returncode, 0, err[-3000:])
            outs.append(json.loads(out.strip().splitlines()[-1]))
        expected = util.numpy_run(
            ref.VRGD(ref.Lamb(0.01, weight_decay_rate=0.01), 0.1, 0.9), {"w": init}, {"w": grads}
        )["w"]
        first = np.array(outs[0]["w"][0])
        self.assertAllClose(first, expected, atol=1e-5, rtol=1e-5)
        for out in outs:  # every replica copy on every worker is bitwise equal
            for copy in out["w"]:
                np.testing.assert_array_equal(np.array(copy), first)
            for copy in out["deficit"]:
                np.testing.assert_array_equal(np.array(copy), np.array(outs[0]["deficit"][0]))


if __name__ == "__main__":
    tf.test.main()
