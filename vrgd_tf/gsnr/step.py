"""The GSNR step: :func:`variance_reduce`, the composition of the stages.

layout (Python, once per trace) -> this replica's samples -> the collectives -> the sums per
entry -> factors -> smoothing (reads and commits the momentum state) -> factor transforms ->
diagnostics (recorded) -> output ``f * S1``; in graph mode the stages from the factors to the
output may run as one XLA cluster (``xla_cluster``, :func:`_clustered`). It returns the
gradients with a :class:`StepReport`; the caller (:class:`vrgd_tf.GSNRAggregator`) turns the
report into warnings.
"""

from typing import List, Mapping, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

from vrgd_tf import naming
from vrgd_tf.gsnr import collectives, halves, packing, reductions, smoothing, sparse
from vrgd_tf.gsnr import factors as factors_lib
from vrgd_tf.gsnr import layout as layout_lib
from vrgd_tf.gsnr import samples as samples_lib
from vrgd_tf.gsnr import state as state_lib
from vrgd_tf.gsnr.options import NOISE_RTOL, XLA_CLUSTER_MIN, VRGDSettings
from vrgd_tf.gsnr.samples import GroupSquares
from vrgd_tf.gsnr.statistics import NUM_STATISTICS, statistics

__all__ = ["StepReport", "ReducedGradients", "variance_reduce"]

_INF = float("inf")


class StepReport(NamedTuple):
    """What one GSNR step tells its caller (no warning is emitted by the step itself).

    Attributes:
      num_samples: int, the static ``k`` of the step: replicas in sync x micro-batch groups.
      samples: float32 scalar tensor, the contributing samples (spec section 1; the
        ``k`` of the statistics); ``num_samples`` as a Python int on a one-sample step.
      active: scalar bool tensor, whether the step had a GSNR (``samples >= 2``); False on a
        one-sample step.
      finite: scalar bool tensor, whether every summed gradient was finite (the state was
        committed); None on a one-sample step (not computed).
      inert: scalar bool tensor: a finite step with a GSNR in which no element of any
        variable had a defined one (every replica sent the same or an all-zero gradient):
        the step was the base optimizer's. False on a one-sample step.
      split_half_measured: Python bool, whether the step carries the split-half subsample
        (``split_half_stride > 0``, two halves of >= 2 samples each and an all-reduced
        variable: ``vrgd_tf.gsnr.halves.plan``). False on a one-sample step.
      transforms_finite: True (no ``factor_transforms``, or a one-sample step), or a scalar
        bool tensor: whether every factor the transforms returned was finite.
      stray: False, or a scalar bool tensor: some replica whose given count was 0 sent a
        nonzero gradient (a loss term that does not depend on the examples, e.g. a weight
        regularizer, on a sample without examples; ``docs/spec.md`` section 1): the step
        was the base optimizer's.
      count_given: Python bool, whether the replicas' counts were given
        (``GroupSquares.count``) rather than inferred from the gradients.
    """

    num_samples: int
    samples: object
    active: object
    finite: Optional[tf.Tensor]
    inert: object
    split_half_measured: bool = False
    transforms_finite: object = True
    stray: object = False
    count_given: bool = False

    @property
    def transforms_not_finite(self):
        """A scalar bool tensor (False without transforms), True on a finite step in which
        some factor the ``factor_transforms`` returned was NaN or infinite (the output is
        then too)."""
        if self.transforms_finite is True or self.finite is None:
            return False
        return tf.logical_and(self.finite, tf.logical_not(self.transforms_finite))

    @property
    def too_few_samples(self):
        """A scalar bool tensor, True on a finite step of ``num_samples >= 2`` without a
        stray gradient in which fewer than 2 samples contributed (replicas without
        examples): the step was the base optimizer's."""
        if self.finite is None:
            return False
        return tf.logical_and(self._finite_not_stray(), self.samples < 2.0)

    @property
    def stray_gradient(self):
        """A scalar bool tensor, True on a finite step with a stray gradient (see
        ``stray``): the step was the base optimizer's."""
        if self.finite is None or self.stray is False:
            return False
        return tf.logical_and(self.finite, self.stray)

    @property
    def samples_left_out(self):
        """A scalar bool tensor, True on a finite step without a stray gradient in which
        fewer than ``num_samples`` samples contributed (``docs/spec.md`` section 1)."""
        if self.finite is None:
            return False
        return tf.logical_and(self._finite_not_stray(), self.samples < float(self.num_samples))

    def _finite_not_stray(self):
        if self.stray is False:
            return self.finite
        return tf.logical_and(self.finite, tf.logical_not(self.stray))


class ReducedGradients(list):
    """The list of variance-reduced gradients, with the step's :class:`StepReport` as
    ``report`` (a plain ``list`` everywhere else: indexing, unpacking, ``tf.nest``)."""

    def __init__(self, gradients=(), report: Optional[StepReport] = None):
        super().__init__(gradients)
        self.report = report


def _group_squares(squares) -> GroupSquares:
    """The step's :class:`GroupSquares`: ``squares``, or ``GroupSquares(None, 1)``."""
    if squares is None:
        return GroupSquares(None, 1)
    if not isinstance(squares, GroupSquares):
        raise TypeError(f"`squares` must be a vrgd_tf.gsnr.GroupSquares or None; got {squares!r}.")
    return squares


def _settings(settings) -> VRGDSettings:
    """``settings``, or the defaults for None; TypeError for another type."""
    if settings is None:
        return VRGDSettings()
    if not isinstance(settings, VRGDSettings):
        raise TypeError(
            "`settings` must be a vrgd_tf.settings.VRGDSettings (e.g. "
            f"`VRGDSettings(gamma=0.1)`); got {settings!r}."
        )
    return settings


def _checked_context(grads, variables, squares, replica_context):
    """The replica context; the one check per step of the context and of ``squares``
    (``num_groups``, ``sq_sums``)."""
    ctx = replica_context or tf.distribute.get_replica_context()
    if ctx is None:
        raise RuntimeError(
            "The GSNR step (vrgd_tf.gsnr.variance_reduce) must run in a replica context "
            "(inside `strategy.run` or `model.fit`), not in a cross-replica context."
        )
    sq_sums, num_groups, count = squares
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
        raise ValueError(f"`num_groups` must be an int >= 1; got {num_groups!r}.")
    _check_count(count, num_groups)
    if num_groups > 1 and sq_sums is None:
        raise ValueError(
            f"`sq_sums` (the sums of squares of the {num_groups} micro-batch "
            "gradients) is required when `num_groups` > 1."
        )
    if sq_sums is not None and (isinstance(sq_sums, Mapping) or len(sq_sums) != len(grads)):
        got = "a mapping" if isinstance(sq_sums, Mapping) else len(sq_sums)
        raise ValueError(
            f"`sq_sums` must hold one tensor per gradient, in their order: got {got} for "
            f"{len(grads)} gradients (GroupSquares.in_order orders a mapping)."
        )
    if sq_sums is not None:
        _check_sq_sums(sq_sums, variables)
    return ctx


def _check_count(count, num_groups: int) -> None:
    """ValueError unless ``count`` (``GroupSquares.count``) is None, an int in
    ``[0, num_groups]`` or a scalar tensor (spec section 1, contributing samples)."""
    if count is None:
        return
    if isinstance(count, (bool, np.bool_)) or isinstance(count, (float, np.floating)):
        raise ValueError(
            f"`num_contributing` must be an int in [0, {num_groups}] or a scalar tensor; "
            f"got {count!r}."
        )
    if isinstance(count, (int, np.integer)):
        if not 0 <= int(count) <= num_groups:
            raise ValueError(
                f"`num_contributing` must be in [0, num_groups={num_groups}] (this "
                f"replica's samples that hold an example of nonzero weight); got {count}."
            )
        return
    shape = tf.TensorShape(getattr(count, "shape", None))
    if shape.rank is not None and shape.rank != 0:
        raise ValueError(
            f"`num_contributing` must be a scalar (this replica's count); got shape {shape}."
        )


def _check_sq_sums(sq_sums, variables) -> None:
    """ValueError naming ``sq_sums[i]`` if it is None or its static number of elements is
    not its variable's (the step flattens it)."""
    for i, (q, v) in enumerate(zip(sq_sums, variables)):
        shape = None if q is None else tf.TensorShape(getattr(q, "shape", np.shape(q)))
        want = tf.TensorShape(v.shape)
        if shape is None or (
            shape.is_fully_defined() and shape.num_elements() != want.num_elements()
        ):
            raise ValueError(
                f"`sq_sums[{i}]` must be this replica's sum over its micro-batch groups of "
                f"the squared gradients of variable {naming.variable_name(v)!r}, of its "
                f"shape {want.as_list()}; got "
                f"{'None' if shape is None else f'shape {shape.as_list()}'}."
            )


def _without_gsnr(grads, variables, state, ctx, record_statistics, num_samples):
    """One sample (or no gradient): the base's all-reduce; a recording step stores zeros."""
    if state is not None and grads:
        indices = [state.index(v) for v in variables]
        zeros = lambda: tf.zeros([len(indices), NUM_STATISTICS])  # noqa: E731
        state_lib.record(state, indices, zeros, record_statistics)
        undefined = lambda: tf.zeros([len(indices), halves.NUM_SPLIT_HALF])  # noqa: E731
        state_lib.record(state, indices, undefined, record_statistics, kind="split_half")
    report = StepReport(num_samples, num_samples, False, None, False)
    return ReducedGradients(collectives.sum_plain(grads, ctx), report)


class _Factors(NamedTuple):
    """The factors of a step, per block of its layout.

    Attributes:
      raw: the :class:`vrgd_tf.gsnr.factors.Factor` of each block (before the momentum).
      applied: float32 ``[size]`` each, the factor applied to ``S1`` (after the momentum
        and the factor transforms).
      corrections: the new ``c_t`` per block (``beta_3 > 0``; ``[v]`` for a pack), else
        None.
      scaled: None, or per block ``applied * S1`` (float32 ``[size]``) where
        :func:`_scaled` made it (a dense float32 block under XLA), else None.
    """

    raw: List[factors_lib.Factor]
    applied: List[tf.Tensor]
    corrections: Optional[List[tf.Tensor]]
    scaled: Optional[List[Optional[tf.Tensor]]] = None


def _pieces(block):
    """A block's ``sizes`` for ``vrgd_tf.gsnr.packing`` (None unless packed)."""
    return block.sizes if block.packed else None


def _thresholds(layout, summed, settings) -> List[tf.Tensor]:
    """Per block, the noise threshold ``rtol * k`` (``+Inf`` on a step without a GSNR).
    The gathered sparse rows are float32 whatever ``squares_dtype``: float32's ``rtol``."""
    k, active = tf.maximum(summed.count, 1.0), _active(summed)
    return [
        tf.where(
            active, (NOISE_RTOL if b.path == layout_lib.SPARSE_ROWS else settings.rtol) * k, _INF
        )
        for b in layout.blocks
    ]


def _factors(layout, summed, settings) -> List[factors_lib.Factor]:
    """Per block, the raw factor; none is defined on a step without a GSNR (threshold Inf)."""
    k = tf.maximum(summed.count, 1.0)
    return [
        factors_lib.factor(s1, s2, k, settings.gamma, threshold, _pieces(b))
        for b, s1, s2, threshold in zip(
            layout.blocks, summed.s1, summed.s2, _thresholds(layout, summed, settings)
        )
    ]


def _active(summed) -> tf.Tensor:
    """Scalar bool: the step has a GSNR, i.e. at least 2 samples contributed and no replica
    sent a stray gradient (spec section 1)."""
    return tf.logical_and(summed.count >= 2.0, tf.equal(summed.stray, 0.0))


def _report(layout, summed, raw, plan, count_given) -> StepReport:
    """The :class:`StepReport` of a step with a layout, from its sums, raw factors,
    split-half plan and whether the counts were given."""
    active = _active(summed)
    finite = tf.reduce_all([f.finite for f in raw])
    no_defined = tf.equal(tf.add_n([tf.reduce_sum(f.num_defined) for f in raw]), 0.0)
    inert = tf.logical_and(tf.logical_and(finite, active), no_defined)
    stray = summed.stray > 0.0 if count_given else False
    return StepReport(
        layout.num_samples,
        summed.count,
        active,
        finite,
        inert,
        plan is not None,
        stray=stray,
        count_given=count_given,
    )


def _measured(report) -> tf.Tensor:
    """Scalar bool: the step has a noise estimate (at least 2 samples, and some element of
    some variable with a defined GSNR); without one it is the base step (spec section 2)."""
    return tf.logical_and(report.active, tf.logical_not(report.inert))


class _Commit(NamedTuple):
    """The momentum state a step writes (``beta_3 > 0``).

    Attributes:
      deficits: the new ``d_t`` per block, float32 ``[size]`` (None where only the
        stored ones are read: :func:`_applied_from`).
      corrections: the new ``c_t`` per block (``[v]`` for a pack).
      predicate: scalar bool, whether to write them (a finite step with a GSNR).
    """

    deficits: Optional[List[tf.Tensor]]
    corrections: List[tf.Tensor]
    predicate: tf.Tensor


def _smoothed(layout, state, summed, raw, report, settings):
    """``(factors, commit)``: the factors after the momentum (``beta_3 > 0``) and the
    :class:`_Commit` of its state, else the raw factors and None. A step without a noise
    estimate (fewer than 2 samples, or no element of any variable with a defined GSNR:
    ``report.inert``) applies factor 1 and leaves the state as it is (spec section 2: the
    base step); the state is committed on a finite step with a GSNR (:func:`_commit`)."""
    if settings.beta_3 == 0.0:
        return _Factors(raw, [f.factor for f in raw], None), None
    beta_3, gamma = settings.beta_3, settings.gamma
    previous = state_lib.read(layout, state, summed.rows)
    measured = _measured(report)
    corrections = [  # c_t = Inf: p_hat = 1 exactly (also for a sparse entry's untouched rows)
        tf.where(measured, smoothing.next_correction(c, beta_3), _INF) for c in previous.corrections
    ]
    divisors = [packing.per_element(c, _pieces(b)) for b, c in zip(layout.blocks, corrections)]
    applied, deficits = [], []
    for f, d, c in zip(raw, previous.deficits, divisors):
        p_hat, new_deficit = smoothing.smooth(f.factor, d, c, beta_3, gamma)
        applied.append(p_hat)
        deficits.append(new_deficit)
    commit = _Commit(deficits, corrections, tf.logical_and(report.finite, measured))
    return _Factors(raw, applied, corrections), commit


def _applied_from(layout, summed, raw, commit, settings, stored) -> List[tf.Tensor]:
    """The smoothed factor of every block again, from the deficits ``stored`` (read back
    after the commit): ``1 - d_t / c_t`` where the step committed ``d_t``; where it did not
    (not finite, or no GSNR) ``stored`` is ``d_{t-1}`` and ``d_t`` is taken from it and the
    factor recomputed from ``S1``, ``S2`` and ``raw``'s ``mean_ratio`` (the same values)."""
    beta_3, gamma = settings.beta_3, settings.gamma
    k, thresholds = tf.maximum(summed.count, 1.0), _thresholds(layout, summed, settings)
    out = []
    for b, f, s1, s2, d, c, t in zip(
        layout.blocks, raw, summed.s1, summed.s2, stored, commit.corrections, thresholds
    ):
        c = packing.per_element(c, _pieces(b))
        s1, s2, d = reductions.recompute_after(s1, s2, d)
        factor = factors_lib.reapplied(s1, s2, k, gamma, t, f.mean_ratio, _pieces(b))
        d = tf.where(commit.predicate, d, smoothing.smooth(factor, d, c, beta_3, gamma)[1])
        out.append(smoothing.corrected(d, c, gamma))
    return out


def _scaled(layout, summed, raw, commit, settings, stored) -> List[Optional[tf.Tensor]]:
    """``applied * S1`` of each dense float32 block (None for the others) in one
    conditional on ``commit.predicate``: where the step committed, ``(1 - d_t / c_t) *
    S1`` from the stored ``d_t`` alone, so that the loop of a step that commits reads
    ``S1`` and ``d_t`` and not ``S2``; where it did not, the factor taken again as
    :func:`_applied_from` takes it (the same values, ``docs/cost_model.md`` section 6.7)."""
    scaled = [None] * len(layout.blocks)
    kept = [i for i, b in enumerate(layout.blocks) if b.path == layout_lib.DENSE]
    if not kept:
        return scaled
    s1s = [summed.s1[i] for i in kept]

    def committed():  # a pack's c_t per element is made here, not an operand
        out = []
        for i, s1 in zip(kept, s1s):
            c = packing.per_element(commit.corrections[i], _pieces(layout.blocks[i]))
            out.append(smoothing.corrected(stored[i], c, settings.gamma) * s1)
        return out

    def not_committed():
        again = _applied_from(layout, summed, raw, commit, settings, stored)
        return [again[i] * s1 for i, s1 in zip(kept, s1s)]

    for i, x in zip(kept, tf.cond(commit.predicate, committed, not_committed)):
        scaled[i] = x
    return scaled


def _reads_back(layout, state) -> bool:
    """Whether the step takes its smoothed factors from the deficits as stored (under XLA,
    :func:`_commit`): only there and where :func:`_stores_d_t`."""
    return reductions.in_xla() and _stores_d_t(layout, state)


def _stores_d_t(layout, state) -> bool:
    """Whether every stored deficit is the ``d_t`` the step computed: float32 deficits (a
    bfloat16 one is rounded) and no variable given twice (its second entry's commit would
    overwrite the first's)."""
    indices = [e.state_index for e in layout.entries]
    float32 = all(tf.as_dtype(state.deficits[i].dtype) == tf.float32 for i in indices)
    return float32 and len(set(indices)) == len(indices)


def _commit(layout, state, summed, factors, commit, settings) -> _Factors:
    """Writes the momentum state of ``commit`` (None: nothing to write); returns
    ``factors``, or under XLA (:func:`_reads_back`) ``factors`` with the smoothed factors
    of the dense blocks taken again from the deficits as stored: ``1 - d_t / c_t``, where a
    step that commits has written ``d_t``, and from ``d_{t-1}`` and the factor recomputed
    from ``S1`` and ``S2`` where it has not (the same values). The previous deficits are
    then read only by the loop that writes the new ones, and XLA does not write the factor
    out for two consumers (``docs/cost_model.md`` section 6.2). The outputs ``f * S1`` of
    the dense blocks come with them (``scaled``, :func:`_scaled`: one conditional, so that
    a step that commits does not read ``S2`` again, section 6.7).
    """
    if commit is None:
        return factors
    state_lib.commit(
        layout,
        state,
        commit.deficits,
        commit.corrections,
        summed.rows,
        settings.beta_3,
        commit.predicate,
    )
    if not _reads_back(layout, state):
        return factors
    stored = state_lib.read(layout, state, summed.rows).deficits
    again = _applied_from(layout, summed, factors.raw, commit, settings, stored)
    applied = [
        a if b.path == layout_lib.SPARSE_ROWS else x
        for b, a, x in zip(layout.blocks, factors.applied, again)
    ]
    scaled = _scaled(layout, summed, factors.raw, commit, settings, stored)
    return factors._replace(applied=applied, scaled=scaled)


def _transformed(layout, summed, factors, report, variables, settings, step) -> _Factors:
    """The factors with ``applied`` after ``settings.factor_transforms``
    (:class:`FactorContext`), called variable by variable in the order of the gradients;
    on a step without a noise estimate the factor stays 1 (the base step, as on one
    replica, where the transforms are not called)."""
    if not settings.factor_transforms:
        return factors
    pieces = {}  # position -> (factor, S1, S2) of the variable
    for b, a, s1, s2 in zip(layout.blocks, factors.applied, summed.s1, summed.s2):
        cut = [packing.pieces(t, _pieces(b)) for t in (a, s1, s2)]
        pieces.update((e.position, parts) for e, *parts in zip(b.entries, *cut))
    out = {}
    for e in layout.entries:
        a, s1, s2 = pieces[e.position]
        context = factors_lib.FactorContext(
            e.position, variables[e.position], s1, s2, layout.num_samples, step
        )
        out[e.position] = factors_lib.transform(settings.factor_transforms, a, context)
    measured = _measured(report)
    applied = [
        tf.where(measured, packing.concat([out[e.position] for e in b.entries]), a)
        for b, a in zip(layout.blocks, factors.applied)
    ]
    return factors._replace(applied=applied, scaled=None)


def _with_transforms_finite(report, factors, settings) -> StepReport:
    """``report`` with ``transforms_finite`` of the transformed factors (with transforms)."""
    if not settings.factor_transforms:
        return report
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(a)) for a in factors.applied])
    return report._replace(transforms_finite=finite)


def _statistics_rows(layout, state, summed, factors, report, gamma) -> tf.Tensor:
    """float32 ``[n, NUM_STATISTICS]``: the step's diagnostics in entry order, zeros
    without a GSNR."""
    extra = None
    if layout.on(layout_lib.SPARSE_ROWS):
        corrections = factors.corrections or [None] * len(layout.blocks)
        extra = tf.stack(
            [
                state_lib.untouched_statistics(state, e, summed.rows[e.block], corrections[e.block])
                if e.path == layout_lib.SPARSE_ROWS
                else tf.zeros([2])
                for e in layout.entries
            ]
        )
    k = tf.maximum(report.samples, 1.0)
    values = statistics(
        summed.s1,
        factors.raw,
        factors.applied,
        k=k,
        gamma=gamma,
        sizes=[e.statistics_size for e in layout.entries],
        extra=extra,
        pieces=[_pieces(b) for b in layout.blocks],
        order=layout.block_order,
    )
    return tf.where(report.active, values, 0.0)


def _split_half_rows(layout, summed, plan, report, rtol) -> tf.Tensor:
    """float32 ``[n, NUM_SPLIT_HALF]``: the split-half reliability, measured where the plan
    is and every one of the ``k`` samples contributed (the halves' sample counts are
    static), else undefined rows (zeros)."""
    if plan is None:
        return tf.zeros([len(layout.entries), halves.NUM_SPLIT_HALF])
    complete = tf.equal(report.samples, float(plan.num_samples))
    return tf.where(complete, halves.rows(plan, layout, summed, rtol), 0.0)


def _in_branch(layout, state, summed, factors, commit, settings, record):
    """``fn() -> factors`` for the recording branch: ``factors``, or under XLA on a step
    that records only some steps (``record`` a tensor: ``statistics_interval > 1``; no
    factor transforms; :func:`_reads_back`) the same factors taken again inside the branch
    from ``S1``, ``S2`` and the stored deficits (:func:`_refilled`), so that the branch's
    operands are the sums and per-variable scalars and no factor is written out on a step
    that does not record (``docs/cost_model.md`` section 6.2). Recording on every step, the
    branch is taken on every finite step and the factors already made are cheaper to pass
    in."""
    if not tf.is_tensor(record) or not reductions.in_xla() or settings.factor_transforms:
        return lambda: factors
    if commit is not None and not _reads_back(layout, state):
        return lambda: factors
    dense = [b.path != layout_lib.SPARSE_ROWS for b in layout.blocks]
    blank = factors._replace(
        raw=[f._replace(factor=None) if d else f for d, f in zip(dense, factors.raw)],
        applied=[None if d else a for d, a in zip(dense, factors.applied)],
    )
    return lambda: _refilled(layout, state, summed, blank, commit, settings)


def _refilled(layout, state, summed, factors, commit, settings) -> _Factors:
    """``factors`` with each missing (None) raw factor taken again from ``S1``, ``S2`` and
    its ``mean_ratio``, and each missing applied factor from the stored deficits
    (:func:`_applied_from`; the raw factor without ``beta_3``): the same values."""
    k, thresholds = tf.maximum(summed.count, 1.0), _thresholds(layout, summed, settings)
    raw = [
        f
        if f.factor is not None
        else f._replace(
            factor=factors_lib.reapplied(s1, s2, k, settings.gamma, t, f.mean_ratio, _pieces(b))
        )
        for b, f, s1, s2, t in zip(layout.blocks, factors.raw, summed.s1, summed.s2, thresholds)
    ]
    if all(a is not None for a in factors.applied):
        return factors._replace(raw=raw)
    if commit is None:
        again = [f.factor for f in raw]
    else:
        stored = state_lib.read(layout, state, summed.rows).deficits
        again = _applied_from(layout, summed, factors.raw, commit, settings, stored)
    applied = [x if a is None else a for a, x in zip(factors.applied, again)]
    return factors._replace(raw=raw, applied=applied)


class _Math(NamedTuple):
    """What the GSNR math of a step takes besides the settings (:func:`_gsnr_math`)."""

    layout: object
    state: object
    summed: samples_lib.Summed
    plan: object
    count_given: bool
    variables: List
    step: object


def _gsnr_math(math, settings):
    """``(outputs, factors, commit, report)``: the factors from the sums, the momentum
    (its state committed), the factor transforms and the outputs ``f * S1``."""
    layout, state, summed = math.layout, math.state, math.summed
    raw = _factors(layout, summed, settings)
    report = _report(layout, summed, raw, math.plan, math.count_given)
    factors, commit = _smoothed(layout, state, summed, raw, report, settings)
    factors = _commit(layout, state, summed, factors, commit, settings)
    factors = _transformed(layout, summed, factors, report, math.variables, settings, math.step)
    report = _with_transforms_finite(report, factors, settings)
    return _outputs(layout, summed, factors), factors, commit, report


def _clusters(layout, settings) -> bool:
    """Whether the step runs its GSNR math as an XLA cluster (``settings.xla_cluster``):
    never where XLA compiles the step already or in eager execution; ``"auto"`` where the
    dense statistics hold at least ``XLA_CLUSTER_MIN`` elements and there are no factor
    transforms."""
    if settings.xla_cluster == "never" or reductions.in_xla() or tf.executing_eagerly():
        return False
    if settings.xla_cluster == "always":
        return True
    size = sum(e.size for e in layout.entries if e.path != layout_lib.SPARSE_ROWS)
    return size >= XLA_CLUSTER_MIN and not settings.factor_transforms


def _clustered(math, settings, record):
    """:func:`_gsnr_math` as one ``tf.function(jit_compile=True)`` (an XLA cluster in a
    graph): ``(outputs, report, rows)`` (``rows`` as :func:`_rows`). The cluster returns
    the outputs, the report's tensors and, recording on every step (``record`` True), the
    diagnostics' rows; on a step that records only some steps, the per-variable scalars
    of the raw factors and the momentum's ``c_t`` and predicate, and the recording branch
    takes the factors again from them (:func:`_refilled`), except where it cannot (a
    stored deficit that is not ``d_t``: :func:`_stores_d_t`; factor transforms) and for the
    sparse rows, whose factors leave the cluster."""
    layout, state, summed, box = math.layout, math.state, math.summed, {}
    stored_is_d_t = settings.beta_3 == 0.0 or _stores_d_t(layout, state)
    keep = tf.is_tensor(record) and (bool(settings.factor_transforms) or not stored_is_d_t)
    leaves = [keep or b.path == layout_lib.SPARSE_ROWS for b in layout.blocks]

    def traced():
        outputs, factors, commit, report = _gsnr_math(math, settings)
        box["report"] = report
        tensors = {k: v for k, v in report._asdict().items() if tf.is_tensor(v)}
        box["shapes"] = [getattr(o, "dense_shape", None) for o in outputs]
        outputs = [(o.values, o.indices) if isinstance(o, tf.IndexedSlices) else o for o in outputs]
        if record is True:
            rows = _rows(layout, state, summed, math.plan, report, settings, lambda: factors)
            return outputs, tensors, (rows[0](), rows[1]())
        factors = factors._replace(
            raw=[f if k else f._replace(factor=None) for k, f in zip(leaves, factors.raw)],
            applied=[a if k else None for k, a in zip(leaves, factors.applied)],
            scaled=None,
        )
        return outputs, tensors, (factors, commit and commit._replace(deficits=None))

    outputs, tensors, out = tf.function(traced, jit_compile=True, autograph=False)()
    outputs = [  # a static dense shape does not leave a tf.function
        tf.IndexedSlices(*o, shape) if shape is not None else o
        for o, shape in zip(outputs, box["shapes"])
    ]
    report = box["report"]._replace(**tensors)
    if record is True:
        return outputs, report, (lambda: out[0], lambda: out[1])
    again = lambda: _refilled(layout, state, summed, *out, settings)  # noqa: E731
    return outputs, report, _rows(layout, state, summed, math.plan, report, settings, again)


def _rows(layout, state, summed, plan, report, settings, again):
    """``(statistics, split_half)``: ``fn() -> rows`` each, the diagnostics and the
    split-half reliability of the step (``again``: ``fn() -> factors`` that gives the
    step's factors where it is called: :func:`_in_branch`, :func:`_refilled`)."""
    statistics_rows = lambda: _statistics_rows(  # noqa: E731
        layout, state, summed, again(), report, settings.gamma
    )
    return statistics_rows, lambda: _split_half_rows(layout, summed, plan, report, settings.rtol)


def _record(layout, state, report, record, rows) -> None:
    """Records the diagnostics and the split-half reliability (``rows``, from
    :func:`_rows`) on a recording step (``record``: Python bool or scalar bool tensor) with
    finite sums; each row is computed inside its branch."""
    if record is False:
        return
    predicate = report.finite if record is True else tf.logical_and(record, report.finite)
    indices = [e.state_index for e in layout.entries]
    state_lib.record(state, indices, rows[0], predicate)
    state_lib.record(state, indices, rows[1], predicate, kind="split_half")


def _outputs(layout, summed, factors) -> List:
    """``f * S1`` per entry (``factors.applied``, or ``factors.scaled`` where made), in the
    gradient's kind, shape and dtype (see :func:`variance_reduce`)."""
    out = [None] * len(layout.entries)
    scaled = factors.scaled or [None] * len(layout.blocks)
    for b, s1, f, rows, sums, wide, fs1 in zip(
        layout.blocks, summed.s1, factors.applied, summed.rows, summed.sparse, summed.wide, scaled
    ):
        e = b.entries[0]
        if b.path == layout_lib.SPARSE_ROWS:
            out[e.position] = rows.output(f)
        elif b.path == layout_lib.SPARSE_DENSE:
            out[e.position] = sparse.scale_rows(sums, tf.reshape(f, e.shape))
        elif b.path == layout_lib.FLOAT64:
            # S1 summed in float64 too: exactly the base's sum (a finite float64 value
            # beyond float32's range stays finite); the factor is from float32 statistics.
            out[e.position] = tf.cast(tf.reshape(f, e.shape), tf.float64) * wide
        else:
            fs1 = f * s1 if fs1 is None else fs1
            for e, piece in zip(b.entries, packing.pieces(fs1, _pieces(b))):
                out[e.position] = tf.cast(tf.reshape(piece, e.shape), e.dtype)
    return out


@tf.autograph.experimental.do_not_convert  # as GSNRAggregator.__call__: run as written
def variance_reduce(
    grads: Sequence,
    variables: Sequence,
    *,
    state: Optional[state_lib.VRGDState],
    replica_context: Optional[tf.distribute.ReplicaContext] = None,
    record_statistics=True,
    step=None,
    squares: Optional[GroupSquares] = None,
    settings: Optional[VRGDSettings] = None,
) -> ReducedGradients:
    """All-reduces gradients with their squares and returns the variance-reduced gradients.

    Call in the replica context, where the base optimizer would all-reduce (SUM) its
    gradients. Each of the ``R`` replicas in sync may hold ``m`` GSNR samples (micro-batch
    groups): ``grads`` is then the sum of its groups' gradients and ``squares`` a
    :class:`GroupSquares` of the sums of their element-wise squares and ``m``, and
    ``k = R * m``. With ``m = 1`` (``squares`` None) the squares are taken here.

    The collectives (``vrgd_tf.gsnr.collectives``, outside any ``tf.cond``, in a fixed
    order): one ``all_reduce(SUM)`` of the gradients alone, the float32 gradients (one
    tensor per variable, as the base optimizer sends them, so that every strategy sums them
    as it sums the base's; after the collectives the sums of the dense gradients of at most
    ``pack_limit`` elements are computed on as one buffer, ``vrgd_tf.gsnr.layout``, the
    same values bit for bit outside XLA) and the ``tf.IndexedSlices`` on the dense
    statistics path; one of their squares (float32, or bfloat16 with
    ``squares_dtype="bfloat16"``) with this replica's count of contributing samples beside
    float32 squares; one of float32 extras if any (the count beside bfloat16 squares, the
    split-half subsample); if there are float64 gradients, one of them in float64 (so that
    the output is ``factor * S1`` with ``S1`` exactly the base's sum); and, if there are
    ``tf.IndexedSlices`` gradients on the exact rows path (the default
    ``sparse_statistics="rows"``, no ``squares``, indices of static length), one
    ``all_gather(axis=0)`` of their indices and rows packed with squares: their statistics
    are computed on the union of the touched rows only, numerically those of their dense
    form (``vrgd_tf.gsnr.sparse``). Otherwise a sparse gradient is made dense for the
    statistics and its rows go into the gradients' all-reduce as the strategy's sparse SUM.

    ``k`` counts only the contributing samples (spec section 1: those holding an example of
    nonzero weight; ``squares.count`` where the caller knows it, else a replica counts when
    some value of its gradients is nonzero or NaN). A replica with a given count of 0 that
    sent a nonzero gradient (a weight regularizer on a replica without examples) makes the
    step the base step. A step with fewer than 2 contributing samples, like a step of one
    sample, is the base step: factor 1, the momentum state unchanged, zeros recorded
    as its diagnostics; the report says so (``report.too_few_samples``). Otherwise the
    factors of all variables (``vrgd_tf.gsnr.factors.factor``) are smoothed if
    ``beta_3 > 0`` (``vrgd_tf.gsnr.smoothing``), passed through ``factor_transforms``,
    their diagnostics recorded if ``record_statistics``, and ``u = factor * S1`` returned.
    If any summed gradient is not finite, the state is left as it was (the loss-scale
    optimizers skip such a step) and the non-finite values pass through to the caller.

    Args:
      grads: list of ``n`` per-replica gradients, ``tf.Tensor`` or ``tf.IndexedSlices``,
        any float dtype, static shapes, none of them None.
      variables: the ``n`` matching trainable variables.
      state: the optimizer's :class:`VRGDState` (may be None only if ``k == 1``).
      replica_context: defaults to ``tf.distribute.get_replica_context()``.
      record_statistics: Python bool or scalar bool tensor: whether this step computes and
        stores the diagnostics (inside a ``tf.cond``, so steps that do not record skip
        them).
      step: None or a scalar int tensor, the steps completed before this one; handed to
        the factor transforms as ``context.step``.
      squares: None (one sample per replica), or a :class:`GroupSquares`: ``sq_sums``, a
        list of ``n`` dense tensors of the variables' shapes (any float dtype, summed in
        float32), this replica's ``sum_j x_j**2`` over its ``num_groups`` micro-batch
        gradients ``x_j`` (``grads`` being ``sum_j x_j``; for a sparse gradient, the
        squares of each group's dense form), required when ``num_groups > 1``;
        ``num_groups``, Python int >= 1, the number ``m`` of groups per replica; and
        ``count``, None (inferred) or this replica's contributing samples (an int in
        ``[0, m]`` or a scalar tensor).
      settings: the :class:`vrgd_tf.settings.VRGDSettings` (``gamma``, ``beta_3``,
        ``squares_dtype``, ``factor_transforms``, ``sparse_statistics``, ``pack_limit``,
        ``xla_cluster``: in graph mode the math after the collectives as one XLA cluster;
        ``split_half`` with ``statistics_interval`` set the split-half subsample's
        stride). Default ``VRGDSettings()``. Which steps record is the caller's
        (``record_statistics``).

    Returns:
      :class:`ReducedGradients`: a list of ``n`` tensors, each of its gradient's dtype and
      dense shape: the SUM over replicas (one sample: the base's own all-reduce) multiplied
      by the factor, with the :class:`StepReport` as ``.report``. A ``tf.IndexedSlices``
      gradient gives what MirroredStrategy's own SUM gives for it, an ``IndexedSlices`` of
      every replica's rows in replica order, duplicates kept (on the dense-statistics path,
      whatever the strategy's SUM gives), with each row multiplied by its factor row, so
      the base optimizer applies its own sparse rule, and ``gamma=1, beta_3=0`` hands it
      exactly what it would get without VRGD.

    Raises:
      RuntimeError: called in a cross-replica context.
      TypeError, ValueError: ``settings`` not a ``VRGDSettings``, a gradient without a
        static shape, ``squares`` not a :class:`GroupSquares`,
        ``num_groups`` < 1, a ``count`` out of ``[0, m]`` or not a scalar, or ``sq_sums``
        missing (``num_groups > 1``) or not matching
        ``grads``.
    """
    squares = _group_squares(squares)
    settings = _settings(settings)
    grads = [g if isinstance(g, tf.IndexedSlices) else tf.convert_to_tensor(g) for g in grads]
    variables = list(variables)
    ctx = _checked_context(grads, variables, squares, replica_context)
    num_samples = ctx.num_replicas_in_sync * squares.num_groups
    if num_samples == 1 or not grads:
        return _without_gsnr(grads, variables, state, ctx, record_statistics, num_samples)
    layout = layout_lib.build_layout(
        grads,
        variables,
        state,
        num_replicas=ctx.num_replicas_in_sync,
        num_groups=squares.num_groups,
        squares_given=squares.sq_sums is not None,
        sparse_statistics=settings.sparse_statistics,
        pack_limit=settings.pack_limit,
    )
    plan = halves.plan(layout, settings.split_half_stride)
    local = samples_lib.local_samples(layout, grads, squares.sq_sums, squares.count)
    local = halves.with_half(plan, local, ctx)
    reduced = collectives.all_reduce_samples(local, ctx, settings.squares_dtype)
    summed = samples_lib.assemble(layout, grads, reduced)
    math = _Math(layout, state, summed, plan, squares.count is not None, variables, step)
    if _clusters(layout, settings):
        outputs, report, rows = _clustered(math, settings, record_statistics)
    else:
        outputs, factors, commit, report = _gsnr_math(math, settings)
        again = _in_branch(layout, state, summed, factors, commit, settings, record_statistics)
        rows = _rows(layout, state, summed, plan, report, settings, again)
    _record(layout, state, report, record_statistics, rows)
    return ReducedGradients(outputs, report)
