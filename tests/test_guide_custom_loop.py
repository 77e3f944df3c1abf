"""The guide's Keras 3 custom loop (``docs/guide.md``, "Custom loops: a VRGD optimizer"): the
block runs as it is and does VRGD, k = 2 GSNR samples per step (a VRGD optimizer's
``apply_gradients`` inside ``strategy.run`` under MirroredStrategy on 2 logical CPUs)."""

import contextlib
import io
import os
import re

import numpy as np
import tensorflow as tf

import vrgd_tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADING = "Custom loops: a VRGD optimizer"


def guide_block(heading):
    """The first ```python block of the guide's section ``## heading``."""
    with open(os.path.join(REPO, "docs", "guide.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert match, f"no python block under '## {heading}'"
    return match.group(1)


class GuideCustomLoopTest(tf.test.TestCase):
    def test_the_keras3_custom_loop_runs_and_does_vrgd(self):
        code = guide_block(HEADING)
        self.assertIn("strategy.run(replica_step", code)
        self.assertIn("optimizer.apply_gradients(", code)
        namespace = {"__name__": "guide_block"}
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(compile(code, "<guide block>", "exec"), namespace)
        self.assertIn("mean_factor", out.getvalue())
        optimizer, strategy = namespace["optimizer"], namespace["strategy"]
        self.assertEqual(strategy.num_replicas_in_sync, 2)
        self.assertEqual(int(optimizer.iterations.numpy()), 8)  # 2 epochs of 4 batches
        self.assertTrue(np.isfinite(float(namespace["loss"])))
        kernel = vrgd_tf.vrgd_statistics(optimizer)["kernel"]
        self.assertTrue(kernel["has_gsnr"])
        self.assertGreater(kernel["mean_gsnr"], 0.0)
        self.assertLess(kernel["mean_factor"], 1.0)  # VRGD scaled the step


if __name__ == "__main__":
    tf.test.main()
