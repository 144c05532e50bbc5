"""Following a change in a team's cost ratio, with runs stopped at their budget as evidence
(docs/rules.md, Calibration: following a change).

A scope's runs come in time order (admitted, else ended): log ratio or stop value x, stopped flag,
kind code. Each kind's location μ and scale σ are its Tobit fit. Two tests look for the latest change:
- the score scan: each run's score for the location — a finished run (x - μ) / σ, a stopped one
  λ((x - μ) / σ), what it is expected to have needed beyond μ given it needed more than x — and the
  split whose two sides' mean scores differ by SCORE_Z_UP standard errors for a rise (SCORE_Z_DOWN
  for a fall): the mean-shift scan of the earlier test, on scores, so a stopped run counts for what
  it says (the score test of the censored-normal likelihood);
- the stop surge: among the last STOP_RECENT runs, the split after which each kind stopped at its
  budget more often than before it, by a binomial log likelihood ratio of STOP_LR at least.
A rise over the lower SUSPECT_Z / SUSPECT_LR is *suspected*: it may only widen the bound.
Team × kind scopes also read the team's runs: a change found there is taken as the kind's too (a
new model family moves every kind) unless the kind's own runs since it fit no shift better.
After a change, each kind is refitted on its runs before it; one shift δ of every kind's location
comes from the runs since (its posterior under Jeffreys' prior, tobit.shift_posterior), and the
bound is the level quantile of N(μ + δ, σ² + var μ) mixed over that posterior.
"""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from lib.gate.tobit import erfc, location_info, log_survival, scores, shift_posterior, tobit_fit

CHANGE_Z = 4.0            # standard errors between the means of the two sides (the earlier test)
CHANGE_MIN_SHIFT = 0.15   # log ratio (about 16 %): smaller level changes are left to the window
CHANGE_MIN_RUNS = 3       # runs after a change before it can be called
CHANGE_MIN_BEFORE = 9     # runs before a change (its spread carries the shifted bound)
SCORE_Z_UP = 4.0          # standard errors between the mean scores of the two sides, for a rise
SCORE_Z_DOWN = 4.5        # for a fall: a fall found late only leaves the bound loose a while longer
STOP_LR = 8.0             # log likelihood ratio of a surge of budget stops
SUSPECT_Z = 3.0           # a rise this strong, not yet a change, may widen the bound
SUSPECT_LR = 6.0          # a surge of stops this strong, likewise
STOP_RECENT = 60          # the stop surge is looked for among the most recent runs
MIN_UNCENSORED_FOR_TOBIT = 5
_STD = NormalDist()


def _split_z(seg, min_shift: float):
    """(splits k, z of each): for each split with CHANGE_MIN_BEFORE values before and CHANGE_MIN_RUNS
    after, the difference of the two sides' means in standard errors of the pooled within-side
    spread, signed (after minus before); 0 where the means differ by less than min_shift."""
    n = len(seg)
    s1 = np.concatenate([[0.0], np.cumsum(seg)])
    s2 = np.concatenate([[0.0], np.cumsum(seg * seg)])
    k = np.arange(CHANGE_MIN_BEFORE, n - CHANGE_MIN_RUNS + 1)
    mean_a, mean_b = s1[k] / k, (s1[n] - s1[k]) / (n - k)
    within = (s2[k] - k * mean_a ** 2) + (s2[n] - s2[k] - (n - k) * mean_b ** 2)
    sd = np.sqrt(np.maximum(within, 0.0) / max(n - 2, 1)) + 1e-9
    shift = mean_b - mean_a
    z = shift / (sd * np.sqrt(1.0 / k + 1.0 / (n - k)))
    z[np.abs(shift) < min_shift] = 0.0
    return k, z


def _pick(k, z, z_up: float, z_down: float) -> tuple[int | None, float]:
    """The strongest split of _split_z's: strength = z / z_up for a rise, -z / z_down for a fall;
    (its index when the strength is 1 or more, else None; the strength)."""
    strength = np.where(z > 0, z / z_up, -z / z_down)
    best = int(np.argmax(strength))
    return (int(k[best]) if strength[best] >= 1.0 else None), float(strength[best])


def scan(values, min_shift: float, z_up: float = CHANGE_Z, z_down: float = CHANGE_Z) -> tuple[int | None, float]:
    """(index of the first value after the strongest change in mean, its strength), or (None, the
    best strength): see _split_z and _pick."""
    seg = np.asarray(values, dtype=float)
    if len(seg) < CHANGE_MIN_BEFORE + CHANGE_MIN_RUNS:
        return None, 0.0
    return _pick(*_split_z(seg, min_shift), z_up, z_down)


def segment(values, min_shift: float = CHANGE_MIN_SHIFT, z_up: float = CHANGE_Z,
            z_down: float = CHANGE_Z) -> int | None:
    """Index of the first value after the latest change in mean (binary segmentation: the strongest
    split, then again on the values after it), or None."""
    x = np.asarray(values, dtype=float)
    start, found = 0, None
    while True:
        k, _ = scan(x[start:], min_shift, z_up, z_down)
        if k is None:
            return found
        start += k
        found = start


def mean_change(r) -> int | None:
    """The earlier change test (method "mean"): the mean-shift segmentation of the log ratios
    themselves, a stopped run at its stop value (a lower bound on its ratio)."""
    return segment(r)


def _xlogx(v):
    """v·ln v for counts v ≥ 0 (0·ln 0 = 0), per element."""
    v = np.asarray(v, dtype=float)
    return v * np.log(np.maximum(v, 1.0))


def stop_surge(cens, codes, threshold: float = STOP_LR) -> tuple[int | None, float]:
    """(index of the first run of a surge of budget stops, its log likelihood ratio) among the splits
    with at most STOP_RECENT runs after them, or (None, the best ratio).

    For each split and kind, the binomial log likelihood ratio of "the kind's share of stops changed
    at the split" against "it stayed the same", summed over the kinds whose share went up. Two-sample:
    the share before is an estimate too, so a kind with few runs before cannot make a few stops look
    like a surge."""
    c = np.asarray(cens, dtype=bool)
    codes = np.asarray(codes)
    n = len(c)
    k = np.arange(max(CHANGE_MIN_BEFORE, n - STOP_RECENT), n - CHANGE_MIN_RUNS + 1)
    if not len(k):
        return None, 0.0
    lr = np.zeros(len(k))
    k0 = int(k[0])
    head_c, head_codes, tail_c, tail_codes = c[:k0], codes[:k0], c[k0:], codes[k0:]
    if not tail_c.any():
        return None, 0.0
    for code in np.unique(tail_codes).tolist():
        sel = tail_codes == code
        head = head_codes == code
        # stops and runs of this kind before each split, then after it
        cum_s = np.concatenate([[0], np.cumsum(tail_c & sel)]) + int(np.count_nonzero(head_c & head))
        cum_n = np.concatenate([[0], np.cumsum(sel)]) + int(np.count_nonzero(head))
        s_a, n_a = cum_s[k - k0], cum_n[k - k0]
        s_b, n_b = cum_s[-1] - s_a, cum_n[-1] - n_a
        # the maximised binomial log likelihoods, before + after - both together, as Σ ±x·ln x
        ratio = (_xlogx(s_a) + _xlogx(n_a - s_a) - _xlogx(n_a) + _xlogx(s_b) + _xlogx(n_b - s_b) - _xlogx(n_b)
                 - _xlogx(s_a + s_b) - _xlogx(n_a + n_b - s_a - s_b) + _xlogx(n_a + n_b))
        lr += np.where(s_b * n_a > s_a * n_b, ratio, 0.0)
    best = int(np.argmax(lr))
    return (int(k[best]) if lr[best] >= threshold else None), float(lr[best])


def kind_fits(x, cens, codes, upto: int | None = None, start: dict | None = None) -> dict:
    """{kind code: (μ, σ)} from each kind's runs among the first `upto` (all when None), for the kinds
    with CHANGE_MIN_BEFORE runs of which MIN_UNCENSORED_FOR_TOBIT finished. start: {code: (μ, σ)} of
    nearly the same runs, to converge faster."""
    x, cens, codes = x[:upto], cens[:upto], codes[:upto]
    fits = {}
    for code in np.unique(codes).tolist():
        sel = codes == code
        xs, cs = x[sel], cens[sel]
        done = xs[~cs]
        if len(xs) < CHANGE_MIN_BEFORE or len(done) < MIN_UNCENSORED_FOR_TOBIT:
            continue
        if cs.any():
            mu, sigma = tobit_fit(done, xs[cs], start=(start or {}).get(code))
        else:
            mu, sigma = float(done.mean()), float(done.std())
        fits[code] = (mu, max(sigma, 1e-3))
    return fits


def _per_run(fits: dict, codes):
    """(μ, σ) per run from the kinds' fits (NaN for a kind without one); codes are small integers ≥ 0."""
    size = max(int(codes.max()) + 1 if len(codes) else 0, max(fits, default=-1) + 1)
    table = np.full((size, 2), math.nan)
    for code, (mu, sigma) in fits.items():
        table[code] = (mu, sigma)
    per = table[codes]
    return per[:, 0], per[:, 1]


def find_change(x, cens, codes, fits: dict | None = None) -> dict | None:
    """The latest change in a scope's runs (x, cens, integer kind codes, in time order), or None.
    fits: kind_fits of these runs, when already made.

    Returns {"since" (index of its first run), "confirmed" (False: a rise only suspected), "by"
    ("scores" or "stops": which test found it)}."""
    x = np.asarray(x, dtype=float)
    cens = np.asarray(cens, dtype=bool)
    codes = np.asarray(codes)
    fits = kind_fits(x, cens, codes) if fits is None else fits
    mu, sigma = _per_run(fits, codes)
    keep = np.isfinite(mu)
    if keep.sum() < CHANGE_MIN_BEFORE + CHANGE_MIN_RUNS:
        return None
    idx = np.flatnonzero(keep)
    ck, kk = cens[keep], codes[keep]
    u = scores(x[keep], ck, mu[keep], sigma[keep])
    min_shift = CHANGE_MIN_SHIFT / (float(np.median(sigma[keep])) if len(fits) > 1 else next(iter(fits.values()))[1])
    splits, z = _split_z(u, min_shift)
    found, _ = _pick(splits, z, SCORE_Z_UP, SCORE_Z_DOWN)
    if found is not None:
        found += segment(u[found:], min_shift, SCORE_Z_UP, SCORE_Z_DOWN) or 0
    by, confirmed = "scores", True
    surge, lr = stop_surge(ck, kk)
    if surge is not None and (found is None or surge > found):
        found, by = surge, "stops"
    if found is None:
        confirmed = False
        found, _ = _pick(splits, z, SUSPECT_Z, math.inf)
        if found is None and lr >= SUSPECT_LR:
            found, by = stop_surge(ck, kk, SUSPECT_LR)[0], "stops"
    if found is None:
        return None
    return {"since": int(idx[found]), "confirmed": confirmed, "by": by}


def shift_explains(x, cens, mu: float, sigma: float, delta: float) -> bool:
    """Whether runs (of one kind, location μ and scale σ before a change) are at least as likely
    shifted by δ as not shifted at all."""
    def loglik(d):
        z = (np.asarray(x, dtype=float) - mu - d) / sigma
        return float(np.where(cens, log_survival(np.where(cens, z, 0.0)), -0.5 * z * z).sum())
    return loglik(delta) >= loglik(0.0)


def shifted(x, cens, codes, since: int, kind: int, level: float) -> dict | None:
    """The bound of kind `kind` after a change at `since`: each kind refitted on its runs before
    the change; the common shift δ of every kind's location from the runs since, with those fits'
    scales (tobit.shift_posterior); the bound is the `level` quantile of N(μ + δ, σ² + var μ)
    mixed over δ's posterior, so thin evidence (a few runs, all stopped at their budget) gives a
    wide bound and plenty a tight one. None when `kind` has no fit before the change.
    Returns {"q", "median" (log ratios), "delta" (the posterior's mode), "fit" (kind's μ, σ)}."""
    fits = kind_fits(x, cens, codes, upto=since)
    if kind not in fits:
        return None
    after = slice(since, None)
    mu, sigma = _per_run(fits, codes[after])
    ok = np.isfinite(mu)
    if not ok.any():
        return None
    grid, weight = shift_posterior(x[after][ok], cens[after][ok], mu[ok], sigma[ok])
    mu_k, sigma_k = fits[kind]
    mine = (codes[:since] == kind)
    var_mu = 1.0 / float(location_info(x[:since][mine], cens[:since][mine], mu_k, sigma_k).sum())
    spread = math.sqrt(sigma_k * sigma_k + var_mu)
    return {"q": mu_k + _mixture_quantile(grid, weight, spread, level),
            "median": mu_k + _mixture_quantile(grid, weight, spread, 0.5),
            "delta": float(grid[int(np.argmax(weight))]), "fit": (mu_k, sigma_k)}


def _mixture_quantile(centres, weight, spread: float, p: float) -> float:
    """The p-quantile of Σ w·N(centre, spread²), by bisection (to 1e-6 log-ratio units)."""
    z_p = _STD.inv_cdf(p)
    lo = float(centres.min()) + z_p * spread - 1e-9
    hi = float(centres.max()) + z_p * spread + 1e-9
    scale = spread * math.sqrt(2.0)
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        if float((weight * 0.5 * erfc((centres - mid) / scale)).sum()) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def change_bound(x, cens, level: float, *, keys=None, team: tuple | None = None, start=None,
                 fit=None) -> dict | None:
    """The bound of one team × kind after the latest change in its cost ratio, or None (no change
    found: the window's bound stands).

    x, cens: the kind's runs in time order; keys: their order keys (comparable with the team's);
    team: (x, cens, kind codes, keys, this kind's code) of the team's runs in time order, to pool a
    change the kinds share; fit: the Tobit (μ, σ) of exactly these runs when already made; start: a
    previous fit of nearly the same runs, to converge faster.
    A change found in the team's runs is taken as the kind's when it is later than the kind's own
    and the kind's runs since it (CHANGE_MIN_RUNS or more) are explained at least as well by the
    team's shift as by none. Returns {"since" (index of the kind's first run after the change; all
    its runs when none yet), "confirmed", "by", "pooled" (bool), "runs_after" and "stops_after" (of
    the runs the change was found in: the team's when pooled), "since_key" (the key of the first of
    them), "q", "median", "delta", "fit"}."""
    x, cens = np.asarray(x, dtype=float), np.asarray(cens, dtype=bool)
    own_codes = np.zeros(len(x), dtype=int)
    if fit is not None and len(x) >= CHANGE_MIN_BEFORE and (~cens).sum() >= MIN_UNCENSORED_FOR_TOBIT:
        own_fit = {0: (fit[0], max(fit[1], 1e-3))}
    else:
        own_fit = kind_fits(x, cens, own_codes, start={0: start} if start else None)
    found = []
    own = find_change(x, cens, own_codes, own_fit)
    if own is not None:
        found.append((own, False))
    if team is not None and keys is not None:
        tx, tc, tk, tkeys, code = team
        pooled = find_change(tx, tc, tk)
        if pooled is not None:
            found.append((pooled, True))
    # the latest confirmed change, else the latest suspected rise
    found.sort(key=lambda f: (f[0]["confirmed"], _key(f, keys, team)))
    while found:
        change, is_pooled = found.pop()
        if is_pooled:
            since = int(np.searchsorted(np.asarray(keys), tkeys[change["since"]], side="left"))
            b = shifted(np.asarray(tx, dtype=float), np.asarray(tc, dtype=bool), np.asarray(tk),
                        change["since"], code, level)
            if b is None or (len(x) - since >= CHANGE_MIN_RUNS and
                             not shift_explains(x[since:], cens[since:], *b["fit"], b["delta"])):
                continue
        else:
            since = change["since"]
            b = shifted(x, cens, own_codes, since, 0, level)
            if b is None:
                continue
        found_in = (tc, tkeys) if is_pooled else (cens, keys)
        return {**b, "since": since, "confirmed": change["confirmed"], "by": change["by"], "pooled": is_pooled,
                "runs_after": len(found_in[0]) - change["since"],
                "stops_after": int(np.sum(found_in[0][change["since"]:])),
                "since_key": found_in[1][change["since"]] if found_in[1] is not None else None}
    return None


def _key(found, keys, team):
    """The order key of the first run after a change found in the kind's (or the team's) runs."""
    change, is_pooled = found
    if is_pooled:
        return team[3][change["since"]]
    return keys[change["since"]] if keys is not None else change["since"]
