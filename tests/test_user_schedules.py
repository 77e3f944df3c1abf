"""A learning-rate schedule without ``get_config`` trains every VRGD class, as it trains the
base optimizers: only saving needs a serializable schedule (issue 18, fault 1)."""

import logging

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from test_reference import FAMILIES

import vrgd_tf

import util

if util.HAS_TF_KERAS:
    import tf_keras


class KerasDecay(keras.optimizers.schedules.LearningRateSchedule):
    """A user schedule as tutorials write it: ``__call__`` only, no ``get_config``."""

    def __call__(self, step):
        return 0.05 / (1.0 + tf.cast(step, tf.float32))


def tf_keras_decay():
    class TfKerasDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return 0.05 / (1.0 + tf.cast(step, tf.float32))

    return TfKerasDecay()


def schedule_for(family):
    return KerasDecay() if family == "keras3" else tf_keras_decay()


CASES = [
    dict(testcase_name=f"{family}_{name}", family=family, name=name)
    for family in ("keras3", "tf_keras")
    for name in ("sgd", "adam", "lars", "lamb")
]


class ScheduleWithoutConfigTest(tf.test.TestCase, parameterized.TestCase):
    def _family(self, family):
        if family == "tf_keras":
            util.skip_without_tf_keras(self)
        return FAMILIES[family]

    @parameterized.named_parameters(*CASES)
    def test_trains_and_gamma_one_is_the_base(self, family, name):
        fam = self._family(family)
        init, grads = util.make_varying_problem(2, seed=3)
        strategy = util.strategy_for(2)
        run = lambda make: util.run_custom_loop(  # noqa: E731
            strategy, make, init, grads, make_variable=fam.make_variable
        )[0]
        base = run(lambda: fam.bases[name](learning_rate=schedule_for(family)))
        same = run(
            lambda: fam.classes[name](learning_rate=schedule_for(family), gamma=1.0, beta_3=0.0)
        )
        vr_vars, vr = util.run_custom_loop(
            strategy,
            lambda: fam.classes[name](learning_rate=schedule_for(family), statistics_interval=1),
            init,
            grads,
            make_variable=fam.make_variable,
        )
        for n in init:
            self.assertAllClose(same[n].numpy(), base[n].numpy(), rtol=1e-6, atol=1e-7)
        self.assertGreater(max(s["mean_gsnr"] for s in vr.vrgd_statistics().values()), 0.0)
        moved = max(np.max(np.abs(vr_vars[n].numpy() - base[n].numpy())) for n in init)
        self.assertGreater(moved, 1e-6)  # real VRGD, not the base
        with self.assertRaises(NotImplementedError):  # saving still needs get_config
            vr.get_config()

    @parameterized.named_parameters(
        ("keras3", "keras3"),
        ("tf_keras", "tf_keras"),
    )
    def test_unmatched_exclusion_is_still_logged(self, family):
        fam = self._family(family)
        init, grads = util.make_problem(2, seed=1, steps=1)
        with self.assertLogs("vrgd_tf", level=logging.WARNING) as logs:
            util.run_custom_loop(
                util.strategy_for(2),
                lambda: fam.classes["lamb"](
                    learning_rate=schedule_for(family),
                    weight_decay_rate=0.01,
                    exclude_from_weight_decay=["LayerNorm"],
                ),
                init,
                grads,
                make_variable=fam.make_variable,
            )
        self.assertTrue(any("'LayerNorm' matches none" in r.getMessage() for r in logs.records))

    def test_keras3_micro_batches_fit(self):
        rng = np.random.RandomState(0)
        x = rng.randn(32, 4).astype(np.float32)
        y = (x @ rng.randn(4, 2) + rng.randn(32, 2)).astype(np.float32)
        with util.strategy_for(2).scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
            model.compile(
                optimizer=vrgd_tf.VRGDLamb(learning_rate=KerasDecay(), statistics_interval=1),
                loss="mse",
            )
        vrgd_tf.use_micro_batches(model, num_groups=2)
        history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
        self.assertTrue(np.all(np.isfinite(history.history["loss"])))
        stats = model.optimizer.vrgd_statistics()
        self.assertGreater(max(s["mean_gsnr"] for s in stats.values()), 0.0)

    def test_tf_keras_grouped_gradients(self):
        util.skip_without_tf_keras(self)
        from vrgd_tf import tf_keras as vtk

        strategy = util.strategy_for(2)
        with strategy.scope():
            w = tf.Variable(np.ones(3, np.float32), name="w")
            opt = vtk.VRGDLamb(learning_rate=tf_keras_decay(), statistics_interval=1)
        grads = tf.constant([[1.0, -2.0, 0.5], [0.5, -1.0, 3.0]])

        @tf.function
        def step():
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                g = tf.gather(grads, rid)
                opt.apply_grouped_gradients([(g, w)], [g * g * 0.6], num_groups=2)

            strategy.run(fn)

        step()
        self.assertEqual(int(opt.iterations.numpy()), 1)
        self.assertGreater(opt.vrgd_statistics()["w"]["mean_gsnr"], 0.0)


if __name__ == "__main__":
    tf.test.main()
