"""XLA: every optimizer step and the full GSNR step compile with jit_compile=True (the
stand-in for TPU) and equal the uncompiled step."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from hlo_text import output_conditional_arrays

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


def _run_steps(variables, steps, jit, state_dtype="float32", record_at=None):
    """``variance_reduce`` (``gamma=0.1, beta_3=0.9``) over ``steps`` (per step, per
    variable: float32 ``[k, *shape]``, replica 0's own, the others' through
    :class:`FakeReplicaContext`) on a fresh state, each step one ``tf.function``
    (``jit_compile=jit``); records on step ``record_at`` (a tensor predicate; never if
    None). Returns the outputs and the deficits after each step, and the last statistics."""
    k = steps[0][0].shape[0]
    state = gsnr.VRGDState(
        lambda kind, i, shape, ref_: tf.Variable(
            tf.zeros(shape, gsnr.state.variable_dtype(kind, state_dtype)), name=kind
        ),
        id,
        0.9,
        state_dtype=state_dtype,
    )
    state.add_variables(variables)
    outs, deficits = [], []
    for step, g in enumerate(steps):
        ctx = FakeReplicaContext([[x[d] for x in g] for d in range(1, k)])

        def fn(record, *mine):
            return gsnr.variance_reduce(
                list(mine),
                variables,
                settings=gsnr.VRGDSettings(gamma=0.1, beta_3=0.9),
                state=state,
                replica_context=ctx,
                record_statistics=record,
            )

        mine = [tf.constant(x[0]) for x in g]
        out = tf.function(fn, jit_compile=jit)(tf.constant(step == record_at), *mine)
        outs.append([o.numpy() for o in out])
        deficits.append([d.numpy() for d in state.deficits])
    return outs, deficits, [v.numpy() for v in state.statistics]


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

    def test_xla_steps_that_do_not_commit_equal_the_graph_steps(self):
        """Under XLA the smoothed factor is taken again from the deficits as stored after
        the commit (``step._commit``): a step that does not commit (a NaN in one variable's
        sums; a step whose replicas all sent the same gradient, without a GSNR) must still
        apply ``1 - d_t / c_t`` from the uncommitted ``d_t``, and leave the state as it
        was, as the graph-mode step does. The last step records: its diagnostics, whose
        factors the recording branch takes again from the sums and the stored deficits
        under XLA, equal the graph step's (the factor varies from step to step, so the
        smoothed factor differs from the raw one). Two small variables are packed."""
        k, rng = 4, np.random.RandomState(7)
        shapes = {"a": [64, 8], "b": [8], "c": [3, 5]}
        names = sorted(shapes)
        steps = []
        for step in range(5):
            g = {n: rng.randn(k, *s).astype(np.float32) for n, s in shapes.items()}
            if step == 1:
                g["c"][0, 1, 2] = np.nan  # this replica's own: the step is not finite
            if step == 3:
                g = {n: np.repeat(v[:1], k, 0) for n, v in g.items()}  # no GSNR
            steps.append(g)
        variables = [tf.Variable(tf.zeros(shapes[n]), name=n) for n in names]
        per_step = [[g[n] for n in names] for g in steps]

        def run(jit):  # a tensor record_statistics, as with statistics_interval > 1
            return _run_steps(variables, per_step, jit, record_at=4)

        (xla, xla_d, xla_s), (graph, graph_d, graph_s) = run(True), run(False)
        for i, n in enumerate(names):
            self.assertAllClose(xla_s[i], graph_s[i], rtol=1e-5, atol=1e-7)
            self.assertGreater(xla_s[i][0], 0.0)  # recorded
        for step in range(5):
            for i, n in enumerate(names):
                if step == 1 and n == "c":
                    continue  # the NaN passes through
                self.assertAllClose(xla[step][i], graph[step][i], rtol=1e-6, atol=1e-7)
                self.assertAllClose(xla_d[step][i], graph_d[step][i], rtol=1e-6, atol=1e-7)
        for i, n in enumerate(names):
            self.assertAllEqual(xla_d[1][i], xla_d[0][i])  # not committed
            self.assertAllEqual(xla_d[3][i], xla_d[2][i])
            self.assertAllEqual(xla[3][i], steps[3][n].sum(0))  # factor 1: S1 exactly
        # The uncommitted step still applied its smoothed factor (not 1, not d_{t-1}'s).
        self.assertNotAllClose(xla[1][0], steps[1]["a"].sum(0))

    def test_xla_output_of_a_committing_step_reads_s1_and_the_stored_deficit_only(self):
        """Under XLA the output ``p_hat * S1`` is made in one conditional on the commit's
        predicate (``step._scaled``): the branch of a step that commits takes ``S1`` and the
        stored ``d_t`` (two arrays of the variable's size) and not ``S2``, which only the
        other branch reads (``docs/cost_model.md`` section 6.7). Read from the optimized
        HLO of the compiled step on one dense variable of 4,096 elements."""
        k, rng = 4, np.random.RandomState(5)
        variable = tf.Variable(tf.zeros([64, 64]), name="w")
        state = gsnr.VRGDState(
            lambda kind, i, shape, ref_: tf.Variable(tf.zeros(shape), name=kind), id, 0.9
        )
        state.add_variables([variable])
        g = rng.randn(k, 64, 64).astype(np.float32)
        ctx = FakeReplicaContext([[g[d]] for d in range(1, k)])

        def fn(mine):
            settings = gsnr.VRGDSettings(gamma=0.1, beta_3=0.9)
            return gsnr.variance_reduce(
                [mine],
                [variable],
                settings=settings,
                state=state,
                replica_context=ctx,
                record_statistics=False,
            )

        step = tf.function(fn, jit_compile=True)
        hlo = step.experimental_get_compiler_ir(tf.constant(g[0]))(stage="optimized_hlo")
        # S1 and d_t against S1, S2 and d_{t-1} (the other branch's factor is large enough
        # that XLA keeps the conditional rather than making it a select)
        committing, other = output_conditional_arrays(hlo, ("f32[4096]", "f32[64,64]"))
        self.assertEqual(committing, 2)
        self.assertGreaterEqual(other, 3)

    def test_xla_steps_whose_stored_deficit_is_not_d_t_equal_the_graph_steps(self):
        """The read-back of ``step._commit`` needs the stored deficit to be the step's
        ``d_t``: not for a bfloat16 state under float32 settings (a direct call; the state
        rounds ``d_t``), nor for a variable given twice (the second commit overwrites the
        first's). Both fall back to the factors made before the commit, as in graph mode."""
        k, rng = 4, np.random.RandomState(3)
        v, w = tf.Variable(tf.zeros([64]), name="v"), tf.Variable(tf.zeros([16]), name="w")
        cases = {"bfloat16 state": ([v], "bfloat16"), "w twice": ([w, w], "float32")}
        for label, (variables, state_dtype) in cases.items():
            steps = [
                [rng.randn(k, *x.shape).astype(np.float32) for x in variables] for _ in range(3)
            ]

            def run(jit):
                return _run_steps(variables, steps, jit, state_dtype=state_dtype)[0]

            for xla, graph in zip(run(True), run(False)):
                for a, b in zip(xla, graph):
                    self.assertAllClose(a, b, rtol=1e-6, atol=1e-7, msg=label)


if __name__ == "__main__":
    tf.test.main()
