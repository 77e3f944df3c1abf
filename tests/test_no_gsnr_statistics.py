"""A step without a GSNR records zeros, so no restored number is reported as current.

After ``load_model`` (or a checkpoint restore) of a run trained with VRGD active, a run in
which VRGD cannot act (one GSNR sample per step: one replica, no micro-batch groups) used to
keep reporting the restored diagnostics at every step. Every recording step without a GSNR
now stores zeros (spec section 4), in both families.
"""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

import vrgd_tf

import util


def assert_all_zero(test, stats):
    test.assertNotEmpty(stats)
    for name, row in stats.items():
        test.assertEqual(list(row.values()), [0.0] * len(row), name)


def assert_some_nonzero(test, stats):
    test.assertTrue(any(row["mean_gsnr"] > 0.0 for row in stats.values()), stats)


class NoGSNRStatisticsTest(tf.test.TestCase):
    def test_keras3_load_model_then_one_sample_steps_record_zeros(self):
        rng = np.random.RandomState(3)
        x = rng.randn(32, 4).astype(np.float32)
        y = (x @ rng.randn(4, 3) + rng.randn(32, 3)).astype(np.float32)
        with util.strategy_for(2).scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
            model.compile(optimizer=vrgd_tf.VRGDLamb(0.01, statistics_interval=1), loss="mse")
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        assert_some_nonzero(self, model.optimizer.vrgd_statistics())
        path = os.path.join(tempfile.mkdtemp(), "m.keras")
        model.save(path)
        loaded = keras.models.load_model(path)  # no strategy: one replica, k = 1
        assert_some_nonzero(self, loaded.optimizer.vrgd_statistics())  # as saved
        loaded.fit(x, y, batch_size=16, epochs=1, verbose=0)
        assert_all_zero(self, loaded.optimizer.vrgd_statistics())

    def test_tf_keras_restore_then_one_sample_steps_record_zeros(self):
        util.skip_without_tf_keras(self)
        from vrgd_tf import tf_keras as vtk

        init, grads = util.make_varying_problem(2, seed=8, steps=2)
        make_variable = lambda n, v: tf.Variable(v, name=n)  # noqa: E731
        variables, opt = util.run_custom_loop(
            util.strategy_for(2),
            lambda: vtk.VRGDLamb(0.01, statistics_interval=1),
            init,
            grads,
            make_variable=make_variable,
        )
        assert_some_nonzero(self, opt.vrgd_statistics())
        path = tf.train.Checkpoint(optimizer=opt, **variables).write(
            os.path.join(tempfile.mkdtemp(), "ckpt")
        )
        restored = {n: tf.Variable(np.zeros_like(v), name=n) for n, v in init.items()}
        again = vtk.VRGDLamb(0.01, statistics_interval=1)
        tf.train.Checkpoint(optimizer=again, **restored).read(
            path
        ).assert_existing_objects_matched()
        one = {n: g[:, :1] for n, g in grads.items()}  # one replica: k = 1
        util.run_custom_loop(
            tf.distribute.get_strategy(), lambda: again, init, one, existing=restored
        )
        assert_all_zero(self, again.vrgd_statistics())


if __name__ == "__main__":
    tf.test.main()
