"""`squares_dtype="bfloat16"`: the squares all-reduced in bfloat16, the gradients in float32.

Validation by name, config round trips (both families, aggregator, Model Garden), factors
against float32 and against a NumPy model of the bfloat16 rounding, `gamma=1, beta_3=0`
still the base optimizer, and the XLA-compiled step.
"""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

import vrgd_tf
import vrgd_tf.tf_keras as vtk
from vrgd_tf import gsnr
from vrgd_tf.model_garden import configs

import numpy_reference as ref
import util

BF16_U = 2.0**-8  # unit roundoff of bfloat16 (8-bit significand)


def bf16(x):
    """float64 values of ``x`` rounded to bfloat16 (round to nearest even, as tf.cast)."""
    return tf.cast(tf.cast(np.asarray(x, np.float32), tf.bfloat16), tf.float64).numpy()


def factor_of_step(cls, grads, k, jit_compile=False, **kwargs):
    """One VRGD step with learning rate 1 and no momentum: returns the factor
    ``-(w1 - w0) / S1`` per element. grads: float32 [k, n]."""
    init = np.zeros(grads.shape[1:], np.float32)
    variables, opt = util.run_custom_loop(
        util.strategy_for(k),
        lambda: cls(learning_rate=1.0, **kwargs),
        {"w": init},
        {"w": grads[None]},
        jit_compile=jit_compile,
    )
    w = util.replica_values(variables["w"])[0]
    with np.errstate(divide="ignore", invalid="ignore"):  # S1 = 0: no factor to read
        return -w / grads.astype(np.float64).sum(0), opt


def reference_bf16_factor(xs, gamma):
    """float64 factors when each square is rounded to bfloat16 and the two replicas' squares
    are added in bfloat16 (k = 2: one addition, so the order does not matter)."""
    xs = np.asarray(xs, np.float64)
    k = xs.shape[0]
    assert k == 2
    s1 = xs.sum(0)
    s2 = bf16(bf16(xs[0] ** 2) + bf16(xs[1] ** 2))
    signal = s1**2 / k
    noise = s2 - signal
    defined = noise > BF16_U * k * s2
    r = np.where(defined, signal / np.where(defined, noise, 1.0), 0.0)
    mu = r[defined].mean()
    return np.where(defined, np.clip(r / mu, gamma, 1.0), 1.0)


def random_pair(seed, n=400):
    """Two replicas' gradients with GSNR = (signal / scale)**2 from 0 to about 30."""
    rng = np.random.RandomState(seed)
    signal = np.clip(rng.randn(n), -2.0, 2.0)
    sign = np.where(rng.rand(n) < 0.5, 1.0, -1.0)
    scale = np.exp(rng.uniform(-1.0, 1.5, n))
    return (signal + np.stack([sign, -sign]) * scale).astype(np.float32)


class FakeReplicaContext:
    """Replica 0 of 2, the other replica's gradient given: the all-reduce adds it in, in
    the buffers' own dtypes (float32 gradients, bfloat16 squares). Lets the whole GSNR step,
    collective included, compile into one XLA cluster on one device (as in test_xla.py)."""

    num_replicas_in_sync = 2

    def __init__(self, other):
        self.other = np.ravel(other).astype(np.float32)

    def all_reduce(self, op, value):
        """The step's three calls: ``[x]`` (float32), ``[x**2]`` (bfloat16), then
        ``[[count, stray]]`` (float32: bfloat16 squares cannot carry it exactly)."""
        assert op == tf.distribute.ReduceOp.SUM
        if value[0].dtype == tf.bfloat16:  # the squares' own call
            return [value[0] + tf.cast(tf.constant(self.other * self.other), tf.bfloat16)]
        (x,) = value
        assert x.dtype == tf.float32
        if x.shape == [2] and self.other.shape != (2,):  # [count, stray]
            return [x + tf.constant([1.0, 0.0])]
        assert x.shape == self.other.shape
        return [x + tf.constant(self.other)]


class ValidationTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(
        (lambda **kw: vrgd_tf.VRGDSGD(**kw),),
        (lambda **kw: vrgd_tf.VRGDLamb(**kw),),
        (lambda **kw: vtk.VRGDLars(**kw),),
        (lambda **kw: vtk.VRGDAdam(**kw),),
        (lambda **kw: vrgd_tf.GSNRAggregator(**kw),),
    )
    def test_bad_values_are_refused_by_name(self, make):
        for bad in ("float16", "bf16", "Float32", ""):
            with self.assertRaisesRegex(ValueError, r"`squares_dtype`.*'float32', 'bfloat16'"):
                make(squares_dtype=bad)
        for bad in (16, None, np.float32):
            with self.assertRaisesRegex(TypeError, "`squares_dtype`"):
                make(squares_dtype=bad)
        self.assertEqual(make(squares_dtype=tf.bfloat16).squares_dtype, "bfloat16")
        self.assertEqual(make().squares_dtype, "float32")

    def test_variance_reduce_checks_before_any_collective(self):
        strategy = util.strategy_for(2)
        with strategy.scope():
            v = tf.Variable([1.0, 2.0])
        with self.assertRaisesRegex(ValueError, "`squares_dtype`"):
            strategy.run(
                lambda: gsnr.variance_reduce(
                    [tf.ones([2])],
                    [v],
                    state=None,
                    settings=gsnr.VRGDSettings(squares_dtype="f16"),
                )
            )

    def test_model_garden_config_names_the_key(self):
        config = configs.VRGDOptimizationConfig(
            {"optimizer": {"type": "vrgd_lamb", "vrgd_lamb": {"squares_dtype": "float16"}}}
        )
        with self.assertRaisesRegex(
            ValueError, r"optimizer\.vrgd_lamb\.squares_dtype: `squares_dtype` must be one of"
        ):
            configs.check_optimization_config(config)
        for field in configs.VRGD_CONFIG_FIELDS.values():
            self.assertEqual(field().squares_dtype, "float32")


class ConfigRoundTripTest(tf.test.TestCase):
    def test_keras3_get_config_from_config_and_serialize(self):
        for cls in (vrgd_tf.VRGDSGD, vrgd_tf.VRGDAdam, vrgd_tf.VRGDLamb, vrgd_tf.VRGDLars):
            opt = cls(learning_rate=0.01, squares_dtype="bfloat16")
            self.assertEqual(opt.get_config()["squares_dtype"], "bfloat16")
            self.assertEqual(cls.from_config(opt.get_config()).squares_dtype, "bfloat16")
            again = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
            self.assertIsInstance(again, cls)
            self.assertEqual(again.squares_dtype, "bfloat16")

    def test_tf_keras_and_aggregator_round_trip(self):
        for cls in (vtk.VRGDSGD, vtk.VRGDAdam, vtk.VRGDLamb, vtk.VRGDLars):
            opt = cls(learning_rate=0.01, squares_dtype="bfloat16")
            self.assertEqual(cls.from_config(opt.get_config()).squares_dtype, "bfloat16")
        agg = vrgd_tf.GSNRAggregator(gamma=0.2, squares_dtype="bfloat16", statistics_interval=1)
        self.assertEqual(
            vrgd_tf.GSNRAggregator.from_config(agg.get_config()).get_config(), agg.get_config()
        )

    def test_model_garden_builds_the_optimizer_with_it(self):
        from official.modeling.optimization import optimizer_factory

        import vrgd_tf.model_garden  # noqa: F401 (registers the types)

        config = configs.VRGDOptimizationConfig(
            {
                "optimizer": {"type": "vrgd_lamb", "vrgd_lamb": {"squares_dtype": "bfloat16"}},
                "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.01}},
            }
        )
        configs.check_optimization_config(config)
        again = configs.VRGDOptimizationConfig(config.as_dict())
        self.assertEqual(again.optimizer.vrgd_lamb.squares_dtype, "bfloat16")
        factory = optimizer_factory.OptimizerFactory(again)
        opt = factory.build_optimizer(factory.build_learning_rate())
        self.assertEqual(opt.squares_dtype, "bfloat16")

    def test_saved_keras_model_keeps_it(self):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(
            optimizer=vrgd_tf.VRGDSGD(
                learning_rate=0.1, squares_dtype="bfloat16", statistics_interval=1
            ),
            loss="mse",
        )
        model.fit(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32), verbose=0)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.keras")
            model.save(path)
            loaded = keras.models.load_model(path)
        self.assertEqual(loaded.optimizer.squares_dtype, "bfloat16")
        self.assertAllEqual(loaded.optimizer.iterations, 1)


class FactorTest(tf.test.TestCase, parameterized.TestCase):
    def test_exact_in_bfloat16_gives_the_float32_factors_exactly(self):
        # Small integers: every square and every sum of squares (< 256) is a bfloat16
        # number, so both dtypes see the same S2 and the factors are equal bit for bit.
        xs = np.array(
            [[1, 2, 3, -1, 4, 2, 0, 5], [3, 2, 1, 2, 4, -2, 1, 6]], np.float32
        )  # element 1 and 4: identical on both replicas (factor 1)
        f32, _ = factor_of_step(vrgd_tf.VRGDSGD, xs, 2, gamma=0.1)
        b16, _ = factor_of_step(vrgd_tf.VRGDSGD, xs, 2, gamma=0.1, squares_dtype="bfloat16")
        np.testing.assert_array_equal(b16[xs.sum(0) != 0], f32[xs.sum(0) != 0])
        expected, _ = ref.gsnr_factor(xs, 0.1)
        self.assertAllClose(f32[xs.sum(0) != 0], expected[xs.sum(0) != 0], rtol=1e-6)
        self.assertEqual(f32[1], 1.0)
        self.assertEqual(f32[4], 1.0)

    def test_random_gradients_match_the_bfloat16_model_and_float32_within_tolerance(self):
        # Replica d gets signal +- scale, where float32 resolves the variance to ~1e-5 (as
        # util.make_problem).
        xs = random_pair(7)
        b16, _ = factor_of_step(vrgd_tf.VRGDSGD, xs, 2, gamma=0.1, squares_dtype="bfloat16")
        f32, _ = factor_of_step(vrgd_tf.VRGDSGD, xs, 2, gamma=0.1)
        # The implementation is exactly the float64 model of the bfloat16 rounding (up to
        # float32 arithmetic on the rounded sums).
        self.assertAllClose(b16, reference_bf16_factor(xs, 0.1), rtol=2e-5, atol=1e-6)
        # Against float32: |noise error| <= 2u S2 (one rounding of each square, one of
        # their sum), so r is off by at most a relative 2u(1 + r) / (1 - 2u(1 + r)); the
        # factors r / mean(r), clipped, differ by at most 0.05 where r <= 5 (bound
        # measured here: see the assertion's message) and are all in [gamma, 1].
        expected, _ = ref.gsnr_factor(xs, 0.1)
        self.assertAllClose(f32, expected, rtol=1e-4, atol=1e-6)
        s1 = xs.astype(np.float64).sum(0)
        var = (xs.astype(np.float64) ** 2).sum(0) / 2 - (s1 / 2) ** 2
        r = (s1 / 2) ** 2 / var
        moderate = r <= 5.0
        diff = np.abs(b16 - f32)
        self.assertLess(diff[moderate].max(), 0.05, msg=f"max diff {diff[moderate].max()}")
        self.assertLess(np.median(diff), 0.01)
        self.assertBetween(b16.min(), 0.1 - 1e-6, 1.0)
        self.assertBetween(b16.max(), 0.1, 1.0 + 1e-6)

    def test_xla_compiled_step_equals_eager_and_the_model(self):
        xs = random_pair(11, n=60)
        state = gsnr.VRGDState(
            lambda kind, i, shape, ref_: tf.Variable(tf.zeros(shape), name=kind), id, 0.9
        )
        var = tf.Variable(tf.zeros([60]))
        state.add_variables([var])

        def fn(g):
            return gsnr.variance_reduce(
                [g],
                [var],
                state=state,
                replica_context=FakeReplicaContext(xs[1]),
                settings=gsnr.VRGDSettings(squares_dtype="bfloat16"),
            )[0]

        compiled = tf.function(fn, jit_compile=True)(tf.constant(xs[0])).numpy()
        eager = fn(tf.constant(xs[0])).numpy()
        s1 = xs.astype(np.float64).sum(0)
        self.assertAllClose(eager / s1, reference_bf16_factor(xs, 0.1), rtol=2e-5, atol=1e-6)
        # XLA may keep the bfloat16 sum of this one-device stand-in in float32 (it allows
        # excess precision), so compiled is within the bfloat16 rounding of eager and of
        # the float32 factors, not equal to either.
        f32, _ = ref.gsnr_factor(xs, 0.1)
        self.assertAllClose(compiled / s1, eager / s1, atol=0.02, rtol=0)
        self.assertAllClose(compiled / s1, f32, atol=0.02, rtol=0)
        self.assertBetween((compiled / s1).min(), 0.1 - 1e-6, 1.0 + 1e-6)

    def test_unresolvable_noise_gives_factor_one_not_nan(self):
        # GSNR 1e4 on both replicas: float32 resolves it, bfloat16 does not (the
        # rounding of the squares exceeds the spread), so with bfloat16 it is undefined:
        # factor 1, left out of mean(r), never NaN or a spurious huge ratio.
        xs = np.array([[1.0, 1.0, 2.0], [1.01, -0.5, 0.5]], np.float32)
        b16, opt = factor_of_step(vrgd_tf.VRGDSGD, xs, 2, gamma=0.1, squares_dtype="bfloat16")
        self.assertTrue(np.all(np.isfinite(b16)))
        self.assertEqual(b16[0], 1.0)
        f32, _ = factor_of_step(vrgd_tf.VRGDSGD, xs, 2, gamma=0.1)
        self.assertEqual(f32[0], 1.0)  # r ~ 4e4 > mean(r): clipped at 1
        self.assertAllClose(b16, reference_bf16_factor(xs, 0.1), rtol=1e-5)
        # float32: element 0 is defined and inflates mean(r); bfloat16 leaves it out.
        self.assertLess(f32[2], b16[2])
        stats = opt.vrgd_statistics()
        self.assertTrue(all(np.isfinite(v) for s in stats.values() for v in s.values()))

    def test_gamma_one_beta_zero_is_the_base_optimizer(self):
        cls, base = vrgd_tf.VRGDSGD, keras.optimizers.SGD
        init, grads = util.make_problem(4, seed=3, steps=3)
        strategy = util.strategy_for(4)
        vr, _ = util.run_custom_loop(
            strategy,
            lambda: cls(
                learning_rate=0.1, momentum=0.9, gamma=1.0, beta_3=0.0, squares_dtype="bfloat16"
            ),
            init,
            grads,
        )
        plain, _ = util.run_custom_loop(
            strategy, lambda: base(learning_rate=0.1, momentum=0.9), init, grads
        )
        for n in init:
            np.testing.assert_array_equal(
                util.replica_values(vr[n])[0], util.replica_values(plain[n])[0]
            )

    def test_tf_keras_gamma_one_is_the_base_optimizer(self):
        init, grads = util.make_problem(2, seed=4, steps=2)
        strategy = util.strategy_for(2)
        mk = lambda n, v: tf.Variable(v, name=n)  # noqa: E731
        vr, _ = util.run_custom_loop(
            strategy,
            lambda: vtk.VRGDSGD(
                learning_rate=0.1, gamma=1.0, squares_dtype="bfloat16", statistics_interval=1
            ),
            init,
            grads,
            make_variable=mk,
        )
        plain, _ = util.run_custom_loop(
            strategy,
            lambda: tf_keras.optimizers.legacy.SGD(learning_rate=0.1),
            init,
            grads,
            make_variable=mk,
        )
        for n in init:
            np.testing.assert_array_equal(
                util.replica_values(vr[n])[0], util.replica_values(plain[n])[0]
            )


if __name__ == "__main__":
    tf.test.main()


class SparseRowsThresholdTest(tf.test.TestCase):
    """The sparse path gathers float32 rows whatever ``squares_dtype``: their noise threshold
    stays float32's. With the bfloat16 threshold, rows whose GSNR is above ~127 (k = 2) had
    factor 1 and were left out of the mean, so the same sparse gradient stepped differently
    with ``squares_dtype="bfloat16"``."""

    def test_sparse_step_is_the_same_with_bfloat16_squares(self):
        rng = np.random.RandomState(3)
        base = rng.randn(3, 3).astype(np.float32)
        vals = [base + 0.03 * rng.randn(3, 3).astype(np.float32) for _ in range(2)]
        vals[0][0] = rng.randn(3)
        got = {}
        for sd in ("float32", "bfloat16"):
            strategy = util.strategy_for(2)
            with strategy.scope():
                var = keras.Variable(np.ones((12, 3), np.float32), name="emb")
                opt = vrgd_tf.VRGDSGD(0.1, squares_dtype=sd, statistics_interval=1)
                opt.build([var])

            @tf.function
            def step(v):
                def fn(v):
                    g = tf.IndexedSlices(v, tf.constant([1, 2, 3]), tf.constant([12, 3]))
                    opt.apply_gradients([(g, var)])

                strategy.run(fn, args=(v,))

            step(
                strategy.experimental_distribute_values_from_function(
                    lambda c: tf.constant(vals[c.replica_id_in_sync_group])
                )
            )
            got[sd] = (var.numpy(), list(opt.vrgd_statistics().values())[0])
        self.assertAllEqual(got["bfloat16"][0], got["float32"][0])
        self.assertEqual(got["bfloat16"][1], got["float32"][1])
        self.assertLess(got["float32"][1]["frac_at_one"], 1.0)
