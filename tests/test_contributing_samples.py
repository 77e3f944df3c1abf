"""Replicas without examples are no GSNR samples (spec section 2), in both families.

Without ``drop_remainder=True`` the last, short batch leaves some replicas empty (4 replicas,
2 examples: split 1, 1, 0, 0). Their zero gradients used to enter the variance: the factor
and the recorded GSNR were those of k = 4 samples, two of them zero (with 2 replicas split
1, 0 the recorded GSNR was exactly 1). Now k counts the samples that contributed a nonzero
gradient (one all-reduced count); with fewer than 2 the step is the base optimizer's, its
diagnostics read zeros and a warning names ``drop_remainder=True``, once.
"""

import logging

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf

import numpy_reference as ref
import util

FEW = "fewer than 2 contributed a nonzero gradient"


def families():
    """``(name, make VR-Momentum, make the base, make_variable)`` of both families."""
    out = [
        (
            "keras3",
            lambda **kw: vrgd_tf.VRGDSGD(0.1, momentum=0.9, **kw),
            lambda: keras.optimizers.SGD(0.1, momentum=0.9),
            None,
        )
    ]
    if util.HAS_TF_KERAS:
        import tf_keras

        from vrgd_tf import tf_keras as vtk

        out.append(
            (
                "tf_keras",
                lambda **kw: vtk.VRGDSGD(0.1, momentum=0.9, **kw),
                lambda: tf_keras.optimizers.legacy.SGD(0.1, momentum=0.9),
                lambda n, v: tf.Variable(v, name=n),
            )
        )
    return out


def with_empty_replicas(grads, empty):
    """``grads`` ([steps, k, ...] per variable) with ``empty`` more replicas of zeros."""
    return {n: np.concatenate([g, np.zeros_like(g[:, :empty])], axis=1) for n, g in grads.items()}


def few_warnings(logs):
    return [r.getMessage() for r in logs.records if FEW in r.getMessage()]


class ContributingSamplesTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(*[f[0] for f in families()])
    def test_four_replicas_two_with_examples_step_and_record_as_k_2(self, family):
        _, make_vr, _, make_variable = next(f for f in families() if f[0] == family)
        init, grads = util.make_varying_problem(2, seed=5, steps=3)
        variables, opt = util.run_custom_loop(
            util.strategy_for(4),
            lambda: make_vr(gamma=0.1, beta_3=0.5, statistics_interval=1),
            init,
            with_empty_replicas(grads, 2),
            make_variable=make_variable,
        )
        vr = ref.VRGD(ref.SGD(0.1, momentum=0.9), 0.1, 0.5)
        expected = util.numpy_run(vr, init, grads)  # the two samples alone: k = 2
        stats = opt.vrgd_statistics()
        for name in init:
            self.assertAllClose(variables[name].numpy(), expected[name], rtol=1e-5, atol=1e-6)
            want = ref.gsnr_statistics(grads[name][-1], 0.1, applied=vr.factors[name])
            got = next(s for n, s in stats.items() if n.endswith(name))
            got = [got[f] for f in vrgd_tf.gsnr.STATISTICS_FIELDS]
            self.assertAllClose(got, want, rtol=1e-4, atol=1e-6, msg=name)
            self.assertLess(got[3], 0.99)  # VRGD acted

    @parameterized.parameters(*[f[0] for f in families()])
    def test_two_replicas_one_with_examples_is_the_base_step_and_warns_once(self, family):
        _, make_vr, make_base, make_variable = next(f for f in families() if f[0] == family)
        init, grads = util.make_varying_problem(1, seed=6, steps=3)
        grads = with_empty_replicas(grads, 1)
        strategy = util.strategy_for(2)
        with self.assertLogs("vrgd_tf", level=logging.WARNING) as logs:
            variables, opt = util.run_custom_loop(
                strategy,
                lambda: make_vr(gamma=0.1, beta_3=0.9, statistics_interval=1),
                init,
                grads,
                make_variable=make_variable,
            )
        base, _ = util.run_custom_loop(
            strategy, make_base, init, grads, make_variable=make_variable
        )
        for name in init:
            np.testing.assert_array_equal(variables[name].numpy(), base[name].numpy())
        warnings = few_warnings(logs)
        self.assertLen(warnings, 1)
        self.assertIn("drop_remainder=True", warnings[0])
        for row in opt.vrgd_statistics().values():  # no GSNR: zeros (it read mean_gsnr 1)
            self.assertEqual(list(row.values()), [0.0] * len(row))
        for deficit in opt.vrgd_aggregator.state.deficits:
            self.assertAllEqual(deficit.numpy(), np.zeros(deficit.shape))

    def test_fit_with_a_short_last_batch_records_the_gsnr_of_its_examples(self):
        """``model.fit`` on 4 replicas, 6 examples in batches of 4 (no drop_remainder): the
        last step's 2 examples go to 2 replicas, and its recorded GSNR is that of their two
        gradients (k = 2; it was k = 4 with two zero samples)."""
        rng = np.random.RandomState(7)
        x = rng.randn(6, 4).astype(np.float32)
        y = (x @ rng.randn(4, 3) + rng.randn(6, 3)).astype(np.float32)
        with util.strategy_for(4).scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, use_bias=False)])
            model.compile(optimizer=vrgd_tf.VRGDSGD(0.01, statistics_interval=1), loss="mse")
        kernels = []
        snapshot = keras.callbacks.LambdaCallback(
            on_train_batch_begin=lambda *_, **__: kernels.append(model.layers[0].kernel.numpy())
        )
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
        model.fit(data, epochs=1, verbose=0, callbacks=[snapshot])
        w = kernels[-1]  # the weights of the last, short step
        # d loss_i / dW for loss_i = mean((x_i W - y_i)**2): the samples, up to a constant.
        samples = np.stack([2.0 / 3.0 * np.outer(x[i], x[i] @ w - y[i]) for i in (4, 5)])
        want = ref.gsnr_statistics(samples, 0.1)
        (got,) = model.optimizer.vrgd_statistics().values()
        self.assertAllClose(got["mean_gsnr"], want[0], rtol=1e-4)
        self.assertAllClose(got["frac_at_gamma"], want[1], rtol=1e-5)
        self.assertAllClose(got["mean_factor"], want[3], rtol=1e-4)

    def test_xla_compiled_step_counts_the_contributing_samples(self):
        """The count travels in the first all-reduce (outside any tf.cond): the whole step
        compiles with XLA, and 4 replicas of which 2 sent zeros give what 2 replicas give."""
        from test_xla import FakeReplicaContext

        init, grads = util.make_varying_problem(2, seed=9, steps=1)
        names = sorted(init)
        variables = [tf.Variable(init[n], name=n) for n in names]
        mine = [tf.constant(grads[n][0, 0]) for n in names]
        theirs = [grads[n][0, 1] for n in names]
        zeros = [np.zeros_like(t) for t in theirs]

        def run(jit, others):
            state = vrgd_tf.gsnr.VRGDState(
                lambda kind, i, shape, ref_: tf.Variable(tf.zeros(shape), name=kind), id, 0.9
            )
            state.add_variables(variables)
            ctx = FakeReplicaContext(others)

            def fn(*g):
                out = vrgd_tf.gsnr.variance_reduce(
                    list(g),
                    variables,
                    state=state,
                    replica_context=ctx,
                    settings=vrgd_tf.gsnr.VRGDSettings(beta_3=0.9),
                )
                return list(out), out.report.samples

            out, samples = tf.function(fn, jit_compile=jit)(*mine)
            return [o.numpy() for o in out] + [s.numpy() for s in state.statistics], samples

        two, k2 = run(False, [theirs])
        four, k4 = run(True, [theirs, zeros, zeros])
        self.assertEqual(float(k2), 2.0)
        self.assertEqual(float(k4), 2.0)
        for a, b in zip(four, two):
            self.assertAllClose(a, b, rtol=1e-5, atol=1e-6)

    @parameterized.parameters("rows", "dense")
    def test_sparse_rows_contribute_by_their_values_as_dense_gradients_do(self, mode):
        """A replica's count is inferred from its gradients' values, not their squares (spec
        section 1), on both sparse paths: rows of 1e-20 (squares 0 in float32) are a sample,
        so k = 2 and the recorded GSNR is that of one sample with squares and one without,
        exactly 1 per element (2 S2 - S1**2 = S2), with no warning. (The squares used to
        decide: that replica was left out and the step was the base step with a warning.)"""
        strategy = util.strategy_for(2)
        with strategy.scope():
            var = tf.Variable(np.zeros((4, 2), np.float32), name="table")
            agg = vrgd_tf.GSNRAggregator(gamma=0.1, sparse_statistics=mode, statistics_interval=1)
            agg.build([var])
        values = np.array([[[1.0, 2.0], [3.0, -1.0]], [[1e-20, 1e-20], [-1e-20, 1e-20]]])

        @tf.function
        def step():
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                g = tf.IndexedSlices(
                    tf.gather(tf.constant(values, tf.float32), rid),
                    tf.constant([0, 2]),
                    tf.constant([4, 2]),
                )
                return tf.convert_to_tensor(agg([g], [var])[0])

            return strategy.run(fn)

        with self.assertNoLogs("vrgd_tf", level="WARNING"):
            out = strategy.experimental_local_results(step())[0].numpy()
        # GSNR 1 on every touched element: factor 1, the 2 replicas' shares of the sum.
        self.assertAllClose(out[[0, 2]] * 2, values.sum(axis=0), rtol=1e-6)
        (row,) = agg.statistics().values()
        self.assertTrue(row["has_gsnr"])
        self.assertAllClose(row["mean_gsnr"], 1.0, rtol=1e-6)

    @parameterized.parameters(False, True)
    def test_a_replica_contributes_when_any_value_is_nonzero_or_nan(self, jit):
        """``any_nonzero`` reads the small tensors first and the large ones only in a branch
        taken when those are all zero; one element nonzero (of either sign) or NaN anywhere
        counts, in graph mode and under XLA (where the max of the squares used to drop a
        NaN, and "not <= 0" became "> 0")."""
        from vrgd_tf.gsnr import samples

        sizes = [3, 5, 40, 400]  # the smallest 1/16 (3 + 5 + 40 elements) is read first

        def squares(where, value):
            out = [np.zeros(n, np.float32) for n in sizes]
            if where is not None:
                out[where][where] = value
            return [tf.constant(q) for q in out]

        fn = tf.function(lambda *q: samples.any_nonzero(q), jit_compile=jit)
        self.assertFalse(fn(*squares(None, 0.0)))
        for where in range(len(sizes)):
            for value in (1e-30, -1e-30, np.nan):
                self.assertTrue(fn(*squares(where, value)), msg=f"{where} {value}")
        self.assertFalse(samples.any_nonzero([tf.zeros([0])]))
        self.assertTrue(fn(*squares(3, 2.0)[::-1]))  # the order given does not matter


if __name__ == "__main__":
    tf.test.main()
