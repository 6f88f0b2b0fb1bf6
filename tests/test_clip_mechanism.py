"""experiments/clip_mechanism.py: against the hand-derived case (on-policy, r = 1 for every token,
the table of F gives r = 1 in every rule, so GRPO, CISPO and GPPO with any β1 make the same updates,
bit for bit), one qualitative outcome (off-policy, GPPO keeps pushing its clipped negative tokens
down, GRPO stops: they fall further under GPPO, less far with a smaller β1) and a small run of the
whole script."""

import importlib.util
import json
import os

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location(
    "clip_mechanism", os.path.join(ROOT, "experiments", "clip_mechanism.py")
)
mech = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mech)

SMALL = dict(seeds=6, prompts=16, batch_prompts=8, steps=4)


def rules():
    return [mech.LossConfig(alpha=0.0, **o) for o in mech.RULES.values()]


def test_on_policy_every_rule_makes_the_same_updates():
    cfg = mech.MechanismConfig(**SMALL, updates="1")
    world = mech.make_world(cfg)
    runs = mech.train(cfg, world, rules(), [False] * len(mech.RULES), updates=1)
    for run in runs[1:]:
        assert torch.equal(run["success"], runs[0]["success"]) and torch.equal(
            run["entropy"], runs[0]["entropy"]
        )
        assert run["low"].sum() == run["high"].sum() == 0  # r = 1: nothing is clipped
    # and the policy did learn
    assert not torch.equal(runs[0]["success"][-1], runs[0]["success"][0])


def test_off_policy_gppo_pushes_clipped_negative_tokens_further_down_than_grpo():
    cfg = mech.MechanismConfig(**SMALL, updates="8")
    runs = dict(
        zip(
            mech.RULES,
            mech.train(cfg, mech.make_world(cfg), rules(), [False] * len(mech.RULES), updates=8),
        )
    )
    per_token = {
        rule: float(run["dlogp_low"].sum() / run["low"].sum()) for rule, run in runs.items()
    }
    # clipped, and no gradient there
    assert runs["GRPO"]["low"].sum() > 0 and runs["GRPO"]["coef_low"].sum() == 0
    assert (
        per_token["GPPO β1=1"]
        < per_token["GPPO β1=0.5"]
        < per_token["GPPO β1=0.25"]
        < per_token["GRPO"]
        < 0
    )


def test_the_script_runs_small_and_writes_its_numbers(tmp_path):
    out = tmp_path / "m.json"
    result = mech.main(mech.MechanismConfig(**SMALL, updates="1,4", out=str(out)))
    saved = json.loads(out.read_text())
    assert [p["updates"] for p in saved["points"]] == [1, 4] and saved["points"][0]["clipped"] == 0
    assert set(saved["points"][1]["rules"]) == set(mech.RULES)
    assert saved["points"][0]["rules"]["GPPO β1=1"]["vs_grpo"]["success_auc"] == [0.0, 0.0]
    assert result["start"]["success"] == pytest.approx(saved["start"]["success"])
