#!/usr/bin/env bash
# The sft arm's follow-up (benchmarks/RESULTS.md, "sft, follow-up"): the only-correct SFT data of
# `experiments/ablate.py --arms=sft --out_dir=out/ablate_sft`, trained for 2 epochs (at least as many steps as the
# mixed arm's one epoch), evaluated as the arm's models were, then compared with the mixed arm by the arm's rule.
#   bash experiments/sft_followup.sh            # after the sft arm; resumes (finished runs are skipped)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-out/ablate_sft/runs}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
# the arm's held-out sets: the first 100 problems of the toy's (every seed's toy files hold the same ones)
HELD_OUT=$RUNS/held_out_100
mkdir -p "$HELD_OUT"
for n in 3 4; do head -n 100 "$RUNS/toy-s0/test/countdown_$n.jsonl" > "$HELD_OUT/countdown_$n.jsonl"; done

one() {  # seed: SFT (2 epochs) then eval, each skipped when its output exists
  local s=$1 data=$RUNS/distill-sft-correct-s$1 d=$RUNS/sft-correct-2ep-s$1
  mkdir -p "$d"
  [ -f "$d/hf/tokenizer.json" ] || python sft.py --out_dir="$d" --seed="$s" --data="$data/sft.jsonl" \
      --tokenizer="$RUNS/toy-s$s/tokenizer" --epochs=2 --row_tokens=1024 --rows_per_step=2 > "$d/log.txt" 2>&1
  [ -f "$d/eval/results.json" ] || python eval.py --model="$d/hf" --out_dir="$d/eval" --k=4 --max_tokens=400 \
      --reward_workers=2 --math_data="$HELD_OUT/countdown_3.jsonl,$HELD_OUT/countdown_4.jsonl" > "$d/eval_log.txt" 2>&1
}
one 0 & one 1 & wait
one 2

python - "$RUNS" <<'PY'
import json, math, os, statistics, sys
runs = sys.argv[1]
def scores(name):  # per seed: (easy, hard) eval.py Avg@4, as the sft arm reads them
    out = []
    for s in range(3):
        with open(os.path.join(runs, f"{name}-s{s}", "eval", "results.json")) as f:
            bench = json.load(f)["benchmarks"]
        out.append((bench["countdown_3"]["avg_at_k"], bench["countdown_4"]["avg_at_k"]))
    return out
arms = {"only-correct, 2 epochs": scores("sft-correct-2ep"), "mixed, 1 epoch": scores("sft-mixed")}
for arm, per_seed in arms.items():
    cols = [[seed[i] for seed in per_seed] for i in (0, 1)]
    print(f"{arm}: easy {statistics.mean(cols[0]):.3f} ± {statistics.stdev(cols[0]):.3f}, "
          f"hard {statistics.mean(cols[1]):.3f} ± {statistics.stdev(cols[1]):.3f}  per seed {per_seed}")
for i, kind, favoured, other in [(0, "easy", "only-correct, 2 epochs", "mixed, 1 epoch"),
                                 (1, "hard", "mixed, 1 epoch", "only-correct, 2 epochs")]:
    a, b = [seed[i] for seed in arms[favoured]], [seed[i] for seed in arms[other]]
    effect, se = statistics.mean(a) - statistics.mean(b), math.sqrt(statistics.variance(a) / 3 + statistics.variance(b) / 3)
    verdict = "reproduced" if effect > 2 * se else "reversed" if effect < -2 * se else "not reproduced"
    print(f"{kind}: {favoured} vs {other}: {effect:+.3f} (2 x s.e. {2 * se:.3f}): {verdict}")
PY
