"""VRGD under ``MirroredStrategy``'s DEFAULT cross-device ops (``CollectiveAllReduce`` on 4
logical CPUs), both families (issue 36, fault 1).

``CollectiveAllReduce`` concatenates one ``all_reduce`` call's dense tensors into a buffer
and sums it in chunks whose order depends on the offsets, so a gradient summed beside other
tensors (the count of contributing samples, the split-half subsample) can differ in its last
bits from the same gradient summed alone, as the base optimizer sums it. The gradients
travel in a call of their own (``vrgd_tf.gsnr.collectives``): ``gamma=1, beta_3=0`` is then
the base bit for bit, and ``split_half`` leaves the weights as they are (``docs/spec.md``
sections 2 and 4). The other tests use ``ReductionToOneDevice`` (``util.strategy_for``),
which sums each tensor alone.

The runs are in one subprocess (``default_collective_main.py``): the collective keys of
several strategies in one process can clash. The Keras 3 family runs every case; tf_keras
the plain step and split_half with bfloat16 squares, in a custom loop and in ``fit`` (the
collectives are shared; each case is a trace on 4 replicas: the suite's time).
"""

import numpy as np
import tensorflow as tf
from test_strategies import run_main

import util


class DefaultCollectiveTest(tf.test.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        families = ["keras3"] + (["tf_keras"] if util.HAS_TF_KERAS else [])
        cls.out = run_main("default_collective_main.py", *families)

    def families(self):
        return ["keras3"] + (["tf_keras"] if util.HAS_TF_KERAS else [])

    def weights(self, family, case):
        got = self.out[family][case]
        self.assertIsInstance(got, dict, f"{family} {case}: {got}")
        return {n: np.array(v) for n, v in got.items()}

    def assert_same_weights(self, family, case, reference):
        got, want = self.weights(family, case), self.weights(family, reference)
        self.assertEqual(sorted(got), sorted(want))
        for name in want:
            self.assertAllEqual(got[name], want[name], msg=f"{family} {case} {name}")

    def test_sgd_gamma_1_is_the_base_bit_for_bit(self):
        # A [276] and a [552] variable (the sums span several chunks), 5 steps.
        for family in self.families():
            for case in ("vr_sgd", "vr_sgd_bf16_split"):
                self.assert_same_weights(family, f"vars/{case}", "vars/sgd")

    def test_dense_model_fit_is_the_base_bit_for_bit(self):
        for family in self.families():
            self.assert_same_weights(family, "dense/vr_sgd_split", "dense/sgd")

    def test_adam_gamma_1_is_the_base_bit_for_bit_after_40_steps(self):
        for family in self.families()[:1]:  # the Keras 3 family runs every case
            self.assert_same_weights(family, "vars40/vr_adam_split", "vars40/adam")

    def test_sparse_rows_beside_dense_gradients(self):
        # An IndexedSlices gradient (the exact rows path: an all-gather) between the two
        # dense ones: the dense sums and the rows are the base's.
        for family in self.families()[:1]:  # the Keras 3 family runs every case
            self.assert_same_weights(family, "sparse/vr_sgd_split", "sparse/sgd")
            # int64 indices: the collective's all-gather gives them no static length.
            self.assert_same_weights(family, "sparse64/vr_sgd", "sparse64/sgd")

    def test_float64_variables(self):
        for family in self.families()[:1]:  # the Keras 3 family runs every case
            self.assert_same_weights(family, "float64/vr_sgd_split", "float64/sgd")

    def test_split_half_leaves_the_weights_unchanged(self):
        # gamma=0.5: the factors act, and read the squares; the subsample changes neither.
        for family in self.families()[:1]:  # the Keras 3 family runs every case
            self.assert_same_weights(family, "vars/vr_sgd_gamma_split", "vars/vr_sgd_gamma")
            got = self.weights(family, "vars/vr_sgd_gamma")
            base = self.weights(family, "vars/sgd")
            self.assertGreater(max(np.max(np.abs(got[n] - base[n])) for n in base), 1e-3)


if __name__ == "__main__":
    tf.test.main()
