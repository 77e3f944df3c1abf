"""The undefined and extreme cases of spec section 2 and 4, against the NumPy reference."""

import logging

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf
from vrgd_tf import gsnr
from vrgd_tf.gsnr import factors, statistics

import numpy_reference as ref
import util


def one_var_run(cls, kwargs, grads, init=None, k=None, dtype="float32"):
    """grads: [steps, k, *shape]. Returns (final weights, optimizer)."""
    grads = np.asarray(grads)
    k = grads.shape[1] if k is None else k
    shape = grads.shape[2:]
    init = np.ones(shape, np.float32) if init is None else init
    variables, opt = util.run_custom_loop(
        util.strategy_for(k),
        lambda: cls(**kwargs),
        {"w": init},
        {"w": grads},
        make_variable=lambda n, v: keras.Variable(v.astype(dtype), name=n, dtype=dtype),
    )
    return variables["w"], opt


class GSNRFactorTest(tf.test.TestCase, parameterized.TestCase):
    """gsnr_factor against the reference on mixed defined/undefined elements."""

    @parameterized.parameters(2, 4, 8)
    def test_factor_and_statistics(self, k):
        rng = np.random.RandomState(k)
        noise = rng.randn(k, 50)
        noise = (noise - noise.mean(0)) / noise.std(0)  # GSNR set by design, below ~30
        xs = noise * np.exp(rng.uniform(-1, 1, 50)) + np.clip(rng.randn(50), -2, 2)
        xs[:, :5] = xs[0, :5]  # identical on every replica: s2 = 0
        xs[:, 5:8] = 0.0  # all zero
        xs = xs.astype(np.float32)
        s1 = tf.constant(xs.sum(0))
        s2 = tf.constant((xs.astype(np.float32) ** 2).sum(0))
        factor, stats = gsnr.gsnr_factor(s1, s2, k, 0.1)
        expected, _ = ref.gsnr_factor(xs, 0.1)
        self.assertAllClose(factor, expected, atol=1e-5)
        np.testing.assert_array_equal(factor.numpy()[:8], 1.0)
        self.assertBetween(float(tf.reduce_min(factor)), 0.1, 1.0)
        mu, at_gamma, at_one, mean_factor, norm_ratio = ref.gsnr_statistics(xs, 0.1)
        self.assertAllClose(
            stats.stack(), [mu, at_gamma, at_one, mean_factor, norm_ratio], rtol=1e-5
        )
        self.assertAllClose(mean_factor, expected.mean())
        self.assertGreater(at_gamma, 0.0)

    def test_packed_variables_match_per_variable_reference_eager_and_compiled(self):
        # Each variable of the packed buffer is normalised by its own mean GSNR; empty
        # variables anywhere in the list own no element.
        rng = np.random.RandomState(3)
        k = 4
        for sizes in ([3, 1, 4], [5], [2, 0, 3], [1, 1, 1], [7, 0], [0, 6]):
            parts = [
                (rng.randn(k, n) * rng.uniform(0.7, 2) + rng.randn(n)).astype(np.float32)
                for n in sizes
            ]
            xs = np.concatenate(parts, axis=1)
            s1 = tf.constant(xs.sum(0))
            s2 = tf.constant((xs**2).sum(0))
            expected = np.concatenate(
                [ref.gsnr_factor(p, 0.1)[0] if p.size else np.zeros(0) for p in parts]
            )
            expected_stats = [
                ref.gsnr_statistics(p, 0.1) if p.size else (0.0, 0.0, 0.0, 0.0, 1.0) for p in parts
            ]
            eager = statistics.gsnr_factors_flat(s1, s2, sizes, k, 0.1)
            compiled = tf.function(
                lambda a, b: statistics.gsnr_factors_flat(a, b, sizes, k, 0.1), jit_compile=True
            )(s1, s2)
            # Float32 one-pass variance: relative error ~ k * eps32 * (1 + r), see gsnr.py.
            for factor, stats in (eager, compiled):
                self.assertAllClose(factor, expected, rtol=1e-4, atol=1e-6)
                self.assertAllClose(stats, expected_stats, rtol=1e-4, atol=1e-6)

    def test_xla_compiled_factor_equals_eager(self):
        rng = np.random.RandomState(0)
        xs = (rng.randn(4, 7, 5) + rng.randn(7, 5)).astype(np.float32)
        s1, s2 = tf.constant(xs.sum(0)), tf.constant((xs**2).sum(0))
        compiled = tf.function(lambda a, b: gsnr.gsnr_factor(a, b, 4, 0.1)[0], jit_compile=True)
        self.assertAllClose(
            compiled(s1, s2), gsnr.gsnr_factor(s1, s2, 4, 0.1)[0], rtol=1e-6, atol=0
        )

    @parameterized.parameters(
        ("zero", np.zeros(6)),
        ("mean_zero_but_noisy", None),
    )
    def test_variable_without_usable_mean_gets_factor_one(self, _, xs):
        if xs is None:  # +a / -a on two replicas: mean 0, variance > 0, r = 0 everywhere
            xs = np.array([[1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]], np.float32)
        else:
            xs = np.stack([xs, xs]).astype(np.float32)
        factor, stats = gsnr.gsnr_factor(
            tf.constant(xs.sum(0)), tf.constant((xs**2).sum(0)), 2, 0.1
        )
        np.testing.assert_array_equal(factor.numpy(), 1.0)
        self.assertAllEqual(tf.math.is_finite(stats.stack()), [True] * statistics.NUM_STATISTICS)

    def test_diagnostics_keep_no_extra_full_size_tensor_alive(self):
        """The diagnostics run after the smoothing, in a tf.cond: every [N] tensor the
        branch captures stays alive through it, 4 N bytes per replica at the step's peak.
        Only S1, the raw and the applied factor may be captured (before: also the signal,
        the normalised ratio and the use mask, 2.25 N more)."""
        n = 1000
        sizes = [600, 400]

        @tf.function
        def step(s1, s2, applied):
            parts = [tf.split(x, sizes) for x in (s1, s2, applied)]
            fs = [factors.factor(a, b, 4, 0.1, gsnr.NOISE_RTOL * 4) for a, b in zip(*parts[:2])]
            return tf.cond(
                tf.reduce_all(tf.math.is_finite(s1)),
                lambda: statistics.statistics(parts[0], fs, parts[2], k=4, gamma=0.1, sizes=sizes),
                lambda: tf.zeros([2, statistics.NUM_STATISTICS]),
            )

        spec = tf.TensorSpec([n], tf.float32)
        graph = step.get_concrete_function(spec, spec, spec).graph
        conds = [op for op in graph.get_operations() if op.type in ("If", "StatelessIf")]
        self.assertLen(conds, 1)
        full = [t for t in conds[0].inputs[1:] if t.shape.as_list() in ([600], [400])]
        # Per variable: s1, factor, applied.
        self.assertLen(full, 3 * len(sizes), [t.op.name for t in full])
        self.assertEqual({t.dtype for t in full}, {tf.float32})


class UndefinedCasesTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(
        (vrgd_tf.VRGDSGD, dict(learning_rate=0.1, momentum=0.9)),
        (vrgd_tf.VRGDAdam, dict(learning_rate=0.01)),
        (vrgd_tf.VRGDLamb, dict(learning_rate=0.01, weight_decay_rate=0.01)),
        (vrgd_tf.VRGDLars, dict(learning_rate=0.1, weight_decay_rate=0.01)),
    )
    def test_identical_gradients_on_all_replicas_run_the_base_exactly(self, cls, kwargs):
        g = np.random.RandomState(1).randn(3, 1, 4, 3).astype(np.float32)
        grads = np.repeat(g, 4, axis=1)
        vr_w, opt = one_var_run(cls, dict(kwargs, gamma=0.1, statistics_interval=1), grads)
        base_w, _ = one_var_run(cls._vrgd_base_class, kwargs, grads)
        np.testing.assert_array_equal(vr_w.numpy(), base_w.numpy())
        self.assertEqual(opt.vrgd_statistics()["w"]["frac_at_one"], 1.0)

    def test_all_zero_gradients_leave_weights_unchanged_and_finite(self):
        w, opt = one_var_run(
            vrgd_tf.VRGDLamb, dict(learning_rate=0.1), np.zeros((3, 4, 5), np.float32)
        )
        np.testing.assert_array_equal(w.numpy(), np.ones(5))
        for var in opt.variables:
            self.assertTrue(np.all(np.isfinite(var.numpy())), var.name)

    @parameterized.parameters("none", "one_device")
    def test_one_replica_equals_base_and_warns_once(self, mode):
        g = np.random.RandomState(2).randn(3, 1, 6).astype(np.float32)
        strategy = (
            tf.distribute.get_strategy()
            if mode == "none"
            else tf.distribute.OneDeviceStrategy("/cpu:0")
        )
        with self.assertLogs("vrgd_tf", level=logging.WARNING) as logs:
            vr, opt = util.run_custom_loop(
                strategy,
                lambda: vrgd_tf.VRGDAdam(learning_rate=0.1, statistics_interval=1),
                {"w": np.ones(6, np.float32)},
                {"w": g},
            )
        self.assertLen([r for r in logs.records if "one replica" in r.getMessage()], 1)
        base, _ = util.run_custom_loop(
            strategy, lambda: keras.optimizers.Adam(0.1), {"w": np.ones(6, np.float32)}, {"w": g}
        )
        np.testing.assert_array_equal(vr["w"].numpy(), base["w"].numpy())

    def test_large_gradients_with_tiny_spread(self):
        """~1e4 with a spread of 1e-3: float32 cannot resolve the variance -> factor 1."""
        rng = np.random.RandomState(3)
        base = 1e4 * (1 + rng.rand(1, 1, 8))
        spread = np.concatenate([1e-3 * rng.randn(2, 4, 4), 5e3 * rng.randn(2, 4, 4)], -1)
        grads = np.concatenate([np.repeat(base, 2, 0)[:, :, :8] * np.ones((2, 4, 8))], 0)
        grads = (grads + spread).astype(np.float32)
        w, opt = one_var_run(vrgd_tf.VRGDSGD, dict(learning_rate=1e-6, gamma=0.1), grads)
        self.assertTrue(np.all(np.isfinite(w.numpy())))
        vr = ref.VRGD(ref.SGD(1e-6), 0.1, 0.0)
        expected = util.numpy_run(vr, {"w": np.ones(8)}, {"w": grads})
        self.assertAllClose(w.numpy(), expected["w"], rtol=1e-5)
        np.testing.assert_array_equal(vr.factors["w"][:4], 1.0)  # the tiny-spread half
        self.assertLess(vr.factors["w"][4:].min(), 1.0)  # the noisy half

    def test_squares_that_overflow_float32_give_factor_one_not_inf(self):
        grads = np.full((1, 2, 3), 1e25, np.float32)
        grads[0, 1] = [3e25, 1e25, 2e25]
        w, _ = one_var_run(
            vrgd_tf.VRGDSGD, dict(learning_rate=1e-26), grads, init=np.zeros(3, np.float32)
        )
        self.assertTrue(np.all(np.isfinite(w.numpy())))
        self.assertAllClose(w.numpy(), -1e-26 * grads[0].sum(0), rtol=1e-6)

    def test_non_finite_gradient_passes_through_and_state_is_untouched(self):
        grads = np.random.RandomState(4).randn(2, 2, 5).astype(np.float32)
        grads[1, 0, 2] = np.nan
        w, opt = one_var_run(vrgd_tf.VRGDAdam, dict(learning_rate=0.1), grads[:1])
        deficit_before = opt.vrgd_aggregator.state.deficits[0].numpy().copy()
        stats_before = opt.vrgd_aggregator.state.statistics[0].numpy().copy()
        w2, opt2 = one_var_run(vrgd_tf.VRGDAdam, dict(learning_rate=0.1), grads)
        self.assertTrue(np.isnan(w2.numpy()[2]))  # not hidden
        np.testing.assert_array_equal(
            opt2.vrgd_aggregator.state.deficits[0].numpy(), deficit_before
        )
        np.testing.assert_array_equal(
            opt2.vrgd_aggregator.state.statistics[0].numpy(), stats_before
        )

    @parameterized.parameters("float16", "bfloat16")
    def test_low_precision_variables(self, dtype):
        """Gradients up to ~300 (squares overflow float16 at 256): statistics in float32."""
        rng = np.random.RandomState(5)
        g = 300 * rng.rand(1, 1, 16) * np.sign(rng.randn(1, 1, 16)) + 100 * rng.randn(2, 4, 16)
        np_dtype = tf.as_dtype(dtype).as_numpy_dtype
        grads = g.astype(np_dtype)
        w, opt = one_var_run(
            vrgd_tf.VRGDSGD,
            dict(learning_rate=1e-3),
            grads,
            dtype=dtype,
            init=np.zeros(16, np.float32),
        )
        self.assertEqual(w.dtype, dtype)
        self.assertTrue(np.all(np.isfinite(w.numpy().astype(np.float32))))
        vr = ref.VRGD(ref.SGD(1e-3), 0.1, 0.0)
        expected = util.numpy_run(vr, {"w": np.zeros(16)}, {"w": grads.astype(np.float64)})
        self.assertAllClose(w.numpy().astype(np.float32), expected["w"], rtol=2e-2, atol=2e-2)
        self.assertLess(vr.factors["w"].min(), 0.5)


class SparseGradientTest(tf.test.TestCase):
    def test_embedding_with_repeated_ids(self):
        k, vocab, dim = 2, 6, 3
        ids = np.array([[1, 1, 3], [1, 2, 2]])  # replica d looks up ids[d]
        coef = np.random.RandomState(6).randn(k, 3, dim).astype(np.float32)
        init = np.random.RandomState(7).randn(vocab, dim).astype(np.float32)
        strategy = util.strategy_for(k)
        with strategy.scope():
            emb = keras.layers.Embedding(vocab, dim)
            emb.build((None,))
            emb.embeddings.assign(init)
            opt = vrgd_tf.VRGDSGD(learning_rate=0.5, gamma=0.1, statistics_interval=1)
            opt.build(emb.trainable_variables)
        seen = []

        @tf.function
        def step():
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                with tf.GradientTape() as tape:
                    out = emb(tf.gather(tf.constant(ids), rid))
                    loss = tf.reduce_sum(out * tf.gather(tf.constant(coef), rid)) / k
                grad = tape.gradient(loss, emb.trainable_variables)
                seen.append(type(grad[0]))
                opt.apply_gradients(zip(grad, emb.trainable_variables))

            strategy.run(fn)

        step()
        self.assertTrue(all(t is tf.IndexedSlices for t in seen), seen)
        dense = np.zeros((1, k, vocab, dim))
        for d in range(k):
            for i, r in enumerate(ids[d]):
                dense[0, d, r] += coef[d, i] / k
        vr = ref.VRGD(ref.SGD(0.5), 0.1, 0.0)
        expected = util.numpy_run(vr, {"e": init}, {"e": dense})
        self.assertAllClose(emb.embeddings.numpy(), expected["e"], atol=1e-5)
        self.assertLess(vr.factors["e"][1:3].min(), 1.0)  # the repeated rows are noisy


if __name__ == "__main__":
    tf.test.main()
