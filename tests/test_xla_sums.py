"""Per-variable sums under XLA (``vrgd_tf.gsnr.reductions.sums``): XLA on CPU adds a
variadic reduce's elements in sequence, so the sums are taken over rows of at most
``BLOCK`` elements and the rows' sums by a tree. Before, a 262,144-element sum of a factor
mostly at ``gamma`` was 7e-5 off float64, and the GSNR step under ``xla_cluster="always"``
differed from the step run op by op (``"never"``) by 7e-5 in its output."""

import numpy as np
import tensorflow as tf
import test_xla_cluster

from vrgd_tf.gsnr import reductions


def _xla_sums(values, finite_of=None):
    @tf.function(jit_compile=True, autograph=False)
    def run(values, finite_of):
        out, finite = reductions.sums(values, finite_of=finite_of)
        return out, (tf.constant(True) if finite is None else finite)

    out, finite = run([tf.constant(v) for v in values], finite_of)
    return [float(o) for o in out], bool(finite)


def _at_gamma(n, seed=0):
    """``n`` float32 factors, 87 % of them at 0.1 (the clip at ``gamma``), the rest in
    (0.1, 1): the sum whose roundings all go the same way."""
    rng = np.random.default_rng(seed)
    return np.where(rng.uniform(size=n) < 0.87, 0.1, rng.uniform(0.1, 1.0, n)).astype(np.float32)


class XlaSumsTest(tf.test.TestCase):
    def test_a_sum_of_many_similar_values_is_float32_exact(self):
        # 2**18 (rows of 256), 2**18 + 1 (of 185), 262147 (no divisor: zero padding), and
        # one row's worth.
        for n in (2**18, 2**18 + 1, 262147, 200):
            factor = _at_gamma(n)
            ratio = factor / np.float32(3.0)
            want = [factor.astype(np.float64).sum(), ratio.astype(np.float64).sum()]
            got, _ = _xla_sums([factor, ratio])
            for g, w in zip(got, want):
                self.assertLess(abs(g - w) / w, 1e-6, n)

    def test_a_count_past_2_to_the_24(self):
        n = 2**24 + 2**20
        got, _ = _xla_sums([np.ones([n], np.float32)])
        self.assertEqual(got[0], float(n))  # float32 in one sequence would stop at 2**24

    def test_finite_with_rows_and_padding(self):
        for n in (2**18, 262147):
            values = np.ones([n], np.float32)
            for bad, want in ((None, True), (np.nan, False), (np.inf, False)):
                check = np.zeros([n], np.float32)
                if bad is not None:
                    check[n - 1] = bad
                got, finite = _xla_sums([values], tf.constant(check))
                self.assertEqual(finite, want, (n, bad))
                self.assertEqual(got[0], float(n))

    def test_the_cluster_equals_op_by_op_on_a_large_variable(self):
        # A [512, 512] variable recording every step: mean_factor was 3e-4 off and the
        # output 7e-5 off the step run op by op.
        kwargs = dict(gamma=0.1, beta_3=0.9, statistics_interval=1, steps=2)
        shapes = ([512, 512], [30])
        plain, stats, _ = test_xla_cluster._run(xla_cluster="never", shapes=shapes, **kwargs)
        fused, fused_stats, _ = test_xla_cluster._run(xla_cluster="always", shapes=shapes, **kwargs)
        for a, b in zip(plain, fused):
            for x, y in zip(a, b):
                self.assertAllClose(x, y, rtol=1e-5, atol=1e-6)
        self.assertGreater(stats["v0"]["frac_at_gamma"], 0.5)
        for key, value in stats["v0"].items():
            self.assertAllClose(value, fused_stats["v0"][key], rtol=1e-5, atol=1e-6, msg=key)


if __name__ == "__main__":
    tf.test.main()
