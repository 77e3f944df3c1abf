"""XLA: every optimizer step and the full GSNR step compile with jit_compile=True (the
stand-in for TPU) and equal the uncompiled step."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf
from vrgd_tf import gsnr
from vrgd_tf import tf_keras as vtk
from vrgd_tf.gsnr.statistics import NUM_STATISTICS

import numpy_reference as ref
import util
from util import make_problem

KERAS3 = {
    "sgd": (vrgd_tf.VRGDSGD, dict(learning_rate=0.1, momentum=0.9)),
    "adam": (vrgd_tf.VRGDAdam, dict(learning_rate=0.01)),
    "lars": (
        vrgd_tf.VRGDLars,
        dict(learning_rate=0.5, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"]),
    ),
    "lamb": (
        vrgd_tf.VRGDLamb,
        dict(learning_rate=0.01, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"]),
    ),
}
TF_KERAS = {
    "sgd": (vtk.VRGDSGD, dict(learning_rate=0.1, momentum=0.9)),
    "adam": (vtk.VRGDAdam, dict(learning_rate=0.01)),
    "lars": (vtk.VRGDLars, dict(learning_rate=0.5, weight_decay_rate=0.01)),
    "lamb": (vtk.VRGDLamb, dict(learning_rate=0.01, weight_decay_rate=0.01)),
}


class FakeReplicaContext:
    """Replica 0 of k, the other replicas' gradients given: all_reduce(SUM) adds them in.

    Lets the whole GSNR step, collective included, be traced into one XLA cluster on one
    device, as it is on a TPU core.
    """

    def __init__(self, others):
        self.others = others  # [k - 1][n] arrays
        self.num_replicas_in_sync = len(others) + 1
        self.calls = 0

    def all_reduce(self, op, value):
        """VRGD's two calls per step: the float32 gradients ``[x_1 .. x_n]`` alone, then
        ``[x_1**2 .. x_n**2]`` with the count of samples that contributed and the stray flag
        (one ``[2]`` tensor after them)."""
        assert op == tf.distribute.ReduceOp.SUM
        squares = self.calls % 2 == 1
        self.calls += 1
        out = []
        for i, v in enumerate(value):
            if i == len(self.others[0]):  # [count, stray]: 1 per replica with a nonzero gradient
                count = float(sum(any(np.any(g != 0) for g in grads) for grads in self.others))
                extra = np.array([count, 0.0])
            else:
                parts = [np.ravel(grads[i]).astype(np.float32) for grads in self.others]
                extra = sum(p * p if squares else p for p in parts)
            out.append(v + tf.constant(extra, tf.float32))
        return out


class XlaTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(sorted(KERAS3))
    def test_keras3_step_compiles_and_matches(self, name):
        cls, kwargs = KERAS3[name]
        init, grads = make_problem(1, seed=2)
        strategy = tf.distribute.get_strategy()
        eager, _ = util.run_custom_loop(strategy, lambda: cls(**kwargs), init, grads)
        xla, _ = util.run_custom_loop(
            strategy, lambda: cls(**kwargs), init, grads, jit_compile=True
        )
        for n in init:
            self.assertAllClose(xla[n].numpy(), eager[n].numpy(), rtol=1e-6, atol=1e-6)

    @parameterized.parameters(sorted(TF_KERAS))
    def test_tf_keras_step_compiles_and_matches(self, name):
        cls, kwargs = TF_KERAS[name]
        init, grads = make_problem(1, seed=3)
        strategy = tf.distribute.get_strategy()
        mk = lambda n, v: tf.Variable(v, name=n)  # noqa: E731
        eager, _ = util.run_custom_loop(
            strategy, lambda: cls(**kwargs), init, grads, make_variable=mk
        )
        xla, _ = util.run_custom_loop(
            strategy, lambda: cls(**kwargs), init, grads, make_variable=mk, jit_compile=True
        )
        for n in init:
            self.assertAllClose(xla[n].numpy(), eager[n].numpy(), rtol=1e-6, atol=1e-6)

    @parameterized.parameters(0.0, 0.9)
    def test_full_gsnr_step_compiles_with_four_replicas(self, beta_3):
        """variance_reduce, state updates included, in one XLA cluster."""
        k = 4
        init, grads = make_problem(k, seed=4, steps=2)
        names = sorted(init)
        variables = [tf.Variable(init[n], name=n) for n in names]

        def run(jit):
            state = gsnr.VRGDState(
                lambda kind, i, shape, ref_: tf.Variable(tf.zeros(shape), name=kind), id, beta_3
            )
            state.add_variables(variables)
            outs = []
            for step in range(2):
                others = [[grads[n][step, d] for n in names] for d in range(1, k)]
                ctx = FakeReplicaContext(others)
                mine = [tf.constant(grads[n][step, 0]) for n in names]

                def fn(record, *g):
                    return gsnr.variance_reduce(
                        list(g),
                        variables,
                        settings=gsnr.VRGDSettings(gamma=0.1, beta_3=beta_3),
                        state=state,
                        replica_context=ctx,
                        record_statistics=record,
                    )

                # Diagnostics recorded on the second step only (a tf.cond in the program).
                out = tf.function(fn, jit_compile=jit)(tf.constant(step == 1), *mine)
                outs.append([o.numpy() for o in out])
                stats.append([v.numpy() for v in state.statistics])
            return outs

        stats = []
        compiled = run(True)
        compiled_stats, stats = stats, []
        eager = run(False)
        # The factor applied at step 2 (after smoothing), for the mean_factor diagnostic.
        moms = {n: ref.FactorMomentum(beta_3) for n in names}
        applied = {
            n: [moms[n](ref.gsnr_factor(grads[n][s], 0.1)[0]) for s in range(2)][1] for n in names
        }
        for step_stats in (compiled_stats, stats):
            for i, n in enumerate(names):
                self.assertAllEqual(step_stats[0][i], np.zeros(NUM_STATISTICS))
                self.assertAllClose(
                    step_stats[1][i],
                    ref.gsnr_statistics(grads[n][1], 0.1, applied[n]),
                    rtol=1e-5,
                    atol=1e-7,
                )
        moms = {n: ref.FactorMomentum(beta_3) for n in names}
        for step in range(2):
            for i, n in enumerate(names):
                self.assertAllClose(compiled[step][i], eager[step][i], rtol=1e-6, atol=1e-7)
                factor, s1 = ref.gsnr_factor(grads[n][step], 0.1)
                self.assertAllClose(compiled[step][i], moms[n](factor) * s1, rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    tf.test.main()
