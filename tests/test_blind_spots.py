"""Cases the rest of the suite did not reach: each test here fails with a one-line slip in
the step or the restore that every other test passed with (issue 18, "blind spots").
Written against public behaviour (weights, ``vrgd_statistics``, slots, checkpoints), so
they hold whatever the step's internals look like.

* Sparse rows that no replica touches in a step decay their factor momentum by ``beta_3``,
  as the dense form's factor 1 makes them (spec section 4): the sparse and the dense form
  of the same gradients train the same weights when the touched rows change between steps.
* The factor momentum's bias correction is per variable: a variable whose gradient is None
  in a step keeps its own count (NumPy reference).
* The standalone ``GSNRAggregator`` counts only steps with finite gradients, so a skipped
  step does not shift the phase of ``statistics_interval``.
* tf_keras: a checkpoint restored before the slots exist, under a variable creator scope
  (the deferred slot restoration), restores the VRGD slots as it restores Adam's.
"""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import vrgd_tf

import numpy_reference as ref
import util

FAMILIES = (("keras3", "keras3"), ("tf_keras", "tf_keras"))


def family_tools(test, family):
    """``(VRGDSGD class, make_variable)`` of the family (skips tf_keras without it)."""
    if family == "tf_keras":
        util.skip_without_tf_keras(test)
        from vrgd_tf import tf_keras as vtk

        return vtk.VRGDSGD, lambda name, value: tf.Variable(value, name=name)
    return vrgd_tf.VRGDSGD, lambda name, value: keras.Variable(value, name=name)


def run_steps(strategy, optimizer, variables, steps):
    """Applies ``steps``: a list of ``{name: per-replica gradients}``, each a callable
    ``(replica id) -> gradient`` (a name left out has gradient None in that step)."""
    names = list(variables)

    @tf.function
    def step(present, grads):
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            pairs = [(grads[n](rid) if n in present else None, variables[n]) for n in names]
            optimizer.apply_gradients(pairs)

        strategy.run(fn)

    for grads in steps:
        present = tuple(sorted(grads))
        step(present, grads)


class SparseUntouchedRowsTest(tf.test.TestCase, parameterized.TestCase):
    """Rows 0-1 touched, then only rows 2-3, then rows 0-1 again, with ``beta_3 = 0.9``:
    rows 0-1's momentum must decay in the middle step (slip: no decay)."""

    ROWS = ([0, 1], [2, 3], [0, 1])

    def _steps(self, sparse):
        rng = np.random.RandomState(4)
        steps = []
        for rows in self.ROWS:
            values = tf.constant(rng.randn(2, 2, 2).astype(np.float32))  # [replica, row, w]
            indices = tf.constant([rows, rows], tf.int64)

            def grad(rid, values=values, indices=indices):
                slices = tf.IndexedSlices(
                    tf.gather(values, rid), tf.gather(indices, rid), tf.constant([6, 2], tf.int64)
                )
                return slices if sparse else tf.convert_to_tensor(slices)

            steps.append({"embedding": grad})
        return steps

    @parameterized.named_parameters(*FAMILIES)
    def test_sparse_equals_dense_when_the_touched_rows_change(self, family):
        cls, make_variable = family_tools(self, family)
        strategy = util.strategy_for(2)
        init = np.random.RandomState(0).randn(6, 2).astype(np.float32)
        out = {}
        for sparse in (True, False):
            with strategy.scope():
                variables = {"embedding": make_variable("embedding", init)}
                opt = cls(0.5, gamma=0.1, beta_3=0.9)
                if family == "keras3":
                    opt.build(list(variables.values()))
            run_steps(strategy, opt, variables, self._steps(sparse))
            out[sparse] = variables["embedding"].numpy()
        moved = np.abs(out[True] - init)[:2]
        self.assertGreater(moved.min(), 1e-3)
        self.assertAllClose(out[True], out[False], rtol=1e-6, atol=1e-6)


class CorrectionPerVariableTest(tf.test.TestCase, parameterized.TestCase):
    """Two variables, ``beta_3 = 0.9``; the second has no gradient in step 2 of 4, so its
    bias correction lags the first's by one step (slip: the first's used for both)."""

    @parameterized.named_parameters(*FAMILIES)
    def test_a_skipped_gradient_keeps_its_own_correction(self, family):
        cls, make_variable = family_tools(self, family)
        k, rng = 2, np.random.RandomState(7)
        init = {"a": rng.randn(3).astype(np.float32), "b": rng.randn(4).astype(np.float32)}
        grads = {
            n: (rng.randn(4, k, *v.shape) * np.exp(rng.uniform(-1, 1, v.shape))).astype(np.float32)
            for n, v in init.items()
        }
        present = [("a", "b"), ("a",), ("a", "b"), ("a", "b")]
        strategy = util.strategy_for(k)
        with strategy.scope():
            variables = {n: make_variable(n, v) for n, v in init.items()}
            opt = cls(0.1, gamma=0.1, beta_3=0.9)
            if family == "keras3":
                opt.build(list(variables.values()))
        consts = {n: tf.constant(g) for n, g in grads.items()}
        steps = [
            {n: (lambda rid, n=n, i=i: tf.gather(consts[n][i], rid)) for n in names}
            for i, names in enumerate(present)
        ]
        run_steps(strategy, opt, variables, steps)
        vr = ref.VRGD(ref.SGD(0.1), 0.1, 0.9)
        expected = {n: np.asarray(v, np.float64) for n, v in init.items()}
        for i, names in enumerate(present):
            for n in names:
                expected[n] = vr.step(n, expected[n], grads[n][i])
        for n in init:
            self.assertAllClose(variables[n].numpy(), expected[n], rtol=1e-5, atol=1e-6)


class AggregatorStepCounterTest(tf.test.TestCase):
    """``statistics_interval=2``: steps 1 (finite), 2 (NaN), 3 (finite). Only finite steps
    count, so step 3 is the second counted step and records (slip: counting step 2 too
    moves the recording to step 4)."""

    def test_a_non_finite_step_does_not_shift_the_recording(self):
        strategy = util.strategy_for(2)
        rng = np.random.RandomState(5)
        g = rng.randn(3, 2, 4).astype(np.float32)
        g[1, 0, 2] = np.nan
        with strategy.scope():
            w = tf.Variable(np.zeros(4, np.float32), name="w")
            aggregator = vrgd_tf.GSNRAggregator(gamma=0.1, statistics_interval=2)
            aggregator.build([w])
        consts = tf.constant(g)

        @tf.function
        def step(i):
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                aggregator([tf.gather(consts[i], rid)], [w])

            strategy.run(fn)

        step(tf.constant(0))
        step(tf.constant(1))
        self.assertEqual(aggregator.statistics()["w"]["mean_gsnr"], 0.0)  # nothing yet
        step(tf.constant(2))
        got = aggregator.statistics()["w"]
        want = ref.gsnr_statistics(g[2], 0.1)
        self.assertAllClose(
            [got[f] for f in ("mean_gsnr", "frac_at_gamma", "frac_at_one", "mean_factor")],
            want[:4],
            rtol=1e-5,
        )


class TfKerasDeferredSlotRestoreTest(tf.test.TestCase):
    """A tf_keras ``VRGDAdam`` trained 2 steps (k = 2 by micro-batch groups, no strategy),
    checkpointed, and restored into a fresh model and optimizer under a variable creator
    scope, where tf_keras defers every slot's restore until the slot is created. The VRGD
    slots must come back with Adam's ``m`` and ``v`` (slip: the deferred restore of a new
    VRGD slot dropped), and training continues as uninterrupted."""

    def _make(self):
        from vrgd_tf import tf_keras as vtk

        w = tf.Variable(np.linspace(-1.0, 1.0, 4).astype(np.float32), name="w")
        return w, vtk.VRGDAdam(0.05, beta_3=0.9, statistics_interval=1)

    @staticmethod
    def _step(opt, w, groups):
        g = tf.constant(groups)
        opt.apply_grouped_gradients([(tf.reduce_sum(g, 0), w)], [tf.reduce_sum(g * g, 0)], 2)

    def test_restore_under_a_variable_creator_scope(self):
        util.skip_without_tf_keras(self)
        rng = np.random.RandomState(3)
        data = rng.randn(3, 2, 4).astype(np.float32)
        w, opt = self._make()
        for i in range(2):
            self._step(opt, w, data[i])
        path = tf.train.Checkpoint(w=w, opt=opt).save(os.path.join(tempfile.mkdtemp(), "c"))
        slots = {name: opt.get_slot(w, name).numpy() for name in opt.get_slot_names()}
        self.assertGreater(np.abs(slots["vrgd_deficit"]).max(), 0.0)
        self._step(opt, w, data[2])
        uninterrupted = w.numpy()

        w2, opt2 = self._make()
        with tf.variable_creator_scope(lambda next_creator, **kwargs: next_creator(**kwargs)):
            status = tf.train.Checkpoint(w=w2, opt=opt2).restore(path)
        self.assertEmpty(opt2.weights)  # nothing created yet: the slot restores are deferred
        self._step(opt2, w2, data[2])
        self.assertAllClose(w2.numpy(), uninterrupted, rtol=1e-6, atol=1e-7)
        status.assert_consumed()
        for name in ("m", "v", "vrgd_deficit", "vrgd_correction"):
            self.assertIn(name, opt2.get_slot_names())


if __name__ == "__main__":
    tf.test.main()
