r"""Where the passes of the GSNR step go, counted (issue 39): ops and bytes per stage, graph
mode and XLA, beside the fused floor. Times nothing (``passes.py`` times the same steps).

The steps of ``passes.py`` on BERT-tiny's 44 variable shapes (N = 4,384,058 elements, k = 4
groups, one device, ``VRGDSettings(beta_3=0.9)``): the library's GSNR step cumulatively up to
each stage (``passes.STAGES``: ``sums``, ``factors``, ``smoothed``, ``recorded``; each writes
its ``f * S1`` into variables), ``variance_reduce`` itself (``library``), and the fused floor
(``passes.floor_step``). Each is traced once per mode and counted:

* graph mode: every op of the traced graph and of the branches of its ``If`` ops, by kind,
  with a memory model: an op reads its tensor inputs and writes its outputs (no op fuses;
  reads of variables, assignments, reshapes and identities alias and cost nothing). ``ops/el``
  is the sum over the ops of their largest tensor's elements, per element of N (element-wise
  ops per element); ``model passes`` is the bytes read and written over ``8 N`` (a copy
  pass: 4 bytes read and 4 written per element).
* XLA: ``experimental_get_compiler_ir()(stage="optimized_hlo")`` of the ``jit_compile``
  function (CPU): the kernels of the entry computation (fusions and the instructions left
  unfused), the conditionals and while loops, float64 instructions, and the same memory
  model per kernel (its operands and outputs; inside conditionals, every branch counted).

The per-stage rows are the differences between consecutive prefixes.

Example:
  python3 benchmarks/stage_ops.py              # about a minute; writes results/stage_ops.json
  python3 benchmarks/stage_ops.py --quick      # small shapes
"""

import argparse
import collections
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import passes  # noqa: E402
import tensorflow as tf  # noqa: E402
from bert_shapes import BERT_TINY_SHAPES, QUICK_SHAPES  # noqa: E402

import harness  # noqa: E402

#: Ops that alias their input or touch no tensor memory (cost 0 in the graph-mode model).
_FREE = {
    "Const",
    "Identity",
    "IdentityN",
    "Reshape",
    "ReadVariableOp",
    "AssignVariableOp",
    "NoOp",
    "Placeholder",
    "Shape",
    "StopGradient",
    "Squeeze",
    "ExpandDims",
}
#: Graph-mode op kinds, for the table.
_KINDS = {
    "select": {"Select", "SelectV2"},
    "multiply/add": {"Mul", "AddV2", "Add", "Sub", "Square", "Neg", "AddN"},
    "divide": {"RealDiv", "DivNoNan", "Div", "Reciprocal"},
    "compare/logical": {
        "Greater",
        "GreaterEqual",
        "Less",
        "LessEqual",
        "Equal",
        "NotEqual",
        "IsNan",
        "IsFinite",
        "LogicalAnd",
        "LogicalOr",
        "LogicalNot",
    },
    "clip": {"ClipByValue", "Maximum", "Minimum"},
    "reduction": {"Sum", "All", "Any", "Max", "Min", "Prod", "Mean", "SegmentSum"},
    "cast": {"Cast"},
    "concat/split/slice": {
        "ConcatV2",
        "Split",
        "SplitV",
        "Slice",
        "StridedSlice",
        "Pack",
        "Unpack",
        "Fill",
        "Tile",
        "BroadcastTo",
        "GatherV2",
        "TensorScatterUpdate",
    },
}
_ELEMENT_FLOOR = 1024  # a tensor of fewer elements is per-variable bookkeeping, not a pass


def _elements(t):
    shape = t.shape
    if shape.rank is None or not shape.is_fully_defined():
        return 0
    return int(np.prod(shape.as_list())) if shape.rank else 1


def _bytes(t):
    try:
        size = t.dtype.size
    except (AttributeError, TypeError, ValueError):
        return 0
    return _elements(t) * size


def _kind(op_type):
    for kind, types in _KINDS.items():
        if op_type in types:
            return kind
    return "other"


def _graphs(graph, outer):
    """``graph`` and, recursively, the branch graphs of its ``If`` / ``While`` ops."""
    yield graph
    for op in graph.get_operations():
        if op.type in ("If", "StatelessIf", "While", "StatelessWhile"):
            names = ("then_branch", "else_branch") if "If" in op.type else ("cond", "body")
            for name in names:
                fn = outer._get_function(op.get_attr(name).name)
                yield from _graphs(fn.graph, outer)


def graph_counts(fn, n):
    """Graph-mode counts of the traced ``fn`` (see the module docstring)."""
    graph = fn.get_concrete_function().graph
    out = collections.Counter()
    for g in _graphs(graph, graph):
        for op in g.get_operations():
            t = op.type
            if t in ("If", "StatelessIf"):
                out["conditionals"] += 1
                continue
            tensors = [x for x in list(op.inputs) + list(op.outputs) if x.dtype != tf.resource]
            if t == "Cast" and any(x.dtype == tf.float64 for x in op.outputs):
                out["casts to float64"] += 1
            if any(x.dtype == tf.float64 for x in tensors) and max(map(_elements, tensors)) > 1:
                out["float64 ops"] += 1
            if t == "ReadVariableOp":
                out["variable reads"] += 1
            if t in ("AssignVariableOp", "ResourceScatterUpdate"):
                out["variable writes"] += 1
            if t in _FREE or not tensors:
                continue
            largest = max(map(_elements, tensors))
            out["ops"] += 1
            if largest < _ELEMENT_FLOOR:
                continue
            out["large ops"] += 1
            out[f"kind {_kind(t)}"] += 1
            out["elements"] += largest
            out["bytes"] += sum(map(_bytes, tensors))
    counts = dict(out)
    counts["ops/el"] = out["elements"] / n
    counts["model passes"] = out["bytes"] / (8.0 * n)
    return counts


_DTYPE_BYTES = {"f32": 4, "f64": 8, "s32": 4, "u32": 4, "s64": 8, "pred": 1, "bf16": 2, "f16": 2}
_SHAPE = re.compile(r"\b(f32|f64|s32|u32|s64|pred|bf16|f16)\[([0-9,]*)\]")
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+) = (.*?) ([\w\-]+)\((.*?)\)(.*)$")
_COMP = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+) .*\{\s*$")
_FREE_HLO = {
    "parameter",
    "constant",
    "tuple",
    "get-tuple-element",
    "bitcast",
    "after-all",
    "partition-id",
    "replica-id",
}


def _shape_bytes(text):
    """Bytes and elements of an HLO shape (a tuple: the sum)."""
    total, elements = 0, 0
    for dtype, dims in _SHAPE.findall(text):
        e = int(np.prod([int(d) for d in dims.split(",") if d])) if dims else 1
        total += e * _DTYPE_BYTES[dtype]
        elements += e
    return total, elements


def _computations(hlo):
    """``{name: (is_entry, [(name, shape text, opcode, operands, attributes)])}``."""
    comps, current = {}, None
    for line in hlo.splitlines():
        m = _COMP.match(line)
        if m and not line[:1].isspace():  # a computation's header; instructions are indented
            current = m.group(2)
            comps[current] = (bool(m.group(1)), [])
            continue
        m = _INSTR.match(line)
        if m and current is not None:
            operands = re.findall(r"%([\w.\-]+)", m.group(5))
            comps[current][1].append((m.group(2), m.group(3), m.group(4), operands, m.group(6)))
    return comps


def hlo_counts(fn, n):
    """XLA counts of ``fn`` (``jit_compile=True``; see the module docstring)."""
    hlo = fn.experimental_get_compiler_ir()(stage="optimized_hlo")
    comps = _computations(hlo)
    entry = [name for name, (is_entry, _) in comps.items() if is_entry][0]
    out = collections.Counter()

    def walk(name, scope):
        instrs = comps[name][1]
        shapes = {i[0]: i[1] for i in instrs}
        for iname, shape, opcode, operands, attrs in instrs:
            if opcode in _FREE_HLO:
                continue
            if opcode == "conditional":
                out["conditionals"] += 1
                for called in re.findall(r"%([\w.\-]+)", attrs):
                    if called in comps:
                        walk(called, "conditional")
                continue
            if opcode == "call":  # an outlined computation: its instructions are the kernels
                for called in re.findall(r"to_apply=%([\w.\-]+)", attrs):
                    walk(called, scope)
                continue
            if opcode == "while":
                out["while loops"] += 1
                for called in re.findall(r"(?:body|condition)=%([\w.\-]+)", attrs):
                    walk(called, "while")
                continue
            written, elements = _shape_bytes(shape)
            read = sum(_shape_bytes(shapes.get(o, ""))[0] for o in operands)
            largest = max([elements] + [_shape_bytes(shapes.get(o, ""))[1] for o in operands])
            out["kernels"] += 1
            if "f64[" in shape:
                out["float64 kernels"] += 1
            if opcode == "custom-call":
                out["custom calls"] += 1
            if largest < _ELEMENT_FLOOR:
                continue
            out["large kernels"] += 1
            out["fusions" if opcode == "fusion" else f"unfused {opcode}"] += 1
            if opcode == "fusion" and "kind=kInput" in attrs:
                out["reduction fusions"] += 1
            out[f"bytes {scope}"] += read + written
            out["bytes"] += read + written

    walk(entry, "entry")
    counts = dict(out)
    counts["model passes"] = out["bytes"] / (8.0 * n)
    return counts


def _functions(shapes, jit_compile):
    """``{name: tf.function}``: the stage prefixes, the library step and the floor."""
    from vrgd_tf.settings import VRGDSettings

    rng = np.random.default_rng(0)
    k, settings = passes.NUM_GROUPS, VRGDSettings(beta_3=0.9)

    def zeros():
        return [tf.Variable(tf.zeros(s), trainable=False) for s in shapes]

    grads = [tf.Variable(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    squares = [tf.Variable(np.square(rng.standard_normal(s)).astype(np.float32)) for s in shapes]
    weights = zeros()
    fns = {}

    def prefix(stage):
        state, outputs = passes._plain_state(weights, 0.9), zeros()

        def fn():
            g, q = [x.read_value() for x in grads], [x.read_value() for x in squares]
            if stage == "library":
                passes.library_step(g, q, weights, state, outputs, k, settings)
            else:
                passes.stage_prefix(stage, g, q, weights, state, outputs, k, settings)

        return fn

    for stage in passes.STAGES + ("library",):
        fns[stage] = prefix(stage)
    library_nostats_state, library_nostats_out = passes._plain_state(weights, 0.9), zeros()

    def nostats():
        g, q = [x.read_value() for x in grads], [x.read_value() for x in squares]
        passes.library_step(
            g, q, weights, library_nostats_state, library_nostats_out, k, settings, record=False
        )

    fns["library_nostats"] = nostats
    d, o = zeros(), zeros()
    c = [tf.Variable(0.0) for _ in shapes]
    fns["floor"] = lambda: passes.floor_step(grads, squares, d, c, o, k, 0.1, 0.9, settings.rtol)
    n = int(sum(int(np.prod(s)) for s in shapes))
    src, dst = tf.Variable(tf.zeros([n])), tf.Variable(tf.zeros([n]))
    fns["pass"] = lambda: dst.assign(src + 1.0)
    return {name: tf.function(f, jit_compile=jit_compile) for name, f in fns.items()}


def measure(shapes, log=print):
    n = int(sum(int(np.prod(s)) for s in shapes))
    rows = []
    for jit in (False, True):
        for name, fn in _functions(shapes, jit).items():
            counts = hlo_counts(fn, n) if jit else graph_counts(fn, n)
            rows.append({"jit_compile": jit, "step": name, "counts": counts})
            log(f"jit_compile={jit} {name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="Small shapes.")
    parser.add_argument("--out", default=None, help="JSON written.")
    args = parser.parse_args(argv)
    shapes = QUICK_SHAPES if args.quick else BERT_TINY_SHAPES
    out = args.out or os.path.join(
        harness.RESULTS_DIR, "stage_ops_quick.json" if args.quick else "stage_ops.json"
    )
    doc = {
        "kind": "stage_ops",
        "command": harness.command_line(),
        "environment": harness.environment(),
        "elements": int(sum(int(np.prod(s)) for s in shapes)),
        "variables": len(shapes),
        "rows": measure(shapes),
    }
    harness.write_json(out, doc)
    print("->", out)
    return doc


if __name__ == "__main__":
    main()
