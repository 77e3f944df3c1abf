"""Misuses that used to train wrongly in silence or fail with a cryptic error; each now
raises or warns with the fix (issue 18, faults 5, 6 and 7)."""

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf

import util


class VRGDAsBaseTest(tf.test.TestCase, parameterized.TestCase):
    """``make_vrgd_optimizer`` of a VRGD class: a message naming its base, not a bare MRO
    ``TypeError``."""

    def test_keras3(self):
        with self.assertRaisesRegex(TypeError, r"VRGDLamb` is already a VRGD.*vrgd_tf\..*Lamb"):
            vrgd_tf.make_vrgd_optimizer(vrgd_tf.VRGDLamb)
        subclass = type("MyVRGDAdam", (vrgd_tf.VRGDAdam,), {})
        with self.assertRaisesRegex(TypeError, r"MyVRGDAdam` is already a VRGD.*Adam"):
            vrgd_tf.make_vrgd_optimizer(subclass)
        # A plain class still works.
        made = vrgd_tf.make_vrgd_optimizer(keras.optimizers.Lion, register=False)
        self.assertTrue(issubclass(made, keras.optimizers.Lion))

    def test_tf_keras(self):
        util.skip_without_tf_keras(self)
        from vrgd_tf import tf_keras as vtk

        with self.assertRaisesRegex(TypeError, r"VRGDLars` is already a VRGD.*lars\.LARS"):
            vtk.make_vrgd_optimizer(vtk.VRGDLars)


class TfKerasSkippedAggregationTest(tf.test.TestCase):
    """tf_keras ``apply_gradients(..., experimental_aggregate_gradients=False)`` would train
    the base optimizer: it raises, except where the loss-scale wrapper aggregated through
    VRGD first."""

    def _run(self, strategy, make_optimizer, apply):
        with strategy.scope():
            w = tf.Variable(np.ones(3, np.float32), name="w")
            opt = make_optimizer()
        grads = tf.constant([[1.0, -2.0, 0.5], [0.5, -1.0, 3.0]])

        @tf.function
        def step():
            def fn():
                ctx = tf.distribute.get_replica_context()
                g = tf.gather(grads, ctx.replica_id_in_sync_group % 2)
                apply(opt, ctx, g, w)

            strategy.run(fn)

        step()
        return w, opt

    def test_user_summed_gradients_raise(self):
        util.skip_without_tf_keras(self)
        from vrgd_tf import tf_keras as vtk

        def summed(opt, ctx, g, w):
            total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, g)
            opt.apply_gradients([(total, w)], experimental_aggregate_gradients=False)

        for k in (2, 1):
            with self.assertRaisesRegex(
                ValueError, r"experimental_aggregate_gradients=False.*GSNRAggregator"
            ):
                self._run(util.strategy_for(k), lambda: vtk.VRGDSGD(0.1), summed)

    def test_loss_scale_optimizer_still_aggregates_through_vrgd(self):
        util.skip_without_tf_keras(self)
        import tf_keras

        from vrgd_tf import tf_keras as vtk

        def scaled(opt, ctx, g, w):
            opt.apply_gradients([(g, w)])

        strategy = util.strategy_for(2)
        w, lso = self._run(
            strategy,
            lambda: tf_keras.mixed_precision.LossScaleOptimizer(
                vtk.VRGDSGD(0.1, gamma=1.0), dynamic=False, initial_scale=1.0
            ),
            scaled,
        )
        self.assertAllClose(w.numpy(), 1.0 - 0.1 * np.array([1.5, -3.0, 3.5]))
        self.assertGreater(vrgd_tf.vrgd_statistics(lso)["w"]["mean_gsnr"], 0.0)


if __name__ == "__main__":
    tf.test.main()
