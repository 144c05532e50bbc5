"""The censored normal calibration fits log cost ratios with (docs/rules.md, Calibration).

A run stopped at its budget or time limit only says its log ratio r exceeded its stop value c: it adds
log(1 - Φ(z)), z = (c - μ) / σ, to the likelihood where a finished run adds the normal log density
(Tobin 1958). Everything here is in log-ratio units; arrays are numpy, floats plain.
"""
from __future__ import annotations

import math

import numpy as np

_SQRT2PI = math.sqrt(2.0 * math.pi)


def erfc(x):
    """erfc over a numpy array (numpy has none): math.erfc element by element for small arrays
    (numpy's per-call overhead dominates there), else the Chebyshev fit of Press et al., *Numerical
    Recipes* (2nd ed., 1992, §6.2, erfcc), fractional error under 1.2e-7 everywhere, tails included."""
    x = np.asarray(x, dtype=float)
    if x.size <= _SMALL:
        return np.fromiter(map(math.erfc, x.ravel().tolist()), dtype=float, count=x.size).reshape(x.shape)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    ans = t * np.exp(poly)
    return np.where(x >= 0, ans, 2.0 - ans)


_SMALL = 256   # arrays up to this size: math.erfc per element is the faster


def mills(z):
    """Inverse Mills ratio λ(z) = φ(z) / (1 - Φ(z)) = E[Z - z | Z > z] + z, over an array: the
    expected standardised value of a run known only to exceed z."""
    z = np.asarray(z, dtype=float)
    return np.exp(-0.5 * z * z) / _SQRT2PI / np.maximum(0.5 * erfc(z / math.sqrt(2.0)), 1e-300)


def tobit_fit(done, cens, iterations: int = 200, *, start: tuple[float, float] | None = None,
              tol: float = 1e-9) -> tuple[float, float]:
    """Normal (μ, σ) of log ratios by maximum likelihood with right-censoring, via EM.

    Newton's method first, from `start` (the fit of nearly the same runs, e.g. a replay one run
    later) or else from the mean and spread of the values with stops at their stop value: it
    converges in a few steps where EM, slow under heavy censoring, takes dozens; EM if it fails."""
    d = np.asarray(done, dtype=float)
    c = np.asarray(cens, dtype=float)
    n = len(d) + len(c)
    if start is None:
        values = np.concatenate([d, c])
        start = (float(values.mean()), max(float(values.std()), 1e-3))
    if len(c):
        fit = _tobit_newton(d, c, start, tol)
        if fit is not None:
            return fit
    mu, sigma = start
    s1_done, s2_done = float(d.sum()), float((d * d).sum())
    for _ in range(iterations):
        s1, s2 = s1_done, s2_done
        if len(c):
            lam = mills((c - mu) / sigma)
            s1 += float((mu + sigma * lam).sum())
            s2 += float((mu * mu + sigma * sigma + sigma * (c + mu) * lam).sum())
        new_mu = s1 / n
        new_sigma = math.sqrt(max(s2 / n - new_mu * new_mu, 1e-6))
        if abs(new_mu - mu) < tol and abs(new_sigma - sigma) < tol:
            mu, sigma = new_mu, new_sigma
            break
        mu, sigma = new_mu, new_sigma
    return mu, sigma


def _tobit_newton(d, c, start: tuple[float, float], tol: float, iterations: int = 30):
    """Newton's method on the censored-normal log likelihood from `start`; None when it does not
    converge to a maximum (then EM takes over). The finished runs enter through their count, sum and
    sum of squares only."""
    mu, sigma = start
    nd, s1, s2d = len(d), float(np.sum(d)), float(np.dot(d, d))
    for _ in range(iterations):
        if not (sigma > 1e-6 and math.isfinite(mu)):
            return None
        sum_rd = (s1 - nd * mu) / sigma                                  # Σ (d - μ) / σ
        sum_rd2 = (s2d - 2.0 * mu * s1 + nd * mu * mu) / (sigma * sigma)  # Σ ((d - μ) / σ)²
        z = (c - mu) / sigma
        lam = mills(z)
        k = lam * (lam - z)
        lam_s, lz, kz = float(lam.sum()), float(np.dot(lam, z)), float(np.dot(k, z))
        s2 = sigma * sigma
        g_mu = (sum_rd + lam_s) / sigma
        g_sigma = (-nd + sum_rd2 + lz) / sigma
        h_mm = -(nd + float(k.sum())) / s2
        h_ms = -(2.0 * sum_rd + kz + lam_s) / s2
        h_ss = (nd - 3.0 * sum_rd2 - float(np.dot(k * z, z)) - 2.0 * lz) / s2
        det = h_mm * h_ss - h_ms * h_ms
        if not (h_mm < 0 and det > 0):
            return None
        step_mu = (h_ss * g_mu - h_ms * g_sigma) / det
        step_sigma = (h_mm * g_sigma - h_ms * g_mu) / det
        mu, sigma = mu - step_mu, sigma - step_sigma
        if abs(step_mu) < tol and abs(step_sigma) < tol:
            return (float(mu), float(sigma)) if sigma > 1e-6 else None
    return None


def scores(x, cens, mu, sigma):
    """Each run's score for the location, in standard deviations: (x - μ) / σ for a finished run,
    λ((x - μ) / σ) for a run stopped at x (what it is expected to have needed beyond μ, given it
    needed more than x). Zero mean when the runs follow N(μ, σ²); mu and sigma may be per run."""
    z = (np.asarray(x, dtype=float) - mu) / sigma
    cens = np.asarray(cens, dtype=bool)
    z[cens] = mills(z[cens])
    return z


def location_info(x, cens, mu, sigma):
    """Fisher information about the location (per log-ratio unit², observed): 1 / σ² per finished run,
    λ(λ - z) / σ² per stopped run (less: a stop far under the location says little). Arrays per run."""
    z = (np.asarray(x, dtype=float) - mu) / sigma
    lam = mills(np.where(cens, z, 0.0))
    return np.where(cens, lam * (lam - z), 1.0) / (sigma * sigma)


def log_survival(z):
    """log(1 - Φ(z)) over an array, accurate in both tails."""
    z = np.asarray(z, dtype=float)
    return np.log(np.maximum(0.5 * erfc(z / math.sqrt(2.0)), 1e-300))


def shift_posterior(x, cens, mu, sigma, points: int = 121) -> tuple[np.ndarray, np.ndarray]:
    """(grid of shifts δ, posterior weights summing to 1) of the common shift of runs whose location
    was μ with scale σ (per run): the likelihood of the finished runs' values and of the stopped
    runs exceeding their stop values, times Jeffreys' prior √I(δ), I the observed information about
    δ. The prior keeps the posterior proper when every run stopped at its budget (the likelihood
    alone then only grows with δ); its mode is Firth's (1993) penalised estimate. A coarse pass over
    a wide span finds where the posterior is above 1e-9 of its peak; the grid spans that."""
    x = np.asarray(x, dtype=float)
    cens = np.asarray(cens, dtype=bool)
    mu = np.broadcast_to(np.asarray(mu, dtype=float), x.shape)
    sigma = np.broadcast_to(np.asarray(sigma, dtype=float), x.shape)
    d = x - mu
    top = float(sigma.max())
    grid = np.linspace(float(d.min()) - 4.0 * top, float(d.max()) + 6.0 * top, 41)
    for _ in range(3):
        ll = _shift_loglik(grid, x, cens, mu, sigma)
        live = np.flatnonzero(ll > ll.max() - 20.7)            # e^-20.7 ≈ 1e-9
        step = grid[1] - grid[0]
        if live[0] > 0 and live[-1] < len(grid) - 1:
            break
        grid = np.linspace(grid[0] - (4.0 * top if live[0] == 0 else 0.0),
                           grid[-1] + (6.0 * top if live[-1] == len(grid) - 1 else 0.0), 41)
    grid = np.linspace(grid[live[0]] - step, grid[live[-1]] + step, points)
    ll = _shift_loglik(grid, x, cens, mu, sigma)
    w = np.exp(ll - ll.max())
    return grid, w / w.sum()


def _shift_loglik(grid, x, cens, mu, sigma):
    """Log posterior (up to a constant) of each shift in `grid`: the censored-normal log likelihood
    of the runs plus ½ log I(δ)."""
    z = (x[None, :] - mu[None, :] - grid[:, None]) / sigma[None, :]
    done = ~cens
    ll = (-0.5 * z[:, done] ** 2).sum(axis=1)
    info = float((1.0 / sigma[done] ** 2).sum())
    if cens.any():
        zc = z[:, cens]
        surv = np.maximum(0.5 * erfc(zc / math.sqrt(2.0)), 1e-300)
        lam = np.exp(-0.5 * zc * zc) / _SQRT2PI / surv
        ll = ll + np.log(surv).sum(axis=1)
        info = info + (lam * (lam - zc) / sigma[cens] ** 2).sum(axis=1)
    return ll + 0.5 * np.log(info)
