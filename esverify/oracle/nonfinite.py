"""Our side of the rows with non-finite rewards: the references' own arithmetic, NaN and infinities kept.

esverify's trainer refuses a NaN or infinite reward, and a non-finite
coefficient, before changing anything (docs/trainer.md): one bad reward
would poison every weight. The references refuse nothing: a reward
function that divides by zero hands them a NaN, and they z-score it and
update with it. The `nan` and `inf` reward populations
(esverify.oracle.rewards) therefore check what a reference does then
against that arithmetic carried out on our side: the z-scores
`(r - mean) / (std + 1e-8)` in f64 with numpy's mean and std
(docs/numerics.md §2; a NaN anywhere makes every coefficient NaN, an
infinity makes the mean infinite and the std NaN), then the update of
our profile with those coefficients as they are (docs/numerics.md §3), so
that the reference's NaN weights are compared bit for bit with ours.
"""
from __future__ import annotations

import numpy as np


def zscore(rewards) -> tuple[np.ndarray, float, float]:
    """(coefficients f64 (N,), mean, std) of z-score shaping on `rewards` as the references compute it,
    whatever the values: numpy's mean and std (ddof 0) of the f64 array, then (r - mean) / (std + 1e-8)
    element-wise in f64; no error for NaN or infinities (numpy's invalid-value warnings silenced)."""
    r = np.ascontiguousarray(np.asarray(rewards, dtype=np.float64))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        mean, std = np.mean(r), np.std(r)
        return (r - mean) / (std + 1e-8), float(mean), float(std)


def mean_reward(values) -> float:
    """esverify.es.schedule.mean_reward's arithmetic (``float(numpy.mean(values))``, f64) without its refusal of
    a NaN or infinite reward."""
    with np.errstate(all="ignore"):
        return float(np.mean(np.asarray(values, dtype=np.float64)))


def batch_weighted_mean(batches) -> float:
    """esverify.es.schedule.batch_weighted_mean's arithmetic (per mini-batch numpy's mean times its size, summed
    in Python floats in batch order, over the count) without its refusal of a non-finite reward."""
    total, count = 0.0, 0
    for batch in batches:
        r = np.asarray(batch, dtype=np.float64)
        with np.errstate(all="ignore"):
            total += float(np.mean(r)) * r.size
        count += r.size
    return total / count


def update(trainer, coeffs, as_written=None) -> None:
    """theta += (alpha / N) sum_n C_n q(eps_n) on `trainer` (an esverify.es.Trainer, no member active) with the
    f64 coefficients `coeffs` as they are, NaN and infinities included, without advancing the iteration. For
    the non-finite rows only: every other row goes through Trainer.update and its checks.

    as_written: the reference's own update in torch calls on whole tensors (its adapter's
    `nonfinite_update`: update(params, noise, coeffs, alpha, population)), where a reference has one: which
    NaN a weight ends with depends on the torch kernels that produce it, so the profile's chunks and
    kernels, exact for finite values, need not give the reference's NaN bits. The noise it is handed is
    our trainer's (the contract stream of each member and slot, or torch's under native noise) rounded to
    the parameter's dtype. Without one (or with antithetic pairs or decay): `Trainer.update`'s arithmetic
    (the same profile calls per slot and chunk, antithetic folding, anchored decay) without its refusal."""
    cfg = trainer.config
    if as_written is not None and not cfg.antithetic and not cfg.decay_on:
        def noise(member, slot):
            t = trainer.slots[slot][1]
            eps = trainer._draw(member, slot, 0, t.numel(), t.device)
            return eps.reshape(t.shape).to(t.dtype)
        as_written([t for _, t in trainer.slots], noise, [float(v) for v in np.asarray(coeffs, np.float64)],
                   cfg.alpha, cfg.population)
        return
    c = np.asarray(coeffs, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        terms = [(2 * k, float(c[2 * k] - c[2 * k + 1])) for k in range(cfg.population // 2)] if cfg.antithetic \
            else [(n, float(v)) for n, v in enumerate(c)]
    trainer.apply_terms(terms)
