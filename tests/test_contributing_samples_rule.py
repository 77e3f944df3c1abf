"""The rule of contributing samples (spec section 1; issue 36, fault 2), in both families.

A GSNR sample counts when it holds at least one example of nonzero weight. Where the batch is
split (``use_micro_batches``, Model Garden's trainer, the JAX step) the count is taken from
the data; a custom loop passes it (``num_contributing=``); elsewhere it is inferred from the
gradients' values. A sample without examples that sends a nonzero gradient (a weight
regularizer) cannot be separated from the sums: the step is the base step, with a warning.
Each test failed before the rule (the values asked for are in each docstring).
"""

import contextlib
import logging

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf

import numpy_reference as ref
import util

STRAY = "cannot be separated"
LEFT_OUT = "left samples out"
INFERRED = "their gradient was exactly zero"


def messages(logs, text):
    return [r.getMessage() for r in logs.records if text in r.getMessage()]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@contextlib.contextmanager
def capture_logs():
    """The ``vrgd_tf`` logger's warnings in the block (none is fine, unlike assertLogs),
    whatever level an earlier test in the process left on the logger (the suite's worker
    runs other files first: these tests passed alone and failed there)."""
    handler, logger = _Records(), logging.getLogger("vrgd_tf")
    level, disabled = logger.level, logger.disabled
    logger.setLevel(logging.WARNING)
    logger.disabled = False
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.disabled = disabled


def families():
    """``(name, make VRGDSGD(**kw), make_variable)`` of both families."""
    out = [("keras3", lambda **kw: vrgd_tf.VRGDSGD(0.1, statistics_interval=1, **kw), None)]
    if util.HAS_TF_KERAS:
        from vrgd_tf import tf_keras as vtk

        out.append(
            (
                "tf_keras",
                lambda **kw: vtk.VRGDSGD(0.1, statistics_interval=1, **kw),
                lambda n, v: tf.Variable(v, name=n),
            )
        )
    return out


def family(name):
    return next(f for f in families() if f[0] == name)


def kernel_row(stats):
    return next(row for name, row in stats.items() if "kernel" in name)


def grouped_loop(strategy, make_opt, init, grads, counts, make_variable=None):
    """One custom-loop step: replica ``d`` applies ``grads[name][d]`` with
    ``apply_grouped_gradients(..., num_groups=1, num_contributing=counts[d])`` (``counts``
    None: no keyword, the count inferred). Returns the optimizer."""
    make_variable = make_variable or (lambda n, v: keras.Variable(v, name=n))
    names = sorted(init)
    with strategy.scope():
        variables = {n: make_variable(n, init[n]) for n in names}
        opt = make_opt(gamma=0.1)
        if hasattr(opt, "build") and not getattr(opt, "_is_legacy_optimizer", False):
            opt.build([variables[n] for n in names])
    consts = {n: tf.constant(grads[n]) for n in names}
    given = None if counts is None else tf.constant(counts, tf.int32)

    @tf.function
    def step():
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            pairs = [(tf.gather(consts[n], rid), variables[n]) for n in names]
            kwargs = {} if given is None else {"num_contributing": tf.gather(given, rid)}
            opt.apply_grouped_gradients(pairs, [g * g for g, _ in pairs], 1, **kwargs)

        strategy.run(fn)

    step()
    return opt


def shards(seed, k=4, scale=1.0):
    """``(init, grads)``: a kernel ``[4, 3]``, one gradient per replica ``[k, 4, 3]``."""
    rng = np.random.RandomState(seed)
    init = {"kernel": rng.randn(4, 3).astype(np.float32)}
    grads = {"kernel": (scale * (1.0 + rng.randn(k, 4, 3))).astype(np.float32)}
    return init, grads


class NonzeroTest(tf.test.TestCase):
    def test_each_dtype_is_compared_in_itself(self):
        """The inferred count's test: a float64 value of 1e-300 (0 in float32) is nonzero,
        and so are NaN, Inf and a bfloat16 value; zeros are not; under XLA too."""
        from vrgd_tf.gsnr import samples

        def cases():
            zeros = [tf.zeros([3], tf.float64), tf.zeros([2, 2])]
            tiny = tf.constant([0.0, 1e-300, 0.0], tf.float64)
            return [
                ("zeros", zeros, False),
                ("float64 1e-300", [tiny, tf.zeros([2, 2])], True),
                ("NaN", [tf.zeros([3], tf.float64), tf.constant([[0.0, np.nan]] * 2)], True),
                ("Inf", [tf.constant([np.inf], tf.float16)], True),
                ("bfloat16", [tf.constant([0.0, -1e-30], tf.bfloat16)], True),
            ]

        for jit in (False, True):
            for name, values, want in cases():
                for fn in (samples.nonzero_or_nan, samples.any_nonzero):
                    got = tf.function(lambda v=values, f=fn: f(v), jit_compile=jit)()
                    self.assertEqual(bool(got), want, f"{name}, {fn.__name__}, jit {jit}")


class CustomLoopTest(tf.test.TestCase, parameterized.TestCase):
    """The count a custom loop passes (``num_contributing=``), and the inferred one."""

    @parameterized.parameters(*[f[0] for f in families()])
    def test_regularizer_gradient_on_replicas_without_examples_is_the_base_step(self, name):
        """Replicas 2, 3 hold no example but send an L2 regularizer's gradient: with their
        count 0 given, the step is the base step (statistics zeros) with one warning naming
        the cause. (Before: no ``num_contributing``; inferred, they counted as samples.)"""
        _, make_opt, make_variable = family(name)
        init, grads = shards(1)
        reg = 0.01 * init["kernel"]
        grads["kernel"] = grads["kernel"] + reg
        grads["kernel"][2:] = reg
        with self.assertLogs("vrgd_tf", level=logging.WARNING) as logs:
            opt = grouped_loop(
                util.strategy_for(4), make_opt, init, grads, [1, 1, 0, 0], make_variable
            )
        self.assertLen(messages(logs, STRAY), 1)
        self.assertIn("drop_remainder=True", messages(logs, STRAY)[0])
        self.assertIn("regularizer", messages(logs, STRAY)[0])
        row = kernel_row(opt.vrgd_statistics())
        self.assertFalse(row["has_gsnr"])
        self.assertEqual(row["mean_gsnr"], 0.0)

    @parameterized.parameters(*[f[0] for f in families()])
    def test_a_real_sample_with_a_zero_gradient_counts_when_the_count_is_given(self, name):
        """Replica 3's gradient is exactly zero but it held examples: given, k = 4 and the
        GSNR is that of the 4 samples, without a warning (before: no keyword)."""
        _, make_opt, make_variable = family(name)
        init, grads = shards(2)
        grads["kernel"][3] = 0.0
        with self.assertNoLogs("vrgd_tf", level=logging.WARNING):
            opt = grouped_loop(
                util.strategy_for(4), make_opt, init, grads, [1, 1, 1, 1], make_variable
            )
        want = ref.gsnr_statistics(grads["kernel"], 0.1)[0]
        self.assertAllClose(kernel_row(opt.vrgd_statistics())["mean_gsnr"], want, rtol=1e-4)

    @parameterized.parameters(*[f[0] for f in families()])
    def test_an_inferred_zero_gradient_is_left_out_with_a_warning(self, name):
        """Without a count, the same zero gradient is taken for a replica without examples:
        k = 3, and a warning names the cause and the fix, once (before: no warning)."""
        _, make_opt, make_variable = family(name)
        init, grads = shards(2)
        grads["kernel"][3] = 0.0
        with self.assertLogs("vrgd_tf", level=logging.WARNING) as logs:
            opt = grouped_loop(util.strategy_for(4), make_opt, init, grads, None, make_variable)
        (message,) = messages(logs, LEFT_OUT)
        self.assertIn(INFERRED, message)
        self.assertIn("num_contributing", message)
        want = ref.gsnr_statistics(grads["kernel"][:3], 0.1)[0]
        self.assertAllClose(kernel_row(opt.vrgd_statistics())["mean_gsnr"], want, rtol=1e-4)

    @parameterized.parameters(*[f[0] for f in families()])
    def test_a_gradient_of_1e_24_counts_when_inferred(self, name):
        """Replica 3's gradient is about 1e-24 (its squares are 0 in float32): inferred from
        the values, it counts (k = 4, no warning). (Before: k = 3 from the squares.)"""
        _, make_opt, make_variable = family(name)
        init, grads = shards(3)
        grads["kernel"][3] *= 1e-24
        self.assertTrue(np.all(np.square(grads["kernel"][3]) == 0.0))
        with self.assertNoLogs("vrgd_tf", level=logging.WARNING):
            opt = grouped_loop(util.strategy_for(4), make_opt, init, grads, None, make_variable)
        want = ref.gsnr_statistics(grads["kernel"], 0.1)[0]
        self.assertAllClose(kernel_row(opt.vrgd_statistics())["mean_gsnr"], want, rtol=1e-4)

    def test_aggregator_takes_the_count(self):
        """``GSNRAggregator(..., num_contributing=)``: a zero gradient of a replica that held
        examples counts (k = 2 of 2 replicas, GSNR 1 per element: 2 S2 - S1**2 = S2)."""
        strategy = util.strategy_for(2)
        with strategy.scope():
            w = keras.Variable(np.zeros(3, np.float32), name="w")
            agg = vrgd_tf.GSNRAggregator(gamma=0.1, statistics_interval=1)
            agg.build([w])
        values = tf.constant([[1.0, -2.0, 3.0], [0.0, 0.0, 0.0]])

        @tf.function
        def step():
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                return agg([tf.gather(values, rid)], [w], num_contributing=1)[0]

            return strategy.run(fn)

        with self.assertNoLogs("vrgd_tf", level=logging.WARNING):
            step()
        (row,) = agg.statistics().values()
        self.assertAllClose(row["mean_gsnr"], 1.0)

    def test_count_out_of_range_is_refused(self):
        strategy = util.strategy_for(2)
        with strategy.scope():
            w = keras.Variable(np.zeros(3, np.float32), name="w")
            agg = vrgd_tf.GSNRAggregator(gamma=0.1, statistics_interval=1)
            agg.build([w])
        for bad in (2, -1, 0.5, True):

            @tf.function
            def step(bad=bad):
                strategy.run(lambda: agg([tf.ones(3)], [w], num_contributing=bad))

            with self.assertRaisesRegex(ValueError, "num_contributing"):
                step()


def masked_data(seed=4, n=8):
    """8 examples of ``Dense(3)`` data; the last quarter (shard or group 3) has weight 0."""
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 4).astype(np.float32)
    y = (x @ rng.randn(4, 3) + rng.randn(n, 3)).astype(np.float32)
    w = np.ones(n, np.float32)
    w[3 * n // 4 :] = 0.0
    return x, y, w


def fit_once(replicas, groups, x, y, w, regularizer=None, batch=8, epochs=1):
    """Fits ``Dense(3, use_bias=False)`` (kernel ``w0``) on ``replicas`` (``groups`` None:
    Keras' own fit); returns ``(model, w0, kernels before each step, logs)``."""
    rng = np.random.RandomState(0)
    w0 = rng.randn(4, 3).astype(np.float32)
    with util.strategy_for(replicas).scope():
        layer = keras.layers.Dense(3, use_bias=False, kernel_regularizer=regularizer)
        model = keras.Sequential([keras.Input((4,)), layer])
        model.layers[0].kernel.assign(w0)
        model.compile(optimizer=vrgd_tf.VRGDSGD(0.01, gamma=0.1, statistics_interval=1), loss="mse")
    if groups is not None:
        vrgd_tf.use_micro_batches(model, groups)
    kernels = []
    snapshot = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda *_, **__: kernels.append(model.layers[0].kernel.numpy())
    )
    arrays = (x, y) if w is None else (x, y, w)
    data = tf.data.Dataset.from_tensor_slices(arrays).batch(batch)
    with capture_logs() as logs:
        model.fit(data, epochs=epochs, verbose=0, callbacks=[snapshot])
    return model, w0, kernels, logs


def shard_gradients(x, y, w, kernel, k):
    """The ``k`` shards' gradients of the weighted MSE (up to a common constant)."""
    per_example = np.stack(
        [w[i] * 2.0 / 3.0 * np.outer(x[i], x[i] @ kernel - y[i]) for i in range(len(x))]
    )
    return per_example.reshape((k, -1) + per_example.shape[1:]).sum(1)


class FitTest(tf.test.TestCase, parameterized.TestCase):
    """The count from the data in ``fit`` (``use_micro_batches``, any ``m``)."""

    @parameterized.parameters((4, 1, True), (4, 1, False), (1, 4, True))
    def test_one_masked_shard_is_left_out_on_replicas_and_groups_alike(
        self, replicas, groups, micro
    ):
        """4 shards, shard 3 with sample weight 0: its gradient is zero, and 4 replicas x 1
        group (with or without ``use_micro_batches``) and 1 device x 4 groups record the
        kernel GSNR of the 3 others. (Before: 1 x 4 counted the masked group, k = 4.)"""
        x, y, w = masked_data()
        model, w0, _, _ = fit_once(replicas, groups if micro else None, x, y, w)
        samples = shard_gradients(x, y, w, w0, 4)[:3]
        want = ref.gsnr_statistics(samples, 0.1)[0]
        got = kernel_row(model.optimizer.vrgd_statistics())["mean_gsnr"]
        self.assertAllClose(got, want, rtol=1e-4)

    def test_regularizer_on_a_short_last_batch_is_the_base_step(self):
        """4 replicas, 6 examples in batches of 4: the last step splits 1, 1, 0, 0 and the
        empty replicas send the L2 regularizer's gradient. With the count from the data
        (``use_micro_batches(model, 1)``) that step is the base step (statistics zeros)
        with one warning naming the cause. (Before: k = 4, kernel GSNR 0.467, no warning.)"""
        rng = np.random.RandomState(7)
        x = rng.randn(6, 4).astype(np.float32)
        y = (x @ rng.randn(4, 3) + rng.randn(6, 3)).astype(np.float32)
        reg = keras.regularizers.L2(0.01)
        model, _, _, logs = fit_once(4, 1, x, y, None, regularizer=reg, batch=4)
        (message,) = messages(logs, STRAY)
        self.assertIn("drop_remainder=True", message)
        row = kernel_row(model.optimizer.vrgd_statistics())
        self.assertFalse(row["has_gsnr"])

    def test_regularizer_on_a_masked_group_is_the_base_step(self):
        """1 device x 4 groups, group 3 with sample weight 0 and an L2 regularizer: the
        group sends the regularizer's gradient, which cannot be separated from the sums: the
        base step, with the warning. (Before: the group counted, k = 4.)"""
        x, y, w = masked_data()
        reg = keras.regularizers.L2(0.01)
        model, _, _, logs = fit_once(1, 4, x, y, w, regularizer=reg)
        self.assertLen(messages(logs, STRAY), 1)
        self.assertFalse(kernel_row(model.optimizer.vrgd_statistics())["has_gsnr"])


class ModelGardenTest(tf.test.TestCase):
    """The count from the data in Model Garden's trainer (``vrgd_micro_batches > 1``)."""

    def test_a_group_with_a_zero_gradient_counts(self):
        """2 replicas x 2 groups; replica 1's examples are fitted exactly (x = 0, y = 0 at
        zero bias), so its gradient is exactly zero, but its groups hold examples: the count
        from the data keeps them, k = 4, and the kernel GSNR is that of the 4 groups, with
        no warning. (Before: inferred from the gradients, replica 1 was left out, k = 2.)"""
        util.skip_without_tf_keras(self)
        from test_model_garden_micro_batches import LinearTask, experiment

        from vrgd_tf import tf_keras as vtk
        from vrgd_tf.model_garden.trainer import VRGDTrainer

        rng = np.random.RandomState(3)
        x = rng.randn(16, 4).astype(np.float32)
        y = (x @ rng.randn(4, 3) + rng.randn(16, 3)).astype(np.float32)
        x[8:], y[8:] = 0.0, 0.0
        w0 = rng.randn(4, 3).astype(np.float32)
        strategy = util.strategy_for(2)
        with strategy.scope():
            task = LinearTask(w0)
            dataset = strategy.experimental_distribute_dataset(
                tf.data.Dataset.from_tensor_slices((x, y)).batch(16, drop_remainder=True)
            )
            trainer = VRGDTrainer(
                experiment(2, 16),
                task,
                model=task.build_model(),
                optimizer=vtk.VRGDSGD(0.01, gamma=0.1, statistics_interval=1),
                train=True,
                evaluate=False,
                train_dataset=dataset,
            )
        with capture_logs() as logs:
            trainer.train(tf.constant(1))
        util.release_iterator(trainer)
        self.assertEqual(messages(logs, LEFT_OUT), [])
        err = (x @ w0 - y).reshape(4, 4, 3)  # zero bias at the first step
        samples = np.einsum("qbi,qbo->qio", x.reshape(4, 4, 4), err)
        self.assertTrue(np.all(samples[2:] == 0.0))
        want = ref.gsnr_statistics(samples, 0.1)[0]
        got = kernel_row(trainer.optimizer.vrgd_statistics())["mean_gsnr"]
        self.assertAllClose(got, want, rtol=1e-4)


if __name__ == "__main__":
    tf.test.main()
