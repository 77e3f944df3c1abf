"""Helpers of the sweeps only (not a test, not part of the library).

scikit-learn's digits as 1-D signals, the train/test tensors of a data dict, the square-root
learning-rate rule, the GSNR snapshot of a VR optimizer and one training run of the batch-size
sweep (fixed epochs, test accuracy after each slice of an epoch). The trainer is
:class:`studylib.Trainer` and the model, the optimizer pairs and MNIST-1D are :mod:`shared`'s.
"""

import math
import os
import sys
import time

SWEEPS = os.path.dirname(os.path.abspath(__file__))
STUDIES = os.path.dirname(SWEEPS)
if STUDIES not in sys.path:
    sys.path.insert(1, STUDIES)

import numpy as np  # noqa: E402
import shared  # noqa: E402
import tensorflow as tf  # noqa: E402

RESULTS_DIR = os.path.join(SWEEPS, "results")


def load_digits_1d(test_fraction=0.2, seed=0):
    """scikit-learn's 1,797 real 8x8 digits as 64-point 1-D signals (row-major, /16).

    Stratified, seeded train/test split (``sklearn.model_selection.train_test_split``).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = digits.data.astype(np.float32) / 16.0
    x = (x - x.mean()) / x.std()
    y = digits.target.astype(np.int32)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y
    )
    return {
        "x": x_tr[..., None],
        "y": y_tr,
        "x_test": x_te[..., None],
        "y_test": y_te,
        "info": {
            "name": "digits",
            "source": "sklearn.datasets.load_digits",
            "num_train": len(y_tr),
            "num_test": len(y_te),
            "seed": seed,
            "layout": "8x8 flattened row-major to 64 points",
        },
    }


def prepare_train_test(data):
    """Adds tensors of the train and test arrays to a data dict (the sweeps have no
    validation split; ``studylib.prepare`` is the evidence study's, with one)."""
    data["tf_x"] = tf.constant(data["x"])
    data["tf_y"] = tf.constant(data["y"])
    data["tf_x_test"] = tf.constant(data["x_test"])
    data["tf_y_test"] = tf.constant(data["y_test"])
    return data


def scaled_lr(base_lr, batch, base_batch):
    """Square-root scaling rule: ``base_lr * sqrt(batch / base_batch)``."""
    return base_lr * math.sqrt(batch / base_batch)


def gsnr_snapshot(optimizer):
    """``{variable: [mean_gsnr, frac_at_gamma, frac_at_one]}`` or None for a base optimizer."""
    if not hasattr(optimizer, "vrgd_statistics"):
        return None
    return {
        name: [
            round(v["mean_gsnr"], 6),
            round(v["frac_at_gamma"], 6),
            round(v["frac_at_one"], 6),
        ]
        for name, v in optimizer.vrgd_statistics().items()
    }


def _curve_point(trainer, data, epoch, step, sub):
    """One point of a run's curve: test accuracy and loss, training accuracy and loss on
    the first ``sub`` examples."""
    test_acc, test_loss = trainer.evaluate(data["tf_x_test"], data["tf_y_test"])
    tr_acc, tr_loss = trainer.evaluate(data["tf_x"][:sub], data["tf_y"][:sub])
    return {
        "epoch": round(epoch, 4),
        "step": step,
        "test_acc": round(test_acc, 5),
        "test_loss": round(test_loss, 5),
        "train_acc_subset": round(tr_acc, 5),
        "train_loss_subset": round(tr_loss, 5),
    }


def _final(trainer, data, curve):
    """The run's end: test accuracy and loss of the last curve point, training accuracy and
    loss on the whole training set, the gap, and whether it diverged."""
    train_acc, train_loss = trainer.evaluate(data["tf_x"], data["tf_y"])
    test_acc, test_loss = curve[-1]["test_acc"], curve[-1]["test_loss"]
    return {
        "test_acc": test_acc,
        "test_loss": test_loss,
        "train_acc": round(train_acc, 5),
        "train_loss": round(train_loss, 5),
        "gap": round(train_acc - test_acc, 5),
        "diverged": not (math.isfinite(train_loss) and math.isfinite(test_loss)),
    }


def train_run(
    trainer,
    build_model,
    data,
    *,
    seed,
    batch,
    epochs,
    peak_lr,
    warmup_frac,
    evals_per_epoch=1,
    train_eval_subset=10000,
):
    """Trains ``trainer`` (a :class:`studylib.Trainer` of ``build_model``) from scratch for
    a fixed number of epochs; returns the per-run record.

    Same seed -> same initial weights and same data order, whatever the optimizer.
    """
    n = data["x"].shape[0]
    steps_per_epoch = n // batch
    if steps_per_epoch < 1:
        raise ValueError(f"batch {batch} larger than the training set ({n})")
    total = steps_per_epoch * epochs
    warmup = max(1, int(round(warmup_frac * total)))
    weights = trainer.weight_cache.get(seed)
    if weights is None:
        weights = trainer.weight_cache[seed] = shared.init_weights(build_model, seed)
    trainer.reset(weights, peak_lr, warmup, total)
    sub = min(train_eval_subset, n)
    chunks = max(1, min(evals_per_epoch, steps_per_epoch))
    bounds = [round(steps_per_epoch * (c + 1) / chunks) for c in range(chunks)]
    curve, gsnr, step, train_time, t0 = [], [], 0, 0.0, time.time()
    for epoch in range(epochs):
        perm = np.random.default_rng([seed, epoch]).permutation(n).astype(np.int32)
        done = 0
        for b in bounds:
            t1 = time.time()
            trainer.train_steps(data["tf_x"], data["tf_y"], perm, done, batch, b - done)
            train_time += time.time() - t1
            step += b - done
            done = b
            curve.append(_curve_point(trainer, data, epoch + b / steps_per_epoch, step, sub))
        snap = gsnr_snapshot(trainer.optimizer)
        if snap is not None:
            gsnr.append({"epoch": epoch + 1, "step": step, "stats": snap})
    return {
        "seed": seed,
        "batch": batch,
        "epochs": epochs,
        "steps": total,
        "steps_per_epoch": steps_per_epoch,
        "warmup_steps": warmup,
        "peak_lr": peak_lr,
        "final": _final(trainer, data, curve),
        "curve": curve,
        "gsnr": gsnr,
        "wall_s": round(time.time() - t0, 2),
        "train_s": round(train_time, 2),
    }
