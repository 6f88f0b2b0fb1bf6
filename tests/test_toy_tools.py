"""The toy diagnosis and the curve summary (experiments/), on hand-made samples and logs."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
sys.path.insert(0, ROOT)

import plot_train  # noqa: E402
import toy_diagnose  # noqa: E402


def sample(lines, answer):
    return "<think>\n" + "\n".join(lines) + f"\n</think>\n\n\\boxed{{{answer}}}<|im_end|>"


def test_classify_each_bucket_on_hand_written_samples():
    # 57 + 68 = 125: columns 7+8+0=15, 5+6+1=12
    right = ["7+8+0=15", "5+6+1=12"]
    assert toy_diagnose.classify(57, 68, sample(right, 125)) == "right"
    assert toy_diagnose.classify(57, 68, sample(["7+8+0=16", "5+6+1=12"], 126)) == "trace"      # a slipped column
    assert toy_diagnose.classify(57, 68, sample(["7+8+0=15"], 5)) == "trace"                     # a column missing
    assert toy_diagnose.classify(57, 68, sample(right, 124)) == "assemble"                       # right lines, wrong answer
    assert toy_diagnose.classify(57, 68, "<think>\n7+8+0=15\n5+6+1=12\n</think>\n\nno box") == "format"
    assert toy_diagnose.classify(57, 68, sample(["7+8=15", "5+6+1=12"], 124)) == "format"      # a malformed line
    # a right boxed answer counts as right even if the trace is odd: the reward only reads the answer
    assert toy_diagnose.classify(57, 68, sample(["7+8+0=16"], 125)) == "right"


def test_summary_first_step_last_five_and_held_out(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [dict(step=0, eval_accuracy=0.5)] + [dict(step=s, accuracy=s / 10) for s in range(1, 8)]
    records += [dict(step=7, eval_accuracy=0.75), dict(step=7, accuracy=0.9)]   # step 7 logged again (a resume)
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    s = plot_train.summary(plot_train.load(str(path)))
    assert s["first_step_accuracy"] == 0.1
    assert abs(s["last5_accuracy"] - (0.3 + 0.4 + 0.5 + 0.6 + 0.9) / 5) < 1e-12
    assert (s["held_out_first"], s["held_out_last"], s["steps"]) == (0.5, 0.75, 7)
