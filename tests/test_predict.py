"""The scale study's model (xsa/studies/predict.py): it recovers known coefficients, its intervals widen with
the between-condition variance, and it refuses to fit before every axis varies."""

import math

import numpy as np
import pytest

from xsa.studies.predict import Condition, design_row, fit, pairs_to_test

TRUE = np.array([-0.006, 0.001, 0.0005, -0.0008])  # b0, bH, bD, bT


def grid(sigma=0.003, tau=0.0, n=8, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for h, d, t in [(1, 1.14, 512), (1, 3.43, 512), (1, 6.86, 512), (1, 13.7, 512), (2, 1.2, 512), (4, 1.2, 512),
                    (8, 1.2, 512), (1, 3.43, 256), (1, 3.43, 1024), (1, 1.2, 512)]:
        mu = float(design_row(h, d, t) @ TRUE) + rng.normal(0, tau)
        out.append(Condition(f"{h}-{d}-{t}", h, d, t, tuple(mu + rng.normal(0, sigma, n))))
    return out


def test_the_fit_recovers_the_coefficients_within_their_intervals():
    f = fit(grid(sigma=0.0005, n=20))
    assert f.df == 6
    for axis in (1, 2, 3):
        est, lo, hi = f.slope(axis)
        assert lo <= TRUE[axis] <= hi and lo < est < hi
    assert abs(f.beta[0] - TRUE[0]) < 5e-4


def test_without_between_condition_variance_the_fit_is_least_squares_on_the_means():
    # condition means exactly on a plane (each condition's pairs symmetric about it): REML finds tau^2 = 0,
    # and with equal n GLS is OLS on the means (numpy's least squares)
    conds = [Condition(c.name, c.heads, c.tokens_per_param, c.seq_len,
                       tuple(float(c.x() @ TRUE) + s for s in (-0.002, 0.002, -0.001, 0.001)))
             for c in grid()]
    f = fit(conds)
    assert f.tau2 == 0.0
    X = np.stack([c.x() for c in conds])
    ols = np.linalg.lstsq(X, np.array([np.mean(c.diffs) for c in conds]), rcond=None)[0]
    assert np.allclose(f.beta, ols, atol=1e-12) and np.allclose(f.beta, TRUE, atol=1e-12)


def test_a_between_condition_variance_is_found_and_widens_the_prediction():
    quiet, spread = fit(grid(sigma=0.0005, n=20, seed=1)), fit(grid(sigma=0.0005, tau=0.003, n=20, seed=1))
    assert spread.tau2 > 1e-6 > quiet.tau2
    _, lo_q, hi_q = quiet.predict(12, 10.5, 2048)
    _, lo_s, hi_s = spread.predict(12, 10.5, 2048)
    assert hi_s - lo_s > 2 * (hi_q - lo_q)


def test_the_prediction_is_the_linear_predictor_and_extrapolation_widens_it():
    f = fit(grid(sigma=0.001, n=8))
    mu, lo, hi = f.predict(12, 10.5, 2048)
    assert mu == pytest.approx(float(design_row(12, 10.5, 2048) @ f.beta))
    _, lo_in, hi_in = f.predict(2, 3.43, 512)  # inside the measured ranges
    assert hi - lo > hi_in - lo_in


def test_no_fit_before_five_conditions_or_while_an_axis_does_not_vary():
    conds = grid()
    assert fit(conds[:4]) is None
    one_length = [c for c in conds if c.seq_len == 512]
    assert fit(one_length) is None  # T never varies: bT cannot be estimated
    assert fit([Condition(c.name, c.heads, c.tokens_per_param, c.seq_len, c.diffs[:1]) for c in conds]) is None


def test_pairs_to_test_meets_the_half_width():
    from xsa.base.stats import t_critical
    n = pairs_to_test(0.0003 * math.sqrt(2), 0.001)
    assert t_critical(n - 1) * 0.0003 * math.sqrt(2) / math.sqrt(n) <= 0.001
    assert t_critical(n - 2) * 0.0003 * math.sqrt(2) / math.sqrt(n - 1) > 0.001 or n == 3
