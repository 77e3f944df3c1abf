"""GSNR diagnostics: the callback writes the optimizer's statistics to TensorBoard."""

import glob
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

import numpy_reference as ref
import util
import vrgd_tf
from vrgd_tf import gsnr


class SummariesTest(tf.test.TestCase):

    def test_callback_writes_reference_statistics(self):
        k, n = 4, 32
        rng = np.random.RandomState(0)
        x = rng.randn(n, 5).astype(np.float32)
        y = (x @ rng.randn(5, 2) + 2 * rng.randn(n, 2)).astype(np.float32)
        strategy = util.strategy_for(k)
        with strategy.scope():
            model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2, name="d")],
                                     name="net")
            model.compile(optimizer=vrgd_tf.VRGDSGD(learning_rate=0.0), loss="mse")
        w = model.layers[0].kernel.numpy().astype(np.float64)
        log_dir = tempfile.mkdtemp()
        cb = vrgd_tf.GSNRTensorBoard(log_dir, update_freq=1, log_to_history=True)
        hist = model.fit(x, y, batch_size=n, epochs=1, verbose=0, callbacks=[cb], shuffle=False)

        b = n // k
        gk = [2.0 / (b * 2) / k * x[d * b:(d + 1) * b].T
              @ (x[d * b:(d + 1) * b] @ w - y[d * b:(d + 1) * b]) for d in range(k)]
        expected = ref.gsnr_statistics(np.stack(gk), 0.1)  # beta_3 = 0: raw factor applied
        stats = model.optimizer.vrgd_statistics()
        kernel = [s for name, s in stats.items() if name.endswith("kernel")][0]
        self.assertAllClose([kernel[f] for f in gsnr.STATISTICS_FIELDS], expected, rtol=1e-4)
        self.assertAllClose(hist.history["vrgd/median/mean_gsnr"][-1],
                            np.median([s["mean_gsnr"] for s in stats.values()]))
        self.assertAllClose(hist.history["vrgd/mean/mean_factor"][-1],
                            np.mean([s["mean_factor"] for s in stats.values()]))

        events = glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
        self.assertLen(events, 1)
        tags = set()
        for record in tf.data.TFRecordDataset(events[0]):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for v in event.summary.value:
                tags.add(v.tag)
        self.assertIn("vrgd/kernel/mean_gsnr", tags)  # "net/d/" is shared by all: dropped
        self.assertIn("vrgd/hist/frac_at_gamma", tags)

    def test_statistics_interval_records_on_multiples_of_it(self):
        """3 steps on 2 replicas: interval 1 keeps step 3's statistics, interval 2 step 2's
        (the step that brings ``iterations`` to 2), interval 0 none; both families."""
        from test_keras_reference import make_problem
        import tf_keras  # noqa: F401  (the tf_keras family needs it)
        from vrgd_tf import tf_keras as vr_tf_keras
        init, grads = make_problem(2, seed=5, steps=3)
        families = [
            (vrgd_tf.VRGDLamb, None),
            (vr_tf_keras.VRGDLamb, lambda n, v: tf.Variable(v, name=n)),
        ]
        # Applied (smoothed, beta_3 = 0.9) factor of each step, for mean_factor.
        vr = ref.VRGD(ref.Lamb(0.01), 0.1, 0.9)
        applied = []
        for step in range(3):
            for n in init:
                vr.step(n, init[n], grads[n][step])
            applied.append(dict(vr.factors))
        for cls, make_variable in families:
            for interval, step in ((1, 2), (2, 1), (0, None)):
                _, opt = util.run_custom_loop(
                    util.strategy_for(2),
                    lambda: cls(learning_rate=0.01, statistics_interval=interval),  # noqa
                    init, grads, make_variable=make_variable)
                self.assertEqual(opt.get_config()["statistics_interval"], interval)
                for name, var in zip(opt._vrgd_state.variable_names,
                                     opt._vrgd_state.statistics):
                    key = [n for n in init if name.endswith(n)][0]
                    expected = (np.zeros(4) if step is None
                                else ref.gsnr_statistics(grads[key][step], 0.1,
                                                         applied[step][key]))
                    self.assertAllClose(var.numpy(), expected, rtol=1e-5, atol=1e-7,
                                        msg=f"{cls.__module__} interval={interval} {name}")

    def test_statistics_interval_checked(self):
        with self.assertRaisesRegex(ValueError, "statistics_interval.*>= 0"):
            vrgd_tf.VRGDSGD(statistics_interval=-1)
        with self.assertRaisesRegex(TypeError, "statistics_interval"):
            vrgd_tf.VRGDSGD(statistics_interval=2.5)

    def test_update_freq_checked(self):
        with self.assertRaisesRegex(ValueError, "update_freq"):
            vrgd_tf.GSNRTensorBoard("/tmp/x", update_freq=0)


class DisplayNamesTest(tf.test.TestCase):

    def test_shared_leading_scopes_are_dropped_and_names_stay_distinct(self):
        from vrgd_tf.naming import display_names
        self.assertEqual(display_names(["net/d1/kernel", "net/d1/bias", "net/d2/kernel"]),
                         ["d1/kernel", "d1/bias", "d2/kernel"])
        self.assertEqual(display_names(["d1/kernel", "d1/bias", "d2/kernel"]),
                         ["d1/kernel", "d1/bias", "d2/kernel"])
        self.assertEqual(display_names(["net/d/kernel", "net/d/bias"]), ["kernel", "bias"])
        # tf_keras SavedModel variables loaded under a strategy lose their layer scope
        self.assertEqual(display_names(["kernel", "bias", "kernel", "bias"]),
                         ["kernel", "bias", "kernel_1", "bias_1"])
        self.assertEqual(display_names([]), [])


if __name__ == "__main__":
    tf.test.main()
