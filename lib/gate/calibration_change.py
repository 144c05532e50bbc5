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
After a change found, the search starts again on the runs since it, each kind refitted there
(binary segmentation). A rise over the lower SUSPECT_Z / SUSPECT_LR after the latest change is
*suspected*: it may only widen the bound.
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


def find_change(x, cens, codes, fits: dict | None = None) -> dict:
    """The latest change in a scope's runs (x, cens, integer kind codes, in time order), and a rise
    suspected after it. fits: kind_fits of these runs, when already made.

    A change the score scan or the stop surge finds; then the search starts again on the runs after
    it, each kind refitted on them (binary segmentation): the runs since a change, scored against
    the level before it, would otherwise look like further changes. Returns {"change", "suspect"},
    each None or {"since" (index of its first run), "by" ("scores" or "stops")}."""
    x = np.asarray(x, dtype=float)
    cens = np.asarray(cens, dtype=bool)
    codes = np.asarray(codes)
    fits = kind_fits(x, cens, codes) if fits is None else fits
    mu, sigma = _per_run(fits, codes)
    keep = np.isfinite(mu)
    none = {"change": None, "suspect": None}
    if keep.sum() < CHANGE_MIN_BEFORE + CHANGE_MIN_RUNS:
        return none
    idx = np.flatnonzero(keep)
    xk, ck, kk = x[keep], cens[keep], codes[keep]
    u = scores(xk, ck, mu[keep], sigma[keep])
    min_shift = CHANGE_MIN_SHIFT / (float(np.median(sigma[keep])) if len(fits) > 1 else next(iter(fits.values()))[1])
    splits, z = _split_z(u, min_shift)
    found, _ = _pick(splits, z, SCORE_Z_UP, SCORE_Z_DOWN)
    by = "scores"
    surge, lr = stop_surge(ck, kk)
    if found is None and surge is not None:
        found, by = surge, "stops"
    if found is not None:
        later = find_change(xk[found:], ck[found:], kk[found:])
        if later["change"] is not None:
            return {k: None if v is None else {**v, "since": int(idx[found + v["since"]])} for k, v in later.items()}
        suspect = later["suspect"]
        return {"change": {"since": int(idx[found]), "by": by},
                "suspect": None if suspect is None else {**suspect, "since": int(idx[found + suspect["since"]])}}
    found, _ = _pick(splits, z, SUSPECT_Z, math.inf)
    if found is None and lr >= SUSPECT_LR:
        found, by = stop_surge(ck, kk, SUSPECT_LR)[0], "stops"
    return {"change": None, "suspect": None if found is None else {"since": int(idx[found]), "by": by}}


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
                 fit=None) -> dict:
    """The bound of one team × kind after the latest change in its cost ratio, and after a rise
    suspected since (each None when there is none).

    x, cens: the kind's runs in time order; keys: their order keys (comparable with the team's);
    team: (x, cens, kind codes, keys, this kind's code) of the team's runs in time order, to pool a
    change the kinds share; fit: the Tobit (μ, σ) of exactly these runs when already made; start: a
    previous fit of nearly the same runs, to converge faster.
    Of the changes found in the kind's runs and in the team's, the latest counts; one found in the
    team's runs only when the kind's runs since it (CHANGE_MIN_RUNS or more) are explained at least
    as well by the team's shift as by none. Returns {"change", "suspect"}, each None or {"since"
    (index of the kind's first run after it; all its runs when none yet), "by", "pooled" (found in
    the team's runs), "runs_after" and "stops_after" (of the runs it was found in), "since_key" (the
    key of the first of them), "q", "median", "delta", "fit"}."""
    x, cens = np.asarray(x, dtype=float), np.asarray(cens, dtype=bool)
    own_codes = np.zeros(len(x), dtype=int)
    if fit is not None and len(x) >= CHANGE_MIN_BEFORE and (~cens).sum() >= MIN_UNCENSORED_FOR_TOBIT:
        own_fit = {0: (fit[0], max(fit[1], 1e-3))}
    else:
        own_fit = kind_fits(x, cens, own_codes, start={0: start} if start else None)
    streams = [(x, cens, own_codes, keys, 0, False)]
    if team is not None and keys is not None:
        tx, tc, tk, tkeys, code = team
        streams.append((np.asarray(tx, dtype=float), np.asarray(tc, dtype=bool), np.asarray(tk), tkeys, code, True))
    found = {"change": [], "suspect": []}
    for stream in streams:
        got = find_change(*stream[:3], own_fit if not stream[5] else None)
        for what in found:
            if got[what] is not None:
                found[what].append((got[what], stream))
    latest = None
    result = {"change": None, "suspect": None}
    for what in ("change", "suspect"):
        # the latest first; a suspected rise only after the change that counts
        ranked = sorted(found[what], key=lambda f: f[1][3][f[0]["since"]] if f[1][3] is not None else f[0]["since"])
        while ranked:
            info, stream = ranked.pop()
            key = stream[3][info["since"]] if stream[3] is not None else info["since"]
            if latest is not None and not key > latest:
                break
            b = _bound_after(x, cens, keys, info, stream, level)
            if b is not None:
                result[what] = b
                latest = key if what == "change" else latest
                break
    return result


def _bound_after(x, cens, keys, info: dict, stream: tuple, level: float) -> dict | None:
    """change_bound's answer for one change found in `stream` (the kind's runs or the team's), or
    None when it cannot bound this kind (no fit before it) or, found in the team's runs, the kind's
    own runs since it fit no shift better than the team's."""
    sx, sc, sk, skeys, code, pooled = stream
    if pooled:
        since = int(np.searchsorted(np.asarray(keys), skeys[info["since"]], side="left"))
    else:
        since = info["since"]
    b = shifted(sx, sc, sk, info["since"], code, level)
    if b is None:
        return None
    if pooled and len(x) - since >= CHANGE_MIN_RUNS and not shift_explains(x[since:], cens[since:], *b["fit"],
                                                                           b["delta"]):
        return None
    return {**b, "since": since, "by": info["by"], "pooled": pooled, "runs_after": len(sc) - info["since"],
            "stops_after": int(np.sum(sc[info["since"]:])),
            "since_key": skeys[info["since"]] if skeys is not None else None}
