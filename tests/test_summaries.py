"""GSNR diagnostics: the callback writes the optimizer's statistics to TensorBoard."""

import glob
import json
import os
import subprocess
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

import vrgd_tf
from vrgd_tf import gsnr, summaries
from vrgd_tf.gsnr.statistics import NUM_STATISTICS

import numpy_reference as ref
import util

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def event_scalars(log_dir):
    """{tag: {step: value}} of the scalars in the one event file in ``log_dir``."""
    events = glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
    assert len(events) == 1, events
    out = {}
    for record in tf.data.TFRecordDataset(events[0]):
        event = tf.compat.v1.Event.FromString(record.numpy())
        for v in event.summary.value:
            if v.metadata.plugin_data.plugin_name == "scalars":
                out.setdefault(v.tag, {})[event.step] = float(tf.make_ndarray(v.tensor))
    return out


def reference_kernel_statistics(x, y, w, k):
    """Reference (mean GSNR, at gamma, at 1, mean factor) of the kernel of Dense(mse) on k
    replicas (beta_3 = 0: the raw factor is applied)."""
    n = x.shape[0]
    b = n // k
    gk = [
        2.0
        / (b * y.shape[1])
        / k
        * x[d * b : (d + 1) * b].T
        @ (x[d * b : (d + 1) * b] @ w - y[d * b : (d + 1) * b])
        for d in range(k)
    ]
    return ref.gsnr_statistics(np.stack(gk), 0.1)


def run_python(code, *args, env=None):
    """Runs ``code`` in a fresh interpreter on this worktree's vrgd_tf; returns stdout."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in [env.get("PYTHONPATH")] if p])
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


class SummariesTest(tf.test.TestCase):
    def test_callback_writes_reference_statistics(self):
        k, n = 4, 32
        rng = np.random.RandomState(0)
        x = rng.randn(n, 5).astype(np.float32)
        y = (x @ rng.randn(5, 2) + 2 * rng.randn(n, 2)).astype(np.float32)
        strategy = util.strategy_for(k)
        with strategy.scope():
            model = keras.Sequential(
                [keras.Input((5,)), keras.layers.Dense(2, name="d")], name="net"
            )
            model.compile(
                optimizer=vrgd_tf.VRGDSGD(learning_rate=0.0, statistics_interval=1), loss="mse"
            )
        w = model.layers[0].kernel.numpy().astype(np.float64)
        log_dir = tempfile.mkdtemp()
        cb = vrgd_tf.GSNRTensorBoard(log_dir, update_freq=1, log_to_history=True)
        hist = model.fit(x, y, batch_size=n, epochs=1, verbose=0, callbacks=[cb], shuffle=False)

        b = n // k
        gk = [
            2.0
            / (b * 2)
            / k
            * x[d * b : (d + 1) * b].T
            @ (x[d * b : (d + 1) * b] @ w - y[d * b : (d + 1) * b])
            for d in range(k)
        ]
        expected = ref.gsnr_statistics(np.stack(gk), 0.1)  # beta_3 = 0: raw factor applied
        stats = model.optimizer.vrgd_statistics()
        kernel = [s for name, s in stats.items() if name.endswith("kernel")][0]
        self.assertAllClose([kernel[f] for f in gsnr.STATISTICS_FIELDS], expected, rtol=1e-4)
        self.assertAllClose(
            hist.history["vrgd/median/mean_gsnr"][-1],
            np.median([s["mean_gsnr"] for s in stats.values()]),
        )
        self.assertAllClose(
            hist.history["vrgd/mean/mean_factor"][-1],
            np.mean([s["mean_factor"] for s in stats.values()]),
        )

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
        (the step that brings ``iterations`` to 2; both families), interval 0 none. The
        data's GSNR differs on every step, so a recording one step off is seen."""
        util.skip_without_tf_keras(self)
        import tf_keras  # noqa: F401  (the tf_keras family needs it)

        from vrgd_tf import tf_keras as vr_tf_keras

        init, grads = util.make_varying_problem(2, seed=5, steps=3)
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
            # Which step brings `iterations` to a multiple is the family's (interval 2); that
            # interval 1 records every step and 0 none is the shared step's, once (Keras 3:
            # the suite's time, issue 36).
            cases = ((1, 2), (2, 1), (0, None)) if make_variable is None else ((2, 1),)
            for interval, step in cases:
                _, opt = util.run_custom_loop(
                    util.strategy_for(2),
                    lambda: cls(learning_rate=0.01, statistics_interval=interval),  # noqa
                    init,
                    grads,
                    make_variable=make_variable,
                )
                self.assertEqual(opt.get_config()["statistics_interval"], interval)
                for name, var in zip(
                    opt.vrgd_aggregator.state.variable_names, opt.vrgd_aggregator.state.statistics
                ):
                    key = [n for n in init if name.endswith(n)][0]
                    expected = (
                        np.zeros(NUM_STATISTICS)
                        if step is None
                        else ref.gsnr_statistics(grads[key][step], 0.1, applied[step][key])
                    )
                    self.assertAllClose(
                        var.numpy(),
                        expected,
                        rtol=1e-5,
                        atol=1e-7,
                        msg=f"{cls.__module__} interval={interval} {name}",
                    )

    def test_statistics_interval_checked(self):
        with self.assertRaisesRegex(ValueError, "statistics_interval.*>= 0"):
            vrgd_tf.VRGDSGD(statistics_interval=-1)
        with self.assertRaisesRegex(TypeError, "statistics_interval"):
            vrgd_tf.VRGDSGD(statistics_interval=2.5)

    def test_update_freq_checked(self):
        with self.assertRaisesRegex(ValueError, "update_freq"):
            vrgd_tf.GSNRTensorBoard("/tmp/x", update_freq=0)

    def test_missing_tensorboard_is_named_at_construction(self):
        """TensorFlow 2.21 does not install tensorboard; tf.summary.scalar then fails at the
        first write (TBNotInstalledError, seen with .ci/compat). The callback and the writer
        refuse it up front, naming the package: in a fresh interpreter where ``tensorboard``
        cannot be imported (``sys.modules["tensorboard"] = None`` before any import).

        The same interpreter shows that importing vrgd_tf and vrgd_tf.summaries does not
        import tf_keras, and vrgd_tf.tf_keras's callback is a tf_keras callback (a test of its
        own before, one import of TensorFlow more: the suite's time, issue 36; vrgd_tf never
        imports tensorboard, it only looks for it when a writer is made)."""
        code = """
import re, sys
sys.modules["tensorboard"] = None
import vrgd_tf
from vrgd_tf import summaries
print("BEFORE", "tf_keras" in sys.modules)
for make, pattern in [
    (lambda: vrgd_tf.GSNRTensorBoard("/tmp/x"), r"GSNRTensorBoard .*pip install tensorboard"),
    (
        lambda: summaries.write_gsnr_summaries(vrgd_tf.VRGDSGD(0.1), step=1),
        r"write_gsnr_summaries .*`tensorboard`",
    ),
]:
    try:
        make()
    except ImportError as e:
        assert re.search(pattern, str(e)), str(e)
    else:
        raise AssertionError("no ImportError for " + pattern)
print("refused")
if sys.argv[1:] == ["tf_keras"]:
    from vrgd_tf.tf_keras import GSNRTensorBoard
    import tf_keras
    print("AFTER", issubclass(GSNRTensorBoard, tf_keras.callbacks.Callback))
"""
        out = run_python(code, *(["tf_keras"] if util.HAS_TF_KERAS else []))
        self.assertEqual(out.split()[:3], ["BEFORE", "False", "refused"])
        if util.HAS_TF_KERAS:
            self.assertEqual(out.split()[3:], ["AFTER", "True"])
        summaries.require_tensorboard("this test")  # this environment has it
        vrgd_tf.GSNRTensorBoard(tempfile.mkdtemp())

    def test_tf_keras_callback_is_a_tf_keras_callback(self):
        """vrgd_tf.tf_keras.GSNRTensorBoard(log_dir, ...) is a tf_keras callback, and a
        2-replica tf_keras fit with it writes the reference statistics."""
        util.skip_without_tf_keras(self)
        import tf_keras

        from vrgd_tf import tf_keras as vtk

        k, n = 2, 16
        rng = np.random.RandomState(1)
        x = rng.randn(n, 5).astype(np.float32)
        y = (3 * rng.randn(n, 2)).astype(np.float32)  # noisy: moderate GSNR
        with util.strategy_for(k).scope():
            model = tf_keras.Sequential(
                [tf_keras.Input((5,)), tf_keras.layers.Dense(2, name="d")], name="net"
            )
            model.compile(
                optimizer=vtk.VRGDSGD(learning_rate=0.0, statistics_interval=1), loss="mse"
            )
        w = model.layers[0].kernel.numpy().astype(np.float64)
        log_dir = tempfile.mkdtemp()
        cb = vtk.GSNRTensorBoard(log_dir, update_freq=2, log_to_history=True)
        self.assertIsInstance(cb, tf_keras.callbacks.Callback)
        self.assertNotIsInstance(cb, summaries.GSNRTensorBoard)
        self.assertEqual(
            (type(cb).__module__, type(cb).__qualname__), ("vrgd_tf.tf_keras", "GSNRTensorBoard")
        )
        self.assertEqual((cb.log_dir, cb.update_freq, cb.log_to_history), (log_dir, 2, True))
        with self.assertRaisesRegex(ValueError, "update_freq"):
            vtk.GSNRTensorBoard(log_dir, update_freq=0)

        hist = model.fit(
            np.concatenate([x, x]),
            np.concatenate([y, y]),
            batch_size=n,
            epochs=1,
            verbose=0,
            callbacks=[cb],
            shuffle=False,
        )
        mu, at_gamma, at_one, *_ = reference_kernel_statistics(x, y, w, k)
        self.assertGreater(mu, 0.0)
        stats = model.optimizer.vrgd_statistics()
        name = [s for s in stats if s.endswith("kernel")][0]
        scalars = event_scalars(log_dir)
        for field, expected in (
            ("mean_gsnr", mu),
            ("frac_at_gamma", at_gamma),
            ("frac_at_one", at_one),
        ):
            written = scalars[f"vrgd/{name}/{field}"]
            self.assertEqual(sorted(written), [2])  # 2 batches, update_freq=2
            self.assertAllClose(written[2], expected, rtol=1e-4, atol=1e-7, msg=field)
            self.assertAllClose(stats[name][field], expected, rtol=1e-4, atol=1e-7)
        self.assertAllClose(
            hist.history["vrgd/median/mean_gsnr"], [scalars["vrgd/median/mean_gsnr"][2]], rtol=1e-6
        )

    def test_legacy_keras_fit_with_top_level_callback(self):
        """TF_USE_LEGACY_KERAS=1: vrgd_tf.GSNRTensorBoard is the tf_keras callback, and a
        2-replica tf.keras fit with vrgd_tf.VRGDSGD writes the reference statistics.
        Deterministic: fixed data and kernel. The same interpreter checks the switch of
        the optimizers (test_tf_keras_features had its own for it: one import of TensorFlow
        less, the suite's time, issue 36): vrgd_tf.VRGDLamb is the tf_keras class, and a
        tf.keras fit with it, without a strategy, lowers the loss."""
        util.skip_without_tf_keras(self)
        code = (
            "import sys, json\n"
            "import tensorflow as tf\n"
            "cpu = tf.config.list_physical_devices('CPU')[0]\n"
            "tf.config.set_logical_device_configuration(\n"
            "    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
            "import numpy as np, tf_keras, vrgd_tf\n"
            "rng = np.random.RandomState(2)\n"
            "x = rng.randn(16, 5).astype(np.float32)\n"
            "y = (3 * rng.randn(16, 2)).astype(np.float32)\n"
            "strategy = tf.distribute.MirroredStrategy(\n"
            "    ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())\n"
            "with strategy.scope():\n"
            "    m = tf.keras.Sequential([tf.keras.Input((5,)),\n"
            "                             tf.keras.layers.Dense(2, name='d')], name='net')\n"
            "    m.compile(optimizer=vrgd_tf.VRGDSGD(learning_rate=0.0, statistics_interval=1), loss='mse')\n"
            # A fixed kernel (not Dense's unseeded init): every element's GSNR is at most
            # 2.9, where float32 gives mean_gsnr to ~1e-6; a random init can put one
            # element's GSNR in the thousands and its rounding above rtol.
            "m.layers[0].kernel.assign(np.full((5, 2), 0.1, np.float32))\n"
            "w = m.layers[0].kernel.numpy()\n"
            "cb = vrgd_tf.GSNRTensorBoard(sys.argv[1], update_freq=1)\n"
            "m.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb], shuffle=False)\n"
            "assert vrgd_tf.VRGDLamb.__module__ == 'vrgd_tf.tf_keras', vrgd_tf.VRGDLamb\n"
            "lamb = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])\n"
            "lamb.compile(optimizer=vrgd_tf.VRGDLamb(learning_rate=0.01), loss='mse')\n"
            "h = lamb.fit(np.ones((8, 3)), np.zeros((8, 2)), epochs=2, verbose=0)\n"
            "print('RESULT', json.dumps(dict(\n"
            "    lamb_module=type(lamb.optimizer).__module__, lamb_loss=h.history['loss'],\n"
            "    cls=type(cb).__name__, cls_module=type(cb).__module__,\n"
            "    module=type(m.optimizer).__module__,\n"
            "    tf_keras_callback=isinstance(cb, tf_keras.callbacks.Callback),\n"
            "    x=x.tolist(), y=y.tolist(), w=w.tolist(),\n"
            "    stats=m.optimizer.vrgd_statistics())))\n"
        )
        log_dir = tempfile.mkdtemp()
        out = run_python(code, log_dir, env={"TF_USE_LEGACY_KERAS": "1"})
        result = json.loads(out.split("RESULT", 1)[1])
        self.assertEqual(result["cls"], "GSNRTensorBoard")
        self.assertEqual(result["cls_module"], "vrgd_tf.tf_keras")
        self.assertTrue(result["tf_keras_callback"])
        self.assertEqual(result["module"], "vrgd_tf.tf_keras")
        self.assertEqual(result["lamb_module"], "vrgd_tf.tf_keras")
        self.assertLess(result["lamb_loss"][1], result["lamb_loss"][0])
        x, y, w = (np.asarray(result[key], np.float64) for key in ("x", "y", "w"))
        mu, at_gamma, at_one, *_ = reference_kernel_statistics(x, y, w, 2)
        self.assertGreater(mu, 0.0)
        name = [s for s in result["stats"] if s.endswith("kernel")][0]
        scalars = event_scalars(log_dir)
        for field, expected in (
            ("mean_gsnr", mu),
            ("frac_at_gamma", at_gamma),
            ("frac_at_one", at_one),
        ):
            self.assertAllClose(
                scalars[f"vrgd/{name}/{field}"][1], expected, rtol=1e-4, atol=1e-7, msg=field
            )
        self.assertIn("vrgd/mean/frac_at_one", scalars)

    # test_import_does_not_import_tf_keras: in test_missing_tensorboard_is_named_at_construction's
    # interpreter (the suite's time, issue 36).


def event_histogram_counts(log_dir, tag):
    """{step: number of values} of histogram ``tag`` in the one event file in ``log_dir``."""
    events = glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
    assert len(events) == 1, events
    out = {}
    for record in tf.data.TFRecordDataset(events[0]):
        event = tf.compat.v1.Event.FromString(record.numpy())
        for v in event.summary.value:
            if v.tag == tag:
                out[event.step] = float(tf.make_ndarray(v.tensor)[:, 2].sum())
    return out


def fit_dense(callback, steps, epochs=1, steps_per_execution=1, family="keras", k=2):
    """A ``k``-replica fit of Dense(2) with VRGDSGD (statistics every step) and ``callback``,
    ``steps`` batches per epoch; returns the model."""
    rng = np.random.RandomState(4)
    n = 8 * steps
    x = rng.randn(n, 5).astype(np.float32)
    y = (x @ rng.randn(5, 2) + rng.randn(n, 2)).astype(np.float32)
    if family == "keras":
        lib, opt = keras, vrgd_tf.VRGDSGD
    else:
        import tf_keras as lib

        from vrgd_tf import tf_keras as vtk

        opt = vtk.VRGDSGD
    with util.strategy_for(k).scope():
        model = lib.Sequential([lib.Input((5,)), lib.layers.Dense(2, name="d")], name="net")
        model.compile(
            optimizer=opt(learning_rate=0.01),
            loss="mse",
            steps_per_execution=steps_per_execution,
        )
    model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, callbacks=[callback], shuffle=False)
    return model


class SummaryStepTest(tf.test.TestCase):
    """GSNRTensorBoard counts optimizer steps (``iterations``), not its calls (issue 22,
    item 3), and takes ``update_freq`` as Keras' TensorBoard does."""

    def test_steps_per_execution_writes_at_the_optimizer_steps(self):
        """steps_per_execution=3, 12 steps, update_freq=3: four points, at steps 3, 6, 9,
        12 (one point, at step 3, before), the last with the final statistics; update_freq
        4: at the first call after each multiple (6, 9, 12); a second fit continues."""
        log_dir = tempfile.mkdtemp()
        model = fit_dense(
            vrgd_tf.GSNRTensorBoard(log_dir, update_freq=3), 12, steps_per_execution=3
        )
        self.assertEqual(int(model.optimizer.iterations.numpy()), 12)
        written = event_scalars(log_dir)["vrgd/kernel/mean_gsnr"]
        self.assertEqual(sorted(written), [3, 6, 9, 12])
        self.assertAllClose(written[12], model.optimizer.vrgd_statistics()["kernel"]["mean_gsnr"])
        log_dir = tempfile.mkdtemp()
        fit_dense(vrgd_tf.GSNRTensorBoard(log_dir, update_freq=4), 12, steps_per_execution=3)
        self.assertEqual(sorted(event_scalars(log_dir)["vrgd/kernel/mean_gsnr"]), [6, 9, 12])

    def test_a_second_fit_continues_the_steps(self):
        log_dir, again = tempfile.mkdtemp(), tempfile.mkdtemp()
        model = fit_dense(vrgd_tf.GSNRTensorBoard(log_dir, update_freq=2), 4)
        x = np.zeros([16, 5], np.float32) + np.arange(16, dtype=np.float32)[:, None]
        y = np.ones([16, 2], np.float32)
        callback = vrgd_tf.GSNRTensorBoard(again, update_freq=2)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[callback], shuffle=False)
        self.assertEqual(sorted(event_scalars(log_dir)["vrgd/kernel/mean_gsnr"]), [2, 4])
        self.assertEqual(sorted(event_scalars(again)["vrgd/kernel/mean_gsnr"]), [6])

    def test_update_freq_epoch_and_batch(self):
        """ "epoch": one point per epoch at its last step (a ValueError from int() before);
        "batch": every step."""
        log_dir = tempfile.mkdtemp()
        callback = vrgd_tf.GSNRTensorBoard(log_dir, update_freq="epoch")
        self.assertEqual(callback.update_freq, "epoch")
        fit_dense(callback, 4, epochs=2)
        self.assertEqual(sorted(event_scalars(log_dir)["vrgd/kernel/mean_gsnr"]), [4, 8])
        log_dir = tempfile.mkdtemp()
        callback = vrgd_tf.GSNRTensorBoard(log_dir, update_freq="batch")
        self.assertEqual(callback.update_freq, 1)
        fit_dense(callback, 3)
        self.assertEqual(sorted(event_scalars(log_dir)["vrgd/kernel/mean_gsnr"]), [1, 2, 3])

    def test_invalid_update_freq_is_named(self):
        for value in ("sometimes", "100", 0, -2, 2.5, True, None):
            with self.assertRaisesRegex(ValueError, "`update_freq` must be .*epoch", msg=value):
                vrgd_tf.GSNRTensorBoard("/tmp/x", update_freq=value)
        self.assertEqual(vrgd_tf.GSNRTensorBoard("/tmp/x", update_freq=np.int64(5)).update_freq, 5)

    def test_tf_keras_callback_counts_optimizer_steps(self):
        """tf_keras, steps_per_execution=2, 8 steps, update_freq=2: points at 2, 4, 6, 8
        (at 2 and 4 before: one per call); "epoch" accepted."""
        util.skip_without_tf_keras(self)
        from vrgd_tf import tf_keras as vtk

        log_dir = tempfile.mkdtemp()
        callback = vtk.GSNRTensorBoard(log_dir, update_freq=2)
        fit_dense(callback, 8, steps_per_execution=2, family="tf_keras")
        self.assertEqual(sorted(event_scalars(log_dir)["vrgd/kernel/mean_gsnr"]), [2, 4, 6, 8])
        self.assertEqual(vtk.GSNRTensorBoard(log_dir, "epoch").update_freq, "epoch")
        with self.assertRaisesRegex(ValueError, "`update_freq`"):
            vtk.GSNRTensorBoard(log_dir, update_freq="often")


class _Odd(keras.layers.Layer):
    """Variables that have no GSNR beside a Dense layer that has: a zero-size weight, an
    ``overwrite_with_gradient`` weight (as float8's scale and amax history) and a head the
    loss never reaches (its gradient is always None)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.body = keras.layers.Dense(4, name="body")
        self.out = keras.layers.Dense(2, name="out")
        self.head = keras.layers.Dense(3, name="unused_head")

    def build(self, shape):
        self.body.build(shape)
        self.out.build((None, 4))
        self.head.build((None, 4))
        self.empty = self.add_weight(shape=(0,), initializer="zeros", name="empty")
        self.amax = self.add_weight(shape=(4,), initializer="zeros", name="amax_history")
        self.amax.overwrite_with_gradient = True

    def call(self, x):
        h = self.body(x) + 0.0 * self.amax
        return self.out(h) + tf.reduce_sum(self.empty)


class HeadlineOverVariablesWithGSNRTest(tf.test.TestCase):
    """Variables without a GSNR are marked and left out of the headline (issue 22, item 4)."""

    def test_rows_without_gsnr_are_marked_and_left_out(self):
        k, n = 4, 32
        rng = np.random.RandomState(5)
        x = rng.randn(n, 5).astype(np.float32)
        y = (x @ rng.randn(5, 2) + 2 * rng.randn(n, 2)).astype(np.float32)
        with util.strategy_for(k).scope():
            model = keras.Sequential([keras.Input((5,)), _Odd(name="odd")], name="net")
            model.compile(
                optimizer=vrgd_tf.VRGDSGD(learning_rate=0.01, statistics_interval=1), loss="mse"
            )
        model.fit(x, y, batch_size=n, epochs=1, verbose=0, shuffle=False)
        stats = model.optimizer.vrgd_statistics()
        marks = {name: row["has_gsnr"] for name, row in stats.items()}
        self.assertEqual(
            marks,
            {
                "body/kernel": True,
                "body/bias": True,
                "out/kernel": True,
                "out/bias": True,
                "empty": False,
                "amax_history": False,
                "unused_head/kernel": False,
                "unused_head/bias": False,
            },
        )
        measured = [row for row in stats.values() if row["has_gsnr"]]
        every = list(stats.values())
        logs = summaries.summary_logs(model.optimizer)
        for tag, field, reduce in (
            ("vrgd/mean/mean_factor", "mean_factor", np.mean),
            ("vrgd/mean/norm_ratio", "norm_ratio", np.mean),
            ("vrgd/median/mean_gsnr", "mean_gsnr", np.median),
        ):
            want = reduce([row[field] for row in measured])
            self.assertAllClose(logs[tag], want, msg=tag)
            # What the headline was before: the zero rows pulled it down.
            self.assertGreater(abs(want - reduce([row[field] for row in every])), 0.05, msg=tag)
        self.assertEqual(logs["vrgd/empty/has_gsnr"], 0.0)
        self.assertEqual(logs["vrgd/out/kernel/has_gsnr"], 1.0)
        self.assertEqual(summaries.headline(stats), summaries.summary_logs(model.optimizer, True))
        weighted = summaries.all_weights_statistics(model.optimizer, model.trainable_variables)
        self.assertAllClose(
            weighted["mean_gsnr_over_variables"], np.mean([r["mean_gsnr"] for r in measured])
        )
        log_dir = tempfile.mkdtemp()
        summaries.write_gsnr_summaries(model.optimizer, 1, tf.summary.create_file_writer(log_dir))
        self.assertEqual(event_histogram_counts(log_dir, "vrgd/hist/mean_factor"), {1: 4.0})

    def test_no_variable_with_gsnr_has_no_headline(self):
        """Before the first recording step every row is zeros: no headline values (a
        History column shows NaN, see test_fit_logs), per-variable rows marked."""
        with util.strategy_for(2).scope():
            model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2)])
            model.compile(optimizer=vrgd_tf.VRGDSGD(statistics_interval=5), loss="mse")
            model.optimizer.build(model.trainable_variables)
        self.assertEqual(summaries.summary_logs(model.optimizer, headline_only=True), {})
        stats = model.optimizer.vrgd_statistics()
        self.assertEqual([row["has_gsnr"] for row in stats.values()], [False, False])


class AllWeightsStatisticsTest(tf.test.TestCase):
    """summaries.all_weights_statistics: element-weighted fractions over all weights."""

    def test_weighted_by_variable_size_against_the_numpy_reference(self):
        k, n = 4, 32
        rng = np.random.RandomState(1)
        x = rng.randn(n, 5).astype(np.float32)
        y = (x @ rng.randn(5, 2) + 2 * rng.randn(n, 2)).astype(np.float32)
        with util.strategy_for(k).scope():
            model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2, name="d")])
            model.compile(
                optimizer=vrgd_tf.VRGDSGD(learning_rate=0.0, statistics_interval=1), loss="mse"
            )
        w = model.layers[0].kernel.numpy().astype(np.float64)
        bias = model.layers[0].bias.numpy().astype(np.float64)
        self.assertIsNone(
            summaries.all_weights_statistics(model.optimizer, model.trainable_variables)
        )  # not built yet
        model.fit(x, y, batch_size=n, epochs=1, verbose=0, shuffle=False)
        b = n // k
        shards = [slice(d * b, (d + 1) * b) for d in range(k)]
        residuals = [x[s] @ w + bias - y[s] for s in shards]  # mse: d/dout = 2 r / (b * 2)
        g_kernel = np.stack([x[s].T @ r / b / k for s, r in zip(shards, residuals)])
        g_bias = np.stack([r.sum(axis=0) / b / k for r in residuals])
        kernel = ref.gsnr_statistics(g_kernel, 0.1)  # (mean GSNR, at gamma, at 1, factor)
        bias_ref = ref.gsnr_statistics(g_bias, 0.1)
        got = summaries.all_weights_statistics(model.optimizer, model.trainable_variables)
        self.assertAllClose(got["frac_at_gamma"], (10 * kernel[1] + 2 * bias_ref[1]) / 12)
        self.assertAllClose(got["frac_at_one"], (10 * kernel[2] + 2 * bias_ref[2]) / 12)
        self.assertAllClose(
            got["mean_gsnr_over_variables"], (kernel[0] + bias_ref[0]) / 2, rtol=1e-4
        )
        # Variables the optimizer does not train count nothing; a base optimizer gives None.
        stray = tf.Variable(tf.zeros([1000]))
        self.assertEqual(
            summaries.all_weights_statistics(model.optimizer, [*model.trainable_variables, stray]),
            got,
        )
        self.assertIsNone(summaries.all_weights_statistics(model.optimizer, [stray]))
        self.assertIsNone(
            summaries.all_weights_statistics(keras.optimizers.SGD(), model.trainable_variables)
        )


class _Wrapper:
    """A stand-in wrapper optimizer (``inner_optimizer``), for nesting."""

    def __init__(self, inner):
        self.inner_optimizer = inner


class VrgdStatisticsHelperTest(tf.test.TestCase):
    """vrgd_tf.vrgd_statistics reaches the VRGD optimizer inside loss-scale wrappers."""

    def _data(self):
        # small values: no float16 overflow at the initial loss scale on either replica
        # (Keras 3's LossScaleOptimizer checks finiteness per replica, before the all-reduce)
        rng = np.random.RandomState(3)
        x = (0.1 * rng.randn(16, 5)).astype(np.float32)
        y = (0.1 * (x @ rng.randn(5, 2) + rng.randn(16, 2))).astype(np.float32)
        return x, y

    def _check(self, wrapper, inner):
        self.assertEqual(int(inner.iterations.numpy()), 2)  # both steps applied
        stats = vrgd_tf.vrgd_statistics(wrapper)
        self.assertEqual(stats, inner.vrgd_statistics())
        self.assertLen(stats, 2)  # kernel and bias
        kernel = [v for name, v in stats.items() if name.endswith("kernel")][0]
        self.assertGreater(kernel["mean_gsnr"], 0.0)
        self.assertBetween(kernel["frac_at_one"], 0.0, 1.0)
        self.assertIs(vrgd_tf.unwrap_optimizer(wrapper), inner)
        self.assertEqual(vrgd_tf.vrgd_statistics(_Wrapper(_Wrapper(wrapper))), stats)
        self.assertIs(vrgd_tf.unwrap_optimizer(_Wrapper(_Wrapper(wrapper))), inner)
        self.assertEqual(
            summaries.summary_logs(wrapper)["vrgd/median/mean_gsnr"],
            float(np.median([v["mean_gsnr"] for v in stats.values()])),
        )

    def test_keras3_mixed_float16_loss_scale_optimizer(self):
        x, y = self._data()
        keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            with util.strategy_for(2).scope():
                model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2)])
                model.compile(
                    optimizer=vrgd_tf.VRGDAdam(learning_rate=0.01, statistics_interval=1),
                    loss="mse",
                )
            model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        self.assertIsInstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
        self.assertFalse(hasattr(model.optimizer, "vrgd_statistics"))
        self._check(model.optimizer, model.optimizer.inner_optimizer)

    def test_tf_keras_mixed_float16_loss_scale_optimizer(self):
        util.skip_without_tf_keras(self)
        import tf_keras

        from vrgd_tf import tf_keras as vtk

        x, y = self._data()
        tf_keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            with util.strategy_for(2).scope():
                model = tf_keras.Sequential([tf_keras.Input((5,)), tf_keras.layers.Dense(2)])
                model.compile(
                    optimizer=vtk.VRGDAdam(learning_rate=0.01, statistics_interval=1), loss="mse"
                )
            model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
        finally:
            tf_keras.mixed_precision.set_global_policy("float32")
        self.assertIsInstance(model.optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
        self.assertFalse(hasattr(model.optimizer, "vrgd_statistics"))
        self._check(model.optimizer, model.optimizer.inner_optimizer)

    def test_no_vrgd_optimizer_inside_raises_type_error(self):
        with self.assertRaisesRegex(TypeError, "no VRGD optimizer inside .*SGD"):
            vrgd_tf.vrgd_statistics(keras.optimizers.SGD())
        wrapped = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
        with self.assertRaisesRegex(TypeError, "no VRGD optimizer inside .*LossScaleOptimizer"):
            vrgd_tf.vrgd_statistics(wrapped)
        with self.assertRaisesRegex(TypeError, "_Wrapper"):
            vrgd_tf.vrgd_statistics(_Wrapper(wrapped))
        self.assertIs(vrgd_tf.unwrap_optimizer(wrapped), wrapped)
        self.assertEqual(summaries.summary_logs(wrapped), {})


class DisplayNamesTest(tf.test.TestCase):
    def test_shared_leading_scopes_are_dropped_and_names_stay_distinct(self):
        from vrgd_tf.naming import display_names

        self.assertEqual(
            display_names(["net/d1/kernel", "net/d1/bias", "net/d2/kernel"]),
            ["d1/kernel", "d1/bias", "d2/kernel"],
        )
        self.assertEqual(
            display_names(["d1/kernel", "d1/bias", "d2/kernel"]),
            ["d1/kernel", "d1/bias", "d2/kernel"],
        )
        self.assertEqual(display_names(["net/d/kernel", "net/d/bias"]), ["kernel", "bias"])
        # tf_keras SavedModel variables loaded under a strategy lose their layer scope
        self.assertEqual(
            display_names(["kernel", "bias", "kernel", "bias"]),
            ["kernel", "bias", "kernel_1", "bias_1"],
        )
        self.assertEqual(display_names([]), [])


if __name__ == "__main__":
    tf.test.main()
