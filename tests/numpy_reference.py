"""Independent float64 NumPy implementation of the VRGD spec (docs/spec.md) and of
the base update rules (Keras 3 SGD/Adam, Model Garden LAMB/LARS), for the tests.

Written from the spec and the published update rules, not from vrgd_tf's code.
"""

import re

import numpy as np

# The spec leaves "variance resolvable in float32" to the implementation; vrgd_tf documents
# s2 <= 16 * eps32 * k * mean(x^2) as "no noise estimate". Written out here on purpose.
EPS32 = 2.0**-23
NOISE_RTOL = 16.0 * EPS32


def gsnr_factor(xs, gamma):
    """xs: array [k, ...] of what each replica hands the optimizer. Returns (factor, S1)."""
    xs = np.asarray(xs, np.float64)
    k = xs.shape[0]
    s1 = xs.sum(0)
    if k == 1:
        return np.ones_like(s1), s1
    s2 = (xs * xs).sum(0)
    mean = s1 / k
    meansq = s2 / k
    var = meansq - mean**2
    with np.errstate(all="ignore"):
        defined = np.isfinite(mean) & np.isfinite(meansq) & (var > NOISE_RTOL * k * meansq)
        r = np.where(defined, mean**2 / np.where(defined, var, 1.0), 0.0)
    if defined.sum() == 0:
        return np.ones_like(s1), s1
    mu = r[defined].mean()
    if not (mu > 0 and np.isfinite(mu)):
        return np.ones_like(s1), s1
    factor = np.where(defined, np.clip(r / mu, gamma, 1.0), 1.0)
    return factor, s1


def gsnr_statistics(xs, gamma, applied=None):
    """(mean GSNR over defined elements or 0, fraction clipped at gamma, fraction at 1,
    mean factor applied, update norm ratio ||applied * S1|| / ||S1|| or 1 if S1 = 0):
    ``applied`` is the factor after smoothing (default: the raw one)."""
    xs = np.asarray(xs, np.float64)
    k = xs.shape[0]
    s1, s2 = xs.sum(0), (xs * xs).sum(0)
    mean, meansq = s1 / k, s2 / k
    var = meansq - mean**2
    with np.errstate(all="ignore"):
        defined = np.isfinite(mean) & np.isfinite(meansq) & (var > NOISE_RTOL * k * meansq)
        r = np.where(defined, mean**2 / np.where(defined, var, 1.0), 0.0)
    mu = r[defined].mean() if defined.any() else 0.0
    factor, _ = gsnr_factor(xs, gamma)
    usable = mu > 0 and np.isfinite(mu)
    at_gamma = (defined & (r / mu <= gamma)).mean() if usable and gamma < 1 else 0.0
    applied = factor if applied is None else np.asarray(applied, np.float64)
    plain = np.sqrt((s1 * s1).sum())
    ratio = np.sqrt(((applied * s1) ** 2).sum()) / plain if plain > 0 else 1.0
    return mu, at_gamma, (factor >= 1.0).mean(), applied.mean(), ratio


class FactorMomentum:
    """p_t = b3 p + (1 - b3) f, p_hat = p / (1 - b3^t) (spec section 3)."""

    def __init__(self, beta_3):
        self.beta_3 = beta_3
        self.p = None
        self.t = 0

    def __call__(self, factor):
        if self.beta_3 == 0.0:
            return factor
        if self.p is None:
            self.p = np.zeros_like(factor)
        self.t += 1
        self.p = self.beta_3 * self.p + (1 - self.beta_3) * factor
        return self.p / (1 - self.beta_3**self.t)


def _excluded(patterns, name):
    return any(re.search(p, name) for p in patterns or ())


def _trust(w_norm, u_norm, coef=1.0):
    if w_norm > 0 and u_norm > 0:
        return coef * w_norm / u_norm
    return 1.0


class SGD:
    def __init__(self, learning_rate, momentum=0.0, nesterov=False):
        self.lr, self.mom, self.nesterov = learning_rate, momentum, nesterov
        self.m = {}

    def step(self, name, w, g):
        if self.mom == 0:
            return w - self.lr * g
        m = self.m.get(name, np.zeros_like(w))
        m = m * self.mom - g * self.lr
        self.m[name] = m
        if self.nesterov:
            return w + m * self.mom - g * self.lr
        return w + m


class Adam:
    """Keras 3 Adam."""

    def __init__(self, learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
        self.lr, self.b1, self.b2, self.eps = learning_rate, beta_1, beta_2, epsilon
        self.m, self.v, self.t = {}, {}, {}

    def step(self, name, w, g):
        t = self.t.get(name, 0) + 1
        self.t[name] = t
        m = self.m.get(name, np.zeros_like(w)) * self.b1 + (1 - self.b1) * g
        v = self.v.get(name, np.zeros_like(w)) * self.b2 + (1 - self.b2) * g * g
        self.m[name], self.v[name] = m, v
        alpha = self.lr * np.sqrt(1 - self.b2**t) / (1 - self.b1**t)
        return w - alpha * m / (np.sqrt(v) + self.eps)


class Lamb:
    """You et al. 2020 Algorithm 2, as Model Garden's LAMB."""

    def __init__(
        self,
        learning_rate,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        weight_decay_rate=0.0,
        exclude_from_weight_decay=None,
        exclude_from_layer_adaptation=None,
    ):
        self.lr, self.b1, self.b2, self.eps = learning_rate, beta_1, beta_2, epsilon
        self.wd = weight_decay_rate
        self.ex_wd = exclude_from_weight_decay
        self.ex_la = exclude_from_layer_adaptation or exclude_from_weight_decay
        self.m, self.v, self.t = {}, {}, {}

    def step(self, name, w, g):
        t = self.t.get(name, 0) + 1
        self.t[name] = t
        m = self.m.get(name, np.zeros_like(w)) * self.b1 + (1 - self.b1) * g
        v = self.v.get(name, np.zeros_like(w)) * self.b2 + (1 - self.b2) * g * g
        self.m[name], self.v[name] = m, v
        update = (m / (1 - self.b1**t)) / (np.sqrt(v / (1 - self.b2**t)) + self.eps)
        if not _excluded(self.ex_wd, name):
            update = update + self.wd * w
        ratio = 1.0
        if not _excluded(self.ex_la, name):
            ratio = _trust(np.linalg.norm(w), np.linalg.norm(update))
        return w - ratio * self.lr * update


class Lars:
    """Model Garden's LARS, classic momentum."""

    def __init__(
        self,
        learning_rate,
        momentum=0.9,
        weight_decay_rate=0.0,
        eeta=0.001,
        nesterov=False,
        exclude_from_weight_decay=None,
        exclude_from_layer_adaptation=None,
    ):
        self.lr, self.mom, self.wd, self.eeta = learning_rate, momentum, weight_decay_rate, eeta
        self.nesterov = nesterov
        self.ex_wd = exclude_from_weight_decay
        self.ex_la = exclude_from_layer_adaptation or exclude_from_weight_decay
        self.v = {}

    def step(self, name, w, g):
        if self.wd and not _excluded(self.ex_wd, name):
            g = g + self.wd * w
        ratio = 1.0
        if not _excluded(self.ex_la, name):
            ratio = _trust(np.linalg.norm(w), np.linalg.norm(g), self.eeta)
        lr = self.lr * ratio
        v = self.mom * self.v.get(name, np.zeros_like(w)) + lr * g
        self.v[name] = v
        update = self.mom * v + lr * g if self.nesterov else v
        return w - update


class VRGD:
    """A VR optimizer: per variable, factor -> momentum -> u = p_hat * S1 -> base step."""

    def __init__(self, base, gamma, beta_3):
        self.base, self.gamma, self.beta_3 = base, gamma, beta_3
        self.mom = {}
        self.factors = {}

    def step(self, name, w, per_replica_grads):
        factor, s1 = gsnr_factor(per_replica_grads, self.gamma)
        k = np.asarray(per_replica_grads).shape[0]
        if k > 1:
            factor = self.mom.setdefault(name, FactorMomentum(self.beta_3))(factor)
        self.factors[name] = factor
        return self.base.step(name, np.asarray(w, np.float64), factor * s1)


def split_half_reliability(xs, k_a, min_pairs=3):
    """Split-half reliability of one variable's GSNR (docs/spec.md section 4), from the raw
    samples ``xs`` ``[k, ...]``: half A is ``xs[:k_a]``, half B the rest. Returns
    ``(reliability, rho, num_pairs, defined)``; reliability and rho are 0 when undefined."""
    xs = np.asarray(xs, np.float64).reshape(xs.shape[0], -1)
    k = xs.shape[0]
    total_s2 = (xs * xs).sum(0)
    logs, masks = [], []
    for half in (xs[:k_a], xs[k_a:]):
        k_h = half.shape[0]
        with np.errstate(all="ignore"):
            mean, var = half.mean(0), half.var(0)  # biased: the half's noise is k_h * var
            defined = (k_h * var > NOISE_RTOL * k * total_s2) & (mean * mean > 0) & (k_h >= 2)
            logs.append(np.log(np.where(defined, mean * mean / np.where(defined, var, 1.0), 1.0)))
        masks.append(defined)
    pair = masks[0] & masks[1]
    n = int(pair.sum())
    if n < min_pairs:
        return 0.0, 0.0, n, False
    a, b = logs[0][pair], logs[1][pair]
    if n * a.var() <= 1e-5 * (a * a).sum() or n * b.var() <= 1e-5 * (b * b).sum():
        return 0.0, 0.0, n, False
    rho = float(np.corrcoef(a, b)[0, 1])
    return 2 * rho / (1 + abs(rho)), rho, n, True
