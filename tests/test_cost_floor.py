"""benchmarks/passes.py's fused floor (issue 39): the same math as the library's GSNR step,
and its stage prefixes end at the library's output (nothing here times anything)."""

import os
import sys

import numpy as np
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import passes  # noqa: E402

from vrgd_tf.settings import VRGDSettings  # noqa: E402

# Two packed small variables, one above the default pack limit, and one with no defined GSNR.
_SHAPES = [(300, 40), (7, 3), (16,), (5, 4)]
_K = 4


def _problem(seed):
    rng = np.random.default_rng(seed)
    s1s, s2s = [], []
    for i, shape in enumerate(_SHAPES):
        groups = rng.standard_normal((_K,) + shape).astype(np.float32)
        groups += rng.standard_normal(shape).astype(np.float32) * (i + 0.5)
        if i == 3:
            groups[:] = groups[0]  # every group the same: noise 0, no element defined
        s1s.append(groups.sum(0))
        s2s.append(np.square(groups).sum(0))
    return s1s, s2s


class FloorTest(tf.test.TestCase):
    def _run(self, jit_compile):
        settings = VRGDSettings(beta_3=0.9)
        weights = [tf.Variable(tf.zeros(s)) for s in _SHAPES]
        state = passes._plain_state(weights, 0.9)
        lib_out = [tf.Variable(tf.zeros(s)) for s in _SHAPES]
        s1v = [tf.Variable(tf.zeros(s)) for s in _SHAPES]
        s2v = [tf.Variable(tf.zeros(s)) for s in _SHAPES]
        floor_d = [tf.Variable(tf.zeros(s)) for s in _SHAPES]
        floor_c = [tf.Variable(0.0) for _ in _SHAPES]
        floor_o = [tf.Variable(tf.zeros(s)) for s in _SHAPES]
        prefix_states = {s: passes._plain_state(weights, 0.9) for s in passes.STAGES}
        prefix_out = {s: [tf.Variable(tf.zeros(x)) for x in _SHAPES] for s in passes.STAGES}

        @tf.function(jit_compile=jit_compile)
        def step():
            g, q = [v.read_value() for v in s1v], [v.read_value() for v in s2v]
            passes.library_step(g, q, weights, state, lib_out, _K, settings, record=False)
            passes.floor_step(s1v, s2v, floor_d, floor_c, floor_o, _K, 0.1, 0.9, settings.rtol)
            for stage in passes.STAGES:
                passes.stage_prefix(
                    stage, g, q, weights, prefix_states[stage], prefix_out[stage], _K, settings
                )

        for seed in range(3):  # three steps: the momentum state read and written
            s1s, s2s = _problem(seed)
            for v, x in zip(s1v + s2v, s1s + s2s):
                v.assign(x)
            step()
            for i in range(len(_SHAPES)):
                want = lib_out[i].numpy()
                self.assertAllClose(floor_o[i].numpy(), want, rtol=2e-6, atol=0)
                self.assertAllClose(floor_d[i].numpy(), state.deficits[i].numpy(), 2e-6, 1e-7)
                for stage in ("smoothed", "recorded"):
                    self.assertAllClose(prefix_out[stage][i].numpy(), want, rtol=2e-6, atol=0)
                self.assertAllEqual(prefix_out["sums"][i].numpy(), s1s[i])
            self.assertAllEqual(floor_o[3].numpy(), s1s[3])  # no GSNR: factor 1
            self.assertLess(np.mean(floor_o[0].numpy() / s1s[0]), 0.9)  # the factor acted

    def test_floor_gives_the_library_output_in_graph_mode(self):
        self._run(False)

    def test_floor_gives_the_library_output_under_xla(self):
        self._run(True)


class QuickRunTest(tf.test.TestCase):
    """``passes.py --quick`` and ``stage_ops.py --quick`` run and report every arm."""

    def test_passes_quick_reports_the_floor_the_nostats_arm_and_the_stages(self):
        out = os.path.join(self.get_temp_dir(), "passes.json")
        doc = passes.main(["--quick", "--reps=1", "--steps=1", f"--out={out}"])
        for row in doc["rows"]:
            # A quick run's timings are noise (one call, a loaded machine): differences such
            # as the GSNR part may come out negative; the arms must be there and finite.
            for key in ("floor_passes", "gsnr_nostats_passes", "gsnr_passes"):
                self.assertTrue(np.isfinite(row["median"][key]), key)
            self.assertEqual(set(row["median"]["stage_passes"]), set(passes.STAGES) | {"library"})

    def test_stage_ops_counts_every_prefix_in_both_modes(self):
        import stage_ops

        out = os.path.join(self.get_temp_dir(), "stage_ops.json")
        doc = stage_ops.main(["--quick", f"--out={out}"])
        counts = {(r["jit_compile"], r["step"]): r["counts"] for r in doc["rows"]}
        for jit in (False, True):
            self.assertAlmostEqual(counts[(jit, "pass")]["model passes"], 1.0 + jit, places=3)
            # variance_reduce is the last prefix, op for op.
            self.assertEqual(counts[(jit, "library")], counts[(jit, "recorded")])
            self.assertEqual(counts[(jit, "library_nostats")], counts[(jit, "smoothed")])


if __name__ == "__main__":
    tf.test.main()
