"""Cases the rest of the suite did not reach (issue 36, "The suite's blind spots"): each test
here fails with a one-line slip of the library that the other tests passed with. Written
against public behaviour only (``GSNRAggregator``'s arguments and outputs,
``vrgd_statistics``, the event files, the constructors' errors, a traced step's graph), so
they hold whatever the step's internals look like.

* Exact sparse rows with ``beta_3 > 0``: rows no replica touches in a step (touched in an
  earlier one) add ``1 - d_t / c_t`` to ``mean_factor`` and decay their deficit, as on the
  dense path.
* ``GSNRTensorBoard`` takes the step count from ``optimizer.iterations`` when ``fit`` starts
  (a second ``fit`` that does not start at a multiple of ``update_freq``), and keeps counting
  across epochs.
* The ``tf.compat.v1`` ``ParameterServerStrategy`` is refused, as the TF2 one is.
* A dense gradient of exactly ``pack_limit`` elements joins the pack.
* ``gamma=float("nan")`` is refused by every constructor of both families and the aggregator.
* A non-finite step leaves the recorded diagnostics as they were.
"""

import math
import tempfile

import keras
import numpy as np
import tensorflow as tf
import test_summaries as ts
from absl.testing import parameterized

import vrgd_tf
from vrgd_tf import gsnr

import util

FAMILIES = (("keras3", "keras3"), ("tf_keras", "tf_keras"))


def _tf_keras():
    from vrgd_tf import tf_keras as vtk

    return vtk


class SparseRowsLeftUntouchedTest(tf.test.TestCase):
    """A (16, 2) embedding on 2 replicas, ``beta_3 = 0.9``, ``statistics_interval=1``: step 1
    touches rows 0-7, step 2 rows 8-15 (rows 0-7 keep a deficit from step 1 that no replica
    refreshes), step 3 rows 0-7 again (their factor reads the deficit decayed in step 2). The sparse path (``sparse_statistics="rows"``) gives the
    dense path's diagnostics after each step and its outputs (which read the deficits) bit
    for bit to float32 rounding (slips: the untouched rows' share of ``mean_factor`` taken
    as 1, or their deficit not decayed)."""

    ROWS = (list(range(8)), list(range(8, 16)), list(range(8)))

    def _run(self, mode, values):
        strategy = util.strategy_for(2)
        with strategy.scope():
            var = tf.Variable(tf.zeros([16, 2]), name="embedding")
            aggregator = vrgd_tf.GSNRAggregator(
                gamma=0.1, beta_3=0.9, statistics_interval=1, sparse_statistics=mode
            )
            aggregator.build([var])

        @tf.function
        def step(vals, idx):
            def fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                grad = tf.IndexedSlices(
                    tf.gather(vals, rid), tf.gather(idx, rid), tf.constant([16, 2], tf.int64)
                )
                (out,) = aggregator([grad], [var])
                return tf.convert_to_tensor(out)

            return strategy.experimental_local_results(strategy.run(fn))[0]

        outputs, stats = [], []
        for rows, v in zip(self.ROWS, values):
            idx = tf.constant([rows, rows], tf.int64)
            outputs.append(step(tf.constant(v), idx).numpy())
            stats.append(aggregator.statistics()["embedding"])
        return outputs, stats

    def test_untouched_rows_match_the_dense_path(self):
        rng = np.random.RandomState(11)
        values = [
            (rng.randn(2, len(rows), 2) * np.exp(rng.uniform(-1, 1, (2, len(rows), 2)))).astype(
                np.float32
            )
            for rows in self.ROWS
        ]
        sparse = self._run("rows", values)
        dense = self._run("dense", values)
        for step, (a, b) in enumerate(zip(sparse[1], dense[1])):
            for field in gsnr.STATISTICS_FIELDS:
                self.assertAllClose(a[field], b[field], rtol=1e-5, atol=1e-6, msg=(step, field))
        self.assertLess(dense[1][1]["mean_factor"], 0.99)
        for step, (a, b) in enumerate(zip(sparse[0], dense[0])):
            self.assertAllClose(a, b, rtol=1e-5, atol=1e-6, msg=f"output of step {step + 1}")
        self.assertGreater(np.abs(dense[0][2][:8]).min(), 0.0)


class TensorBoardClockTest(tf.test.TestCase, parameterized.TestCase):
    """``GSNRTensorBoard`` writes at the optimizer steps that are multiples of
    ``update_freq``, whatever the epochs and however many steps an earlier ``fit`` ran."""

    def _family(self, family):
        if family == "tf_keras":
            util.skip_without_tf_keras(self)
            return _tf_keras().GSNRTensorBoard, "tf_keras"
        return vrgd_tf.GSNRTensorBoard, "keras"

    @parameterized.named_parameters(*FAMILIES)
    def test_points_over_two_epochs(self, family):
        """3 steps per epoch, 2 epochs, ``update_freq=2``: points at steps 2, 4, 6 (slip:
        the clock reset at each epoch writes at 2, 5, 6)."""
        callback_cls, name = self._family(family)
        log_dir = tempfile.mkdtemp()
        model = ts.fit_dense(callback_cls(log_dir, update_freq=2), 3, epochs=2, family=name)
        self.assertEqual(int(model.optimizer.iterations.numpy()), 6)
        self.assertEqual(sorted(ts.event_scalars(log_dir)["vrgd/kernel/mean_gsnr"]), [2, 4, 6])

    @parameterized.named_parameters(*FAMILIES)
    def test_a_second_fit_from_an_odd_step(self, family):
        """A first ``fit`` of 3 steps, then a second of 3 steps (optimizer steps 4-6) with
        ``update_freq=2``: points at 4 and 6 (slip: the clock not synced with ``iterations``
        when ``fit`` starts writes at 5 and 6)."""
        callback_cls, name = self._family(family)
        first = tempfile.mkdtemp()
        model = ts.fit_dense(callback_cls(first, update_freq=3), 3, family=name)
        self.assertEqual(sorted(ts.event_scalars(first)["vrgd/kernel/mean_gsnr"]), [3])
        rng = np.random.RandomState(5)
        x = rng.randn(24, 5).astype(np.float32)
        y = rng.randn(24, 2).astype(np.float32)
        again = tempfile.mkdtemp()
        callback = callback_cls(again, update_freq=2)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[callback], shuffle=False)
        self.assertEqual(int(model.optimizer.iterations.numpy()), 6)
        self.assertEqual(sorted(ts.event_scalars(again)["vrgd/kernel/mean_gsnr"]), [4, 6])


class CompatV1ParameterServerTest(tf.test.TestCase):
    """``tf.compat.v1.distribute.experimental.ParameterServerStrategy`` (local, no cluster;
    its scope needs a graph) is refused at construction in both families and by the
    aggregator, with the message the TF2 strategy gets (slip: only the TF2 class listed)."""

    def test_refused_in_both_families_and_by_the_aggregator(self):
        strategy = tf.compat.v1.distribute.experimental.ParameterServerStrategy()
        makers = {
            "VRGDSGD": lambda: vrgd_tf.VRGDSGD(0.1, statistics_interval=1),
            "VRGDLamb": lambda: vrgd_tf.VRGDLamb(0.01, statistics_interval=1),
            "gsnr_aggregator": lambda: vrgd_tf.GSNRAggregator(statistics_interval=1),
        }
        if util.HAS_TF_KERAS:
            vtk = _tf_keras()
            makers["tf_keras VRGDSGD"] = lambda: vtk.VRGDSGD(0.1, statistics_interval=1)
            makers["tf_keras VRGDAdam"] = lambda: vtk.VRGDAdam(0.01, statistics_interval=1)
        with tf.Graph().as_default(), strategy.scope():
            for case, make in makers.items():
                with self.assertRaisesRegex(
                    ValueError,
                    r"cannot run under tf\.distribute\.experimental\.ParameterServerStrategy"
                    r".*MirroredStrategy",
                    msg=case,
                ):
                    make()


def traced_ops(pack_limit, sizes):
    """Graph nodes of one traced ``GSNRAggregator`` step (one device, 2 micro-batch groups,
    diagnostics recorded, ``beta_3 = 0.9``) over dense variables of ``sizes`` elements."""
    variables = [tf.Variable(tf.zeros([n]), name=f"v{i}") for i, n in enumerate(sizes)]
    aggregator = vrgd_tf.GSNRAggregator(beta_3=0.9, pack_limit=pack_limit, statistics_interval=1)
    aggregator.build(variables)

    @tf.function
    def step():
        grads = [tf.ones([n]) for n in sizes]
        squares = [tf.ones([n]) for n in sizes]
        return aggregator(grads, variables, sq_sums=squares, num_groups=2)

    graph = step.get_concrete_function().graph.as_graph_def()
    return len(graph.node) + sum(len(f.node_def) for f in graph.library.function)


class PackLimitBoundaryTest(tf.test.TestCase):
    """Six variables of 64 elements: with ``pack_limit=64`` they share one buffer, so the
    traced step is the one of ``pack_limit=1024`` (all packed), not the one of
    ``pack_limit=63`` (none packed) (slip: ``size < pack_limit``)."""

    def test_a_variable_of_exactly_pack_limit_elements_is_packed(self):
        sizes = [64] * 6
        at_limit = traced_ops(64, sizes)
        self.assertEqual(at_limit, traced_ops(1024, sizes))
        self.assertLess(at_limit, traced_ops(63, sizes))


class GammaNanTest(tf.test.TestCase, parameterized.TestCase):
    """``gamma=float("nan")`` fails every ``0 < gamma <= 1`` comparison; each constructor
    raises ``ValueError`` naming ``gamma`` (slip: the check written as
    ``gamma <= 0 or gamma > 1``, which NaN passes)."""

    NAN = float("nan")

    def _assert_refused(self, make, case):
        with self.assertRaisesRegex(ValueError, "`gamma`", msg=case):
            make()

    def test_keras3_family_and_the_aggregator(self):
        makers = {
            "VRGDSGD": lambda: vrgd_tf.VRGDSGD(0.1, gamma=self.NAN, statistics_interval=1),
            "VRGDAdam": lambda: vrgd_tf.VRGDAdam(0.1, gamma=self.NAN, statistics_interval=1),
            "VRGDLars": lambda: vrgd_tf.VRGDLars(0.1, gamma=self.NAN, statistics_interval=1),
            "VRGDLamb": lambda: vrgd_tf.VRGDLamb(0.1, gamma=self.NAN, statistics_interval=1),
            "make_vrgd_optimizer(AdamW)": lambda: vrgd_tf.make_vrgd_optimizer(
                keras.optimizers.AdamW
            )(0.1, gamma=self.NAN),
            "GSNRAggregator": lambda: vrgd_tf.GSNRAggregator(gamma=self.NAN, statistics_interval=1),
            "GSNRAggregator(settings)": lambda: vrgd_tf.GSNRAggregator(
                settings=vrgd_tf.settings.VRGDSettings(gamma=self.NAN), statistics_interval=1
            ),
        }
        for case, make in makers.items():
            self._assert_refused(make, case)
        self.assertTrue(math.isnan(self.NAN))

    def test_tf_keras_family(self):
        util.skip_without_tf_keras(self)
        import tf_keras

        vtk = _tf_keras()
        makers = {
            "VRGDSGD": lambda: vtk.VRGDSGD(0.1, gamma=self.NAN, statistics_interval=1),
            "VRGDAdam": lambda: vtk.VRGDAdam(0.1, gamma=self.NAN, statistics_interval=1),
            "VRGDLars": lambda: vtk.VRGDLars(0.1, gamma=self.NAN, statistics_interval=1),
            "VRGDLamb": lambda: vtk.VRGDLamb(0.1, gamma=self.NAN, statistics_interval=1),
            "make_vrgd_optimizer(Adamax)": lambda: vtk.make_vrgd_optimizer(
                tf_keras.optimizers.legacy.Adamax
            )(0.1, gamma=self.NAN),
        }
        for case, make in makers.items():
            self._assert_refused(make, case)


class NonFiniteStepKeepsDiagnosticsTest(tf.test.TestCase, parameterized.TestCase):
    """2 replicas, diagnostics every step: step 1 finite, step 2 with one NaN element. After
    step 2 ``vrgd_statistics`` reads what step 1 recorded (slip: the diagnostics written on
    any recording step, finite or not)."""

    @parameterized.named_parameters(*FAMILIES)
    def test_the_recorded_diagnostics_are_kept(self, family):
        if family == "tf_keras":
            util.skip_without_tf_keras(self)
            make_optimizer = lambda: _tf_keras().VRGDSGD(0.1, beta_3=0.9, statistics_interval=1)  # noqa: E731
            make_variable = lambda n, v: tf.Variable(v, name=n)  # noqa: E731
        else:
            make_optimizer = lambda: vrgd_tf.VRGDSGD(0.1, beta_3=0.9, statistics_interval=1)  # noqa: E731
            make_variable = None
        rng = np.random.RandomState(2)
        grads = rng.randn(2, 2, 6).astype(np.float32)  # [step, replica, element]
        grads[1, 1, 3] = np.nan
        recorded = []
        for _, _, opt in util.custom_loop_steps(
            util.strategy_for(2),
            make_optimizer,
            {"w": np.zeros(6, np.float32)},
            {"w": grads},
            make_variable=make_variable,
        ):
            recorded.append(vrgd_tf.vrgd_statistics(opt)["w"])
        first, second = recorded
        self.assertGreater(first["mean_gsnr"], 0.0)
        self.assertLess(first["mean_factor"], 1.0)
        self.assertEqual(second, first)


if __name__ == "__main__":
    tf.test.main()
