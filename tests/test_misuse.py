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


def run_with_aggregator(k, make_optimizer, apply, *, legacy=False):
    """One step on ``k`` replicas: the replicas' gradients go through a standalone
    ``GSNRAggregator`` and then to ``apply(optimizer, summed, w)``. Returns ``w``."""
    strategy = util.strategy_for(k)
    with strategy.scope():
        w = (tf.Variable if legacy else keras.Variable)(np.ones(3, np.float32), name="w")
        aggregator = vrgd_tf.GSNRAggregator(gamma=0.1)
        aggregator.build([w])
        opt = make_optimizer()
        if not legacy:
            opt.build([w])
    grads = tf.constant([[1.0, -2.0, 0.5], [0.5, -1.0, 3.0], [2.0, 0.0, -1.0], [0.0, 1.0, 1.0]])

    @tf.function
    def step():
        def fn():
            ctx = tf.distribute.get_replica_context()
            summed = aggregator([tf.gather(grads, ctx.replica_id_in_sync_group)], [w])
            apply(opt, summed[0], w)

        strategy.run(fn)

    step()
    return w


def keras_apply(opt, g, w):
    opt.apply_gradients([(g, w)])


class AggregatorOutputSummedTwiceTest(tf.test.TestCase, parameterized.TestCase):
    """The aggregator's output is already the sum over the replicas: whatever would
    all-reduce it again raises (it would step ``k`` times too far), with the fix."""

    @parameterized.named_parameters(
        ("sgd", lambda: keras.optimizers.SGD(0.1)),
        ("adam", lambda: keras.optimizers.Adam(0.1)),
        ("lamb", lambda: vrgd_tf.Lamb(0.1)),
        ("loss_scale", lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))),
    )
    def test_keras3_optimizer_under_several_replicas_raises(self, make):
        with self.assertRaisesRegex(
            ValueError, r"summed over the 4 replicas.*4 times too long.*make_vrgd_optimizer"
        ):
            run_with_aggregator(4, make, keras_apply)

    def test_keras3_optimizer_on_one_replica_is_the_sum(self):
        w = run_with_aggregator(1, lambda: keras.optimizers.SGD(0.1), keras_apply)
        self.assertAllClose(w.numpy(), 1.0 - 0.1 * np.array([1.0, -2.0, 0.5]))

    def test_vrgd_optimizer_or_a_second_aggregator_call_raises(self):
        with self.assertRaisesRegex(ValueError, r"already summed.*each replica's own gradients"):
            run_with_aggregator(2, lambda: vrgd_tf.VRGDSGD(0.1), keras_apply)
        with self.assertRaisesRegex(ValueError, r"already summed.*each replica's own gradients"):
            run_with_aggregator(
                2, lambda: vrgd_tf.GSNRAggregator(), lambda agg, g, w: agg([g], [w])
            )

    def test_the_supported_keras3_way_is_the_vrgd_class(self):
        """What the message recommends: ``make_vrgd_optimizer(SGD)`` given each replica's
        own gradients equals the aggregator's sum applied once (tf_keras SGD, no second
        all-reduce)."""
        util.skip_without_tf_keras(self)
        import tf_keras

        init = {"w": np.ones(3, np.float32)}
        grads = np.array([[1.0, -2.0, 0.5], [0.5, -1.0, 3.0], [2.0, 0.0, -1.0], [0.0, 1.0, 1.0]])
        grads = {"w": grads[None].astype(np.float32)}
        vr, _ = util.run_custom_loop(
            util.strategy_for(4), lambda: vrgd_tf.VRGDSGD(0.1, gamma=0.1), init, grads
        )

        def skip_all_reduce(opt, g, w):
            opt.apply_gradients([(g, w)], experimental_aggregate_gradients=False)

        summed = run_with_aggregator(
            4, lambda: tf_keras.optimizers.legacy.SGD(0.1), skip_all_reduce, legacy=True
        )
        self.assertAllClose(vr["w"].numpy(), summed.numpy(), rtol=1e-6)

    def test_tf_keras_optimizer_that_would_all_reduce_raises(self):
        util.skip_without_tf_keras(self)
        import tf_keras

        with self.assertRaisesRegex(
            ValueError, r"SGD.apply_gradients.*4 times too long.*experimental_aggregate"
        ):
            run_with_aggregator(
                4, lambda: tf_keras.optimizers.legacy.SGD(0.1), keras_apply, legacy=True
            )


if __name__ == "__main__":
    tf.test.main()


class TensorAsVariableTest(tf.test.TestCase):
    """A ``Tensor`` given as a variable: tf_keras ``VRGDSGD`` raises the base's clear
    ``NotImplementedError`` (issue 36, fault 4; it failed with ``AttributeError:
    '_unique_id'`` deep in the slot keying)."""

    def test_tf_keras(self):
        util.skip_without_tf_keras(self)
        import tf_keras

        import vrgd_tf.tf_keras as vt

        for opt in (tf_keras.optimizers.legacy.SGD(0.1), vt.VRGDSGD(0.1)):
            with self.assertRaisesRegex(NotImplementedError, r"(?i)updating a `Tensor`"):
                opt.apply_gradients([(tf.ones(2), tf.zeros(2))])


class OneSampleWarningTest(tf.test.TestCase):
    """The one-sample warning names the likely cause when a strategy exists: a model or
    optimizer made outside ``strategy.scope()`` trains on one replica (issue 36, fault 4)."""

    def test_names_the_strategy_scope(self):
        w = keras.Variable(np.ones(2, "float32"))
        optimizer = vrgd_tf.VRGDSGD(0.1)
        with self.assertLogs("vrgd_tf", "WARNING") as logs:
            optimizer.apply([tf.ones(2)], [w])
        self.assertRegex("\n".join(logs.output), r"only one GSNR sample.*strategy\.scope\(\)")
