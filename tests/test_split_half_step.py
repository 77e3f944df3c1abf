"""The split-half reliability of the GSNR inside the step (issue 22 item 2; docs/spec.md
section 4; vrgd_tf.gsnr.halves): the subsample plan, the masked buffer in the first
all-reduce, the recorded values against the NumPy reference (XLA and not), real 8-replica
fits on pure noise (near 0) and on a fixed signal-to-noise pattern (near 1) in both
families and with the standalone aggregator, and what stays out of the saved state."""

import logging

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf
from vrgd_tf import gsnr
from vrgd_tf.gsnr import halves
from vrgd_tf.gsnr import layout as layout_lib

import numpy_reference as ref
import util

K = 8


class SubsampleTest(tf.test.TestCase):
    def test_strides_by_hand(self):
        # A [256, 10] kernel at interval 10: 10 shares a factor with both dimensions (one
        # column in ten would be sampled), 11 does not; ceil(2560 / 11) = 233 elements.
        self.assertEqual(halves.subsample_stride([256, 10], 10), 11)
        # A bias of 256 at interval 10: at most 256 // 64 = 4 keeps 64 elements, 4 shares a
        # factor with 256, 5..8 keep fewer than 64 (ceil(256 / 5) = 52): 3 (86 elements).
        self.assertEqual(halves.subsample_stride([256], 10), 3)
        self.assertEqual(halves.subsample_stride([50], 10), 1)  # below 64: all
        self.assertEqual(halves.subsample_stride([], 10), 1)
        self.assertEqual(halves.subsample_stride([0, 4], 10), 1)
        self.assertEqual(halves.subsample_stride([64, 64], 1), 1)
        # 4096 elements at most: [64, 256] needs a stride >= 4, which shares a factor.
        self.assertEqual(halves.subsample_stride([64, 256], 1), 5)

    def test_strides_keep_the_floor_and_visit_every_column(self):
        for shape in ([64, 256], [256, 10], [3, 3, 16, 32], [1000], [7, 9], [128]):
            for interval in (1, 2, 10, 100, 10**6):
                s = halves.subsample_stride(shape, interval)
                size = int(np.prod(shape))
                count = -(-size // s)
                self.assertGreaterEqual(count, min(size, halves.SUBSAMPLE_FLOOR))
                self.assertLessEqual(count, halves.SUBSAMPLE_CAP)
                self.assertLessEqual(s, 2 * max(interval, -(-size // halves.SUBSAMPLE_CAP)) + 32)
                columns = np.arange(0, size, s) % shape[-1]
                if count >= shape[-1]:
                    self.assertLen(set(columns), shape[-1], msg=f"{shape} {interval}")


def make_layout(shapes, replicas, groups=1):
    grads = [tf.zeros(s) for s in shapes]
    variables = [tf.Variable(g) for g in grads]
    return layout_lib.build_layout(
        grads,
        variables,
        None,
        num_replicas=replicas,
        num_groups=groups,
        squares_given=groups > 1,
    )


class PlanTest(tf.test.TestCase):
    def test_statically_off_where_a_half_has_fewer_than_two_samples(self):
        shapes = [[4, 3], [3]]
        self.assertIsNone(halves.plan(make_layout(shapes, 8), 0))  # stride 0: off
        self.assertIsNone(halves.plan(make_layout(shapes, 2), 1))  # k_A = 1
        self.assertIsNone(halves.plan(make_layout(shapes, 3), 1))  # k_A = 1
        self.assertIsNone(halves.plan(make_layout(shapes, 1, groups=8), 1))  # R = 1
        p = halves.plan(make_layout(shapes, 4), 1)
        self.assertEqual((p.num_samples, p.num_samples_a, p.num_replicas_a), (4, 2, 2))
        self.assertEqual(p.sizes, (12, 3))
        p = halves.plan(make_layout(shapes, 2, groups=2), 1)
        self.assertEqual((p.num_samples, p.num_samples_a, p.num_replicas_a), (4, 2, 1))
        p = halves.plan(make_layout(shapes, 5, groups=3), 1)
        self.assertEqual((p.num_samples, p.num_samples_a), (15, 6))

    def test_options_and_aggregator_arguments_are_checked(self):
        self.assertEqual(gsnr.VRGDSettings().split_half_stride, 0)
        self.assertEqual(gsnr.VRGDSettings(statistics_interval=7).split_half_stride, 0)
        with self.assertRaisesRegex(TypeError, "split_half"):
            vrgd_tf.GSNRAggregator(split_half=1, statistics_interval=1)
        with self.assertRaisesRegex(ValueError, "statistics_interval"):
            vrgd_tf.GSNRAggregator(split_half=True, statistics_interval=0)
        aggregator = vrgd_tf.GSNRAggregator(split_half=True, statistics_interval=10)
        self.assertEqual(aggregator.settings.split_half_stride, 10)
        self.assertTrue(aggregator.get_config()["split_half"])
        self.assertFalse(vrgd_tf.GSNRAggregator(statistics_interval=1).split_half)
        optimizer = vrgd_tf.VRGDSGD(0.1, split_half=True, statistics_interval=1)
        self.assertTrue(optimizer.split_half)
        self.assertTrue(vrgd_tf.VRGDSGD.from_config(optimizer.get_config()).split_half)


# --- one replica's step traced on one device (as on a TPU core) ------------------------------


def subsample(x, shape, stride):
    return np.ravel(x)[:: halves.subsample_stride(shape, stride)]


class FakeReplicaContext:
    """Replica ``me`` of ``R``, each replica holding ``m`` groups whose samples are given:
    the first all-reduce adds the others' gradient sums, the second their sums of squares
    and count, the third (the split-half reliability on) their masked split-half buffer.
    One step per context."""

    def __init__(self, samples, shapes, groups, stride, me):
        self.samples = samples  # [n] arrays [R, m, *shape]
        self.shapes, self.groups, self.stride = shapes, groups, stride
        self.num_replicas_in_sync = samples[0].shape[0]
        self.replica_id_in_sync_group = me
        self.calls = 0

    def replica_sums(self, d):
        grads = [np.float32(x[d].sum(0)) for x in self.samples]
        squares = [np.float32((x[d].astype(np.float64) ** 2).sum(0)) for x in self.samples]
        return grads, squares

    def all_reduce(self, op, value):
        assert op == tf.distribute.ReduceOp.SUM
        call, self.calls = self.calls, self.calls + 1
        n = len(self.samples)
        out = [tf.identity(v) for v in value]
        for d in set(range(self.num_replicas_in_sync)) - {self.replica_id_in_sync_group}:
            grads, squares = self.replica_sums(d)
            if call == 0:  # the gradients
                out = [o + np.ravel(g) for o, g in zip(out, grads)]
            elif call == 1:  # the squares and [count, stray]
                out[:n] = [o + np.ravel(q) for o, q in zip(out, squares)]
                count = float(self.groups) * any(np.any(g != 0) for g in grads)
                out[n] = out[n] + np.array([count, 0.0], np.float32)
            else:  # the split-half buffer
                a = float(d < self.num_replicas_in_sync // 2)
                parts = [subsample(g, s, self.stride) for g, s in zip(grads, self.shapes)]
                parts += [subsample(q, s, self.stride) for q, s in zip(squares, self.shapes)]
                out = [out[0] + a * np.concatenate(parts)]
        return out


def reference_rows(samples, shapes, stride, k_a_replicas):
    """NumPy reference of each variable's recorded values on the same subsample: half A is
    the samples of replicas below ``k_a_replicas``."""
    rows = []
    for x, shape in zip(samples, shapes):
        r, m = x.shape[:2]
        flat = x.reshape(r * m, -1)[:, :: halves.subsample_stride(shape, stride)]
        rows.append(ref.split_half_reliability(flat, k_a_replicas * m))
    return rows


def pattern_samples(rng, shape, r, m, low=-1.0, high=3.0):
    """Samples ``[R, m, *shape]`` of a fixed per-element GSNR in ``10**[low, high]``."""
    scale = np.exp(rng.uniform(-2.0, 2.0, shape))
    snr = 10.0 ** (rng.uniform(low, high, shape) / 2.0)
    return (scale * (snr + rng.randn(r, m, *shape))).astype(np.float32)


class InStepTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(
        (4, 1, 1, False, 0), (4, 1, 10, True, 3), (2, 2, 3, True, 1), (6, 1, 1, True, 2)
    )
    def test_recorded_values_match_the_reference(self, replicas, groups, stride, jit, me):
        """The whole step with its collectives in one (XLA) function, replica ``me`` traced
        (in half A or B): the recorded rows equal the NumPy reference on the same
        subsample; the gradients are those without the reliability."""
        rng = np.random.RandomState(replicas * 10 + stride)
        shapes = [(64, 10), (300,), (5,)]
        samples = [pattern_samples(rng, s, replicas, groups) for s in shapes]
        variables = [tf.Variable(tf.zeros(s)) for s in shapes]
        state = gsnr.VRGDState(
            lambda kind, i, shape, _: tf.Variable(tf.zeros(shape), name=kind), id, 0.0
        )
        state.add_variables(variables)

        def run(split_half_stride):
            settings = gsnr.VRGDSettings(
                split_half=split_half_stride > 0, statistics_interval=max(split_half_stride, 1)
            )
            ctx = FakeReplicaContext(samples, shapes, groups, stride, me)
            grads = [tf.constant(x[me].sum(0)) for x in samples]
            squares = [
                tf.constant((x[me].astype(np.float64) ** 2).sum(0), tf.float32) for x in samples
            ]

            @tf.function(jit_compile=jit)
            def step():
                return gsnr.variance_reduce(
                    grads,
                    variables,
                    state=state,
                    replica_context=ctx,
                    squares=gsnr.GroupSquares(squares if groups > 1 else None, groups),
                    settings=settings,
                )

            return [g.numpy() for g in step()]

        plain = run(0)
        self.assertAllEqual(np.stack([v.numpy() for v in state.split_half]), np.zeros([3, 4]))
        measured = run(stride)
        for a, b in zip(plain, measured):
            # Under XLA the step with the split-half is another program, whose fusions may
            # round a factor differently (measured 4 ulps, 3e-7; docs/spec.md section 4).
            if jit:
                self.assertAllClose(a, b, rtol=1e-6, atol=0.0)
            else:
                self.assertAllEqual(a, b)
        expected = reference_rows(samples, shapes, stride, replicas // 2)
        for i, (reliability, rho, pairs, defined) in enumerate(expected):
            got = state.split_half[i].numpy()
            self.assertEqual(bool(got[3]), defined, msg=f"variable {i}")
            self.assertEqual(got[2], pairs, msg=f"variable {i}")
            self.assertAllClose(got[:2], [reliability, rho], atol=3e-4, msg=f"variable {i}")
        self.assertTrue(state.split_half[0].numpy()[3])  # a 640-element pattern is defined
        self.assertGreater(state.split_half[0].numpy()[0], 0.5)

    def test_a_replica_without_examples_leaves_it_undefined(self):
        """k counts 3 of 4 samples (replica 2 sent zeros): the halves' static counts do not
        hold, so the step records undefined rows (zeros), not a wrong value."""
        rng = np.random.RandomState(0)
        shape = (256,)
        samples = pattern_samples(rng, shape, 4, 1)
        samples[2] = 0.0
        variable = tf.Variable(tf.zeros(shape))
        state = gsnr.VRGDState(lambda kind, i, s, _: tf.Variable(tf.zeros(s)), id, 0.0)
        state.add_variables([variable])
        state.split_half[0].assign([0.5, 0.5, 10.0, 1.0])  # a previous recording step
        ctx = FakeReplicaContext([samples], [shape], 1, 1, 0)
        gsnr.variance_reduce(
            [tf.constant(samples[0, 0])],
            [variable],
            state=state,
            replica_context=ctx,
            settings=gsnr.VRGDSettings(split_half=True, statistics_interval=1),
        )
        self.assertAllEqual(state.split_half[0].numpy(), [0.0, 0.0, 0.0, 0.0])
        self.assertGreater(state.statistics[0].numpy()[3], 0.0)  # the step had a GSNR


class TooFewSamplesWarningTest(tf.test.TestCase):
    def test_warns_once_where_the_halves_cannot_be_formed(self):
        """`split_half=True` on 2 replicas of one group (k_A = 1) or on one replica of 4
        groups (no split) logs one warning naming the setting and the fix; 2 replicas of 2
        groups measure it and do not warn."""
        strategy = util.strategy_for(2)
        with strategy.scope():
            variable = tf.Variable(tf.zeros([5]))

        def run(num_groups, on_strategy):
            with (strategy if on_strategy else tf.distribute.get_strategy()).scope():
                aggregator = vrgd_tf.GSNRAggregator(split_half=True, statistics_interval=1)
                aggregator.build([variable])

            def fn():
                ctx = tf.distribute.get_replica_context()
                g = tf.range(5.0) * tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32)
                squares = None if num_groups == 1 else [g * g * 0.5]
                return aggregator([g], [variable], sq_sums=squares, num_groups=num_groups)

            with self.assertLogs("vrgd_tf", "WARNING") as logs:
                for _ in range(2):
                    (strategy.run if on_strategy else lambda f: f())(fn)
                logging.getLogger("vrgd_tf").warning("end")
            return [m for m in logs.output if "split_half=True" in m]

        for groups, on_strategy in ((1, True), (4, False)):
            (message,) = run(groups, on_strategy)
            self.assertRegex(message, r"cannot measure the split-half reliability.*>= 4 replicas")
            self.assertIn("split_half=False", message)
        self.assertEqual(run(2, True), [])


class UndefinedRowTest(tf.test.TestCase):
    def test_statistics_rows_mark_undefined_and_stay_finite(self):
        """A row whose reliability is undefined says so (`reliability_defined` False) and
        keeps finite placeholders (0.0); a defined row reads its recorded values."""
        variables = [tf.Variable(tf.zeros([5])), tf.Variable(tf.zeros([3]))]
        aggregator = vrgd_tf.GSNRAggregator(split_half=True, statistics_interval=1)
        aggregator.build(variables)
        aggregator.state.split_half[1].assign([0.25, 0.125, 7.0, 1.0])
        undefined, defined = aggregator.statistics().values()
        self.assertIs(undefined["reliability_defined"], False)
        self.assertEqual(
            [undefined[f] for f in ("reliability", "reliability_correlation")], [0.0, 0.0]
        )
        self.assertEqual(undefined["reliability_pairs"], 0)
        self.assertIs(defined["reliability_defined"], True)
        self.assertEqual(defined["reliability"], 0.25)
        self.assertEqual(defined["reliability_correlation"], 0.125)
        self.assertEqual(defined["reliability_pairs"], 7)


# --- real fits on 8 replicas -----------------------------------------------------------------


def regression(signal, steps=2, per_replica=16, outputs=4096, seed=0):
    """Data of a one-input, ``outputs``-output linear model (input 1, no bias: each kernel
    element is one output's mean) whose per-replica gradients at ``w = 0`` are pure noise
    around zero mean (``signal=False``: each output is zero-mean noise of its own scale) or
    have a fixed per-element signal-to-noise pattern (``signal=True``: output ``o`` is
    ``1 + sigma_o * noise``, its per-replica GSNR ``per_replica / sigma_o**2``
    log-uniform in ``10**[-1, 3]``)."""
    rng = np.random.RandomState(seed)
    n = steps * K * per_replica
    gsnr_values = 10.0 ** rng.uniform(-1.0, 3.0, outputs)
    sigma = np.sqrt(per_replica / gsnr_values)
    y = float(signal) + sigma * rng.randn(n, outputs)
    return np.ones([n, 1], np.float32), y.astype(np.float32), K * per_replica


#: (name, signal, low, high): each fit's two kernels, pure noise and a fixed pattern, with
#: the range their split-half reliability must fall in. One model holds both (one traced
#: 8-replica step per family instead of two: the suite's time, issue 36); each kernel's
#: gradient is its own output's, as in a model of that output alone.
HEADS = (("noise", False, -0.15, 0.15), ("pattern", True, 0.8, 1.0))


def two_head_data():
    """``x`` and ``{head: y}`` of :func:`regression` for each of :data:`HEADS`, and the
    global batch."""
    ys = {}
    for name, signal, _, _ in HEADS:
        x, ys[name], batch = regression(signal)
    return x, ys, batch


def two_head_model(api, outputs):
    """``api`` (keras or tf_keras): input 1, one bias-free Dense head per :data:`HEADS`."""
    inputs = api.Input((1,))
    heads = {
        name: api.layers.Dense(outputs, use_bias=False, kernel_initializer="zeros", name=name)(
            inputs
        )
        for name, _, _, _ in HEADS
    }
    return api.Model(inputs, heads)


class FitCheck:
    def assert_heads(self, optimizer, outputs):
        """Each head's row is defined, on most of the kernel, in its range; the headline is
        the median of the rows."""
        stats = vrgd_tf.vrgd_statistics(optimizer)
        self.assertLen(stats, len(HEADS))
        for name, _, low, high in HEADS:
            (row,) = [r for key, r in stats.items() if name in key]
            self.assertTrue(row["reliability_defined"], msg=name)
            self.assertBetween(row["reliability_pairs"], 3000, outputs)
            self.assertBetween(row["reliability"], low, high)
        value = vrgd_tf.summaries.headline(stats)["vrgd/median/reliability"]
        self.assertEqual(value, float(np.median([r["reliability"] for r in stats.values()])))


class Keras3FitTest(tf.test.TestCase, FitCheck):
    def test_fit_on_noise_and_on_a_pattern(self):
        x, ys, batch = two_head_data()
        outputs = ys["noise"].shape[1]
        with util.strategy_for(K).scope():
            model = two_head_model(keras, outputs)
            optimizer = vrgd_tf.VRGDSGD(learning_rate=0.0, split_half=True, statistics_interval=1)
            model.compile(optimizer=optimizer, loss="mse")
        model.fit(x, ys, batch_size=batch, epochs=1, verbose=0, shuffle=False)
        self.assert_heads(optimizer, outputs)

    def test_saved_state_is_unchanged(self):
        """The split-half variables are in no optimizer variable list or checkpoint: the
        same count with and without; a checkpoint of one loads into the other."""
        counts = []
        for split_half in (False, True):
            with util.strategy_for(K).scope():
                model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
                optimizer = vrgd_tf.VRGDLamb(1e-3, split_half=split_half, statistics_interval=1)
                optimizer.build(model.trainable_variables)
            counts.append(len(optimizer.variables))
            self.assertLen(optimizer.vrgd_aggregator.state.split_half, 2)
        self.assertEqual(counts[0], counts[1])


class TfKerasFitTest(tf.test.TestCase, FitCheck):
    def setUp(self):
        super().setUp()
        util.skip_without_tf_keras(self)

    def test_fit_on_noise_and_on_a_pattern(self):
        import tf_keras

        from vrgd_tf import tf_keras as vtk

        x, ys, batch = two_head_data()
        outputs = ys["noise"].shape[1]
        with util.strategy_for(K).scope():
            model = two_head_model(tf_keras, outputs)
            optimizer = vtk.VRGDSGD(learning_rate=0.0, split_half=True, statistics_interval=1)
            model.compile(optimizer=optimizer, loss="mse")
        model.fit(x, ys, batch_size=batch, epochs=1, verbose=0, shuffle=False)
        self.assert_heads(optimizer, outputs)
        slots = {n for n in optimizer.get_slot_names()}
        self.assertFalse(any("split_half" in n for n in slots))


class StandaloneAggregatorTest(tf.test.TestCase):
    def test_custom_loop(self):
        """Two variables, pure noise and a fixed pattern (one traced 8-replica step: the
        suite's time, issue 36): each in its range, as the NumPy reference."""
        rng = np.random.RandomState(3)
        shape = (4096,)
        grads = {
            "noise": (np.exp(rng.uniform(-2, 2, shape)) * rng.randn(K, *shape)).astype(np.float32),
            "pattern": pattern_samples(rng, shape, K, 1)[:, 0],
        }
        strategy = util.strategy_for(K)
        with strategy.scope():
            variables = [tf.Variable(tf.zeros(shape), name=n) for n, *_ in HEADS]
            aggregator = vrgd_tf.GSNRAggregator(split_half=True, statistics_interval=1)
            aggregator.build(variables)
        consts = [tf.constant(grads[n]) for n, *_ in HEADS]

        @tf.function
        def step():
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                return aggregator([tf.gather(c, rid) for c in consts], variables)

            return strategy.run(fn)

        step()
        rows = aggregator.statistics()
        self.assertLen(rows, len(HEADS))
        for name, _, low, high in HEADS:
            (row,) = [r for key, r in rows.items() if name in key]
            self.assertTrue(row["reliability_defined"], msg=name)
            self.assertBetween(row["reliability_pairs"], 4000, 4096)
            self.assertBetween(row["reliability"], low, high)
            expected = ref.split_half_reliability(grads[name], K // 2)
            self.assertAllClose(row["reliability"], expected[0], atol=3e-4, msg=name)
        # A checkpoint of the aggregator holds no split-half variable.
        names = [
            n
            for n, _ in tf.train.list_variables(
                tf.train.Checkpoint(a=aggregator).write(self.get_temp_dir() + "/ckpt")
            )
        ]
        self.assertFalse(any("split_half" in n for n in names), names)
