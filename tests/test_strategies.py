"""Every ``tf.distribute`` strategy a user can pass: VRGD runs, or refuses at construction
and build with a message that names the strategy and what works instead (issue 18, fault
2; ``vrgd_tf.strategies``; the README's support table).

Covered elsewhere: ``MirroredStrategy`` (``tests/test_reference.py``, against the NumPy
reference on 1, 2 and 4 replicas), ``MultiWorkerMirroredStrategy``
(``tests/test_multi_worker.py``, two processes), ``TPUStrategy`` (not constructible without
a TPU: ``tests/test_xla.py`` compiles the per-replica step with XLA).
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf
from vrgd_tf import devices, strategies

import util

HERE = os.path.dirname(os.path.abspath(__file__))
REFUSED = r"cannot run under tf\.distribute\.experimental\.{}.*MirroredStrategy"


def regression(n=32, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 4).astype(np.float32)
    return x, (x @ rng.randn(4, 2) + rng.randn(n, 2)).astype(np.float32)


def central_storage(k=2):
    names = devices.split_cpu(k)
    return tf.distribute.experimental.CentralStorageStrategy(
        compute_devices=names, parameter_device=names[0]
    )


class OneReplicaStrategiesTest(tf.test.TestCase, parameterized.TestCase):
    """Default strategy and ``OneDeviceStrategy``: micro-batch groups give real VRGD, the
    same weights under both."""

    def _fit_keras3(self, strategy):
        x, y = regression()
        with strategy.scope():
            keras.utils.set_random_seed(1)
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
            model.compile(optimizer=vrgd_tf.VRGDLamb(0.01, statistics_interval=1), loss="mse")
        vrgd_tf.use_micro_batches(model, num_groups=4)
        model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
        return [w.numpy() for w in model.weights], model.optimizer.vrgd_statistics()

    def test_keras3_fit_with_groups_one_device_equals_default(self):
        default, stats = self._fit_keras3(tf.distribute.get_strategy())
        one_device, one_stats = self._fit_keras3(tf.distribute.OneDeviceStrategy("/cpu:0"))
        for a, b in zip(default, one_device):
            self.assertAllEqual(a, b)
        self.assertEqual(stats, one_stats)
        self.assertGreater(stats["kernel"]["mean_gsnr"], 0.0)  # k = 4: real VRGD

    def _grouped_tf_keras(self, strategy):
        from vrgd_tf import tf_keras as vtk

        with strategy.scope():
            w = tf.Variable(np.ones(3, np.float32), name="w")
            opt = vtk.VRGDLamb(0.01, statistics_interval=1)
        groups = tf.constant([[1.0, -2.0, 0.5], [0.5, -1.0, 3.0], [2.0, 0.0, -1.0]])

        @tf.function
        def step():
            def fn():
                opt.apply_grouped_gradients(
                    [(tf.reduce_sum(groups, 0), w)],
                    [tf.reduce_sum(groups * groups, 0)],
                    num_groups=3,
                )

            strategy.run(fn)

        for _ in range(2):
            step()
        return w.numpy(), opt.vrgd_statistics()

    def test_tf_keras_grouped_one_device_equals_default(self):
        util.skip_without_tf_keras(self)
        default, stats = self._grouped_tf_keras(tf.distribute.get_strategy())
        one_device, one_stats = self._grouped_tf_keras(tf.distribute.OneDeviceStrategy("/cpu:0"))
        self.assertAllEqual(default, one_device)
        self.assertEqual(stats, one_stats)
        self.assertGreater(stats["w"]["mean_gsnr"], 0.0)


class CentralStorageRefusedTest(tf.test.TestCase):
    """``CentralStorageStrategy``: refused at construction and at build, both families and
    the standalone aggregator (it used to fail in the first step with a ``merge_call``
    RuntimeError); the base optimizers train under it."""

    def test_keras3(self):
        strategy = central_storage()
        with strategy.scope():
            with self.assertRaisesRegex(ValueError, REFUSED.format("CentralStorageStrategy")):
                vrgd_tf.VRGDLamb(0.01, statistics_interval=1)
            with self.assertRaisesRegex(ValueError, REFUSED.format("CentralStorageStrategy")):
                vrgd_tf.GSNRAggregator(statistics_interval=1)
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        outside = vrgd_tf.VRGDSGD(
            0.1, statistics_interval=1
        )  # made outside the scope, built inside
        with self.assertRaisesRegex(ValueError, REFUSED.format("CentralStorageStrategy")):
            with strategy.scope():
                outside.build(model.trainable_variables)
        with strategy.scope():
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        x, y = regression()
        model.fit(x, y, batch_size=16, verbose=0)  # the base trains: refusing is ours

    def test_tf_keras(self):
        util.skip_without_tf_keras(self)
        import tf_keras

        from vrgd_tf import tf_keras as vtk

        strategy = central_storage()
        with strategy.scope():
            with self.assertRaisesRegex(ValueError, REFUSED.format("CentralStorageStrategy")):
                vtk.VRGDLars(0.1, statistics_interval=1)
            model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2)])
        outside = vtk.VRGDSGD(0.1, statistics_interval=1)
        with strategy.scope():
            model.compile(optimizer=outside, loss="mse")
        x, y = regression()
        with self.assertRaisesRegex(ValueError, REFUSED.format("CentralStorageStrategy")):
            model.fit(x, y, batch_size=16, verbose=0)

    def test_v1_api_is_refused_too(self):
        strategy = tf.compat.v1.distribute.experimental.CentralStorageStrategy(
            compute_devices=devices.split_cpu(2), parameter_device="/cpu:0"
        )
        with self.assertRaisesRegex(ValueError, REFUSED.format("CentralStorageStrategy")):
            strategies.check_strategy(strategy, "VRGDSGD")


class ParameterServerRefusedTest(tf.test.TestCase):
    """``ParameterServerStrategy`` (an in-process cluster of one worker and one parameter
    server, in a subprocess: it connects the process to the cluster)."""

    def test_refused_in_both_families(self):
        outcome = run_main("parameter_server_main.py")
        cases = ["keras3_construct", "keras3_build", "aggregator"]
        if util.HAS_TF_KERAS:
            cases.append("tf_keras_construct")
        self.assertEqual(sorted(outcome), sorted(cases))
        for case, message in outcome.items():
            self.assertRegex(message, REFUSED.format("ParameterServerStrategy"), case)


def run_main(script, *args):
    """Runs ``tests/<script>`` with this checkout importable; its last stdout line as JSON."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [os.path.dirname(HERE)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
        ),
    )
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise AssertionError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


class StepsPerExecutionTest(tf.test.TestCase):
    """``model.compile(steps_per_execution=4)`` under ``MirroredStrategy`` (issue 18,
    fault 8): Keras 3's multi-step loop fails with the default cross-device ops on CPUs for
    the base optimizers too (inherited); with ``ReductionToOneDevice`` it runs, and the
    tf_keras family runs with the defaults. Where it runs, VRGD's weights with 4 steps per
    execution are those with 1."""

    def _fit_keras3(self, make_optimizer, steps_per_execution):
        x, y = regression(80)
        with util.strategy_for(2).scope():  # ReductionToOneDevice
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
            model.layers[0].kernel.assign(np.full((4, 2), 0.1, np.float32))
            model.compile(make_optimizer(), "mse", steps_per_execution=steps_per_execution)
        model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
        return model.layers[0].kernel.numpy(), model.optimizer

    def test_keras3_with_reduction_to_one_device(self):
        fours = []
        for make in (
            lambda: vrgd_tf.VRGDSGD(0.05, statistics_interval=1),
            lambda: vrgd_tf.VRGDLamb(0.01, statistics_interval=1),
        ):
            one, _ = self._fit_keras3(make, 1)
            four, opt = self._fit_keras3(make, 4)
            self.assertAllClose(four, one, rtol=1e-6, atol=1e-7)
            self.assertEqual(int(opt.iterations.numpy()), 20)
            self.assertGreater(max(v["mean_gsnr"] for v in opt.vrgd_statistics().values()), 0)
            fours.append(four)
        base, _ = self._fit_keras3(lambda: keras.optimizers.SGD(0.05), 4)
        vr = fours[0]  # VRGDSGD(0.05) with 4 steps per execution (one fit less: issue 36)
        self.assertGreater(np.max(np.abs(base - vr)), 1e-4)  # VRGD acted

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        families = ["keras3"] + (["tf_keras"] if util.HAS_TF_KERAS else [])
        cls.default_ops = run_main("steps_per_execution_main.py", *families)

    def test_keras3_default_cross_device_ops_fail_for_the_base_too(self):
        out = self.default_ops["keras3"]
        for opt in ("base", "vr"):
            self.assertIsInstance(out[opt]["1"], list, opt)
            self.assertRegex(out[opt]["4"], r"(?s)^InvalidArgumentError.*while/cond/Placeholder")

    def test_tf_keras_with_default_cross_device_ops(self):
        util.skip_without_tf_keras(self)
        out = self.default_ops["tf_keras"]
        for opt in ("base", "vr"):
            self.assertAllClose(out[opt]["4"], out[opt]["1"], rtol=1e-6, atol=1e-7)
        self.assertGreater(np.max(np.abs(np.subtract(out["vr"]["4"], out["base"]["4"]))), 1e-4)


if __name__ == "__main__":
    tf.test.main()
