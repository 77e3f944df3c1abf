"""What the demos record and write: Keras callbacks, the results table, JSON and plot.

Used by :mod:`digits_large_batch`, whose file keeps only the training job
(data, model, optimizers, ``model.fit``). Nothing here touches the training arithmetic.
Backend-neutral: on Keras' JAX backend nothing here imports TensorFlow; the GSNR summaries
come from the optimizers' ``vrgd_statistics()`` there, and what the JAX path does not
produce (the split-half reliability) is named in the output and in the JSON
(:data:`NOT_ON_JAX`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np

import vrgd_tf

__all__ = [
    "RunResult",
    "DemoResults",
    "RunRecorder",
    "run_result",
    "print_report",
    "evaluate_accuracy",
    "weights_sha256",
    "format_table",
    "write_json",
    "plot_curves",
    "all_weights_statistics",
    "reliability",
    "NOT_ON_JAX",
]

#: What the report leaves out on Keras' JAX backend, and why (printed and in the JSON).
NOT_ON_JAX = {
    "reliability": "the split-half reliability of the GSNR (curves.reliability and its "
    "report line): `split_half=True` is not implemented on the JAX backend of vrgd_tf, so "
    "the VR optimizers run with split_half=False there",
}


def _on_jax() -> bool:
    return keras.backend.backend() == "jax"


def all_weights_statistics(optimizer, variables) -> Optional[Dict[str, float]]:
    """:func:`vrgd_tf.summaries.all_weights_statistics` on TensorFlow; on JAX the same
    values from ``optimizer.vrgd_statistics()`` (rows keyed by variable path): the
    ``frac_at_gamma`` and ``frac_at_one`` of the variables with a GSNR weighted by their
    sizes, and the plain mean over them of ``mean_gsnr``. None for a base optimizer, one not
    built yet, or no variable with a GSNR."""
    if not _on_jax():
        from vrgd_tf import summaries

        return summaries.all_weights_statistics(optimizer, variables)
    if not hasattr(optimizer, "vrgd_statistics") or not optimizer.built:
        return None
    stats = optimizer.vrgd_statistics()
    rows = [(stats[v.path], np.prod(v.shape)) for v in variables if v.path in stats]
    rows = [(row, size) for row, size in rows if row["has_gsnr"]]
    if not rows:
        return None
    sizes = np.array([size for _, size in rows], np.float64)
    out = {
        field: float(np.dot(sizes, [row[field] for row, _ in rows]) / sizes.sum())
        for field in ("frac_at_gamma", "frac_at_one")
    }
    out["mean_gsnr_over_variables"] = float(np.mean([row["mean_gsnr"] for row, _ in rows]))
    return out


def reliability(stats) -> Optional[float]:
    """The median split-half reliability over the variables of ``stats`` (a
    ``vrgd_statistics()`` result), or None: none defined, or the JAX backend
    (:data:`NOT_ON_JAX`)."""
    if _on_jax():
        return None
    from vrgd_tf import summaries

    return summaries.headline(stats).get(summaries.RELIABILITY_TAG)


@dataclasses.dataclass
class RunResult:
    """One optimizer's run.

    Attributes:
      name: the optimizer's name in ``--optimizers``.
      model: the trained Keras model (its variables are mirrored over the replicas).
      optimizer: its optimizer (``vrgd_statistics()`` for the VR ones).
      train_accuracy: accuracy in [0, 1] over the whole training split after training.
      test_accuracy: accuracy in [0, 1] over the test split after training.
      gap: ``train_accuracy - test_accuracy``.
      wall_time: seconds for building, training and evaluating this run. On CPU it is
        dominated by fixed costs (tracing the replicated step, creating and tearing down the
        distributed input iterators) that vary with the machine's load.
      ms_per_step: median over epochs 2.. of the epoch's step time per step, in ms: the
        steady-state cost of one optimizer step, comparable between optimizers.
      curves: per-epoch lists: ``test_accuracy``, ``test_loss``, and Keras' running
        ``loss`` and ``accuracy`` of the training steps; for VR runs also
        ``frac_at_gamma`` (fraction of all weights whose factor was clipped at gamma in the
        epoch's last step) and, on TensorFlow with ``split_half``, ``reliability``.
      initial_weights_sha256: fingerprint of the initial weights (equal across runs).
      vrgd_statistics: ``optimizer.vrgd_statistics()`` after training, ``None`` for base
        optimizers.
      peak_learning_rate: the schedule's peak.
    """

    name: str
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    train_accuracy: float
    test_accuracy: float
    gap: float
    wall_time: float
    ms_per_step: float
    curves: Dict[str, List[float]]
    initial_weights_sha256: str
    vrgd_statistics: Optional[Dict[str, Dict[str, float]]]
    peak_learning_rate: float

    def row(self) -> Dict[str, Any]:
        """The table row as JSON-ready values."""
        return {
            "optimizer": self.name,
            "train_accuracy": self.train_accuracy,
            "test_accuracy": self.test_accuracy,
            "generalization_gap": self.gap,
            "wall_time_s": self.wall_time,
            "ms_per_step": self.ms_per_step,
        }

    def statistics_summary(self) -> Optional[Dict[str, Any]]:
        """``{"per_variable": vrgd_statistics, "all_weights":`` :func:`all_weights_statistics`
        ``}``, or None for a base optimizer."""
        if self.vrgd_statistics is None:
            return None
        return {
            "per_variable": self.vrgd_statistics,
            "all_weights": all_weights_statistics(self.optimizer, self.model.trainable_variables),
        }


@dataclasses.dataclass
class DemoResults:
    """A demo job's outcome: its config and data, one :class:`RunResult` per optimizer (in
    ``config.optimizers`` order), the paths written and the total wall time in seconds."""

    config: Any
    data: Any
    runs: List[RunResult]
    results_path: str
    plot_path: str
    wall_time: float

    @property
    def rows(self) -> List[Dict[str, Any]]:
        return [r.row() for r in self.runs]


def evaluate_accuracy(model: keras.Model, x: np.ndarray, y: np.ndarray) -> Tuple[float, float]:
    """``(accuracy, mean cross-entropy)`` of ``model`` on all of ``x``, ``y``.

    One full-batch forward pass in inference mode (cross-replica context); the
    cross-entropy of the logits is computed in float64 NumPy.
    """
    logits = np.asarray(keras.ops.convert_to_numpy(model(x, training=False)), np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = float(-log_probs[np.arange(len(y)), y].mean())
    accuracy = float(np.mean(np.argmax(logits, axis=1) == y))
    return accuracy, loss


def weights_sha256(model: keras.Model) -> str:
    """SHA-256 hex digest of the model's weights (bytes, in ``get_weights`` order)."""
    digest = hashlib.sha256()
    for w in model.get_weights():
        digest.update(np.ascontiguousarray(w).tobytes())
    return digest.hexdigest()


class RunRecorder(keras.callbacks.Callback):
    """Records a ``fit`` for :class:`RunResult`, and shows the held-out accuracy per epoch.

    * ``initial_weights_sha256``: :func:`weights_sha256` when training begins;
    * ``epoch_seconds``: wall time of each epoch's training steps (taken first thing in
      ``on_epoch_end``, before the evaluation below and before later callbacks);
    * ``curves``: per epoch ``test_accuracy``/``test_loss`` (also added to the epoch's logs,
      so Keras prints them), Keras' ``loss``/``accuracy`` and, for a VRGD optimizer,
      ``frac_at_gamma`` (:func:`all_weights_statistics`) and, with ``split_half=True``
      (TensorFlow), ``reliability`` (the median over variables of the split-half
      reliability of the GSNR, :func:`reliability`).

    One full-batch forward pass per epoch instead of ``fit(validation_data=...)``: with
    Keras 3.15, each validation pass under a ``MirroredStrategy`` of 8 CPU replicas makes a
    new distributed iterator and re-runs ``_maybe_symbolic_build`` (seconds of mostly idle
    time per epoch), and that build reduces the first batch across replicas, so it fails
    unless the first batch splits evenly.
    """

    def __init__(self, x_test, y_test):
        super().__init__()
        self._x, self._y = x_test, y_test
        self.curves = {k: [] for k in ("test_accuracy", "test_loss", "loss", "accuracy")}
        self.epoch_seconds: List[float] = []
        self.initial_weights_sha256 = ""
        self._start = 0.0

    def on_train_begin(self, logs=None):
        self.initial_weights_sha256 = weights_sha256(self.model)

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_seconds.append(time.perf_counter() - self._start)
        logs = logs if logs is not None else {}
        logs["test_accuracy"], logs["test_loss"] = evaluate_accuracy(self.model, self._x, self._y)
        for key in ("test_accuracy", "test_loss", "loss", "accuracy"):
            if key in logs:
                self.curves[key].append(float(logs[key]))
        weighted = all_weights_statistics(self.model.optimizer, self.model.trainable_variables)
        if weighted is not None:
            self.curves.setdefault("frac_at_gamma", []).append(weighted["frac_at_gamma"])
            median = reliability(vrgd_tf.vrgd_statistics(self.model.optimizer))
            if median is not None:
                self.curves.setdefault("reliability", []).append(median)

    def ms_per_step(self, steps_per_epoch: int) -> float:
        """Median over epochs 2.. (all if there is one) of the epoch's time per step, in ms."""
        seconds = self.epoch_seconds[1:] or self.epoch_seconds
        return 1000.0 * float(np.median(seconds)) / steps_per_epoch


def run_result(name, model, recorder: RunRecorder, data, steps_per_epoch, start, peak):
    """The :class:`RunResult` of a finished ``fit``: accuracy on the whole train and test
    splits (``data.x_train`` ... ``data.y_test``), ``start`` a ``time.perf_counter()``."""
    train_accuracy, _ = evaluate_accuracy(model, data.x_train, data.y_train)
    test_accuracy, _ = evaluate_accuracy(model, data.x_test, data.y_test)
    optimizer = model.optimizer
    return RunResult(
        name=name,
        model=model,
        optimizer=optimizer,
        train_accuracy=train_accuracy,
        test_accuracy=test_accuracy,
        gap=train_accuracy - test_accuracy,
        wall_time=time.perf_counter() - start,
        ms_per_step=recorder.ms_per_step(steps_per_epoch),
        curves=recorder.curves,
        initial_weights_sha256=recorder.initial_weights_sha256,
        vrgd_statistics=(
            optimizer.vrgd_statistics() if hasattr(optimizer, "vrgd_statistics") else None
        ),
        peak_learning_rate=peak,
    )


def format_table(rows: Sequence[Dict[str, Any]]) -> str:
    """The results table as text (accuracies in %)."""
    header = (
        f"{'optimizer':<12} {'train acc':>10} {'test acc':>10} {'gap':>8} "
        f"{'wall time':>10} {'ms/step':>8}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['optimizer']:<12} {100 * row['train_accuracy']:>9.2f}% "
            f"{100 * row['test_accuracy']:>9.2f}% "
            f"{100 * row['generalization_gap']:>7.2f}% "
            f"{row['wall_time_s']:>9.1f}s {row['ms_per_step']:>8.1f}"
        )
    return "\n".join(lines)


def write_json(results: DemoResults, description: str, data_summary: Dict[str, int]) -> None:
    """Writes ``results.results_path``: description, config, data summary, library
    versions, table rows, per-run curves and statistics, total wall time; on JAX also
    ``not_produced`` (:data:`NOT_ON_JAX`)."""
    if _on_jax():
        import jax

        versions = {"jax": jax.__version__}
    else:
        import tensorflow as tf

        versions = {"tensorflow": tf.__version__}
    payload = {
        "description": description,
        "config": dataclasses.asdict(results.config),
        "data": data_summary,
        "versions": {**versions, "keras": keras.__version__, "vrgd_tf": vrgd_tf.__version__},
        "rows": results.rows,
        "runs": {
            r.name: {
                "peak_learning_rate": r.peak_learning_rate,
                "initial_weights_sha256": r.initial_weights_sha256,
                "curves": r.curves,
                "vrgd_statistics": r.statistics_summary(),
            }
            for r in results.runs
        },
        "total_wall_time_s": results.wall_time,
    }
    if _on_jax():
        payload["not_produced"] = NOT_ON_JAX
    with open(results.results_path, "w") as f:
        json.dump(payload, f, indent=2)


def plot_curves(results: DemoResults, title: str, colors: Dict[str, str]) -> None:
    """Writes ``results.plot_path``: test accuracy (left) and training loss (right, log) per
    epoch; ``colors`` maps each run's name to its color, VR runs solid, the others dashed."""
    # The Agg canvas directly, without pyplot: no global backend switch, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    ax_acc, ax_loss = fig.subplots(1, 2)
    for r in results.runs:
        epochs = np.arange(1, len(r.curves["test_accuracy"]) + 1)
        style = dict(
            color=colors[r.name],
            linestyle="-" if r.vrgd_statistics is not None else "--",
            label=r.name,
        )
        ax_acc.plot(epochs, r.curves["test_accuracy"], **style)
        if r.curves["loss"]:
            ax_loss.plot(epochs, r.curves["loss"], **style)
    ax_acc.set(xlabel="epoch", ylabel="test accuracy", title=title)
    ax_loss.set(xlabel="epoch", ylabel="training loss (running mean over the epoch)", yscale="log")
    for ax in (ax_acc, ax_loss):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(results.plot_path, dpi=100)


def print_report(results: DemoResults, header: str) -> None:
    """Prints ``header``, the table, each VR run's last-step statistics over all weights and
    the total wall time with the files written."""
    print(f"\n{header}")
    print(format_table(results.rows))
    print(
        "gap = train acc - test acc. wall time: the whole run, building and tracing included "
        "(VRGD's first step traces more); ms/step: median time of a training step from epoch "
        "2 on. One seed: a few test images (0.2 % each) either way is noise; repeat with "
        "--seed."
    )
    for r in results.runs:
        summary = r.statistics_summary()
        if summary and summary["all_weights"]:
            w = summary["all_weights"]
            print(
                f"{r.name}: last step, share of weights with factor at gamma "
                f"{100 * w['frac_at_gamma']:.1f}%, at 1 {100 * w['frac_at_one']:.1f}%, "
                f"mean GSNR (mean over variables) {w['mean_gsnr_over_variables']:.3g}"
            )
            rows = summary["per_variable"]
            median = reliability(rows)
            if median is not None:
                per = ", ".join(
                    f"{name} {row['reliability']:.2f}"
                    for name, row in rows.items()
                    if row.get("reliability_defined")
                )
                print(
                    f"{r.name}: split-half reliability of the GSNR at the last step (near 0: "
                    "noise, near 1: stable, below 0: the halves disagree; on this demo it "
                    "falls from about 0.6 to about 0 (-0.2 to 0.2) once the model fits its "
                    "training set, so the factor then weights noise; per epoch: "
                    "curves.reliability in the JSON), "
                    f"median over variables {median:.2f}: {per}"
                )
    if _on_jax() and any(r.vrgd_statistics is not None for r in results.runs):
        for why in NOT_ON_JAX.values():
            print(f"Not produced on JAX: {why}.")
    print(
        f"total wall time {results.wall_time:.1f}s; wrote {results.results_path} and "
        f"{results.plot_path}"
    )
