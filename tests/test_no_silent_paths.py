"""Paths that used to fail silently or deep in a step: identical replicas, clipping, loss
scaling with one overflowing replica, and strategy combinations Keras 3 cannot run."""

import logging

import keras
import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized
from test_xla import FakeReplicaContext

import vrgd_tf
from vrgd_tf import tf_keras as vtk

import util
from util import make_problem

INERT = "no variable had a defined GSNR"


def inert_warnings(logs):
    return [r for r in logs.records if INERT in r.getMessage()]


def noisy_regression(n=16, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 4).astype(np.float32)
    y = (x @ rng.randn(4, 2) + 2.0 * rng.randn(n, 2)).astype(np.float32)
    return x, y


class IdenticalReplicasTest(tf.test.TestCase):
    """Every replica gets the same batch: VRGD steps as its base and says so, once."""

    def _compiled_model(self, strategy, optimizer):
        with strategy.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="d")])
            model.layers[0].kernel.assign(np.full((4, 2), 0.1, np.float32))
            model.compile(optimizer=optimizer(), loss="mse")
        return model

    def test_train_on_batch_warns_once_and_steps_as_the_base(self):
        x, y = noisy_regression()
        strategy = util.strategy_for(2)
        vr = self._compiled_model(strategy, lambda: vrgd_tf.VRGDAdam(0.05, statistics_interval=1))
        base = self._compiled_model(strategy, lambda: keras.optimizers.Adam(0.05))
        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            for _ in range(3):
                vr.train_on_batch(x, y)
                base.train_on_batch(x, y)
        self.assertLen(inert_warnings(logs), 1)
        self.assertIn("train_on_batch", inert_warnings(logs)[0].getMessage())
        self.assertIn("2 GSNR samples", inert_warnings(logs)[0].getMessage())
        # Keras hands every replica the whole batch: VRGD is inert, bit for bit the base.
        self.assertAllEqual(vr.layers[0].kernel.numpy(), base.layers[0].kernel.numpy())

    def test_fit_on_the_same_data_does_not_warn(self):
        x, y = noisy_regression()
        model = self._compiled_model(
            util.strategy_for(2), lambda: vrgd_tf.VRGDAdam(0.05, statistics_interval=1)
        )
        logger = logging.getLogger("vrgd_tf")
        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
            logger.warning("sentinel")  # assertLogs needs one record
        self.assertEmpty(inert_warnings(logs))
        stats = model.optimizer.vrgd_statistics()
        self.assertGreater(max(s["mean_gsnr"] for s in stats.values()), 0.0)

    def test_custom_loop_with_the_same_gradient_on_every_replica_warns_in_both_families(self):
        init, grads = make_problem(2, seed=1, steps=2)
        same = {n: np.repeat(g[:, :1], 2, axis=1) for n, g in grads.items()}
        for make_opt, make_variable in (
            (lambda: vrgd_tf.VRGDLamb(0.01, statistics_interval=1), None),
            (
                lambda: vtk.VRGDLamb(0.01, statistics_interval=1),
                lambda n, v: tf.Variable(v, name=n),
            ),
        ):
            with self.assertLogs("vrgd_tf", level="WARNING") as logs:
                _, opt = util.run_custom_loop(
                    util.strategy_for(2), make_opt, init, same, make_variable=make_variable
                )
            self.assertLen(inert_warnings(logs), 1, type(opt).__module__)

    def test_under_xla_the_statistics_reader_warns(self):
        """A jit-compiled GSNR step holds no host call; reading the diagnostics warns."""
        init, grads = make_problem(2, seed=1, steps=1)
        names = sorted(init)
        variables = [keras.Variable(init[n], name=n) for n in names]
        opt = vrgd_tf.VRGDSGD(0.1, statistics_interval=1)
        opt.build(variables)
        mine = [tf.constant(grads[n][0, 0]) for n in names]
        ctx = FakeReplicaContext([[grads[n][0, 0] for n in names]])  # replica 1 = replica 0

        @tf.function(jit_compile=True)
        def step(*g):
            return [u for u, _ in opt._vrgd_reduce(list(zip(g, variables)), ctx)]

        logger = logging.getLogger("vrgd_tf")
        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            out = step(*mine)
            logger.warning("sentinel")
        self.assertEmpty(inert_warnings(logs))
        for u, g in zip(out, mine):
            self.assertAllClose(u, 2.0 * g.numpy())  # the plain sum: factor 1
        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            stats = opt.vrgd_statistics()
        self.assertLen(inert_warnings(logs), 1)
        self.assertTrue(all(s["frac_at_one"] == 1.0 for s in stats.values()))

    def test_after_a_gsnr_step_an_identical_step_is_the_base_step(self):
        """docs/spec.md section 2: replicas that send identical gradients give no noise
        estimate, so the base step runs unchanged: factor 1 (not the beta_3 momentum of the
        earlier factors) and the factor state untouched. It used to apply the momentum's
        p_hat < 1 and advance the state while warning that the step was the base's."""
        init, grads = make_problem(2, seed=3, steps=1)
        names = sorted(init)
        strategy = util.strategy_for(2)
        with strategy.scope():
            variables = [tf.Variable(init[n], name=n) for n in names]
            agg = vrgd_tf.GSNRAggregator(gamma=0.1, beta_3=0.9, statistics_interval=1)
            agg.build(variables)
        distinct = [tf.constant(grads[n][0]) for n in names]  # [replica, ...] per variable
        same = [tf.constant(np.repeat(grads[n][0][:1], 2, axis=0)) for n in names]

        @tf.function
        def step(per_replica):
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                return agg([tf.gather(c, rid) for c in per_replica], variables)

            return strategy.run(fn)

        def state():
            return [util.replica_values(v)[0] for v in agg.state.deficits + agg.state.corrections]

        first = strategy.experimental_local_results(step(distinct))[0]
        shrunk = [
            np.abs(u.numpy() * 2) < 0.99 * np.abs(g.numpy().sum(0))  # 2 replicas' shares
            for u, g in zip(first, distinct)
        ]
        self.assertTrue(any(np.any(x) for x in shrunk))  # the first step had a GSNR
        before = state()
        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            second = step(same)
            agg.statistics()
        self.assertLen(inert_warnings(logs), 1)
        for got, g in zip(strategy.experimental_local_results(second)[0], same):
            self.assertAllEqual(got * 2, g.numpy().sum(0))  # the plain sum (2 shares), bit for bit
        for a, b in zip(state(), before):
            self.assertAllEqual(a, b)

    def test_an_inert_step_reads_factor_one_exactly_with_many_variables(self):
        """The fractions of an inert step are 1 exactly, so the reader's inert check (the
        only warning under XLA) holds. With 8 packed variables the division by the sizes,
        folded into a product with a vectorised reciprocal, gave 0.99999994."""
        shapes = [(4,), (2,), (1,), (5,), (3,), (6,), (7,), (9,)]
        strategy = util.strategy_for(2)
        with strategy.scope():
            variables = [tf.Variable(np.zeros(s, np.float32)) for s in shapes]
            agg = vrgd_tf.GSNRAggregator(gamma=0.1, statistics_interval=1)
            agg.build(variables)
        grads = [tf.constant(np.arange(1.0, np.prod(s) + 1.0, dtype=np.float32)) for s in shapes]

        @tf.function
        def step():
            return strategy.run(lambda: agg(grads, variables))  # the same on every replica

        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            step()
            stats = agg.statistics()
        self.assertLen(inert_warnings(logs), 1)
        for name, row in stats.items():
            for field in ("frac_at_one", "mean_factor", "norm_ratio"):
                self.assertEqual(row[field], 1.0, (name, field))

    def test_distinct_gradients_do_not_warn(self):
        init, grads = make_problem(2, seed=1, steps=2)
        logger = logging.getLogger("vrgd_tf")
        with self.assertLogs("vrgd_tf", level="WARNING") as logs:
            _, opt = util.run_custom_loop(
                util.strategy_for(2),
                lambda: vrgd_tf.VRGDLamb(0.01, statistics_interval=1),
                init,
                grads,
            )
            opt.vrgd_statistics()
            logger.warning("sentinel")
        self.assertEmpty(inert_warnings(logs))


CLIPS = (dict(clipvalue=0.02), dict(clipnorm=0.05), dict(global_clipnorm=0.05))


class ClippingTest(tf.test.TestCase, parameterized.TestCase):
    """The GSNR comes from unclipped replica gradients; clipping acts on the reduced one."""

    def test_keras3_statistics_ignore_clipping(self):
        """Each clip against one unclipped run (the suite's time, issue 36)."""
        init, grads = make_problem(2, seed=2, steps=2)
        _, plain = util.run_custom_loop(
            util.strategy_for(2), lambda: vrgd_tf.VRGDAdam(0.05, statistics_interval=1), init, grads
        )
        want = plain.vrgd_statistics()
        for clip in CLIPS:
            with self.subTest(**clip):
                _, clipped = util.run_custom_loop(
                    util.strategy_for(2),
                    lambda: vrgd_tf.VRGDAdam(0.05, statistics_interval=1, **clip),
                    init,
                    grads,
                )
                got = clipped.vrgd_statistics()
                for name in want:
                    self.assertAllClose(
                        list(got[name].values())[:3],
                        list(want[name].values())[:3],
                        rtol=1e-6,
                        msg=name,
                    )
                    self.assertLess(want[name]["frac_at_one"], 1.0)

    @parameterized.parameters(*CLIPS)
    def test_keras3_gamma_one_equals_base_clipped_after_aggregation(self, **clip):
        init, grads = make_problem(2, seed=3, steps=3)
        variables, _ = util.run_custom_loop(
            util.strategy_for(2),
            lambda: vrgd_tf.VRGDAdam(0.05, gamma=1.0, beta_3=0.0, **clip),
            init,
            grads,
        )
        # The base on one device, fed the replica sum: Keras clips it, then steps.
        summed = {n: g.sum(axis=1, keepdims=True) for n, g in grads.items()}
        expected, _ = util.run_custom_loop(
            util.strategy_for(1), lambda: keras.optimizers.Adam(0.05, **clip), init, summed
        )
        for n in init:
            self.assertAllClose(
                variables[n].numpy(), expected[n].numpy(), rtol=1e-6, atol=1e-7, msg=n
            )

    @parameterized.parameters(*CLIPS)
    def test_tf_keras_gamma_one_equals_base_clipped_after_aggregation(self, **clip):
        init, grads = make_problem(2, seed=3, steps=3)
        make_variable = lambda n, v: tf.Variable(v, name=n)  # noqa: E731
        variables, _ = util.run_custom_loop(
            util.strategy_for(2),
            lambda: vtk.VRGDAdam(0.05, gamma=1.0, beta_3=0.0, **clip),
            init,
            grads,
            make_variable=make_variable,
        )
        expected, _ = util.run_custom_loop(
            util.strategy_for(2),
            lambda: tf_keras.optimizers.legacy.Adam(0.05, **clip),
            init,
            grads,
            make_variable=make_variable,
        )
        for n in init:
            self.assertAllClose(
                variables[n].numpy(), expected[n].numpy(), rtol=1e-6, atol=1e-7, msg=n
            )


class LossScaleOneReplicaOverflowsTest(tf.test.TestCase):
    """Keras 3 LossScaleOptimizer: an inf on replica 1 only skips the step everywhere."""

    def test_step_skipped_on_every_replica_and_scale_halved(self):
        strategy = util.strategy_for(2)
        with strategy.scope():
            w = keras.Variable(np.ones(3, np.float32), name="w")
            inner = vrgd_tf.VRGDAdam(0.1, statistics_interval=1)
            opt = keras.optimizers.LossScaleOptimizer(inner, initial_scale=1024.0)
            opt.build([w])
        grads = tf.constant(
            [[[1.0, 2.0, 3.0], [2.0, -1.0, 0.5]], [[1.0, 2.0, 3.0], [np.inf, -1.0, 0.5]]]
        )

        @tf.function
        def step(i):
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                opt.apply([grads[i][rid] * opt.dynamic_scale], [w])

            strategy.run(fn)

        step(tf.constant(0))
        after_clean = w.numpy().copy()
        state = {v.path: [c.copy() for c in util.replica_values(v)] for v in inner.variables}
        self.assertFalse(np.array_equal(after_clean, np.ones(3)))
        step(tf.constant(1))
        self.assertAllEqual(w.numpy(), after_clean)
        self.assertEqual(float(opt.dynamic_scale.numpy()), 512.0)
        self.assertEqual(int(inner.iterations.numpy()), 1)
        for v in inner.variables:
            for got, want in zip(util.replica_values(v), state[v.path]):
                self.assertAllEqual(got, want, msg=v.path)

    def test_nan_in_a_repeated_sparse_row_skips_the_step(self):
        """Replica 1's embedding gradient holds a NaN in a row whose index repeats (a token
        seen twice). Keras' own finiteness test densifies the boolean rows by summing them
        and read that as finite: the step was applied, the weights became NaN and the scale
        stayed. Now the step is skipped on every replica and the scale halves."""
        strategy = util.strategy_for(2)
        with strategy.scope():
            w = keras.Variable(np.ones((6, 2), np.float32), name="emb")
            inner = vrgd_tf.VRGDSGD(0.1, statistics_interval=1)
            opt = keras.optimizers.LossScaleOptimizer(inner, initial_scale=8.0)
            opt.build([w])
        indices = tf.constant([[1, 4], [3, 3]])
        values = tf.constant([[[1.0, 2.0], [0.5, -1.0]], [[np.nan, 1.0], [2.0, 0.5]]])

        @tf.function
        def step():
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                g = tf.IndexedSlices(values[rid], indices[rid], tf.constant([6, 2]))
                opt.apply([g], [w])

            strategy.run(fn)

        step()
        self.assertAllEqual(w.numpy(), np.ones((6, 2)))
        self.assertEqual(float(opt.dynamic_scale.numpy()), 4.0)
        self.assertEqual(int(inner.iterations.numpy()), 0)


class StrategyCombinationsTest(tf.test.TestCase):
    """Keras 3 options that cannot run under a strategy fail at construction, by name."""

    def test_gradient_accumulation_refused_under_a_strategy(self):
        with util.strategy_for(2).scope():
            with self.assertRaisesRegex(ValueError, "gradient_accumulation_steps=2"):
                vrgd_tf.VRGDSGD(0.1, gradient_accumulation_steps=2, statistics_interval=1)
        vrgd_tf.VRGDSGD(
            0.1, gradient_accumulation_steps=2, statistics_interval=1
        )  # one device: Keras runs it

    def test_ema_overwrite_refused_under_a_strategy(self):
        with util.strategy_for(2).scope():
            with self.assertRaisesRegex(ValueError, "ema_overwrite_frequency=3"):
                vrgd_tf.VRGDAdam(
                    0.1, use_ema=True, ema_overwrite_frequency=3, statistics_interval=1
                )
            opt = vrgd_tf.VRGDAdam(
                0.1, use_ema=True, statistics_interval=1
            )  # EMA without overwrite runs
        self.assertTrue(opt.use_ema)

    def test_ema_without_overwrite_trains_under_a_strategy(self):
        x, y = noisy_regression(32)
        strategy = util.strategy_for(2)
        with strategy.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
            model.compile(
                optimizer=vrgd_tf.VRGDAdam(0.05, use_ema=True, statistics_interval=1), loss="mse"
            )
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        self.assertTrue(np.all(np.isfinite(model.layers[0].kernel.numpy())))

    def test_first_build_inside_strategy_run_says_how_to_fix(self):
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            w = keras.Variable(np.ones(3, np.float32))
            opt = vrgd_tf.VRGDAdam(0.1, statistics_interval=1)

        @tf.function
        def step():
            strategy.run(lambda: opt.apply_gradients([(tf.ones(3), w)]))

        with self.assertRaisesRegex(RuntimeError, r"optimizer.build\(model.trainable_var"):
            step()


if __name__ == "__main__":
    tf.test.main()
