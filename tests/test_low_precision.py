"""bfloat16 and float16 variables, every optimizer class of both families.

Each class either trains such variables like float32 (finite weights that move as far as
the float32 run from the same start, up to the dtype's rounding), or refuses them when it
is built, with a ValueError naming the class, the variable, the dtype, why and the fix.
"""

import logging

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf
from vrgd_tf import optimizers as k3
from vrgd_tf import tf_keras as vtk

import util

STEPS = 2
SHAPES = {"kernel": (4, 3), "bias": (3,)}
LOW = ("bfloat16", "float16")

# What each refusal must say besides the class, the variable and the dtype.
ROUNDS = r"beta_2=0\.999 rounds to 1\.0 in bfloat16.*bias correction"
SECOND_MOMENT = r"second moment v accumulates \(1 - beta_2\) \* g\*\*2 in float16"
LARS_TRACE = r"lars\.LARS\) multiplies its momentum slot .* tf\.multiply"

# family -> class name -> (class, kwargs, {dtype: None (trains) or the refusal's pattern})
CASES = {
    "keras": {
        "Lamb": (k3.Lamb, dict(learning_rate=0.02, weight_decay_rate=0.01), {}),
        "Lars": (k3.Lars, dict(learning_rate=1.0, eeta=0.02, weight_decay_rate=1e-3), {}),
        "VRGDSGD": (k3.VRGDSGD, dict(learning_rate=0.1, momentum=0.9), {}),
        "VRGDAdam": (
            k3.VRGDAdam,
            dict(learning_rate=0.02),
            {"bfloat16": ROUNDS, "float16": SECOND_MOMENT},
        ),
        "VRGDLamb": (k3.VRGDLamb, dict(learning_rate=0.02, weight_decay_rate=0.01), {}),
        "VRGDLars": (k3.VRGDLars, dict(learning_rate=1.0, eeta=0.02, weight_decay_rate=1e-3), {}),
    },
    "tf_keras": {
        "VRGDSGD": (vtk.VRGDSGD, dict(learning_rate=0.1, momentum=0.9), {}),
        "VRGDAdam": (
            vtk.VRGDAdam,
            dict(learning_rate=0.02),
            {"bfloat16": ROUNDS, "float16": SECOND_MOMENT},
        ),
        "VRGDLamb": (
            vtk.VRGDLamb,
            dict(learning_rate=0.02, weight_decay_rate=0.01),
            {"bfloat16": ROUNDS, "float16": SECOND_MOMENT},
        ),
        "VRGDLars": (
            vtk.VRGDLars,
            dict(learning_rate=1.0, eeta=0.02, weight_decay_rate=1e-3),
            {"bfloat16": LARS_TRACE, "float16": LARS_TRACE},
        ),
    },
}
FIX = r"Keep the variables float32.*mixed_bfloat16"

# Largest element-wise distance from the float32 run, in units of the dtype's machine
# epsilon times the largest weight: the start is the same, so only the rounding of the
# stored weights (2 steps) and, for rules computing in the variable's dtype, of the update.
ULPS = 4.0
EPS = {"bfloat16": 2.0**-7, "float16": 2.0**-10}  # machine epsilon


def as_dtype(x, dtype):
    return np.asarray(x, np.float32).astype(tf.as_dtype(dtype).as_numpy_dtype)


def to_float(x):
    return np.asarray(tf.cast(tf.convert_to_tensor(x), tf.float32))


def problem(k=1, seed=0):
    """Start weights (exact in bfloat16 and float16) and per-replica gradients of mixed
    magnitudes (1e-3 to 1), the same at every step; with k > 1 they differ across replicas."""
    rng = np.random.RandomState(seed)
    init, grads = {}, {}
    for n, s in SHAPES.items():
        init[n] = to_float(as_dtype(rng.uniform(0.5, 2.0, s) * rng.choice([-1, 1], s), "bfloat16"))
        signal = rng.randn(*s) * 10.0 ** rng.uniform(-3, 0, s)
        noise = 0.5 * np.abs(signal) * rng.randn(k, *s) if k > 1 else np.zeros((1,) + s)
        g = (signal + noise) / k
        grads[n] = np.broadcast_to(g, (STEPS, k) + s).astype(np.float32)
    return init, grads


def make_variable(family, dtype):
    if family == "keras":
        return lambda n, v: keras.Variable(v, dtype=dtype, name=n)
    return lambda n, v: tf.Variable(tf.cast(v, dtype), name=n)


def record_every_step(cls, kwargs):
    """``statistics_interval=1`` for a VRGD class (the tests read each step's diagnostics)
    that is not given one; nothing for a base class."""
    if hasattr(cls, "vrgd_statistics") and "statistics_interval" not in kwargs:
        return {"statistics_interval": 1}
    return {}


def run(family, cls, kwargs, dtype, init, grads, k=1):
    grads = {n: as_dtype(g, dtype) for n, g in grads.items()}
    variables, opt = util.run_custom_loop(
        util.strategy_for(k),
        lambda: cls(**kwargs, **record_every_step(cls, kwargs)),
        init,
        grads,
        make_variable=make_variable(family, dtype),
    )
    return {n: v for n, v in variables.items()}, opt


def all_cases():
    for family, classes in sorted(CASES.items()):
        for name in sorted(classes):
            for dtype in LOW:
                yield dict(
                    testcase_name=f"_{family}_{name}_{dtype}", family=family, name=name, dtype=dtype
                )


class LowPrecisionTest(tf.test.TestCase, parameterized.TestCase):
    def setUp(self):
        super().setUp()
        logger = logging.getLogger("vrgd_tf")
        self.addCleanup(logger.setLevel, logger.level)  # (later tests listen on it)
        logger.setLevel(logging.ERROR)  # the one-replica warning

    @parameterized.named_parameters(*all_cases())
    def test_trains_like_float32_or_refuses_at_build(self, family, name, dtype):
        cls, kwargs, refusals = CASES[family][name]
        init, grads = problem()
        if dtype in refusals:
            with self.assertRaisesRegex(
                ValueError,
                "(?s)"
                + ".*".join(
                    [
                        cls.__name__,
                        "cannot train variable '.*kernel.*'",
                        f"of dtype {dtype}",
                        refusals[dtype],
                        FIX,
                    ]
                ),
            ):
                run(family, cls, kwargs, dtype, init, grads)
            return
        expected, _ = run(family, cls, kwargs, "float32", init, grads)
        got, _ = run(family, cls, kwargs, dtype, init, grads)
        eps = EPS[dtype]
        for n in init:
            self.assertEqual(tf.as_dtype(got[n].dtype).name, dtype)
            w = to_float(got[n])
            w32 = to_float(expected[n])
            self.assertTrue(np.all(np.isfinite(w)), msg=f"{n}: {w}")
            moved, moved32 = (np.linalg.norm(w - init[n]), np.linalg.norm(w32 - init[n]))
            self.assertGreater(moved32, 0.02, msg=n)
            self.assertBetween(moved / moved32, 0.8, 1.25)
            self.assertAllClose(w, w32, rtol=0, atol=ULPS * eps * np.abs(init[n]).max(), msg=n)

    @parameterized.parameters(
        # (class, kwargs, dtype, None if it builds, else a pattern of the refusal)
        (k3.VRGDSGD, dict(momentum=0.999), "bfloat16", r"momentum=0\.999 rounds to 1\.0"),
        (k3.VRGDSGD, dict(momentum=0.999), "float16", None),  # 0.99902 in float16
        (k3.VRGDSGD, dict(momentum=1.0), "bfloat16", None),  # 1 by choice, not rounding
        (k3.VRGDAdam, dict(epsilon=1e-9), "float16", r"epsilon=1e-09 rounds to 0 in float16"),
        (k3.VRGDAdam, dict(beta_2=0.99), "bfloat16", None),  # 0.98828 in bfloat16
        (k3.VRGDAdam, dict(), "float64", None),
        (
            k3.make_vrgd_optimizer(keras.optimizers.Lion, name="VRGDLionForTest", register=False),
            dict(),
            "float16",
            None,
        ),  # no 2nd moment
    )
    def test_hyperparameter_checks_are_data_driven(self, cls, kwargs, dtype, refusal):
        opt = cls(learning_rate=0.01, **kwargs)
        variable = keras.Variable(np.ones(3), dtype=dtype, name="w")
        if refusal is None:
            opt.build([variable])
            self.assertTrue(opt.built)
        else:
            with self.assertRaisesRegex(ValueError, f"(?s)of dtype {dtype}.*{refusal}"):
                opt.build([variable])
            self.assertFalse(opt.built)  # refused before any state was made

    @parameterized.product(
        cls=[k3.Lamb, k3.Lars, k3.VRGDLamb, k3.VRGDLars], dtype=LOW + ("float32", "float64")
    )
    def test_port_slots_are_float32_for_low_precision_variables(self, cls, dtype):
        opt = cls()
        opt.build([keras.Variable(np.ones(3), dtype=dtype, name="w")])
        slots = [v for v in opt.variables if v.shape == (3,) and not v.name.startswith("vrgd_")]
        self.assertLen(slots, 2 if cls in (k3.Lamb, k3.VRGDLamb) else 1)
        for slot in slots:
            self.assertEqual(slot.dtype, "float32" if dtype in LOW else dtype, slot.name)
            self.assertEqual(slot.name, "w_" + slot.name.split("_")[-1])

    @parameterized.product(cls=[k3.Lamb, k3.VRGDLamb], dtype=LOW)
    def test_lamb_zero_gradient_leaves_weights_unchanged(self, cls, dtype):
        # Was NaN for bfloat16: beta_2 = 0.999 rounded to 1 and 1 - beta_2**t was 0.
        v = keras.Variable(np.array([1.0, -0.5, 2.0, 0.25]), dtype=dtype, name="w")
        opt = cls(0.01)
        for _ in range(2):
            opt.apply_gradients([(tf.zeros(4, dtype), v)])
        self.assertAllEqual(to_float(v), [1.0, -0.5, 2.0, 0.25])

    @parameterized.product(cls=[k3.Lamb, k3.VRGDLamb], dtype=LOW)
    def test_lamb_first_step_is_learning_rate_times_norm(self, cls, dtype):
        # Step 1 of LAMB: update = m_hat / sqrt(v_hat) = sign(g) (epsilon aside), trust
        # ratio ||w|| / ||update|| = 1 for w = ones(4): w moves by lr = 0.01, to 0.99.
        v = keras.Variable(np.ones(4), dtype=dtype, name="w")
        cls(0.01).apply_gradients([(tf.constant([0.5, 1e-3, 3.0, 0.02], dtype), v)])
        self.assertEqual(v.dtype, dtype)
        half_spacing_below_one = EPS[dtype] / 4
        self.assertAllClose(
            to_float(v), np.full(4, 0.99), rtol=0, atol=half_spacing_below_one + 1e-4
        )

    @parameterized.parameters(
        (family_name, dtype)
        for family_name in (
            ("keras", "VRGDSGD"),
            ("keras", "VRGDLamb"),
            ("keras", "VRGDLars"),
            ("tf_keras", "VRGDSGD"),
        )
        for dtype in LOW
        # VRGDSGD in float16 on two replicas, both families, factors at gamma:
        # test_float16_squares_that_overflow_stay_finite (the suite's time, issue 36).
        if (family_name[1], dtype) != ("VRGDSGD", "float16")
    )
    def test_gsnr_with_low_precision_gradients_on_two_replicas(self, family_name, dtype):
        """The GSNR step computes in float32 and casts back: finite, same as float32, and
        the factor is active (some elements clipped at gamma)."""
        family, name = family_name
        cls, kwargs, _ = CASES[family][name]
        init, grads = problem(k=2, seed=3)
        # Rounded to the dtype first, so both runs see the same gradients.
        grads = {n: to_float(as_dtype(g, dtype)) for n, g in grads.items()}
        kwargs = dict(kwargs, gamma=0.1)
        expected, _ = run(family, cls, kwargs, "float32", init, grads, k=2)
        got, opt = run(family, cls, kwargs, dtype, init, grads, k=2)
        eps = EPS[dtype]
        for n in init:
            w = to_float(got[n])
            self.assertTrue(np.all(np.isfinite(w)), msg=f"{n}: {w}")
            self.assertAllClose(
                w, to_float(expected[n]), rtol=0, atol=ULPS * eps * np.abs(init[n]).max(), msg=n
            )
        stats = opt.vrgd_statistics()
        self.assertLen(stats, len(init))
        for n, s in stats.items():
            self.assertTrue(all(np.isfinite(list(s.values()))), msg=f"{n}: {s}")
        self.assertGreater(max(s["frac_at_gamma"] for s in stats.values()), 0.0)

    def test_float16_squares_that_overflow_stay_finite(self):
        """Gradients of 300 (squares overflow float16 at 256) on 2 replicas: finite weights
        (hand-computed) and diagnostics, in both families."""
        init = {"w": np.zeros(4, np.float32)}
        g = np.array([[300.0, -290.0, 280.0, 1.0], [310.0, 310.0, 290.0, 3.0]], np.float16)
        grads = {"w": np.broadcast_to(g, (1, 2, 4))}
        for family in ("keras", "tf_keras"):
            cls = k3.VRGDSGD if family == "keras" else vtk.VRGDSGD
            got, opt = run(family, cls, dict(learning_rate=1e-3), "float16", init, grads, k=2)
            w = to_float(got["w"])
            self.assertTrue(np.all(np.isfinite(w)), msg=family)
            # GSNR mean**2 / var: 3721, 0.0011, 3249, 4; mean 1744; factors clip(r / 1744,
            # 0.1, 1) = 1, 0.1, 1, 0.1; w = -lr * factor * (sum over the replicas).
            self.assertAllClose(w, [-0.61, -0.1 * 20e-3, -0.57, -0.1 * 4e-3], rtol=2e-3, msg=family)
            # The diagnostics too (float16 in both families: tf_keras' only float16 case).
            for s in opt.vrgd_statistics().values():
                self.assertTrue(all(np.isfinite(list(s.values()))), msg=f"{family}: {s}")


class Float64Test(tf.test.TestCase, parameterized.TestCase):
    """float64 variables: S1 is summed in float64, so gamma = 1 is the base bit for bit, and a
    finite gradient beyond float32's range stays finite (it became NaN when S1 was packed in
    float32)."""

    @parameterized.parameters("keras", "tf_keras")
    def test_gamma_one_is_the_base_and_huge_gradients_stay_finite(self, family):
        if family == "tf_keras":
            util.skip_without_tf_keras(self)
        rng = np.random.RandomState(0)
        for grads in (rng.randn(2, 4), np.array([[0.5, 1e40], [0.25, -3e40]])):
            got = []
            for vr in (False, True):
                strategy = util.strategy_for(2)
                with strategy.scope():
                    if family == "keras":
                        var = keras.Variable(np.ones(grads.shape[1]), dtype="float64", name="w")
                        opt = (
                            k3.VRGDSGD(0.1, gamma=1.0, beta_3=0.0, statistics_interval=1)
                            if vr
                            else keras.optimizers.SGD(0.1)
                        )
                        opt.build([var])
                    else:
                        import tf_keras

                        var = tf.Variable(np.ones(grads.shape[1]), dtype=tf.float64, name="w")
                        opt = (
                            vtk.VRGDSGD(0.1, gamma=1.0, beta_3=0.0, statistics_interval=1)
                            if vr
                            else tf_keras.optimizers.SGD(0.1)
                        )

                @tf.function
                def step(g):
                    strategy.run(lambda g: opt.apply_gradients([(g, var)]), args=(g,))

                step(
                    strategy.experimental_distribute_values_from_function(
                        lambda c: tf.constant(grads[c.replica_id_in_sync_group], tf.float64)
                    )
                )
                got.append(var.numpy())
            self.assertTrue(np.all(np.isfinite(got[1])))
            self.assertAllEqual(got[1], got[0])

    def test_beyond_float32_range_the_variable_gets_factor_one(self):
        """A float64 gradient beyond float32's range has no float32 statistics: that
        variable's factor is 1 on the step (the base's step, docs/spec.md section 1) and the
        other variable keeps its GSNR factor; the step counts as not finite."""
        strategy = util.strategy_for(2)
        with strategy.scope():
            huge = tf.Variable(np.zeros(2), dtype=tf.float64, name="huge")
            small = tf.Variable(np.zeros(3), dtype=tf.float64, name="small")
            agg = vrgd_tf.GSNRAggregator(gamma=0.1, statistics_interval=1)
            agg.build([huge, small])
        grads = {
            "huge": np.array([[0.5, 1e40], [0.25, -3e40]]),
            "small": np.array([[1.0, 1.0, 1.0], [1.1, 0.5, -0.5]]),
        }

        @tf.function
        def step():
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                g = [tf.gather(tf.constant(grads[n]), rid) for n in ("huge", "small")]
                return [tf.convert_to_tensor(u) for u in agg(g, [huge, small])]

            return strategy.run(fn)

        # The sums: the 2 replicas' shares.
        out = [strategy.experimental_local_results(o)[0].numpy() * 2 for o in step()]
        self.assertAllEqual(out[0], grads["huge"].sum(axis=0))
        # GSNR S1**2 / (2 S2 - S1**2): 441, 9, 1/9; mean 150; factors 1, 0.1, 0.1.
        self.assertAllClose(out[1], [2.1, 0.15, 0.05], rtol=1e-6)
        # Not a finite step: the diagnostics keep the values before any recording step.
        self.assertEqual(agg.statistics()["small"]["mean_factor"], 0.0)


class Float64SparseTest(tf.test.TestCase, parameterized.TestCase):
    """float64 sparse gradients (docs/spec.md section 1: gamma = 1 is exact for float64):
    the rows reach the base in float64. They used to be rounded to float32 (the exact-rows
    all-gather packs float32; the dense-statistics path scaled them in float32)."""

    @parameterized.parameters("rows", "dense")
    def test_gamma_one_hands_over_the_float64_rows(self, sparse_statistics):
        strategy = util.strategy_for(2)
        with strategy.scope():
            var = tf.Variable(np.zeros((5, 2)), dtype=tf.float64, name="table")
            agg = vrgd_tf.GSNRAggregator(
                gamma=1.0, beta_3=0.0, sparse_statistics=sparse_statistics, statistics_interval=1
            )
            agg.build([var])
        values = np.array([[[1 + 1e-12, 2.0], [3.0, -1e-13]], [[0.5, 1 - 1e-12], [7.0, 1e-9]]])
        indices = np.array([[0, 3], [3, 4]])

        @tf.function
        def step():
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                g = tf.IndexedSlices(
                    tf.gather(tf.constant(values), rid),
                    tf.gather(tf.constant(indices), rid),
                    tf.constant([5, 2]),
                )
                return tf.convert_to_tensor(agg([g], [var])[0])

            return strategy.run(fn)

        got = strategy.experimental_local_results(step())[0].numpy() * 2  # 2 shares: the sum
        expected = np.zeros((5, 2))
        for r in range(2):
            np.add.at(expected, indices[r], values[r])
        self.assertEqual(got.dtype, np.float64)
        self.assertAllEqual(got, expected)


if __name__ == "__main__":
    tf.test.main()
