"""
The d12 test's decision rule (registered with the factorial study, before any d12 record): how the
d12 effect, measured on a GPU at two common rates, is read against the CPU statement.

The CPU statement is the factorial study's conditional d12 number for the model its rules choose
(xsa/factorial/models.py: `d12_conditional`), an interval [L, U]; where its rules make no statement
(candidates tied across axes, or none chosen), each candidate's interval is read in turn. The d12
effect is the per-seed mean over the test's two rates with its 95% t-interval [l, u]:

    rejected      [l, u] misses the central half of [L, U] (it lies wholly below L + (U - L) / 4, or
                  wholly above U - (U - L) / 4): the statement fails, in either direction
    consistent    [l, u] lies inside [L, U]
    inconclusive  neither
"""

from __future__ import annotations


def central_half(lo: float, hi: float) -> tuple[float, float]:
    q = (hi - lo) / 4
    return lo + q, hi - q


def verdict(d12: tuple[float, float], cpu: tuple[float, float]) -> str:
    """The d12 interval read against the CPU statement's interval, by the registered rule."""
    (l, u), (lo, hi) = d12, cpu
    if not (l <= u and lo <= hi):
        raise ValueError(f"d12 test: an interval whose low end is above its high end: d12 {d12}, CPU {cpu}")
    c_lo, c_hi = central_half(lo, hi)
    if u < c_lo or l > c_hi:
        return "rejected"
    if lo <= l and u <= hi:
        return "consistent"
    return "inconclusive"
