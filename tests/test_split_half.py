"""Split-half reliability of the GSNR (vrgd_tf.gsnr.reliability; docs/spec.md section 4): known
answers on synthetic samples, the NumPy reference, the undefined cases, XLA."""

import numpy as np
import tensorflow as tf

from vrgd_tf.gsnr import reliability as split_half

import numpy_reference as ref


def sums(variables, k_a):
    """The step's inputs from raw samples: each variable ``[k, ...]``; returns
    ``(s1, s2, s1_a, s2_a, k, sizes)`` packed flat, float32 as the step has them."""
    flat = [np.asarray(x, np.float64).reshape(x.shape[0], -1) for x in variables]
    xs = np.concatenate(flat, axis=1)
    packed = (xs.sum(0), (xs * xs).sum(0), xs[:k_a].sum(0), (xs[:k_a] ** 2).sum(0))
    return (
        *(tf.constant(p, tf.float32) for p in packed),
        xs.shape[0],
        [x.shape[1] for x in flat],
    )


def run(variables, k_a, **kwargs):
    s1, s2, s1_a, s2_a, k, sizes = sums(variables, k_a)
    return split_half.split_half_reliability(s1, s2, s1_a, s2_a, k, k_a, sizes, **kwargs)


def noise(rng, k, n):
    """Pure noise: every element's mean is 0, its scale its own (log-uniform)."""
    return np.exp(rng.uniform(-2.0, 2.0, n)) * rng.randn(k, n)


def pattern(rng, k, n, low=0.0, high=2.0):
    """A fixed per-element signal-to-noise pattern: element i has GSNR ``snr_i**2`` drawn
    log-uniformly in ``10**[low, high]`` once, the same in every sample."""
    scale = np.exp(rng.uniform(-2.0, 2.0, n))
    snr = 10.0 ** (rng.uniform(low, high, n) / 2.0)
    return scale * (snr + rng.randn(k, n))


class SplitHalfTest(tf.test.TestCase):
    def assert_matches_reference(self, got, variables, k_a):
        for i, x in enumerate(variables):
            reliability, rho, num_pairs, defined = ref.split_half_reliability(x, k_a)
            self.assertEqual(bool(got.defined[i]), defined, msg=f"variable {i}")
            self.assertEqual(float(got.num_pairs[i]), num_pairs, msg=f"variable {i}")
            self.assertAllClose(got.correlation[i], rho, atol=2e-4, msg=f"variable {i}")
            self.assertAllClose(got.reliability[i], reliability, atol=2e-4, msg=f"variable {i}")

    def test_pure_noise_reads_near_zero(self):
        """Two disjoint halves of noise share nothing: |rho| within ~3 / sqrt(elements)."""
        rng = np.random.RandomState(0)
        for k in (4, 8, 64):
            variables = [noise(rng, k, 20000), noise(rng, k, 5000).reshape(k, 50, 100)]
            got = run(variables, k // 2)
            self.assertAllEqual(got.defined, [True, True])
            for value, bound in zip(np.abs(got.reliability), (0.05, 0.09)):
                self.assertLess(value, bound, msg=f"k={k}")
            self.assert_matches_reference(got, variables, k // 2)

    def test_fixed_signal_to_noise_pattern_reads_near_one(self):
        """Each element's GSNR fixed (10**0 to 10**2) over 128 samples: the halves agree."""
        rng = np.random.RandomState(1)
        variables = [pattern(rng, 128, 20000), pattern(rng, 128, 4000, -1.0, 2.0)]
        got = run(variables, 64)
        self.assertAllEqual(got.defined, [True, True])
        self.assertAllGreater(got.reliability, 0.95)
        self.assert_matches_reference(got, variables, 64)
        # Fewer samples: the same pattern reads less reliable, and odd halves work.
        odd = [pattern(rng, 9, 20000)]
        few = run(odd, 4)
        self.assertBetween(float(few.reliability[0]), 0.6, 0.95)
        self.assert_matches_reference(few, odd, 4)

    def test_hand_computed_halves(self):
        """Two samples per half, ``(m + d, m - d)``: GSNR ``m**2 / d**2``. B's GSNR the
        square of A's: rho = 1; B's the inverse of A's: rho = -1, reliability -1."""
        m = np.array([1.0, 2.0, 3.0, 0.5, 4.0])
        d = np.array([1.0, 0.5, 2.0, 1.0, 1.5])
        r_a = m**2 / d**2
        half_a = np.stack([m + d, m - d])
        m_sq = r_a  # B: mean r_a, spread 1 -> GSNR r_a**2 (log: 2 log r_a)
        half_sq = np.stack([m_sq + 1.0, m_sq - 1.0])
        half_inv = np.stack([d + m, d - m])  # mean d, spread m -> GSNR 1 / r_a
        got = run([np.concatenate([half_a, half_sq]), np.concatenate([half_a, half_inv])], 2)
        self.assertAllEqual(got.defined, [True, True])
        self.assertAllClose(got.correlation, [1.0, -1.0], atol=1e-5)
        self.assertAllClose(got.reliability, [1.0, -1.0], atol=1e-5)
        self.assertAllEqual(got.num_pairs, [5.0, 5.0])
        self.assertAllClose(split_half.spearman_brown(tf.constant([0.0, 0.5, 1.0])), [0, 2 / 3, 1])

    def test_undefined_cases_give_zero_and_no_nan(self):
        rng = np.random.RandomState(2)
        k = 8
        good = noise(rng, k, 100)
        constant = np.tile(np.array([[1.0], [-1.0]]), (k // 2, 30))  # every GSNR 0: no pair
        same_snr = np.stack([np.full(40, v) for v in (3.0, 1.0) * (k // 2)])  # r equal: var 0
        partly = noise(rng, k, 60)
        partly[:, :20] = 1.0  # identical samples: no noise, no GSNR
        partly[0, 20] = np.inf  # not finite: left out
        empty = np.zeros([k, 0])
        two = noise(rng, k, 2)  # 2 pairs < MIN_PAIRS
        variables = [good, constant, same_snr, partly, empty, two]
        got = run(variables, k // 2)
        self.assertAllEqual(got.defined, [True, False, False, True, False, False])
        self.assertAllEqual(got.num_pairs, [100, 0, 40, 39, 0, 2])
        for field in got:
            self.assertTrue(np.all(np.isfinite(np.asarray(field, np.float32))))
        self.assertAllEqual(np.asarray(got.reliability)[~np.asarray(got.defined)], [0, 0, 0, 0])
        self.assert_matches_reference(got, variables, k // 2)
        # A half of one sample (k < 4) has no variance: everything undefined.
        for k_small, k_a in ((3, 1), (3, 2), (2, 1)):
            few = run([noise(rng, k_small, 50)], k_a)
            self.assertAllEqual(few.defined, [False])
            self.assertAllEqual(few.reliability, [0.0])

    def test_xla_matches_eager(self):
        rng = np.random.RandomState(3)
        variables = [pattern(rng, 16, 3000), noise(rng, 16, 500), np.zeros([16, 0])]
        s1, s2, s1_a, s2_a, k, sizes = sums(variables, 8)

        @tf.function(jit_compile=True)
        def compiled(*buffers):
            return split_half.split_half_reliability(*buffers, k, 8, sizes)

        eager = split_half.split_half_reliability(s1, s2, s1_a, s2_a, k, 8, sizes)
        for a, b in zip(compiled(s1, s2, s1_a, s2_a), eager):
            self.assertAllClose(a, b, atol=1e-6)

    def test_bad_arguments_are_named(self):
        s = tf.zeros([4])
        with self.assertRaisesRegex(ValueError, "num_samples_a"):
            split_half.split_half_reliability(s, s, s, s, 8, 8, [4])
        with self.assertRaisesRegex(ValueError, "num_samples_a"):
            split_half.split_half_reliability(s, s, s, s, 8, 0, [4])
        with self.assertRaisesRegex(ValueError, "sizes"):
            split_half.split_half_reliability(s, s, s, s, 8, 4, [3])
        with self.assertRaisesRegex(ValueError, "min_pairs"):
            split_half.split_half_reliability(s, s, s, s, 8, 4, [4], min_pairs=1)


if __name__ == "__main__":
    tf.test.main()
