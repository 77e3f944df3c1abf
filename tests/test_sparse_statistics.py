"""Exact sparse GSNR statistics: an ``IndexedSlices`` gradient's statistics are computed on
the union of the rows the replicas touched (gathered), never on its dense shape, and give
what the dense statistics give (the dense path, chosen by the public option
``sparse_statistics="dense"``): same weights, same state, same diagnostics.
"""

import numpy as np
import tensorflow as tf
import test_sparse as ts
from absl.testing import parameterized

from vrgd_tf import gsnr
from vrgd_tf import tf_keras as vtk

import util

OPTIMIZERS = dict(ts.BASES)
OPTIMIZERS[(ts.TF_KERAS, "lars")] = (lambda **kw: vtk.VRGDLars(0.1, **kw), None)
CASES = [(f, n, b) for f, n in sorted(OPTIMIZERS) for b in (0.0, 0.9)]


def run(family, k, make_optimizer):
    """ts.run_sparse, also returning the optimizer's VRGD state and diagnostics."""
    value, opt = ts.run_sparse(family, k, make_optimizer, with_optimizer=True)
    deficit = [util.replica_values(d) for d in opt.vrgd_aggregator.state.deficits]
    return value, opt.vrgd_statistics(), deficit


class SparseEqualsDenseTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(*CASES)
    def test_weights_state_and_diagnostics_equal_the_dense_path(self, family, name, beta_3):
        make_vr = OPTIMIZERS[(family, name)][0]
        # Every optimizer on 1 and 2 replicas across its two beta_3 cases, LAMB and LARS on 4
        # too (the statistics are computed before the optimizer's rule, which test_sparse runs
        # on 1, 2 and 4 replicas for each optimizer; the suite's time, issue 36: each run
        # traces a step). SparseGraphAndXlaTest below is 4 replicas at both beta_3.
        if beta_3 == 0.0:
            ks = (1, 4) if name in ("lamb", "lars") else (1,)
        else:
            ks = (2,)
        for k in ks:
            sparse = run(
                family, k, lambda: make_vr(gamma=0.1, beta_3=beta_3, statistics_interval=1)
            )
            dense = run(
                family,
                k,
                lambda: make_vr(
                    gamma=0.1, beta_3=beta_3, sparse_statistics="dense", statistics_interval=1
                ),
            )
            self.assertAllClose(sparse[0], dense[0], rtol=1e-5, atol=1e-6, msg=f"k={k}")
            self.assertGreater(np.abs(sparse[0] - 1.0).max(), 1e-4)  # it trained
            for row in (2, 5, 6):  # touched by no replica
                self.assertAllEqual(sparse[0][row], np.ones(2))
            (stats_s,), (stats_d,) = sparse[1].values(), dense[1].values()
            for field in gsnr.STATISTICS_FIELDS:
                self.assertAllClose(stats_s[field], stats_d[field], rtol=1e-5, atol=1e-6)
            if k > 1:
                self.assertLess(stats_s["mean_factor"], 0.99)  # VRGD scaled rows
            for a, b in zip(sparse[2], dense[2]):  # deficits, every replica's copy
                self.assertAllClose(a, b, rtol=1e-5, atol=1e-7)


VOCAB, WIDTH = 1000, 4


def local_rows(idx, val):
    """NumPy: what a replica gathers: its rows, and at each index's first occurrence the
    square of the sum of that index's rows (zeros elsewhere)."""
    squares = np.zeros_like(val)
    for i in np.unique(idx):
        at = np.flatnonzero(idx == i)
        squares[at[0]] = np.square(val[at].sum(0))
    return idx, np.concatenate([val, squares], 1)


def densify(idx, val):
    dense = np.zeros((VOCAB, WIDTH), np.float32)
    np.add.at(dense, idx, val)
    return dense


class FakeReplicaContext:
    """Replica 0 of k on one device (as a TPU core traces it), for one sparse gradient: the
    other replicas' contributions are constants, gathered after this replica's (sparse
    path) or added to its sums (dense path)."""

    def __init__(self, others):
        self.others = others  # [k - 1] (indices, values)
        self.num_replicas_in_sync = len(others) + 1

    def all_gather(self, value, axis):
        """The sparse path's one call: indices, rows packed with squares, and (no dense
        gradient carries it) the count of samples that contributed and the stray flag,
        ``[2]``."""
        assert axis == 0 and len(value) == 3
        theirs = [local_rows(*g) for g in self.others]
        return [
            tf.concat([value[0]] + [tf.constant(t[0], value[0].dtype) for t in theirs], 0),
            tf.concat([value[1]] + [tf.constant(t[1]) for t in theirs], 0),
            tf.concat([value[2]] + [tf.constant([1.0, 0.0]) for _ in theirs], 0),
        ]

    def all_reduce(self, op, value):
        """The dense path's two calls: first ``[x]`` with the IndexedSlices, then the
        squares with the count and stray flag ``[x**2, [count, stray]]``."""
        assert op == tf.distribute.ReduceOp.SUM
        dense = [densify(*g).ravel() for g in self.others]
        if not isinstance(value[-1], tf.IndexedSlices):  # the squares and the count
            squares, count = value
            return [
                squares + tf.constant(sum(d * d for d in dense)),
                count + tf.constant([float(len(self.others)), 0.0]),
            ]
        packed, summed = value
        total = tf.convert_to_tensor(summed) + tf.constant(sum(densify(*g) for g in self.others))
        return [packed + tf.constant(sum(dense)), total]


def replica_gradients(k, seed=0, m=6):
    """k replicas' (indices, values): rows 0..7 only, duplicates and rows on one replica."""
    rng = np.random.RandomState(seed)
    return [
        (rng.randint(0, 8, size=m).astype(np.int32), rng.randn(m, WIDTH).astype(np.float32))
        for _ in range(k)
    ]


class SparseGraphAndXlaTest(tf.test.TestCase, parameterized.TestCase):
    def _step(self, grads, beta_3, jit_compile, state_vars, densify=True, sparse=True):
        ctx = FakeReplicaContext(grads[1:])
        var = state_vars["var"]
        state = state_vars["state"]

        def fn():
            idx, val = grads[0]
            g = tf.IndexedSlices(tf.constant(val), tf.constant(idx), tf.constant([VOCAB, WIDTH]))
            (out,) = gsnr.variance_reduce(
                [g],
                [var],
                settings=gsnr.VRGDSettings(
                    gamma=0.1, beta_3=beta_3, sparse_statistics="rows" if sparse else "dense"
                ),
                state=state,
                replica_context=ctx,
            )
            return tf.convert_to_tensor(out) if densify else out

        return tf.function(fn, jit_compile=jit_compile)

    def _state(self, beta_3):
        var = tf.Variable(tf.zeros([VOCAB, WIDTH]))
        state = gsnr.VRGDState(
            lambda kind, i, shape, ref: tf.Variable(tf.zeros(shape), name=f"vrgd_{kind}"),
            id,
            beta_3,
        )
        state.add_variables([var])
        return {"var": var, "state": state}

    @parameterized.parameters((0.0, False), (0.0, True), (0.9, False), (0.9, True))
    def test_sparse_equals_dense_with_and_without_xla(self, beta_3, jit_compile):
        grads = replica_gradients(4)
        results = []
        for sparse in (True, False):
            st = self._state(beta_3)
            fn = self._step(grads, beta_3, jit_compile, st, sparse=sparse)
            outs = [fn().numpy() for _ in range(2)]
            stats = st["state"].statistics[0].numpy()
            deficit = st["state"].deficits[0].numpy() if beta_3 else None
            results.append((outs, stats, deficit))
        (o_s, st_s, d_s), (o_d, st_d, d_d) = results
        for a, b in zip(o_s, o_d):
            self.assertAllClose(a, b, rtol=1e-5, atol=1e-6)
        self.assertAllClose(st_s, st_d, rtol=1e-5, atol=1e-6)
        self.assertLess(st_s[3], 0.999)  # factors below 1 were applied
        if beta_3:
            self.assertAllClose(d_s, d_d, rtol=1e-5, atol=1e-7)

    def test_no_tensor_of_the_dense_shape_on_the_sparse_path(self):
        """With beta_3 = 0 no op of the traced step makes a tensor with VOCAB rows (the dense
        path densifies, squares and all-reduces [VOCAB * WIDTH] elements); the sparse path's
        largest tensors have k * m rows."""
        grads = replica_gradients(4)
        for sparse in (True, False):
            st = self._state(0.0)
            fn = self._step(grads, 0.0, False, st, densify=False, sparse=sparse)
            graph = fn.get_concrete_function().graph
            shapes = [
                t.shape
                for op in graph.get_operations()
                for t in op.outputs
                if op.type not in ("VarHandleOp", "Placeholder")
            ]
            big = [s for s in shapes if s.rank and s.num_elements() and s.num_elements() >= VOCAB]
            if sparse:
                self.assertEqual(big, [])
                self.assertIn(tf.TensorShape([4 * 6, 2 * WIDTH]), shapes)
            else:
                self.assertNotEqual(big, [])  # what this test guards against
