"""Peak memory of the cost benchmarks: the process's resident set from ``/proc/self/status``
(``VmRSS`` now, ``VmHWM`` its high-water mark), one child process per configuration, variant
and repetition (a high-water mark cannot be reset), and the ratios to the base variant.
``overhead.py``, ``groups.py`` and ``gsnr_memory.py`` use it.

Peak RSS counts everything the process holds: tensors, but also the traced graphs, their
kernels and XLA's compiled clusters (one per replica when 8 replicas share the process),
which on an accelerator live in host memory. TensorFlow's CPU allocator keeps statistics
as a BFC allocator (``TF_CPU_ALLOCATOR_USE_BFC=true``, :data:`BFC_ENV`, set in the child's
environment; one allocator serves every logical CPU device) and as oneDNN's allocator, the
default where TensorFlow's oneDNN kernels are on (its default on CPUs with AVX512_VNNI,
AVX512_BF16 or AMX): then the children also report the tensors' own peak
(``tensor_peak_bytes``, tensors and XLA's buffers), the quantity an accelerator's memory
holds. Each child records whether oneDNN was on (``tf_onednn``; not recorded before
2026-12-07, when the recorded runs' machines had it on in some files and off in others)."""

import numpy as np

import children
from harness import tf_onednn
from timing import summarize

#: The child environment under which the CPU allocator keeps statistics (a BFC allocator).
BFC_ENV = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}


def cpu_memory_info():
    """``"available"``, or ``"unavailable: <TF's error>"``: whether
    ``tf.config.experimental.get_memory_info`` works for the CPU in this process (it raises
    "Allocator stats not available" unless the allocator is a BFC allocator, :data:`BFC_ENV`)."""
    import tensorflow as tf

    try:
        tf.config.experimental.get_memory_info("CPU:0")
        return "available"
    except Exception as e:  # noqa: BLE001
        return f"unavailable: {e}"


def status_kb(field):
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), or None."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def rss_kb():
    """Current resident set of this process (``VmRSS``)."""
    return status_kb("VmRSS")


def peak_kb():
    """Peak RSS of this process image: VmHWM. (``getrusage(RUSAGE_SELF).ru_maxrss`` is not
    used: on Linux it carries the parent's high-water mark across fork + exec.)"""
    return status_kb("VmHWM")


def tensor_memory():
    """``(peak, current)`` bytes of TensorFlow's CPU allocator (every logical CPU device's
    tensors and XLA's buffers), or ``(None, None)`` where it keeps no statistics (the default
    allocator with oneDNN off: neither :data:`BFC_ENV` nor :func:`harness.tf_onednn`)."""
    import tensorflow as tf

    try:
        info = tf.config.experimental.get_memory_info("CPU:0")
    except ValueError:  # "Allocator stats not available": not a BFC allocator
        return None, None
    return int(info["peak"]), int(info["current"])


def memory_result(rss_before_model_kb):
    """What a memory child reports after its steps: peak RSS (VmHWM), the RSS just before
    the model was built, the RSS now, ``ru_maxrss`` (for comparison only) and the tensors'
    peak and current bytes (:func:`tensor_memory`; None where the allocator keeps no
    statistics) and whether TensorFlow's oneDNN kernels were on (``tf_onednn``)."""
    import resource

    tensor_peak, tensor_current = tensor_memory()
    return {
        "tensor_peak_bytes": tensor_peak,
        "tensor_current_bytes": tensor_current,
        "tf_onednn": tf_onednn(),
        "maxrss_kb": peak_kb(),
        "rss_before_model_kb": rss_before_model_kb,
        "rss_end_kb": rss_kb(),
        "ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def memory_runs(script, configs, variants, reps, child_args, log, env=None):
    """Peak memory from one child process per (configuration, variant, repetition).

    Interleaved: for each repetition, for each configuration, every variant in an order
    rotated by one per repetition. ``variants`` is a list, or a function of the
    configuration returning one. ``child_args(config, variant)`` gives the child's
    arguments; the child prints :func:`memory_result`; ``env`` (a dict or None) is added to
    the children's environment. Returns ``{config: {variant: [the children's results]}}``.
    """
    names = {c: list(variants(c) if callable(variants) else variants) for c in configs}
    raw = {c: {v: [] for v in names[c]} for c in configs}
    for rep in range(reps):
        for c in configs:
            vs = names[c]
            vs = vs[rep % len(vs) :] + vs[: rep % len(vs)]
            for v in vs:
                res, dt = children.run_child(script, child_args(c, v), log, env=env)
                raw[c][v].append(res)
                log(
                    f"  memory rep {rep} {c} {v}: maxrss {res['maxrss_kb'] / 1024:.0f} MB, "
                    f"increment {(res['maxrss_kb'] - res['rss_before_model_kb']) / 1024:.0f}"
                    f" MB ({dt:.0f}s)"
                )
    return raw


def memory_ratios(raw, variants):
    """Ratios to ``base`` of one configuration's memory results, per repetition: peak RSS,
    the increment (peak minus the RSS before the model) and, where every child reported
    it, the tensors' peak (``tensor_peak_ratio``, ``tensor_peak_mb_median``). Returns
    ``{variant: {...}}`` for the variants other than base, plus ``base_peak_mb_median``
    (and ``base_tensor_peak_mb_median``)."""
    base = raw["base"]
    out = {}
    for v in variants:
        if v == "base":
            continue
        peak_ratio = [r["maxrss_kb"] / b["maxrss_kb"] for r, b in zip(raw[v], base)]
        inc_ratio = [
            (r["maxrss_kb"] - r["rss_before_model_kb"])
            / max(1, b["maxrss_kb"] - b["rss_before_model_kb"])
            for r, b in zip(raw[v], base)
        ]
        out[v] = {
            "peak_ratio": summarize(peak_ratio),
            "increment_ratio": summarize(inc_ratio),
            "peak_mb_median": float(np.median([r["maxrss_kb"] for r in raw[v]])) / 1024,
        }
        if has_tensor_peaks(raw[v]) and has_tensor_peaks(base):
            out[v]["tensor_peak_ratio"] = summarize(
                [r["tensor_peak_bytes"] / b["tensor_peak_bytes"] for r, b in zip(raw[v], base)]
            )
            out[v]["tensor_peak_mb_median"] = _median_mb(raw[v])
    out["base_peak_mb_median"] = float(np.median([b["maxrss_kb"] for b in base])) / 1024
    if has_tensor_peaks(base):
        out["base_tensor_peak_mb_median"] = _median_mb(base)
    return out


def has_tensor_peaks(results):
    """Whether every child result in ``results`` (a non-empty list) reported its tensors."""
    return bool(results) and all(r.get("tensor_peak_bytes") for r in results)


def _median_mb(results):
    return float(np.median([r["tensor_peak_bytes"] for r in results])) / 2**20
