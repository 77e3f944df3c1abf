"""Mechanistic checks (a)-(d) of the Fashion-MNIST evidence protocol (studies/evidence/ROUND2_PROTOCOL.md),
run by ``python3 studies/evidence/round2.py --phases=mechanistic`` (minutes, one process).

(a) Null calibration: the factor statistics (vrgd_tf.gsnr, the library's own math) for pure
    noise, replica gradients i.i.d. N(0, 1) (true GSNR 0), at k = 8 (and 32): the values a
    factor with no signal in it takes; drawn as reference lines in the plots.
(b) Is the factor informative: at 4 checkpoints of a base (Momentum) run at batch 4096, a
    reference GSNR per element from 256 micro-batches of 64 examples (mean**2 / variance of
    the micro-batch gradients, ddof 1), and the Spearman rank correlation per layer
    (``scipy.stats.spearmanr``) of the k = 8 and k = 32 factors of a fresh batch of 4096
    (8 groups of 512, 32 groups of 128) with it; 3 batches per checkpoint, mean reported.
    Only elements with a GSNR in both are ranked: a dead unit (zero gradient on every
    example) has factor 1 (undefined GSNR) and reference 0; their fraction is recorded.
(c) Critical batch B_simple = tr(Sigma) / |G|**2 (McCandlish et al. 2018, "An empirical model
    of large-batch training", eq. 2.8) from the same 256 micro-batch gradients: per-example
    covariance trace tr(Sigma) = 64 * sum of the micro-batch variances, |G|**2 = |mean|**2 -
    tr(Sigma) / 16384 (bias-corrected).
(d) The paper's linear-regression toy (W_i = i, init 0, 100 steps, B = 2048): d = 10,
    x ~ N(0, I), y = W . x + N(0, 1), loss 0.5 (w . x - y)**2 averaged over the batch, plain
    SGD with the VR factor from vrgd_tf.gsnr on k groups; the final excess loss
    |w - W|**2 (mean over 5 seeds) for gamma in {0.01 .. 1} at k = 64 and for k in
    {2 .. 1024} at gamma = 0.1, at three learning rates. The paper does not give d, the
    noise or the learning rate: these are our choices, stated here.
"""

import time

import numpy as np

NULL_ELEMENTS = 200_000
CHECKPOINT_EPOCHS = (0, 3, 15, 30)  # of a 30-epoch run: init, end of warm-up, mid, end
REF_MICRO = 256
REF_SIZE = 64
K_VALUES = (8, 32)
DRAWS = 3
TOY_GAMMAS = (0.01, 0.02, 0.04, 0.1, 0.2, 0.4, 1.0)
TOY_KS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
TOY_LRS = (0.01, 0.05, 0.2, 1.0)
TOY_SEEDS = 5


def _factors(s1, s2, sizes, k, gamma):
    import tensorflow as tf

    from vrgd_tf.gsnr import statistics

    factor, stats = statistics.gsnr_factors_flat(
        tf.constant(s1, tf.float32), tf.constant(s2, tf.float32), sizes, k, gamma
    )
    return factor.numpy(), stats.numpy()


def null_calibration(gamma, log):
    from vrgd_tf import gsnr

    rng = np.random.default_rng(0)
    out = {}
    for k in K_VALUES:
        xs = rng.standard_normal((k, NULL_ELEMENTS)).astype(np.float32)
        _, stats = _factors(xs.sum(0), (xs * xs).sum(0), [NULL_ELEMENTS], k, gamma)
        out[str(k)] = dict(zip(gsnr.STATISTICS_FIELDS, (round(float(v), 6) for v in stats[0])))
        log(f"(a) null k={k}: {out[str(k)]}")
    return out


def _grad_fn(model):
    import tensorflow as tf

    @tf.function
    def grads(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        g = tape.gradient(loss, model.trainable_variables)
        return tf.concat([tf.reshape(t, [-1]) for t in g], 0)

    return grads


def _group_grads(grads, x, y, idx, groups):
    """float64 [groups, N]: the mean-loss gradient of each of ``groups`` equal slices of
    ``idx`` (``x``, ``y`` NumPy arrays)."""
    per = len(idx) // groups
    return np.stack(
        [
            grads(x[idx[i * per : (i + 1) * per]], y[idx[i * per : (i + 1) * per]])
            .numpy()
            .astype(np.float64)
            for i in range(groups)
        ]
    )


def informative_and_critical(data, gamma, lr, log):
    """Checks (b) and (c) along a base Momentum run at batch 4096."""
    import keras
    import studylib
    from scipy import stats as sps

    batch = 4096
    strategy = studylib.strategy_for(8)

    def make_opt(schedule):
        return studylib.make_optimizer("momentum", "base", schedule)

    trainer = studylib.Trainer(strategy, studylib.fashion_cnn, make_opt)
    n = data["x"].shape[0]
    spe = n // batch
    trainer.reset(studylib.init_weights(studylib.fashion_cnn, 0), lr, 3 * spe, 30 * spe)
    probe = studylib.fashion_cnn()
    grads = _grad_fn(probe)
    names = [v.path for v in trainer.model.trainable_variables]
    sizes = [int(np.prod(v.shape)) for v in trainer.model.trainable_variables]
    bounds = np.cumsum([0] + sizes)
    x, y = data["tf_x"], data["tf_y"]
    rng = np.random.default_rng(12345)
    out = []
    done = 0
    for epoch in CHECKPOINT_EPOCHS:
        for e in range(done, epoch):
            perm = np.random.default_rng([0, e]).permutation(n).astype(np.int32)
            trainer.train_steps(x, y, perm, 0, batch, spe)
        done = epoch
        probe.set_weights(trainer.model.get_weights())
        t0 = time.time()
        idx = rng.permutation(n)[: REF_MICRO * REF_SIZE].astype(np.int32)
        ref = _group_grads(grads, data["x"], data["y"], idx, REF_MICRO)  # [256, N]
        mean = ref.mean(0)
        var = ref.var(0, ddof=1)
        ref_gsnr = mean**2 / np.maximum(var, 1e-300)
        tr_sigma = REF_SIZE * var.sum()
        g2 = float(mean @ mean) - tr_sigma / (REF_MICRO * REF_SIZE)
        b_simple = tr_sigma / g2 if g2 > 0 else float("inf")
        layer_b = {}
        for name, a, b in zip(names, bounds[:-1], bounds[1:]):
            lg2 = float(mean[a:b] @ mean[a:b]) - REF_SIZE * var[a:b].sum() / (REF_MICRO * REF_SIZE)
            layer_b[name] = round(float(REF_SIZE * var[a:b].sum() / lg2), 1) if lg2 > 0 else None
        rho = {str(k): {nm: [] for nm in names} for k in K_VALUES}
        rho_r = {str(k): {nm: [] for nm in names} for k in K_VALUES}
        for _ in range(DRAWS):
            idx = rng.permutation(n)[:batch].astype(np.int32)
            g32 = _group_grads(grads, data["x"], data["y"], idx, 32)
            for k in K_VALUES:
                gk = g32.reshape(k, 32 // k, -1).mean(1)
                s1, s2 = gk.sum(0), (gk * gk).sum(0)
                factor, _ = _factors(s1, s2, sizes, k, gamma)
                noise = k * s2 - s1**2
                with np.errstate(all="ignore"):
                    r = s1**2 / noise
                # Only elements with a GSNR in both: a dead unit (gradient 0 on every
                # example) has factor 1 (undefined) and reference 0, a tie that says
                # nothing about the factor's information.
                both = (var > 0) & (noise > 1e-6 * np.maximum(k * s2, 1e-300))
                for name, a, b in zip(names, bounds[:-1], bounds[1:]):
                    m = both[a:b]
                    if m.sum() < 3:
                        continue
                    rho[str(k)][name].append(sps.spearmanr(factor[a:b][m], ref_gsnr[a:b][m])[0])
                    rho_r[str(k)][name].append(sps.spearmanr(r[a:b][m], ref_gsnr[a:b][m])[0])
        val_acc, _ = trainer.evaluate(
            keras.ops.convert_to_tensor(data["x_val"]), keras.ops.convert_to_tensor(data["y_val"])
        )
        rec = {
            "epoch": epoch,
            "step": epoch * spe,
            "val_acc": round(100 * val_acc, 2),
            "ref_median_gsnr": {
                name: float(np.median(ref_gsnr[a:b]))
                for name, a, b in zip(names, bounds[:-1], bounds[1:])
            },
            "spearman_factor": {
                k: {nm: _mean(v) for nm, v in per.items()} for k, per in rho.items()
            },
            "spearman_gsnr": {
                k: {nm: _mean(v) for nm, v in per.items()} for k, per in rho_r.items()
            },
            "frac_dead": {
                name: round(float(np.mean(var[a:b] == 0)), 4)
                for name, a, b in zip(names, bounds[:-1], bounds[1:])
            },
            "tr_sigma": float(tr_sigma),
            "grad_norm2": g2,
            "b_simple": round(float(b_simple), 1),
            "b_simple_per_layer": layer_b,
            "seconds": round(time.time() - t0, 1),
        }
        log(
            f"(b,c) epoch {epoch}: val {rec['val_acc']}%, B_simple {rec['b_simple']}, "
            f"spearman k=8 {rec['spearman_factor']['8']}, k=32 {rec['spearman_factor']['32']}"
        )
        out.append(rec)
    return {"batch": batch, "peak_lr": lr, "seed": 0, "variables": names, "checkpoints": out}


def _mean(v):
    v = [x for x in v if x is not None and np.isfinite(x)]
    return round(float(np.mean(v)), 4) if v else None


def toy(log, previous=None):
    """Check (d): the linear-regression toy; returns the sweep results (the learning rates
    already in ``previous`` are kept, not rerun)."""
    d, batch, steps = 10, 2048, 100
    w_true = np.arange(1, d + 1, dtype=np.float64)

    def run(k, gamma, lr, seed):
        rng = np.random.default_rng(seed)
        w = np.zeros(d)
        for _ in range(steps):
            x = rng.standard_normal((batch, d))
            y = x @ w_true + rng.standard_normal(batch)
            e = x @ w - y
            per = (e[:, None] * x) / batch  # each example's share of the mean-loss gradient
            if k is None:
                u = per.sum(0)
            else:
                gk = per.reshape(k, batch // k, d).sum(1)
                s1, s2 = gk.sum(0), (gk * gk).sum(0)
                factor, _ = _factors(s1, s2, [d], k, gamma)
                u = factor.astype(np.float64) * s1
            w = w - lr * u
        return float(np.sum((w - w_true) ** 2))

    out = {"d": d, "batch": batch, "steps": steps, "seeds": TOY_SEEDS, "by_lr": {}}
    out["by_lr"].update((previous or {}).get("by_lr", {}))
    for lr in TOY_LRS:
        if str(lr) in out["by_lr"]:
            continue
        base = np.mean([run(None, 1.0, lr, s) for s in range(TOY_SEEDS)])
        gam = {
            str(g): float(np.mean([run(64, g, lr, s) for s in range(TOY_SEEDS)]))
            for g in TOY_GAMMAS
        }
        ks = {
            str(k): float(np.mean([run(k, 0.1, lr, s) for s in range(TOY_SEEDS)])) for k in TOY_KS
        }
        best_g = min(gam, key=gam.get)
        best_k = min(ks, key=ks.get)
        out["by_lr"][str(lr)] = {
            "base_excess": float(base),
            "gamma_sweep_k64": gam,
            "k_sweep_gamma0.1": ks,
            "best_gamma": float(best_g),
            "best_k": int(best_k),
        }
        log(
            f"(d) lr {lr}: base {base:.4g}, best gamma {best_g} ({gam[best_g]:.4g}), "
            f"best k {best_k} ({ks[best_k]:.4g})"
        )
    return out


def run_all(state, flags_, save):
    """Runs the checks not yet in ``state`` (a dict saved by ``save()`` after each)."""
    import studylib
    import tensorflow as tf
    from absl import logging

    def log(msg):
        logging.info(msg)
        print(msg, flush=True)

    gamma = flags_.gamma
    state["gamma"] = gamma
    if "null" not in state:
        state["null"] = null_calibration(gamma, log)
        save()
    if "toy" not in state or len(state["toy"]["by_lr"]) < len(TOY_LRS):
        t0 = time.time()
        seconds = (state.get("toy") or {}).get("seconds", 0.0)
        state["toy"] = toy(log, state.get("toy"))
        state["toy"]["seconds"] = round(seconds + time.time() - t0, 1)
        save()
    if "informative" not in state:
        data = studylib.prepare(studylib.load_fashion_mnist(flags_.data_dir))
        data["tf_x_val"] = tf.constant(data["x_val"])
        t0 = time.time()
        # The base rate at 4096 before tuning: the registered batch-256 centre (momentum
        # 0.05) x sqrt(16) = 0.2.
        state["informative"] = informative_and_critical(data, gamma, 0.2, log)
        state["informative"]["seconds"] = round(time.time() - t0, 1)
        save()
