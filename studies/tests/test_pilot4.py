"""Round 4's pilot (studies/evidence/PILOT4.md): the plan's edge rule, the choice of the
batch and the LARS centring runs (pilot4_plan.py), on hand-made runs."""

import pilot4_plan as plan
import pytest


def _run(pair, batch, lr, val):
    return {
        "pair": pair,
        "batch": batch,
        "peak_lr": lr,
        "final": {"val_acc": val, "collapsed": val is None},
        "curve": [{"epoch": 1, "val_acc": 10.0}, {"epoch": 2, "val_acc": val or 10.0}],
    }


def _runs(vals, pair="momentum"):
    return {
        plan.run_key(pair, b, lr): _run(pair, b, lr, v)
        for b, per in vals.items()
        for lr, v in per.items()
    }


def test_layout_and_budget_follow_the_plan():
    assert plan.groups(8192) == 16 and plan.groups(16384) == 32
    assert 55000 // 8192 * plan.EPOCHS == 240 and 55000 // 8192 * plan.WARMUP_EPOCHS == 96
    assert plan.WARMUP_EPOCHS / plan.EPOCHS == pytest.approx(208 / 520)


def test_runs_alternate_then_extend_an_edge_once():
    vals = {
        8192: {1.6: 90.0, 3.2: 91.0, 6.4: 91.5, 12.8: 91.6},
        16384: {3.2: 88.0, 6.4: 89.0, 12.8: 88.5},
    }
    runs, order = {}, []
    while (nxt := plan.next_run(runs)) is not None and nxt[0] == "momentum":
        order.append(nxt[1:])
        runs.update(_runs({nxt[1]: {nxt[2]: vals[nxt[1]][nxt[2]]}}))
    assert order == [
        (8192, 1.6), (16384, 3.2), (8192, 3.2), (16384, 6.4), (8192, 6.4), (16384, 12.8),
        (8192, 12.8),
    ]  # fmt: skip
    assert plan.grid(runs, 8192) == ([1.6, 3.2, 6.4, 12.8], 12.8)  # edge again: no second
    assert plan.grid(runs, 16384) == ([3.2, 6.4, 12.8], 6.4)


@pytest.mark.parametrize(
    "best8, best16, chosen, beyond",
    [
        (92.3, 90.5, 16384, False),  # 8192 within 1 pp: the smallest in [1, 3] is 16384
        (91.0, 89.0, 8192, False),  # 8192 falls 1.88 pp
        (92.88 - 1.0, 85.0, 8192, False),  # exactly 1 pp counts
        (89.0, 80.0, 8192, True),  # none in [1, 3]: the smallest falling >= 1 pp, said so
        (92.5, 92.0, None, False),  # neither falls 1 pp: the regime is not reached
    ],
)
def test_choice_of_the_batch(best8, best16, chosen, beyond):
    runs = _runs(
        {8192: {1.6: 70.0, 3.2: best8, 6.4: 70.0}, 16384: {3.2: 60.0, 6.4: best16, 12.8: 60.0}}
    )
    d = plan.decision(runs)
    assert d["batch"] == chosen and d["beyond"] == beyond
    assert d["gap_pp"][8192] == pytest.approx(92.88 - best8)
    nxt = plan.next_run(runs)
    assert nxt == (None if chosen is None else ("lars", chosen, 1.25))


def test_collapse_counts_zero_and_lars_best_takes_the_lower_rate_on_a_tie():
    runs = _runs(
        {8192: {1.6: 80.0, 3.2: None, 6.4: 90.0}, 16384: {3.2: 80.0, 6.4: 89.0, 12.8: 70.0}}
    )
    assert plan.grid(runs, 8192) == ([1.6, 3.2, 6.4, 12.8], None)
    runs.update(_runs({8192: {12.8: 85.0}}))
    assert plan.decision(runs)["best"][8192] == (6.4, 90.0)
    assert plan.lars_best(runs) is None
    runs.update(_runs({8192: {1.25: 88.0, 2.5: 90.0, 5.0: 90.0, 10.0: 70.0}}, pair="lars"))
    assert plan.lars_best(runs) == (8192, 2.5, 90.0)
    assert plan.next_run(runs) is None


def test_section_reads_progress_decision_and_lars(tmp_path):
    import json

    from report import pilot4

    def write(runs):
        (tmp_path / plan.FILE).write_text(json.dumps({"runs": runs}))
        return pilot4.section(str(tmp_path), str(tmp_path / "img"), "img")

    for r in (runs := _runs({8192: {1.6: 90.0}})).values():
        r.update(warmup_steps=96, steps=240)
    text = write(runs)
    assert "- Momentum, batch 8192 (96 warm-up steps of 240, 16 groups of 512): 1.6 → 90.00" in text
    assert "(in progress: 1 of 3 runs)" in text and "Decision: pending" in text
    runs = _runs(
        {8192: {1.6: 88.0, 3.2: 91.0, 6.4: 90.0}, 16384: {3.2: 80.0, 6.4: 89.0, 12.8: 85.0}}
    )
    for r in runs.values():
        r.update(warmup_steps=96, steps=240)
    text = write(runs)
    assert "best 3.2, 1.88 pp below batch 256 (one seed)." in text
    assert (
        "**Decision (the plan's rule: the smallest batch 1-3 pp below batch 256's 92.88 %): batch 8192;"
        in text
    )
    assert "- LARS, batch 8192: no run yet (in progress: 0 of 4 runs)." in text
    assert (tmp_path / "img" / pilot4.PLOT).exists()
    runs = _runs(
        {8192: {1.6: 90.0, 3.2: 92.5, 6.4: 91.0}, 16384: {3.2: 90.0, 6.4: 92.0, 12.8: 91.0}}
    )
    for r in runs.values():
        r.update(warmup_steps=96, steps=240)
    assert "do not reach the regime" in write(runs)
    assert pilot4.section(str(tmp_path / "none"), str(tmp_path), "img") == ""
