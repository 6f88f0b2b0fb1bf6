"""experiments/verdicts.py: the t distribution against closed forms and table values, Holm's
step-down against a hand-computed family, and the rule on synthetic data: with no true effect, a
family of 10 claims gets any "reproduced"/"reversed" at most 5% of the time; a planted effect of 3
SE is found; the minimum detectable effect is detected about 4 times in 5; the words always follow
the interval shown."""

import math
import random

import pytest

from experiments import verdicts as v


def test_betainc_against_closed_forms():
    for x in (0.01, 0.3, 0.5, 0.77, 0.999):
        # I_x(a, 1) = x^a
        assert v.betainc(2.5, 1.0, x) == pytest.approx(x**2.5, rel=1e-12)
        # I_x(1, b) = 1 − (1−x)^b
        assert v.betainc(1.0, 3.5, x) == pytest.approx(1 - (1 - x) ** 3.5, rel=1e-12)
        assert v.betainc(4.2, 0.5, x) == pytest.approx(1 - v.betainc(0.5, 4.2, 1 - x), abs=1e-13)
    assert v.betainc(3, 2, 0.0) == 0.0 and v.betainc(3, 2, 1.0) == 1.0


def test_t_distribution_against_closed_forms_and_tables():
    for t in (-30.0, -2.0, -0.3, 0.0, 0.7, 4.0, 100.0):
        # Cauchy
        assert v.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-13)
        assert v.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-13)
    # printed tables (6 significant digits), e.g. Abramowitz & Stegun 26.10
    table = {
        (0.975, 1): 12.7062,
        (0.975, 2): 4.30265,
        (0.975, 4): 2.77645,
        (0.975, 10): 2.22814,
        (0.975, 30): 2.04227,
        (0.8, 4): 0.940965,
        (0.8, 2): 1.06066,
        (0.995, 5): 4.03214,
        (0.9995, 3): 12.9240,
    }
    for (p, df), t in table.items():
        assert v.t_quantile(p, df) == pytest.approx(t, abs=6e-5 * t)
        assert v.t_quantile(1 - p, df) == pytest.approx(-t, abs=6e-5 * t)
    # a fractional df (Welch) sits between its integer neighbours; a large df is the normal
    assert v.t_quantile(0.975, 4) < v.t_quantile(0.975, 3.5) < v.t_quantile(0.975, 3)
    assert v.t_quantile(0.975, 1e6) == pytest.approx(1.959964, abs=1e-5)
    for p in (0.6, 0.9, 0.999):
        assert v.t_cdf(v.t_quantile(p, 2.7), 2.7) == pytest.approx(p, abs=1e-12)


def test_compare_paired_and_welch_by_hand():
    # differences 0.1, 0.2, 0.1
    c = v.compare(v.Claim("x", [0.5, 0.6, 0.7], [0.4, 0.4, 0.6], paired=True))
    assert c["effect"] == pytest.approx(0.4 / 3) and c["df"] == 2
    # sd of (.1, .2, .1) = sqrt(1/300)
    assert c["se"] == pytest.approx(math.sqrt(1 / 300) / math.sqrt(3))
    assert c["p"] == pytest.approx(2 * (1 - v.t_cdf(c["effect"] / c["se"], 2)))
    w = v.compare(v.Claim("x", [1.0, 2.0, 3.0], [1.0, 1.0, 4.0, 6.0], paired=False))
    # variances 1 and 6 over n
    va = 1.0 / 3
    vb = 6.0 / 4
    assert w["se"] == pytest.approx(math.sqrt(va + vb))
    assert w["df"] == pytest.approx((va + vb) ** 2 / (va**2 / 2 + vb**2 / 3))
    # one pair only: no test
    assert v.compare(v.Claim("x", [1.0, None], [2.0, 3.0], paired=True)) is None


def test_holm_against_a_hand_computed_family():
    # sorted: 0.005 <= .05/4 yes, 0.01 <= .05/3 yes, 0.03 <= .05/2 no: stop; 0.04 is not tested
    out = v.holm_levels([0.01, 0.04, 0.03, 0.005])
    assert [r for r, _, _ in out] == [True, False, False, True]
    assert [lv for _, lv, _ in out] == pytest.approx([0.05 / 3, 0.025, 0.025, 0.0125])
    assert [p for _, _, p in out] == pytest.approx([0.03, 0.06, 0.06, 0.02])


def null_family(rng, m, n, paired):
    return [
        v.Claim(
            str(i), [rng.gauss(0, 1) for _ in range(n)], [rng.gauss(0, 1) for _ in range(n)], paired
        )
        for i in range(m)
    ]


def test_null_families_get_a_false_verdict_at_most_5_percent_of_the_time():
    """10 claims of 3 seeds per arm and no true effect. The retracted 2 × SE rule: about 0.7 of such
    families hold a false word. Tolerance: 3 binomial standard errors of the simulated rate above
    0.05."""
    rng = random.Random(0)
    families = 2000
    words = ("reproduced", "reversed")
    false = sum(
        any(r["verdict"] in words for r in v.family_verdicts(null_family(rng, 10, 3, True)))
        for _ in range(families)
    )
    assert false / families <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / families)
    # Welch (unpaired arms): the same words from the same p values and Holm steps
    families = 600
    false = sum(
        any(
            rejected
            for rejected, _, _ in v.holm_levels(
                [v.compare(c)["p"] for c in null_family(rng, 10, 3, False)]
            )
        )
        for _ in range(families)
    )
    assert false / families <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / families)


def test_a_planted_effect_of_3_se_is_found_and_the_mde_is_detected_4_times_in_5():
    rng = random.Random(1)
    n = 30
    sims = 1000
    se = 1 / math.sqrt(n)  # differences ~ N(effect, 1): SE of their mean
    found = sum(
        v.family_verdicts(
            [v.Claim("x", [rng.gauss(3 * se, 1) for _ in range(n)], [0.0] * n, True)]
        )[0]["verdict"]
        == "reproduced"
        for _ in range(sims)
    )
    assert found / sims >= 0.75  # noncentral t(29, 3) beyond 2.045: 0.83
    n = 10
    effect = v.mde(1 / math.sqrt(n), n - 1, 0.05)
    found = sum(
        v.family_verdicts(
            [v.Claim("x", [rng.gauss(effect, 1) for _ in range(n)], [0.0] * n, True)]
        )[0]["verdict"]
        == "reproduced"
        for _ in range(sims)
    )
    # 4 binomial standard errors (0.013 each) and the formula's approximation of the noncentral t
    # (under 0.01 here)
    assert abs(found / sims - 0.8) <= 4 * math.sqrt(0.8 * 0.2 / sims) + 0.01


def test_the_words_follow_the_interval_shown():
    rng = random.Random(2)
    for _ in range(300):
        claims = [
            v.Claim(
                str(i),
                [rng.gauss(rng.choice((0, 1.5)), 1) for _ in range(4)],
                [rng.gauss(0, 1) for _ in range(4)],
                rng.random() < 0.5,
            )
            for i in range(5)
        ]
        for r in v.family_verdicts(claims):
            lo, hi = r["ci_holm"]
            excludes = lo > 0 or hi < 0
            assert excludes == (r["verdict"] in ("reproduced", "reversed"))
            assert r["verdict"] != "reproduced" or lo > 0
            # never narrower
            assert r["ci_holm"][0] <= r["ci95"][0] and r["ci95"][1] <= r["ci_holm"][1]
            if not excludes:
                assert r["verdict"].startswith(
                    f"not resolved (minimum detectable effect {r['mde']:.3f}"
                )


def test_seeds_needed_for_a_target_mde():
    n = v.seeds_needed(0.012, 0.03, family_size=8)
    level = 0.05 / 8
    assert (
        v.mde(0.012 / math.sqrt(n), n - 1, level)
        <= 0.03
        < v.mde(0.012 / math.sqrt(n - 1), n - 2, level)
    )


def test_a_claim_with_missing_runs_keeps_its_place_in_the_family():
    """A claim whose runs are missing cannot be rejected, but it was registered: Holm corrects the
    others for it (p = 1), so a p of 0.03 that would pass alone at α = 0.05 fails in a family of 2."""
    # paired differences 0.1, 0.12, 0.08, 0.11, 0.09: t = 0.1 / (0.0158 / √5) = 14.1, p ≈ 1.5e-4
    strong = v.Claim("strong", [0.6, 0.62, 0.58, 0.61, 0.59], [0.5] * 5, paired=True)
    # differences 0.1, 0.0, 0.2, 0.1, 0.15: effect 0.11, SE 0.0332, t 3.31, df 4: p ≈ 0.030
    middling = v.Claim("middling", [0.6, 0.5, 0.7, 0.6, 0.65], [0.5] * 5, paired=True)
    p = v.compare(middling)["p"]
    assert 0.025 < p < 0.05  # alone at 0.05: rejected
    missing = v.Claim("missing", [0.5, None, None], [0.4, None, None], paired=True)
    out = v.family_verdicts([strong, middling, missing])
    by = {x["claim"]: x for x in out}
    assert by["missing"]["verdict"] == "missing runs" and by["missing"]["family_size"] == 3
    # Holm, m = 3: strong at 0.05/3, then middling at 0.05/2 = 0.025 < p: not resolved; the
    # missing claim (p = 1) at the same failed level
    assert by["strong"]["verdict"] == "reproduced" and by["strong"]["level"] == pytest.approx(
        0.05 / 3
    )
    assert by["middling"]["verdict"].startswith("not resolved")
    assert by["middling"]["level"] == pytest.approx(0.025)
    assert by["middling"]["p_holm"] == pytest.approx(2 * p)
    # without the missing claim the same two are both resolved
    assert [x["verdict"] for x in v.family_verdicts([strong, middling])] == [
        "reproduced",
        "reproduced",
    ]
