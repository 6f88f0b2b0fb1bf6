"""The estimators of an evaluation, from each sample's verdict: with c_i of problem i's n samples
correct, over N problems,
    Avg@n  = 1/N sum_i c_i / n                      (the unbiased estimate of pass@1)
    pass@k = 1/N sum_i [1 - C(n - c_i, k) / C(n, k)]  (Codex paper, arXiv 2107.03374; k <= n)
pass_at_k evaluates one problem's term as a product, prod_{m=n-c+1..n} (1 - k/m), so no binomial
coefficient overflows. Python only:
    pass_at_k(n=16, c=3, k=4)          # 1 - C(13, 4) / C(16, 4)
    summarize(samples, ks=[1, 4, 16])  # samples of one benchmark: {problem_index, problem_id,
                                       # correct, reward, format_failure, length, finish_reason}
    pass_ks(cfg)                       # which pass@k to report, from cfg.k and cfg.pass_k ("1,4,8")
"""


def summarize(samples: list, ks: list) -> dict:
    """Aggregate per-sample records {problem_index, problem_id, correct, reward, format_failure,
    length, finish_reason} of one benchmark."""
    correct = {}
    ids = {}
    for s in samples:
        correct.setdefault(s["problem_index"], []).append(bool(s["correct"]))
        ids[s["problem_index"]] = s["problem_id"]
    n_problems = len(correct)
    n = len(samples)
    return dict(
        problems=n_problems,
        k=n // max(n_problems, 1),
        avg_at_k=sum(sum(c) / len(c) for c in correct.values()) / n_problems,
        pass_at_k={
            str(j): sum(pass_at_k(len(c), sum(c), j) for c in correct.values()) / n_problems
            for j in ks
        },
        mean_reward=sum(s["reward"] for s in samples) / n,
        format_failure_rate=sum(s["format_failure"] for s in samples) / n,
        mean_length=sum(s["length"] for s in samples) / n,
        truncated_rate=sum(s["finish_reason"] == "length" for s in samples) / n,
        correct_per_problem=[[ids[i], sum(c)] for i, c in sorted(correct.items())],
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of a problem with c correct out of n samples: 1 - C(n-c, k) / C(n, k), k <=
    n."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k(n={n}, c={c}, k={k}): need 0 <= c <= n and 1 <= k <= n")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    prod = 1.0
    for m in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) = prod_m (1 - k/m)
        prod *= 1.0 - k / m
    return 1.0 - prod


def pass_ks(cfg) -> list:
    """The j of the reported pass@j: cfg.pass_k's comma-separated values, each in 1..cfg.k (empty:
    1, the powers of 4 below k, and k). eval.py's EvalConfig calls it, so a bad --pass_k is a
    ValueError at once."""
    if not cfg.pass_k:
        return sorted({1, cfg.k} | {4**i for i in range(1, 8) if 4**i < cfg.k})
    try:
        ks = sorted({int(x) for x in cfg.pass_k.split(",")})
    except ValueError:
        raise ValueError(
            f"--pass_k={cfg.pass_k!r}: expected comma-separated integers like 1,4,8"
        ) from None
    if ks[0] < 1 or ks[-1] > cfg.k:
        raise ValueError(
            f"--pass_k={cfg.pass_k!r}: each value must be in 1..k={cfg.k} "
            "(pass@j needs j <= k samples)"
        )
    return ks
