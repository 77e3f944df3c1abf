"""The GSNR step's cost in element passes, round by round (issue 39), and its README line.

Inputs: ``passes.py``'s JSONs ``benchmarks/results/passes_issue39_round{3,4,5,7,8}*.json``,
each a before or an after run of one round, round 7 the same TensorFlow code again on
another machine (:data:`RUNS`: the library's commit and the allocator protocol per run;
``docs/cost_model.md`` sections 6.2-6.7 say what each round changed).
Numbers are VR-LAMB minus LAMB in passes per element, median (min-based in brackets), and
the defaults over LAMB's whole update, against issue 39's targets (:data:`TARGETS`)."""

import os

from report.common import RESULTS, load

#: (results stem, round and side, the library's commit, the allocator protocol).
RUNS = (
    ("passes_issue39_round3_before", "round 3, before", "b1b2ebe", "glibc default"),
    ("passes_issue39_round3_after", "round 3, after", "b448cb7", "glibc default"),
    ("passes_issue39_round4_before_heap", "round 4, before", "14006f4", "mmap above 32 MiB"),
    ("passes_issue39_round4_after_heap", "round 4, after", "dd5b2cb", "mmap above 32 MiB"),
    ("passes_issue39_round4_after", "round 4, after", "dd5b2cb", "glibc default"),
    ("passes_issue39_round5_before", "round 5, before", "d284a6b", "no mmap"),
    ("passes_issue39_round5_after", "round 5, after", "92d8b80", "no mmap"),
    ("passes_issue39_round5_after_rerun", "round 5, after (rerun)", "dfe609d", "no mmap"),
    ("passes_issue39_round7", "round 7, again (a new machine)", "737c534", "no mmap"),
    ("passes_issue39_round8_before", "round 8, before", "45efe23", "no mmap"),
    ("passes_issue39_round8_after", "round 8, after", "0f67193", "no mmap"),
    ("passes_issue39_round8_after_rerun", "round 8, after (rerun)", "66d8ce5", "no mmap"),
)
#: Issue 39's targets for the defaults: passes per element by mode, and the ratio to LAMB.
TARGETS = {False: 10.0, True: 8.0}
RATIO_TARGET = 0.75
MODE = {False: "graph", True: "XLA"}


def _over_lamb(stat):
    """The defaults' GSNR part over LAMB's whole update, from one statistic's numbers."""
    return stat["gsnr_default_passes"] / stat["lamb_passes"]


def _cells(row):
    m, n = row["median"], row["min"]

    def both(key):
        return f"{m[key]:.1f} ({n[key]:.1f})"

    ratio = f"{_over_lamb(m):.2f} ({_over_lamb(n):.2f})"
    return [
        both("gsnr_default_passes"),
        ratio,
        both("gsnr_nostats_passes"),
        both("gsnr_passes"),
        both("lamb_passes"),
    ]


def _verdict(row):
    m = row["median"]
    passes = m["gsnr_default_passes"] <= TARGETS[row["jit_compile"]]
    ratio = _over_lamb(m) <= RATIO_TARGET
    return f"passes {'met' if passes else 'not met'}, ratio {'met' if ratio else 'not met'}"


def render(ctx, lines):
    if ctx.quick:
        return
    runs = [(load(os.path.join(RESULTS, stem + ".json")), *rest) for stem, *rest in RUNS]
    runs = [r for r in runs if r[0]]
    if not runs:
        return
    lines += [
        "## The GSNR step's element passes (issue 39)",
        "",
        "`benchmarks/passes.py --cpu_time` (BERT-tiny's 44 variable shapes, 4.38M elements, "
        "4 micro-batch groups on one device; one thread, process CPU time): the GSNR part of "
        "a VR-LAMB step, VR-LAMB minus LAMB in passes per element (one pass: one read and "
        "one write of every element), median over the repetitions (min-based in brackets). "
        f"Targets with the defaults: at most {TARGETS[False]:g} passes in graph mode and "
        f"{TARGETS[True]:g} under XLA, and at most {RATIO_TARGET} of LAMB's whole update. "
        "The allocator protocol matters on CPU: with glibc's default `mmap` of large "
        "temporaries every step zero-fills fresh pages, and a threshold of 32 MiB still left "
        "XLA's arena to `mmap` ([cost model](cost_model.md), sections 6.3 and 6.4); read the "
        "`no mmap` rows against the targets.",
        "",
        "| run | code | allocator | mode | defaults | defaults / LAMB | no diagnostics | "
        "diagnostics every step | LAMB's update | against the targets (medians) |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for doc, label, code, allocator in runs:
        for row in doc["rows"]:
            cells = [label, f"`{code}`", allocator, MODE[row["jit_compile"]]]
            cells += _cells(row) + [_verdict(row)]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    latest = runs[-1][0]
    parts = []
    for row in latest["rows"]:
        m = row["median"]
        parts.append(
            f"{MODE[row['jit_compile']]} {m['gsnr_default_passes']:.1f} passes per element "
            f"({_over_lamb(m):.2f} of LAMB's update)"
        )
    line = (
        "- The GSNR part of a VR-LAMB step with the defaults (`benchmarks/passes.py`, "
        f"{runs[-1][1]}, BERT-tiny's shapes, one device): " + "; ".join(parts) + "."
    )
    ctx.readme_lines.append(line)
    ctx.readme_short.append(line)
