"""The public factor extension point (``factor_transforms=`` of the VRGD classes, of
``GSNRAggregator`` and of ``gsnr.variance_reduce``), used by the study's controls: a
permutation of each variable's factor keeps its multiset, changes the weights, and stays out
of the config."""

import functools
import logging
import os

import keras
import numpy as np
import tensorflow as tf

import vrgd_tf
from vrgd_tf import gsnr

import numpy_reference as ref
import util


def stateless_permutation(seed, counter):
    """``fn(factor, j)``: a permutation of ``factor`` drawn from (seed, counter, j), the same
    on every replica (stateless), as in studies/evidence/round2.py."""

    def permute(factor, context):
        n = factor.shape[0]
        j = context.index
        step = counter if context.step is None else context.step
        key = tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64) * 1009 + j])
        return tf.gather(factor, tf.argsort(tf.random.stateless_uniform([n], key, alg="philox")))

    return permute


class FactorTransformTest(tf.test.TestCase):
    def _run(self, transform, jit_compile=False):
        k = 4
        init, grads = util.make_varying_problem(k, seed=7, steps=1)
        zero = {n: np.zeros_like(v) for n, v in init.items()}

        def make():
            transforms = [] if transform is None else [transform(None)]
            return vrgd_tf.VRGDSGD(
                learning_rate=1.0,
                momentum=0.0,
                gamma=0.1,
                factor_transforms=transforms,
                statistics_interval=1,
            )

        variables, opt = util.run_custom_loop(
            util.strategy_for(k), make, zero, grads, jit_compile=jit_compile
        )
        return variables, opt, grads

    def test_permuted_factor_keeps_multiset_and_changes_weights(self):
        plain, plain_opt, grads = self._run(None)
        shuffled, opt, _ = self._run(lambda o: stateless_permutation(3, 0))
        changed = False
        for name in grads:
            factor, s1 = ref.gsnr_factor(grads[name][0], 0.1)
            # One SGD step from 0 with learning rate 1: w = -factor * S1.
            self.assertAllClose(plain[name].numpy(), -factor * s1, rtol=1e-5, atol=1e-7)
            applied = -shuffled[name].numpy().ravel() / s1.ravel()
            self.assertAllClose(np.sort(applied), np.sort(factor.ravel()), rtol=1e-4, atol=1e-6)
            changed |= not np.allclose(shuffled[name].numpy(), plain[name].numpy())
            # The same factor distribution: mean_factor is unchanged, norm_ratio is that
            # of the permuted factor.
            stats = [s for n, s in opt.vrgd_statistics().items() if n.endswith(name)][0]
            self.assertAllClose(stats["mean_factor"], factor.mean(), rtol=1e-5)
            want = np.linalg.norm(applied * s1.ravel()) / np.linalg.norm(s1)
            self.assertAllClose(stats["norm_ratio"], want, rtol=1e-4)
        self.assertTrue(changed)
        self.assertNotIn("factor_transforms", opt.get_config())
        self.assertNotIn("factor_transforms", opt._vrgd.get_config())
        self.assertLen(opt.factor_transforms, 1)

    def test_permuted_step_compiles_with_xla_and_matches_eager(self):
        """The whole GSNR step with the stateless permutation compiles into one XLA cluster
        (4 replicas through test_xla.FakeReplicaContext) and is deterministic; eager or
        compiled, each variable's factor is a permutation of the unpermuted one. (XLA's
        stateless RNG draws another permutation than the eager kernel for the same key;
        every replica runs the same program, so they agree.)"""
        from test_xla import FakeReplicaContext

        k = 4
        init, grads = util.make_varying_problem(k, seed=9, steps=1)
        names = sorted(init)
        variables = [tf.Variable(init[n], name=n) for n in names]

        def run(jit, transform):
            state = gsnr.VRGDState(
                lambda kind, i, shape, ref_: tf.Variable(tf.zeros(shape), name=kind), id, 0.0
            )
            state.add_variables(variables)
            ctx = FakeReplicaContext([[grads[n][0, d] for n in names] for d in range(1, k)])

            def fn(*g):
                return gsnr.variance_reduce(
                    list(g),
                    variables,
                    state=state,
                    replica_context=ctx,
                    settings=gsnr.VRGDSettings(factor_transforms=transform),
                )

            mine = [tf.constant(grads[n][0, 0]) for n in names]
            return [o.numpy() for o in tf.function(fn, jit_compile=jit)(*mine)]

        perm = stateless_permutation(5, tf.constant(2, tf.int64))
        plain = run(False, None)
        eager = run(False, perm)
        xla = run(True, perm)
        again = run(True, perm)
        for n, p, e, x, y in zip(names, plain, eager, xla, again):
            self.assertAllEqual(x, y)  # deterministic, so the same on every replica
            s1 = grads[n][0].astype(np.float64).sum(0)
            for out in (e, x):
                self.assertAllClose(
                    np.sort((out / s1).ravel()), np.sort((p / s1).ravel()), rtol=1e-4
                )
            self.assertFalse(np.allclose(e, p), n)

    def test_variance_reduce_hands_each_variable_its_own_factor(self):
        seen = []

        def record(factor, context):
            seen.append((context.index, tuple(factor.shape.as_list())))
            self.assertEqual(context.num_samples, 2)
            self.assertEqual(context.summed.shape, factor.shape)
            self.assertEqual(context.summed_squares.shape, factor.shape)
            return factor

        strategy = util.strategy_for(2)
        with strategy.scope():
            a, b = tf.Variable(tf.zeros([3, 2])), tf.Variable(tf.zeros([5]))
            state = gsnr.VRGDState(
                lambda kind, i, shape, ref_var: tf.Variable(tf.zeros(shape)), id, 0.0
            )
            state.add_variables([a, b])

        def fn():
            g = [tf.ones([3, 2]), tf.ones([5])]
            return gsnr.variance_reduce(
                g, [a, b], state=state, settings=gsnr.VRGDSettings(factor_transforms=[record])
            )

        strategy.run(fn)
        self.assertEqual(sorted(set(seen)), [(0, (6,)), (1, (5,))])

    def test_a_step_without_a_noise_estimate_is_the_base_step_with_transforms_too(self):
        """docs/spec.md sections 1 and 2: a step without a noise estimate (identical
        replicas; one replica without examples) is the base step, factor 1, as on one
        replica, where the transforms are not called. They used to transform its factor."""

        def halve(factor, context):
            return factor * 0.5

        strategy = util.strategy_for(2)
        with strategy.scope():
            a = tf.Variable(tf.zeros([3, 2]))
            agg = vrgd_tf.GSNRAggregator(
                gamma=0.1, beta_3=0.0, factor_transforms=[halve], statistics_interval=1
            )
            agg.build([a])

        @tf.function
        def step(per_replica):
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                return agg([tf.gather(per_replica, rid)], [a])[0]

            return strategy.run(fn)

        g = np.arange(1.0, 7.0, dtype=np.float32).reshape(3, 2)
        for name, per_replica in (
            ("identical", np.stack([g, g])),
            ("one replica without examples", np.stack([g, np.zeros_like(g)])),
        ):
            with self.assertLogs("vrgd_tf", level="WARNING"):
                out = strategy.experimental_local_results(step(tf.constant(per_replica)))[0]
                agg.statistics()
            self.assertAllEqual(out * 2, per_replica.sum(0), msg=name)  # 2 replicas' shares
        noisy = np.stack([g, g * np.array([[1.0, 3.0]] * 3, np.float32)])
        out = strategy.experimental_local_results(step(tf.constant(noisy)))[0]
        self.assertLess(float(np.max(out.numpy() * 2 / noisy.sum(0))), 0.51)  # a GSNR: halved

    def test_scalar_transform_from_the_docstring_scales_by_the_norm_ratio(self):
        """The GSNRAggregator docstring's example: one number per variable, the update norm
        ratio ||f * S1|| / ||S1|| of the GSNR factor f."""

        def scalar(factor, context):
            s1 = context.summed
            ratio = tf.math.divide_no_nan(tf.norm(factor * s1), tf.norm(s1))
            ratio = tf.where(tf.norm(s1) > 0, ratio, 1.0)
            return tf.fill(tf.shape(factor), ratio)

        plain, _, grads = self._run(None)
        scaled, opt, _ = self._run(lambda _: scalar)
        for name in grads:
            factor, s1 = ref.gsnr_factor(grads[name][0], 0.1)
            ratio = np.linalg.norm(factor * s1) / np.linalg.norm(s1)
            self.assertAllClose(scaled[name].numpy(), -ratio * s1, rtol=1e-5, atol=1e-7)
            self.assertNotAllClose(scaled[name].numpy(), plain[name].numpy())
            stats = [s for n, s in opt.vrgd_statistics().items() if n.endswith(name)][0]
            self.assertAllClose(stats["mean_factor"], ratio, rtol=1e-5)

    def test_a_wrong_result_is_named_at_trace(self):
        """A transform must return one real value per element of the factor: a scalar, a
        wrong size, None or strings fail when the step is traced, naming the transform, the
        variable and the shape wanted; the variable's shape (same size) is reshaped."""
        strategy = util.strategy_for(2)
        with strategy.scope():
            a = tf.Variable(tf.zeros([3, 2]), name="a")
            state = gsnr.VRGDState(
                lambda kind, i, shape, ref_var: tf.Variable(tf.zeros(shape)), id, 0.0
            )
            state.add_variables([a])

        def step(transform):
            def fn():
                g = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
                g = g * tf.cast(
                    tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.float32
                )
                return gsnr.variance_reduce(
                    [g],
                    [a],
                    state=state,
                    settings=gsnr.VRGDSettings(factor_transforms=[lambda f, c: f, transform]),
                )

            return strategy.experimental_local_results(strategy.run(fn))[0][0]

        def mean_factor(factor, context):
            return tf.reduce_mean(factor)

        cases = [
            (
                mean_factor,
                ValueError,
                r"factor_transforms\[1\]` \(mean_factor\) for variable 'a' returned shape \[\]; .*\[6\].*tf.fill",
            ),
            (lambda f, c: tf.stack([f, f], 1), ValueError, r"returned shape \[6, 2\]"),
            (lambda f, c: None, TypeError, r"factor_transforms\[1\]` \(<lambda>\).*returned None"),
            (lambda f, c: tf.fill(tf.shape(f), "x"), TypeError, "returned dtype string"),
            (lambda f, c: object(), TypeError, "returned object, not a tensor"),
        ]
        for transform, error, message in cases:
            with self.assertRaisesRegex(error, message):
                step(transform)
        # Same number of elements: reshaped; float64 and bool are cast.
        plain = step(lambda f, c: f)
        self.assertAllClose(step(lambda f, c: tf.reshape(f, c.variable.shape)), plain)
        self.assertAllClose(step(lambda f, c: tf.cast(f, tf.float64)), plain)
        self.assertAllClose(
            step(lambda f, c: tf.ones_like(f) > 0), [[3.0, 6.0], [9.0, 12.0], [15.0, 18.0]]
        )

    def test_a_non_finite_transformed_factor_warns_once(self):
        """A transform that returns NaN on finite sums makes the update NaN (the caller's
        arithmetic, passed through): the step logs one warning naming `factor_transforms`;
        a finite transform logs none."""
        strategy = util.strategy_for(2)
        with strategy.scope():
            w = tf.Variable(tf.zeros([4]))

        def run(transform):
            with strategy.scope():
                aggregator = vrgd_tf.GSNRAggregator(
                    factor_transforms=[transform], statistics_interval=1
                )
                aggregator.build([w])

            @tf.function
            def step():
                def fn():
                    rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                    return aggregator([tf.range(4.0) * tf.cast(rid + 1, tf.float32)], [w])[0]

                return strategy.experimental_local_results(strategy.run(fn))[0]

            with self.assertLogs("vrgd_tf", "WARNING") as logs:
                out = [step().numpy() for _ in range(2)]
                logging.getLogger("vrgd_tf").warning("end")
            return out, [m for m in logs.output if "factor_transforms" in m]

        out, messages = run(lambda f, c: tf.math.log(f - 1.0))  # log(0) and log(< 0)
        self.assertFalse(np.isfinite(out[0]).all())
        (message,) = messages
        self.assertIn("NaN or infinite", message)
        out, messages = run(lambda f, c: f * 0.5)
        self.assertTrue(np.isfinite(out[0]).all())
        self.assertEqual(messages, [])

    def test_a_transform_of_the_wrong_arity_is_refused_at_construction(self):
        with self.assertRaisesRegex(
            TypeError, r"factor_transforms\[1\]` \(<lambda>\) must take two positional.*\(f\)"
        ):
            vrgd_tf.VRGDLamb(
                learning_rate=0.1,
                factor_transforms=[lambda f, c: f, lambda f: f],
                statistics_interval=1,
            )
        with self.assertRaisesRegex(TypeError, "factor_transforms.*two positional"):
            vrgd_tf.GSNRAggregator(factor_transforms=lambda f, c, extra: f, statistics_interval=1)

        class Halve:
            def __call__(self, factor, context):
                return factor * 0.5

        fine = [
            lambda f, c, extra=1: f,
            lambda *args: args[0],
            Halve(),
            functools.partial(lambda s, f, c: f, 1),
        ]
        self.assertLen(
            vrgd_tf.GSNRAggregator(factor_transforms=fine, statistics_interval=1).factor_transforms,
            4,
        )

    def test_saving_warns_that_the_transforms_are_left_out_and_the_resume_path_works(self):
        """``model.save`` of a VRGD optimizer with transforms logs once that its config
        leaves them out (``load_model`` gives an optimizer without them); the resume path
        the warning names (the same transforms, ``build``, ``load_weights`` of the
        ``.keras`` file) restores every optimizer variable exactly."""

        def halve(factor, context):
            return factor * 0.5

        def make(transforms):
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            optimizer = vrgd_tf.VRGDLamb(1e-2, factor_transforms=transforms, statistics_interval=1)
            model.compile(optimizer=optimizer, loss="mse")
            return model

        model = make([halve])
        x, y = np.ones([8, 3], np.float32), np.zeros([8, 2], np.float32)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        path = os.path.join(self.get_temp_dir(), "m.keras")
        with self.assertLogs("vrgd_tf", "WARNING") as logs:
            model.save(path)
            model.optimizer.get_config()  # once per optimizer
            logging.getLogger("vrgd_tf").warning("end")
        (message,) = [m for m in logs.output if "leaves out" in m]
        self.assertRegex(message, r"VRGDLamb: .*`factor_transforms\[0\]` \(halve\).*load_weights")
        self.assertEqual(keras.models.load_model(path).optimizer.factor_transforms, ())
        resumed = make([halve])
        resumed.optimizer.build(resumed.trainable_variables)
        resumed.load_weights(path)
        self.assertEqual(resumed.optimizer.factor_transforms, (halve,))
        for want, got in zip(model.optimizer.variables, resumed.optimizer.variables):
            self.assertAllEqual(want.numpy(), got.numpy())
        with self.assertLogs("vrgd_tf", "WARNING") as logs:
            vrgd_tf.GSNRAggregator(factor_transforms=[halve], statistics_interval=1).get_config()
        self.assertRegex(logs.output[0], r"gsnr_aggregator: .*leaves out .*\(halve\)")

    def test_not_callable_is_refused_at_construction(self):
        with self.assertRaisesRegex(TypeError, "factor_transforms"):
            vrgd_tf.VRGDSGD(learning_rate=0.1, factor_transforms=[1.0], statistics_interval=1)
        with self.assertRaisesRegex(TypeError, "factor_transforms"):
            vrgd_tf.GSNRAggregator(factor_transforms=3, statistics_interval=1)
        agg = vrgd_tf.GSNRAggregator(factor_transforms=None, statistics_interval=1)
        self.assertEqual(agg.factor_transforms, ())


if __name__ == "__main__":
    tf.test.main()
