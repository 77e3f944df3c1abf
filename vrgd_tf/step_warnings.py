"""The GSNR step's warnings: each once per aggregator, built from the step's report.

:class:`StepWarnings` turns a :class:`vrgd_tf.gsnr.StepReport` into log warnings (logger
``"vrgd_tf"``), each emitted at most once per :class:`vrgd_tf.GSNRAggregator` (so once per
optimizer), naming the optimizer, the cause and the fix: one GSNR sample per step, a step
where no variable had a GSNR (inert), a step where fewer than 2 samples contributed, a step
that left samples out, a stray gradient from a sample without examples, a factor
transform that returned non-finite values, a split-half reliability that cannot be measured,
and a config that leaves ``factor_transforms`` out. Spec: ``docs/spec.md`` sections 1 and 4.
"""

import logging

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

__all__ = ["StepWarnings"]

_LOG = logging.getLogger("vrgd_tf")

_SPLIT_HALF = (
    "%s: `split_half=True`, but a step of %s GSNR samples (replicas x micro-batch groups) "
    "cannot measure the split-half reliability: it needs two halves of >= 2 samples each, "
    "split by replica (>= 4 replicas, or >= 2 replicas with >= 2 micro-batch groups each: "
    "`vrgd_tf.use_micro_batches`), and a dense gradient (sparse gradients on the exact rows "
    "path are not measured). `reliability` stays undefined (`reliability_defined` False and a "
    "placeholder 0.0 in `vrgd_statistics()`, NaN in the logs). Train on more replicas or "
    "groups, or set `split_half=False`."
)
_SINGLE = (
    "%s: only one GSNR sample per step (one replica in sync, no micro-batch groups), so "
    "there is no gradient noise estimate; VRGD steps exactly as its base optimizer. Train "
    "with k >= 2 replicas or micro-batch groups (the paper uses at least 8) to get variance "
    "reduction. If you made a tf.distribute strategy, build (or load) the model and create "
    "the optimizer inside `strategy.scope()`: outside it they train on one replica."
)
_INERT = (
    "%s: in a step with %s GSNR samples (replicas x micro-batch groups) no variable had a "
    "defined GSNR: every replica sent the same (or an all-zero) gradient, or the gradients "
    "were too small for their squares in float32 (|g| below ~1e-19; scale the loss up), so "
    "VRGD stepped exactly as its base optimizer. The first happens when every replica gets "
    "the same batch, e.g. Keras `model.train_on_batch` under a tf.distribute strategy, or a "
    "custom loop that hands the same tensor to every replica. Feed each replica its own "
    "shard: `model.fit` on a dataset, or `strategy.experimental_distribute_dataset` in a "
    "custom loop."
)
_TOO_FEW = (
    "%s: in a step of %s GSNR samples (replicas x micro-batch groups) fewer than 2 "
    "contributed a nonzero gradient, so there was no noise estimate and VRGD stepped exactly "
    "as its base optimizer (its statistics read zeros). This happens when replicas get no "
    "examples, e.g. the last, short batch of a dataset split over the replicas: batch with "
    "`drop_remainder=True` (`dataset.batch(global_batch, drop_remainder=True)`) so every "
    "replica gets its share of every batch."
)
_LEFT_OUT_GIVEN = (
    "%s: a step of %s GSNR samples (replicas x micro-batch groups) left samples out: they "
    "held no example of nonzero weight (docs/spec.md section 1), so the statistics are "
    "those of the others. This happens on the last, short batch of a dataset split over the "
    "replicas (batch with `drop_remainder=True`), or when every example of a sample has "
    "sample weight 0."
)
_LEFT_OUT_INFERRED = (
    "%s: a step of %s GSNR samples (replicas x micro-batch groups) left samples out: their "
    "gradient was exactly zero, so they were taken for samples without examples "
    "(docs/spec.md section 1). This happens on the last, short batch of a dataset split "
    "over the replicas (batch with `drop_remainder=True`); but a real sample whose gradient "
    "is exactly zero is left out too. Pass the count of contributing samples instead of "
    "letting it be inferred (`vrgd_tf.use_micro_batches(model, num_groups)` in `fit`, "
    "`num_contributing=` of the aggregator or of `apply_grouped_gradients` in a custom loop)."
)
_STRAY = (
    "%s: in a step of %s GSNR samples (replicas x micro-batch groups) a sample without "
    "examples of nonzero weight sent a nonzero gradient: a loss term that does not depend on "
    "the examples (e.g. a weight regularizer, or `add_loss` of the weights) on a replica or "
    "micro-batch group without examples. That gradient cannot be separated from the "
    "samples' sums, so VRGD stepped exactly as its base optimizer (docs/spec.md section 1). "
    "Batch with `drop_remainder=True` (`dataset.batch(global_batch, drop_remainder=True)`) "
    "so every replica and group gets examples."
)
_TRANSFORMS = (
    "%s: a factor returned by `factor_transforms` was NaN or infinite in a step whose summed "
    "gradients were finite, so the update is not finite either. Check the transforms (e.g. "
    "divide with `tf.math.divide_no_nan`, guard norms that can be 0); VRGD's own factor is "
    "always in [gamma, 1]."
)
_UNSAVED_TRANSFORMS = (
    "%s: the config (`get_config`: `model.save`, `from_config`) leaves out %s: callables do "
    "not serialize, so an optimizer (or aggregator) made from it, e.g. by "
    "`keras.models.load_model`, steps without them. To resume with them, build the model and "
    "the optimizer again with the same `factor_transforms`, call "
    "`optimizer.build(model.trainable_variables)` and restore the weights and the "
    "optimizer's state (`model.load_weights` of the `.keras` file, or a "
    "`tf.train.Checkpoint`)."
)


class StepWarnings:
    """The warnings of one aggregator (``owner`` names it in every message), each once."""

    def __init__(self, owner: str):
        self.owner = owner
        self.num_samples = "several"
        self._warned = set()

    def once(self, key: str, message: str, *args) -> None:
        """Logs ``message % (owner, *args)`` unless ``key`` was logged before."""
        if key not in self._warned:
            self._warned.add(key)
            _LOG.warning(message, self.owner, *args)

    def from_report(self, report, split_half: bool) -> None:
        """The warnings of one traced step's :class:`vrgd_tf.gsnr.StepReport`: Python-known
        conditions now, tensor conditions from the step (:meth:`_from_step`)."""
        self.num_samples = report.num_samples
        if split_half and not report.split_half_measured:
            self.once("split_half", _SPLIT_HALF, report.num_samples)
        if report.num_samples == 1:
            self.once("single", _SINGLE)
            return
        self._from_step(report.inert, "inert", self.inert)
        self._from_step(report.too_few_samples, "too_few", self.too_few_samples)
        left_out = self.left_out_given if report.count_given else self.left_out_inferred
        self._from_step(report.samples_left_out, _left_out_key(report.count_given), left_out)
        self._from_step(report.stray_gradient, "stray", self.stray_gradient)
        self._from_step(report.transforms_not_finite, "transforms", self.transforms_not_finite)

    def inert(self) -> None:
        self.once("inert", _INERT, self.num_samples)

    def too_few_samples(self) -> None:
        self.once("too_few", _TOO_FEW, self.num_samples)

    def left_out_given(self) -> None:
        self.once(_left_out_key(True), _LEFT_OUT_GIVEN, self.num_samples)

    def left_out_inferred(self) -> None:
        self.once(_left_out_key(False), _LEFT_OUT_INFERRED, self.num_samples)

    def stray_gradient(self) -> None:
        self.once("stray", _STRAY, self.num_samples)

    def transforms_not_finite(self) -> None:
        self.once("transforms", _TRANSFORMS)

    def unsaved_transforms(self, labels: str) -> None:
        """The config leaves out the ``factor_transforms`` ``labels`` names."""
        self.once("unsaved_transforms", _UNSAVED_TRANSFORMS, labels)

    def _from_step(self, flag, key: str, log) -> None:
        """Emits ``log()`` from the step when ``flag`` (scalar bool tensor) is True.

        Outside XLA, a ``tf.cond`` whose taken branch is a ``tf.py_function`` (a scalar
        predicate per step; the Python call happens only then). Inside an XLA context
        (``jit_compile=True``, TPU) no host call is compiled in: the step stays XLA-pure;
        ``GSNRAggregator.statistics`` gives the inert warning when it reads the recorded
        diagnostics of an inert step, and a step without enough samples records zeros.
        """
        if flag is False or key in self._warned:
            return
        if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
            return

        def emit():
            log()
            return True

        tf.cond(flag, lambda: tf.py_function(emit, [], tf.bool), lambda: tf.constant(False))


def _left_out_key(count_given: bool) -> str:
    """The once-key of the left-out warning: one per cause (given or inferred count)."""
    return "left_out_given" if count_given else "left_out_inferred"
