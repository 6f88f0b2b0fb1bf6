"""The toy diagnoses (sums, Countdown), the calibration targets and the curve summary
(experiments/), on hand-made samples, tables and logs."""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
sys.path.insert(0, ROOT)

import countdown_calibrate  # noqa: E402
import countdown_diagnose  # noqa: E402
import plot_train  # noqa: E402
import toy_diagnose  # noqa: E402


def sample(lines, answer):
    return "<think>\n" + "\n".join(lines) + f"\n</think>\n\n\\boxed{{{answer}}}<|im_end|>"


def test_classify_each_bucket_on_hand_written_samples():
    # 57 + 68 = 125: columns 7+8+0=15, 5+6+1=12
    right = ["7+8+0=15", "5+6+1=12"]
    assert toy_diagnose.classify(57, 68, sample(right, 125)) == "right"
    # a slipped column
    assert toy_diagnose.classify(57, 68, sample(["7+8+0=16", "5+6+1=12"], 126)) == "trace"
    # a column missing
    assert toy_diagnose.classify(57, 68, sample(["7+8+0=15"], 5)) == "trace"
    # right lines, wrong answer
    assert toy_diagnose.classify(57, 68, sample(right, 124)) == "assemble"
    assert (
        toy_diagnose.classify(57, 68, "<think>\n7+8+0=15\n5+6+1=12\n</think>\n\nno box") == "format"
    )
    # a malformed line
    assert toy_diagnose.classify(57, 68, sample(["7+8=15", "5+6+1=12"], 124)) == "format"
    # a right boxed answer counts as right even if the trace is odd: the reward only reads the
    # answer
    assert toy_diagnose.classify(57, 68, sample(["7+8+0=16"], 125)) == "right"


def test_countdown_classify_each_bucket_on_hand_written_samples():
    nums = [12, 3, 5]
    target = 41

    def c(lines, answer):
        return countdown_diagnose.classify(sample(lines, answer), nums, target)

    assert c(["12+5=17*3=51 vs 41 no", "12*3=36+5=41 vs 41 yes"], "(12*3)+5") == ("right", 2)
    assert c(["12+5=17*3=51 vs 41 no", "12-5=7*3=21 vs 41 no"], "(12-5)*3") == ("gave_up", 2)
    assert c(["12+5=17*3=52 vs 41 no"], "(12+5)*3") == ("arithmetic", 1)  # 17*3 is 51
    # not the teacher's exact division
    assert c(["12/5=2*3=6 vs 41 no"], "(12/5)*3") == ("arithmetic", 1)
    assert c(["12+5=17*4=68 vs 41 no"], "(12+5)*4") == ("numbers", 1)  # 4 is not given
    assert c(["12+5=17 vs 41 no"], "12+5") == ("numbers", 1)  # 3 is not used
    assert c(["12+5=17*3=51 vs 41 yes"], "(12+5)*3") == ("false_yes", 1)  # 51 is not 41
    # 41 said no
    assert c(["12*3=36+5=41 vs 41 no", "12+5=17*3=51 vs 41 no"], "(12+5)*3") == ("false_yes", 2)
    # found, then boxed wrong
    assert c(["12*3=36+5=41 vs 41 yes"], "(12*3)-5") == ("answer", 1)
    # the reward reads the answer only
    assert c(["12+5=17*3=51 vs 41 no", "12*3=36+"], "(12*3)+5") == ("right", 1)
    assert c(["12+5=17*3=51 vs 41 no", "12*3=36+"], "(12*3)-5")[0] == "format"  # a cut line
    # cut off
    assert (
        countdown_diagnose.classify("<think>\n12+5=17*3=51 vs 41 no\n", nums, target)[0] == "format"
    )
    # ties: a repeated number must be used as often as it is given
    assert (
        countdown_diagnose.classify(sample(["3+3=6*5=30 vs 30 yes"], "(3+3)*5"), [3, 3, 5], 30)[0]
        == "right"
    )
    assert (
        countdown_diagnose.classify(sample(["5+3=8*5=40 vs 30 no"], "(5+3)*5"), [3, 3, 5], 30)[0]
        == "numbers"
    )


def test_summary_first_step_last_five_and_held_out(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [dict(step=0, eval_accuracy=0.5)] + [
        dict(step=s, accuracy=s / 10) for s in range(1, 8)
    ]
    # step 7 logged again (a resume)
    records += [dict(step=7, eval_accuracy=0.75), dict(step=7, accuracy=0.9)]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    s = plot_train.summary(plot_train.load(str(path)))
    assert s["first_step_accuracy"] == 0.1
    assert abs(s["last5_accuracy"] - (0.3 + 0.4 + 0.5 + 0.6 + 0.9) / 5) < 1e-12
    assert (s["held_out_first"], s["held_out_last"], s["steps"]) == (0.5, 0.75, 7)


def test_calibration_targets_on_hand_made_tables():
    # the SFT model's measured figures (benchmarks/RESULTS.md): every target met on 3 numbers,
    # pass@1 too low on 4
    table = {
        "countdown_3": dict(pass1=0.415, pass_k=0.890, greedy=0.430),
        "countdown_4": dict(pass1=0.179, pass_k=0.645, greedy=0.205),
    }
    assert all(countdown_calibrate.targets(table, 8, 3).values())
    on_4 = countdown_calibrate.targets(table, 8, 4)
    assert [ok for ok in on_4.values()] == [False, True, True, True]
    assert (
        "0.2 <= pass@1 <= 0.5 (4 numbers)" in on_4 and "pass@8 >= 1.5 x pass@1 (4 numbers)" in on_4
    )
    # each target fails on its own: greedy already right, no gain from k samples, hard no harder,
    # too easy
    assert countdown_calibrate.targets(
        {**table, "countdown_3": dict(pass1=0.415, pass_k=0.89, greedy=0.71)}, 8, 3
    ) == {
        "0.2 <= pass@1 <= 0.5 (3 numbers)": True,
        "greedy <= 0.7 (3 numbers)": False,
        "pass@8 >= 1.5 x pass@1 (3 numbers)": True,
        "pass@1 hard <= 0.75 x pass@1 easy": True,
    }
    # 0.62 < 1.5 x 0.415 = 0.6225
    flat = {**table, "countdown_3": dict(pass1=0.415, pass_k=0.62, greedy=0.43)}
    assert list(countdown_calibrate.targets(flat, 8, 3).values()) == [True, True, False, True]
    # 0.32 > 0.75 x 0.415
    same = {**table, "countdown_4": dict(pass1=0.32, pass_k=0.645, greedy=0.205)}
    assert list(countdown_calibrate.targets(same, 8, 4).values()) == [True, True, True, False]
    easy_too = {**table, "countdown_3": dict(pass1=0.51, pass_k=0.95, greedy=0.43)}
    assert list(countdown_calibrate.targets(easy_too, 8, 3).values()) == [False, True, True, True]
