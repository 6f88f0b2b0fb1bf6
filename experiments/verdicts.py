"""The verdict rule of the ablations: a t test per claim, Holm's correction over the family of
claims, and a 95% confidence interval beside every verdict. Standard library only (the t
distribution is written out below).

Per claim the favoured variant is compared with another on ONE pre-registered metric, one value per
seed:
    paired (the arms share seeds):  d_i = a_i − b_i,  effect = mean(d),  SE = sd(d)/√n,  df = n − 1
    Welch (otherwise):              effect = mean(a) − mean(b),  SE = √(s_a²/n_a + s_b²/n_b),
                                    df = SE⁴ / ((s_a²/n_a)²/(n_a − 1) + (s_b²/n_b)²/(n_b − 1))
    t = effect / SE,  p = P(|T_df| ≥ |t|)  (two-sided: a claim can come out either way)
Holm over the m claims of a family at α = 0.05: sort the p values, p_(1) ≤ … ≤ p_(m); step k tests
p_(k) against α/(m − k + 1) and the steps stop at the first p that fails. A claim's interval is
shown at the level of the step that decided it: effect ± t_{1 − level/2, df}·SE with level α/(m − k
+ 1) for a rejected claim, and the failed step's level for every claim from there on. So the
interval excludes 0 exactly when the corrected test rejects, and the words follow the interval:
"reproduced" (excludes 0, favoured ahead), "reversed" (excludes 0, favoured behind), otherwise "not
resolved (minimum detectable effect X at 80% power)", X = (t_{1 − level/2, df} + t_{0.8, df})·SE,
the true effect this design would call 4 times in 5 at that level. These intervals are Holm-adjusted
but not simultaneous (Bonferroni intervals, at α/m each, would be); the unadjusted 95% interval is
reported beside them.

    from experiments.verdicts import Claim, family_verdicts
    family_verdicts([Claim("GPPO > GRPO", gppo_per_seed, grpo_per_seed, paired=True), ...])
Tests: tests/test_verdicts.py (table values of t; the false-verdict rate of null families; a planted
effect).
"""

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

ALPHA = 0.05
POWER = 0.8


# ----------------------------------------------------------------------------- the t distribution


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) = ∫_0^x t^(a−1) (1−t)^(b−1) dt / B(a, b),
    by its continued fraction (Lentz's method), evaluated on the side of (a+1)/(a+b+2) where it
    converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """1 / (1 + d1/(1 + d2/(1 + ...))) with d_{2m+1} = −(a+m)(a+b+m)x / ((a+2m)(a+2m+1)) and d_{2m}
    = m(b−m)x / ((a+2m−1)(a+2m)), the continued fraction of I_x(a, b)·a·B(a, b) / (x^a (1−x)^b)."""
    tiny = 1e-300
    c = 1.0
    d = 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"betainc({a}, {b}, {x}): the continued fraction did not converge")


def t_sf2(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with df degrees of freedom (the two-sided p value): I_{df/(df+t²)}(df/2, 1/2)."""
    return betainc(df / 2, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t), from the symmetry of T: one half of the two-sided tail on the far side."""
    tail = 0.5 * t_sf2(t, df)
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The t with P(T ≤ t) = p: Newton's method on t_cdf from the normal quantile, a bisection where
    a step would leave the bracket that the iterates keep."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p={p} must lie in (0, 1)")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo = 0.0
    hi = 1.0
    while t_cdf(hi, df) < p:  # a bracket [lo, hi] with cdf(lo) < p ≤ cdf(hi)
        lo, hi = hi, hi * 2
    t = min(max(statistics.NormalDist().inv_cdf(p), lo), hi)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(200):
        f = t_cdf(t, df) - p
        if f < 0:
            lo = t
        else:
            hi = t
        density = math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))
        step = t - f / density
        t_next = step if lo < step < hi else (lo + hi) / 2
        if abs(t_next - t) <= 1e-13 * max(1.0, abs(t)):
            return t_next
        t = t_next
    return t


# ------------------------------------------------------------------------- one claim, then a family


@dataclass
class Claim:
    """One pre-registered comparison: per-seed values of the variant the paper favours and of the
    other one. paired: the two arms ran with the same seeds, value i of each from seed i (None: a
    run that is missing)."""

    name: str
    favoured: list
    other: list
    paired: bool


def compare(claim: Claim) -> dict:
    """effect, SE, df, t, two-sided p and n of one claim (paired or Welch, as the module's
    docstring); None for a claim with too few runs (fewer than 2 per arm, or 2 pairs)."""
    if claim.paired:
        pairs = [
            (a, b) for a, b in zip(claim.favoured, claim.other) if a is not None and b is not None
        ]
        if len(pairs) < 2:
            return None
        diffs = [a - b for a, b in pairs]
        effect = statistics.fmean(diffs)
        n = len(diffs)
        se = statistics.stdev(diffs) / math.sqrt(n)
        df = n - 1
    else:
        a = [v for v in claim.favoured if v is not None]
        b = [v for v in claim.other if v is not None]
        if min(len(a), len(b)) < 2:
            return None
        var_a = statistics.variance(a) / len(a)
        var_b = statistics.variance(b) / len(b)
        effect = statistics.fmean(a) - statistics.fmean(b)
        n = (len(a), len(b))
        se = math.sqrt(var_a + var_b)
        df = (
            se**4 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
            if se > 0
            else len(a) + len(b) - 2
        )
    if se == 0:  # identical differences on every seed: no spread to test against
        p = 0.0 if effect != 0 else 1.0
        t = math.copysign(math.inf, effect) if effect else 0.0
    else:
        t = effect / se
        p = t_sf2(t, df)
    return dict(
        effect=effect, se=se, df=df, t=t, p=p, n=n, test="paired t" if claim.paired else "Welch t"
    )


def interval(effect: float, se: float, df: float, level: float) -> tuple:
    """The two-sided (1 − level) confidence interval of the effect."""
    half = t_quantile(1 - level / 2, df) * se
    return (effect - half, effect + half)


def mde(se: float, df: float, level: float, power: float = POWER) -> float:
    """The true effect that a two-sided t test at `level` detects with probability `power`, for this
    SE and df: (t_{1 − level/2} + t_power)·SE (the usual approximation to the noncentral t)."""
    return (t_quantile(1 - level / 2, df) + t_quantile(power, df)) * se


def holm_levels(p_values: list, alpha: float = ALPHA) -> list:
    """Holm's step-down over a family: per claim (rejected, the level its interval is shown at,
    Holm-adjusted p)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [None] * m
    stopped_at = None
    adjusted = 0.0
    for k, i in enumerate(order):
        level = alpha / (m - k)
        adjusted = max(adjusted, min(1.0, (m - k) * p_values[i]))
        if stopped_at is None and p_values[i] > level:
            stopped_at = level
        out[i] = (stopped_at is None, stopped_at or level, adjusted)
    return out


def family_verdicts(claims: list, alpha: float = ALPHA) -> list:
    """One dict per claim, in order: the comparison, the unadjusted 95% interval, the Holm-adjusted
    interval and its level, the minimum detectable effect at that level, and the verdict word that
    the adjusted interval gives; "missing runs" for a claim with too few, counted in the family."""
    stats = [compare(c) for c in claims]
    # A claim with too few runs stays in the family as p = 1: it cannot be rejected, and leaving it
    # out would loosen every other claim's level (the family is what was registered, not what ran).
    holm = holm_levels([1.0 if s is None else s["p"] for s in stats], alpha)
    out = [dict(claim=c.name, verdict="missing runs", family_size=len(claims)) for c in claims]
    for i, (rejected, level, p_holm) in enumerate(holm):
        s = stats[i]
        if s is None:
            out[i].update(level=level)
            continue
        ci_adj = interval(s["effect"], s["se"], s["df"], level)
        detectable = mde(s["se"], s["df"], level)
        if rejected:
            word = "reproduced" if s["effect"] > 0 else "reversed"
        else:
            word = f"not resolved (minimum detectable effect {detectable:.3f} at 80% power)"
        out[i].update(
            s,
            verdict=word,
            p_holm=p_holm,
            level=level,
            ci95=interval(s["effect"], s["se"], s["df"], alpha),
            ci_holm=ci_adj,
            mde=detectable,
        )
    return out


def seeds_needed(
    sd_diff: float,
    target: float,
    family_size: int,
    alpha: float = ALPHA,
    power: float = POWER,
    most: int = 64,
) -> int:
    """The fewest paired seeds n for which the minimum detectable effect at the family's first Holm
    level (α/m, the strictest) is at most `target`, given the SD of the per-seed differences; `most`
    + 1 if none up to it."""
    level = alpha / family_size
    for n in range(2, most + 1):
        if mde(sd_diff / math.sqrt(n), n - 1, level, power) <= target:
            return n
    return most + 1
