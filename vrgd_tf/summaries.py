"""GSNR diagnostics in ``fit``'s logs and as TensorBoard summaries, and the Keras callbacks.

Each VRGD optimizer keeps, per trainable variable, the diagnostics of
:class:`vrgd_tf.gsnr.GSNRStatistics` (mean GSNR, fractions of elements whose factor was
clipped at ``gamma`` and at 1, mean factor applied, update norm ratio
``||f * S1|| / ||S1||``), computed inside the train step on the
steps that bring ``iterations`` to a multiple of its ``statistics_interval`` (other steps skip
that work). These helpers only read them, outside the step.

The headline values (:data:`HEADLINE_TAGS`) summarise the variables that have a GSNR
(:func:`vrgd_tf.aggregator.has_gsnr`; the others, e.g. zero-size variables or a head whose
gradient is always None, keep rows of zeros and are left out) in a way a reader can
trust: ``vrgd/median/mean_gsnr`` is the median over variables of the mean GSNR (a mean over
variables is dominated by the few with a huge GSNR), and ``vrgd/mean/mean_factor`` is the
mean over variables of the factor applied, i.e. how much smaller than the base optimizer's
the average step is (``docs/spec.md`` section 4). With ``split_half=True``,
``vrgd/median/reliability`` is the median over the variables where it is defined of the
split-half reliability of the GSNR: near 0 when the GSNR the factor acts on is noise, near 1
when it is a stable property of the elements (spec section 4).

Callbacks, each in both families (Keras 3 here; tf_keras in :mod:`vrgd_tf.tf_keras`, of the
same names): :class:`GSNRLogger` puts headline values into ``fit``'s logs
(progress bar, ``History``, ``CSVLogger``, Keras' ``TensorBoard``), :class:`GSNRTensorBoard`
writes all of them to TensorBoard. Both count steps by the optimizer's ``iterations``.
"""

import contextlib
import dataclasses
import importlib.util
import logging
import math
from typing import Dict, Mapping, Sequence

import numpy as np
import tensorflow as tf

from vrgd_tf.gsnr import SPLIT_HALF_FIELDS, STATISTICS_FIELDS

__all__ = [
    "write_gsnr_summaries",
    "GSNRLogger",
    "GSNRTensorBoard",
    "summary_logs",
    "headline",
    "HEADLINE_PREFIXES",
    "HEADLINE_TAGS",
    "FIT_LOG_TAGS",
    "RELIABILITY_TAG",
    "OptimizerGroup",
    "unwrap_optimizer",
    "vrgd_statistics",
    "all_weights_statistics",
]

_FIELDS = STATISTICS_FIELDS
#: Tag prefixes of the summaries over all variables (median of the GSNR, means of the rest).
HEADLINE_PREFIXES = ("vrgd/median/", "vrgd/mean/")
#: The headline over variables, ``(tag, field, reduction over the variables)``: the median
#: of the mean GSNR, the means of the other fields. The one definition of the headline.
_HEADLINE = (("vrgd/median/" + _FIELDS[0], _FIELDS[0], np.median),) + tuple(
    ("vrgd/mean/" + field, field, np.mean) for field in _FIELDS[1:]
)
#: The tag of the split-half reliability in the headline, its median over the variables
#: where it is defined (``split_half=True``; spec section 4).
RELIABILITY_TAG = "vrgd/median/" + SPLIT_HALF_FIELDS[0]
_RELIABILITY, _RELIABILITY_DEFINED = SPLIT_HALF_FIELDS[0], SPLIT_HALF_FIELDS[3]
#: The tags of the headline values in order (``vrgd/median/mean_gsnr``, then
#: ``vrgd/mean/<field>`` for ``frac_at_gamma``, ``frac_at_one``, ``mean_factor``,
#: ``norm_ratio``, then :data:`RELIABILITY_TAG`).
HEADLINE_TAGS = tuple(tag for tag, _, _ in _HEADLINE) + (RELIABILITY_TAG,)
#: The headline values :class:`GSNRLogger` puts into ``fit``'s logs by default: the mean
#: factor applied, the median mean GSNR and the update norm ratio; and
#: :data:`RELIABILITY_TAG` when the optimizer measures it (``split_half=True``).
FIT_LOG_TAGS = ("vrgd/mean/mean_factor", "vrgd/median/mean_gsnr", "vrgd/mean/norm_ratio")
#: The per-variable tag marking whether the variable has a GSNR (1.0) or not (0.0).
_HAS_GSNR = "has_gsnr"
_LOG = logging.getLogger("vrgd_tf")


def _tensorboard_installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def require_tensorboard(what: str) -> None:
    """Raises unless the ``tensorboard`` package (what ``tf.summary`` writes with) is installed.

    TensorFlow up to 2.20 installs it; TensorFlow 2.21 no longer depends on it, and its
    ``tf.summary.scalar`` then fails with ``TBNotInstalledError`` when first called.

    Args:
      what: the caller, named in the message.

    Raises:
      ImportError: ``tensorboard`` is not importable; the message says to install it.
    """
    if not _tensorboard_installed():
        raise ImportError(
            f"{what} writes tf.summary events, which need the `tensorboard` package; "
            f"TensorFlow {tf.__version__} does not install it (TensorFlow >= 2.21 no longer "
            "depends on it). Run `pip install tensorboard`, or read the diagnostics without "
            "it: `vrgd_tf.vrgd_statistics(optimizer)`, `vrgd_tf.summaries.summary_logs`."
        )


_WRAPPER_ATTRS = ("inner_optimizer", "_optimizer")
_MAX_WRAPPER_DEPTH = 16


class OptimizerGroup:
    """The VRGD optimizers inside a wrapper that holds several (Keras 3 ``MultiOptimizer``).

    What :func:`unwrap_optimizer` returns for such a wrapper, so that
    :func:`vrgd_statistics`, ``GSNRLogger`` and ``GSNRTensorBoard`` read every VRGD
    optimizer inside. Its rows are labelled by the optimizer that owns them:
    ``"<optimizer name>/<variable name>"`` (the optimizer's position appended,
    ``"<name>_<i>"``, where two share a name).

    Attributes:
      wrapper: the wrapper (its ``iterations`` count the steps).
      optimizers: the VRGD optimizers inside it, in the wrapper's order.
      split_half: True if any of them measures the split-half reliability.
      statistics_interval: int, the greatest common divisor of their positive
        ``statistics_interval`` (a step that any of them records on), 0 if none records.
    """

    def __init__(self, wrapper, optimizers: Sequence):
        self.wrapper = wrapper
        self.optimizers = list(optimizers)
        self.split_half = any(o.split_half for o in self.optimizers)
        intervals = [o.statistics_interval for o in self.optimizers if o.statistics_interval]
        self.statistics_interval = math.gcd(*intervals) if intervals else 0
        names = [o.name for o in self.optimizers]
        self._labels = [n if names.count(n) == 1 else f"{n}_{i}" for i, n in enumerate(names)]

    @property
    def iterations(self):
        return self.wrapper.iterations

    def vrgd_statistics(self) -> Dict[str, Dict[str, float]]:
        """Every VRGD optimizer's rows, keyed ``"<optimizer>/<variable>"``."""
        return {
            f"{label}/{name}": row
            for label, optimizer in zip(self._labels, self.optimizers)
            for name, row in optimizer.vrgd_statistics().items()
        }


def _vrgd_inside_group(optimizer):
    """The VRGD optimizers among ``optimizer.optimizers`` (each unwrapped), if it has some."""
    inner = getattr(optimizer, "optimizers", None)
    if not isinstance(inner, (list, tuple)):
        return []
    found = [unwrap_optimizer(o) for o in inner if o is not optimizer]
    return [o for o in found if hasattr(o, "vrgd_statistics")]


def unwrap_optimizer(optimizer):
    """The VRGD optimizer inside loss-scale wrappers, or ``optimizer`` itself if none.

    Follows ``inner_optimizer`` (Keras 3 ``keras.optimizers.LossScaleOptimizer``, tf_keras
    ``tf_keras.mixed_precision.LossScaleOptimizer``) and ``_optimizer`` through nested
    wrappers (at most 16 deep), and returns the first optimizer found that has
    ``vrgd_statistics``. ``model.compile`` under a ``"mixed_float16"`` policy adds such a
    wrapper around the optimizer it is given. A wrapper that holds several optimizers in
    ``optimizers`` (Keras 3 ``MultiOptimizer``) with VRGD ones among them gives an
    :class:`OptimizerGroup` of those.

    Args:
      optimizer: any optimizer (either family), wrapped or not.

    Returns:
      The VRGD optimizer (or :class:`OptimizerGroup`), or ``optimizer`` unchanged when
      there is none inside it.
    """
    current, seen = optimizer, set()
    for _ in range(_MAX_WRAPPER_DEPTH):
        if hasattr(current, "vrgd_statistics"):
            return current
        group = _vrgd_inside_group(current)
        if group:
            return OptimizerGroup(current, group)
        seen.add(id(current))
        inner = None
        for attr in _WRAPPER_ATTRS:
            candidate = getattr(current, attr, None)
            if candidate is not None and id(candidate) not in seen:
                inner = candidate
                break
        if inner is None:
            break
        current = inner
    return optimizer


def vrgd_statistics(optimizer):
    """``vrgd_statistics()`` of the VRGD optimizer inside ``optimizer``'s wrappers.

    Use this instead of ``model.optimizer.vrgd_statistics()`` when ``model.optimizer`` may
    be a loss-scale wrapper (mixed precision).

    Args:
      optimizer: a vrgd_tf optimizer (either family), possibly inside (nested)
        loss-scale wrappers.

    Returns:
      ``{variable name: {field: float}}`` with the fields of
      :data:`vrgd_tf.gsnr.STATISTICS_FIELDS`; see the optimizers' ``vrgd_statistics``.

    Raises:
      TypeError: there is no VRGD optimizer inside ``optimizer``.
    """
    inner = unwrap_optimizer(optimizer)
    if not hasattr(inner, "vrgd_statistics"):
        raise TypeError(
            "vrgd_statistics: no VRGD optimizer inside "
            f"{type(optimizer).__module__}.{type(optimizer).__qualname__}."
        )
    return inner.vrgd_statistics()


def _statistics_or_empty(optimizer):
    """``vrgd_statistics()`` of the VRGD optimizer inside ``optimizer``; {} if none."""
    optimizer = unwrap_optimizer(optimizer)
    if not hasattr(optimizer, "vrgd_statistics"):
        return {}
    return optimizer.vrgd_statistics()


def headline(stats: Mapping[str, Mapping]) -> Dict[str, float]:
    """The headline values over the variables that have a GSNR.

    Args:
      stats: ``{variable name: row}`` as ``vrgd_statistics()`` returns (rows with the fields
        of :data:`vrgd_tf.gsnr.STATISTICS_FIELDS` and ``has_gsnr``).

    Returns:
      ``{tag: float}`` for the tags of :data:`HEADLINE_TAGS`: the median over the variables
      with ``has_gsnr`` of their ``mean_gsnr`` and the means of the other fields; empty when
      no variable has a GSNR (before the first recording step, or no variable measured).
      :data:`RELIABILITY_TAG`, the median of ``reliability`` over the rows whose
      ``reliability_defined`` is True, only if there is such a row.
    """
    rows = [row for row in stats.values() if row[_HAS_GSNR]]
    if not rows:
        return {}
    out = {tag: float(reduce([row[field] for row in rows])) for tag, field, reduce in _HEADLINE}
    reliable = _reliabilities(rows)
    if reliable:
        out[RELIABILITY_TAG] = float(np.median(reliable))
    return out


def _reliabilities(rows):
    """The ``reliability`` of the rows where it is defined."""
    return [row[_RELIABILITY] for row in rows if row.get(_RELIABILITY_DEFINED, False)]


def _logs(stats, headline_only):
    logs = {}
    if not headline_only:
        for name, row in stats.items():
            for field in _FIELDS:
                logs[f"vrgd/{name}/{field}"] = row[field]
            logs[f"vrgd/{name}/{_HAS_GSNR}"] = float(row[_HAS_GSNR])
            if row.get(_RELIABILITY_DEFINED, False):
                logs[f"vrgd/{name}/{_RELIABILITY}"] = row[_RELIABILITY]
    logs.update(headline(stats))
    return logs


def summary_logs(optimizer, headline_only=False):
    """The optimizer's GSNR diagnostics as a flat ``{tag: float}`` dict.

    Tags: ``"vrgd/<variable>/<field>"`` for every variable and field of
    :data:`vrgd_tf.gsnr.STATISTICS_FIELDS`, ``"vrgd/<variable>/has_gsnr"`` (1.0 or 0.0, see
    :func:`vrgd_tf.aggregator.has_gsnr`), ``"vrgd/<variable>/reliability"`` where the
    split-half reliability is defined, plus the headline over the variables that have a
    GSNR (:func:`headline`): ``"vrgd/median/mean_gsnr"`` (median of the per-variable mean
    GSNR) and ``"vrgd/mean/<field>"`` for ``frac_at_gamma``, ``frac_at_one``,
    ``mean_factor`` and ``norm_ratio`` (means over those variables), present only when some
    variable has one. Suitable for a Keras ``logs`` dict or Model Garden's train-step logs.

    Args:
      optimizer: a vrgd_tf optimizer of either family, possibly inside a loss-scale wrapper.
      headline_only: bool; return only the headline tags (:data:`HEADLINE_TAGS`).

    Returns:
      The dict; empty for a non-VRGD optimizer or one not built yet.
    """
    return _logs(_statistics_or_empty(optimizer), headline_only)


def all_weights_statistics(optimizer, variables):
    """The last recorded step's diagnostics over all weights, each weight counting once.

    ``frac_at_gamma`` and ``frac_at_one`` are the fractions of all elements of ``variables``
    that have a GSNR (means over those variables weighted by their sizes, unlike the
    unweighted headline of :func:`summary_logs`); ``mean_gsnr_over_variables`` is the plain
    mean over those variables of their mean GSNR.

    Args:
      optimizer: a vrgd_tf optimizer of either family, possibly inside loss-scale wrappers;
        anything else gives None.
      variables: the variables to count, e.g. ``model.trainable_variables``; those without
        VRGD state (not trained by ``optimizer``) or without a GSNR
        (:func:`vrgd_tf.aggregator.has_gsnr`) are left out.

    Returns:
      A dict of floats, ``"frac_at_gamma"`` and ``"frac_at_one"`` in [0, 1] and
      ``"mean_gsnr_over_variables"`` >= 0, or None for a non-VRGD optimizer, one not built
      yet, or no element counted.
    """
    optimizer = unwrap_optimizer(optimizer)
    if not hasattr(optimizer, "vrgd_aggregator"):
        return None
    state = optimizer.vrgd_aggregator.state
    stats = list(optimizer.vrgd_statistics().values())  # in the order of the state
    sizes = np.zeros(len(stats))
    for variable in variables:
        if state is not None and variable in state:
            i = state.index(variable)
            sizes[i] = np.prod(variable.shape) if stats[i][_HAS_GSNR] else 0
    if not stats or sizes.sum() == 0:
        return None
    out = {
        field: float(np.dot(sizes, [s[field] for s in stats]) / sizes.sum())
        for field in ("frac_at_gamma", "frac_at_one")
    }
    out["mean_gsnr_over_variables"] = float(
        np.mean([s["mean_gsnr"] for s, size in zip(stats, sizes) if size > 0])
    )
    return out


def write_gsnr_summaries(optimizer, step, writer=None):
    """Writes the optimizer's GSNR diagnostics as TensorBoard scalars and histograms.

    Scalars: every tag of :func:`summary_logs`; histograms ``vrgd/hist/<field>`` over the
    variables that have a GSNR, and ``vrgd/hist/reliability`` over those where the split-half
    reliability is defined (if any).

    Args:
      optimizer: a vrgd_tf optimizer (either family), possibly inside a LossScaleOptimizer.
      step: int, the summary step (the callbacks pass the optimizer's ``iterations``).
      writer: a ``tf.summary`` writer; default the current default writer.

    Returns:
      The logs dict written (see :func:`summary_logs`); empty for a non-VRGD optimizer.

    Raises:
      ImportError: the ``tensorboard`` package is not installed (TensorFlow >= 2.21 does
        not install it), see ``require_tensorboard``.
    """
    require_tensorboard("write_gsnr_summaries")
    stats = _statistics_or_empty(optimizer)
    logs = _logs(stats, headline_only=False)
    if not logs:
        return logs
    rows = [row for row in stats.values() if row[_HAS_GSNR]]
    ctx = writer.as_default(step=step) if writer is not None else contextlib.nullcontext()
    with ctx:
        for key, value in logs.items():
            tf.summary.scalar(key, value, step=step)
        for field in _FIELDS:
            values = np.asarray([row[field] for row in rows], np.float32)
            tf.summary.histogram(f"vrgd/hist/{field}", values, step=step)
        reliable = _reliabilities(rows)
        if reliable:
            values = np.asarray(reliable, np.float32)
            tf.summary.histogram(f"vrgd/hist/{_RELIABILITY}", values, step=step)
    return logs


# --- the callbacks ---------------------------------------------------------------------------


def _iterations(optimizer) -> int:
    """``optimizer.iterations`` as a Python int (one device-to-host read)."""
    return int(tf.convert_to_tensor(optimizer.iterations).numpy())


def _vrgd_optimizer(model, owner):
    """The VRGD optimizer of ``model`` (inside loss-scale wrappers); TypeError if none."""
    optimizer = unwrap_optimizer(model.optimizer)
    if not hasattr(optimizer, "vrgd_statistics"):
        raise TypeError(
            f"{owner}: the model's optimizer "
            f"({type(model.optimizer).__module__}.{type(model.optimizer).__qualname__}) has "
            "no VRGD optimizer inside, so there are no GSNR diagnostics to show. Compile "
            f"with a vrgd_tf optimizer, or remove the {owner} callback."
        )
    return optimizer


@dataclasses.dataclass
class _StepClock:
    """The optimizer's step count as the host knows it, without a read on every batch.

    Between two reads of ``optimizer.iterations`` (a device-to-host copy) the count is
    advanced by the batch indices Keras hands ``on_train_batch_end``: the index of the
    execution's last batch in the epoch, so ``steps_per_execution > 1`` counts its steps.
    That estimate can run ahead (a loss-scale optimizer skips steps; Keras' last execution
    of an epoch may run fewer steps) or behind (a custom step applying twice); it only
    decides when to read, and every value shown or written comes from a read.

    Attributes:
      every: int >= 1, the period of the steps of interest (the optimizer's
        ``statistics_interval``, or a callback's ``update_freq``).
      known: the step count at the last read.
      estimate: the estimated step count now.
      last_batch: the batch index of the previous ``on_train_batch_end`` in this epoch.
    """

    every: int
    known: int = 0
    estimate: int = 0
    last_batch: int = -1

    def start_epoch(self) -> None:
        self.last_batch = -1

    def advance(self, batch: int) -> bool:
        """Counts the batches up to ``batch``; True if the estimate passed a multiple of
        ``every`` since the last read (time to read)."""
        self.estimate += max(int(batch) - self.last_batch, 0)
        self.last_batch = int(batch)
        return self.estimate // self.every > self.known // self.every

    def sync(self, iterations: int) -> bool:
        """Records a read; True if the count passed a multiple of ``every`` since the
        previous read."""
        passed = iterations // self.every > self.known // self.every
        self.known = self.estimate = iterations
        return passed


def _parse_update_freq(update_freq):
    """``update_freq`` as Keras' ``TensorBoard`` takes it: an int >= 1 (bools refused),
    ``"batch"`` (= 1) or ``"epoch"``; ValueError naming the argument otherwise."""
    if update_freq == "batch":
        return 1
    if update_freq == "epoch":
        return update_freq
    if isinstance(update_freq, (bool, np.bool_)) or not isinstance(update_freq, (int, np.integer)):
        valid = False
    else:
        valid = update_freq >= 1
    if not valid:
        raise ValueError(
            '`update_freq` must be an int >= 1 (in optimizer steps), "batch" (= 1) or '
            f'"epoch", as for keras.callbacks.TensorBoard; got {update_freq!r}.'
        )
    return int(update_freq)


class _GSNRLoggerMixin:
    """Puts VRGD's headline GSNR diagnostics into ``fit``'s logs: the progress bar,
    ``History``, and the callbacks listed after it (``CSVLogger``, Keras' ``TensorBoard``).

    Add it to ``fit``'s callbacks, before any callback that should see the values::

        model.fit(data, callbacks=[vrgd_tf.GSNRLogger(), keras.callbacks.CSVLogger("log.csv")])

    The logs get :data:`FIT_LOG_TAGS` by default (``vrgd/mean/mean_factor``,
    ``vrgd/median/mean_gsnr``, ``vrgd/mean/norm_ratio``, and ``vrgd/median/reliability``
    when the optimizer has ``split_half=True``): the headline of
    :func:`headline` over the variables that have a GSNR, as ``vrgd_statistics()`` has them
    after the last recording step (the optimizer's ``statistics_interval``, by default every
    100 steps: construct the optimizer with ``statistics_interval=1`` to see every step's
    values, at the price of recording on every step). Each batch's
    logs carry the values read at the last batch that passed a recording step; the epoch's
    logs (``History``, ``CSVLogger``, the progress bar's end-of-epoch line) the values after
    the epoch's last step, and NaN ("no value") while no variable has a GSNR, e.g. before the
    first recording step, so that every epoch has the same columns. tf_keras' progress bar
    shows, during an epoch, the mean over its batches of every log that is not a model metric
    (these included); its end-of-epoch line shows the values themselves.

    Why a callback and not metrics the optimizer exposes (the Keras idiom for a number that
    describes the optimizer rather than the predictions, as ``LearningRateScheduler`` and
    ``ReduceLROnPlateau`` add ``learning_rate`` to the logs): a Keras metric belongs to the
    model's predictions. It would be listed in ``compile(metrics=...)`` per output, also run in
    ``evaluate`` and validation (``val_vrgd/...``: the training step's statistics shown as a
    validation result), and go into the ``.keras`` file's compile config with a reference to
    the optimizer it cannot serialize. A callback needs none of that, works the same in both
    families and leaves ``compile`` alone.

    How the logs get there (Keras 3.15 ``keras.callbacks.CallbackList``, tf_keras 2.20
    ``tf_keras.callbacks.CallbackList``): every hook hands one ``logs`` dict to the
    callbacks in list order, and ``History`` and ``ProgbarLogger`` are appended after the
    ones given to ``fit``, so they see what this callback added; a callback given before it
    in the list does not. Host round trips: it reads ``optimizer.iterations`` and the
    statistics only at the batches whose steps passed a recording step (it counts steps
    from the batch indices in between, so ``steps_per_execution > 1`` counts right), plus
    one read of ``iterations`` at the end of each epoch and of both at the start of
    ``fit``; other batches add nothing (Keras 3 converts each batch's logs to Python numbers
    anyway; under tf_keras this callback accepts tensor logs, so it forces no conversion).

    Args:
      keys: None, or a non-empty sequence of tags of :data:`HEADLINE_TAGS`, the values to
        log. None (default): :data:`FIT_LOG_TAGS`, plus :data:`RELIABILITY_TAG` if the
        optimizer measures the split-half reliability (decided when ``fit`` starts).

    Raises:
      ValueError: at construction, ``keys`` empty or with a tag not in
        :data:`HEADLINE_TAGS`; when ``fit`` starts, the optimizer's ``statistics_interval``
        is 0 (it records nothing), or ``keys`` include :data:`RELIABILITY_TAG` and the
        optimizer has ``split_half=False`` (it measures none).
      TypeError: when ``fit`` starts, the model's optimizer is not a VRGD optimizer (or a
        loss-scale wrapper around one).
    """

    _supports_tf_logs = True  # tf_keras: logs may stay tensors (this reads none of them)

    def __init__(self, keys=None):
        super().__init__()
        self._default_keys = keys is None
        keys = FIT_LOG_TAGS if keys is None else keys
        keys = (keys,) if isinstance(keys, str) else tuple(keys)
        unknown = [key for key in keys if key not in HEADLINE_TAGS]
        if not keys or unknown:
            raise ValueError(
                f"`keys` must be a non-empty sequence of headline tags {HEADLINE_TAGS}; got "
                f"{keys!r}" + (f" ({unknown!r} unknown)." if unknown else ".")
            )
        self.keys = keys
        self._clock = None
        self._values = {}

    def on_train_begin(self, logs=None):
        optimizer = _vrgd_optimizer(self.model, type(self).__name__)
        if optimizer.statistics_interval == 0:
            raise ValueError(
                f"{type(self).__name__}: the optimizer's `statistics_interval` is 0, so it "
                "records no diagnostics to log. Set `statistics_interval` >= 1 (e.g. the "
                "steps of an epoch), or remove the callback."
            )
        if self._default_keys:
            self.keys = FIT_LOG_TAGS + ((RELIABILITY_TAG,) if optimizer.split_half else ())
        elif RELIABILITY_TAG in self.keys and not optimizer.split_half:
            raise ValueError(
                f"{type(self).__name__}: `keys` include {RELIABILITY_TAG!r}, but the "
                "optimizer has `split_half=False`, so it measures no reliability (the column "
                "would read NaN). Construct the optimizer with `split_half=True`, or leave "
                "that tag out of `keys`."
            )
        self._clock = _StepClock(optimizer.statistics_interval)
        self._clock.sync(_iterations(optimizer))
        self._read(optimizer)

    def on_epoch_begin(self, epoch, logs=None):
        self._clock.start_epoch()

    def on_train_batch_end(self, batch, logs=None):
        if self._clock.advance(batch):
            self._refresh()
        if logs is not None:
            logs.update(self._values)

    def on_epoch_end(self, epoch, logs=None):
        self._refresh()
        if logs is not None:
            logs.update({key: self._values.get(key, math.nan) for key in self.keys})

    def _refresh(self):
        """Reads ``iterations``; the statistics too if a recording step has passed."""
        optimizer = unwrap_optimizer(self.model.optimizer)
        if self._clock.sync(_iterations(optimizer)):
            self._read(optimizer)

    def _read(self, optimizer):
        values = headline(optimizer.vrgd_statistics())
        self._values = {key: values[key] for key in self.keys if key in values}


class _GSNRTensorBoardMixin:
    """Writes the VRGD GSNR diagnostics to TensorBoard every ``update_freq`` optimizer steps.

    Scalars and histograms of :func:`write_gsnr_summaries`, at the step the optimizer's
    ``iterations`` reads when they are written: with ``steps_per_execution = s`` Keras calls
    the callback once per ``s`` steps, and a point is written at the first call at or after
    each multiple of ``update_freq``; a second ``fit`` continues the count. It reads
    ``iterations`` only at those calls and once per epoch (it counts the steps from the
    batch indices in between), so the other batches cost no host round trip.

    Args:
      log_dir: str, directory for the event files (e.g. beside Keras' TensorBoard
        callback: ``os.path.join(log_dir, "vrgd")``).
      update_freq: int >= 1, in optimizer steps; ``"batch"`` (= 1); or ``"epoch"`` (one
        point at the end of each epoch), as Keras' ``TensorBoard`` takes it. Use a multiple
        of the optimizer's ``statistics_interval``. Default 100.
      log_to_history: bool; also add the headline values (:data:`HEADLINE_TAGS`, the
        reliability only with ``split_half=True``; NaN while no variable has a GSNR) to the
        epoch logs (progress bar, ``History``).
        :class:`GSNRLogger` does that for a chosen few, during the epoch too.

    Raises:
      ValueError: ``update_freq`` is none of those (the message names it).
      ImportError: the ``tensorboard`` package is not installed (TensorFlow >= 2.21 does
        not install it; ``pip install tensorboard``).
    """

    _supports_tf_logs = True  # tf_keras: logs may stay tensors (this reads none of them)

    def __init__(self, log_dir, update_freq=100, log_to_history=False):
        super().__init__()
        self.update_freq = _parse_update_freq(update_freq)
        require_tensorboard(type(self).__name__)
        self.log_dir = log_dir
        self.log_to_history = log_to_history
        self._writer = None
        self._clock = None

    def on_train_begin(self, logs=None):
        self._writer = tf.summary.create_file_writer(self.log_dir)
        optimizer = unwrap_optimizer(self.model.optimizer)
        interval = getattr(optimizer, "statistics_interval", 1)
        per_step = self.update_freq != "epoch"
        if per_step and (interval == 0 or self.update_freq % interval):
            _LOG.warning(
                "%s(update_freq=%d) with statistics_interval=%d: the "
                "written diagnostics are from an earlier step (or zeros). Use an "
                "update_freq that is a multiple of the optimizer's statistics_interval.",
                type(self).__name__,
                self.update_freq,
                interval,
            )
        self._clock = _StepClock(self.update_freq if per_step else 1)
        self._clock.sync(_iterations(optimizer))

    def on_epoch_begin(self, epoch, logs=None):
        self._clock.start_epoch()

    def on_train_batch_end(self, batch, logs=None):
        if self.update_freq != "epoch" and self._clock.advance(batch):
            self._write(only_if_passed=True)

    def on_epoch_end(self, epoch, logs=None):
        # Per step: also catches a multiple the step estimate missed.
        self._write(only_if_passed=self.update_freq != "epoch")
        if self.log_to_history and logs is not None:
            values = headline(_statistics_or_empty(self.model.optimizer))
            measured = getattr(unwrap_optimizer(self.model.optimizer), "split_half", False)
            tags = [t for t in HEADLINE_TAGS if measured or t != RELIABILITY_TAG]
            logs.update({tag: values.get(tag, math.nan) for tag in tags})

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()

    def _write(self, only_if_passed):
        step = _iterations(unwrap_optimizer(self.model.optimizer))
        if self._clock.sync(step) or not only_if_passed:
            write_gsnr_summaries(self.model.optimizer, step, self._writer)


def _callback_class(mixin, name, callback_base, doc, module):
    return type(
        name, (mixin, callback_base), {"__module__": module, "__qualname__": name, "__doc__": doc}
    )


_CALLBACKS = ((_GSNRLoggerMixin, "GSNRLogger"), (_GSNRTensorBoardMixin, "GSNRTensorBoard"))


def _keras3_callbacks():
    import keras

    return tuple(
        _callback_class(
            mixin,
            name,
            keras.callbacks.Callback,
            mixin.__doc__.replace("\n\n", " (Keras 3 callback.)\n\n", 1),
            __name__,
        )
        for mixin, name in _CALLBACKS
    )


GSNRLogger, GSNRTensorBoard = _keras3_callbacks()


def _tf_keras_callbacks():
    """The tf_keras ``GSNRLogger`` and ``GSNRTensorBoard``, which :mod:`vrgd_tf.tf_keras`
    makes and exports (here they would import tf_keras with this module)."""
    import tf_keras

    return tuple(
        _callback_class(
            mixin,
            name,
            tf_keras.callbacks.Callback,
            f"""The tf_keras (Keras 2) callback of :class:`vrgd_tf.summaries.{name}`: the same
    arguments and behaviour, for tf_keras models (``vrgd_tf.tf_keras`` optimizers; with
    ``TF_USE_LEGACY_KERAS=1``, ``tf.keras`` models and ``vrgd_tf.{name}``).""",
            "vrgd_tf.tf_keras",
        )
        for mixin, name in _CALLBACKS
    )
