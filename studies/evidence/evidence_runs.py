"""What the evidence runners share (round3.py, round4.py): the wall-clock budget guard and
the end-of-run metrics. Imports TensorFlow only through the trainer it is handed. (Not
``runs.py``: the digits job's ``runs/`` output folder would shadow that name.)"""

import math
import time


class OutOfBudget(Exception):
    pass


class Budget:
    """Wall-clock guard: :meth:`check` raises :class:`OutOfBudget` when the expected run
    time (the mean of this process's runs, else ``guess_seconds``) would overrun."""

    def __init__(self, minutes, guess_seconds):
        self.limit = minutes * 60.0 if minutes > 0 else None
        self.guess = guess_seconds
        self.start = time.time()
        self.times = []

    def record(self, seconds):
        self.times.append(seconds)

    def expected(self):
        return sum(self.times) / len(self.times) if self.times else self.guess

    def check(self, what):
        if self.limit is not None and time.time() - self.start + self.expected() > self.limit:
            raise OutOfBudget(f"budget: next run {what}")


def final_metrics(trainer, data, curve, with_test, collapse_below=20.0):
    """End-of-run metrics: the last epoch's validation accuracy and loss, the full training
    split's accuracy and loss, ``collapsed`` (final validation accuracy below
    ``collapse_below`` % or not finite), ``diverged`` (non-finite training loss); the test
    set and the generalization gap only when ``with_test`` (final phases)."""
    train_acc, train_loss = trainer.evaluate(data["tf_x"], data["tf_y"])
    val = curve[-1]["val_acc"]
    out = {
        "val_acc": val,
        "val_loss": curve[-1]["val_loss"],
        "train_acc": round(100 * train_acc, 3),
        "train_loss": round(train_loss, 5),
        "collapsed": not (math.isfinite(val) and val >= collapse_below),
        "diverged": not math.isfinite(train_loss),
    }
    if with_test:
        test_acc, test_loss = trainer.evaluate(data["tf_x_test"], data["tf_y_test"])
        out.update(
            test_acc=round(100 * test_acc, 3),
            test_loss=round(test_loss, 5),
            gap=round(100 * train_acc - 100 * test_acc, 3),
        )
    return out
