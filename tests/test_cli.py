"""Every entry point answers --help with its options and exit code 0 (a user's first command)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("script,expect", [("sft.py", "--lr="), ("gppo.py", "--loss_mode="), ("eval.py", "--k="),
                                           ("reward.py", "--"), ("rollout.py", "--model"), ("data.py", "toy"),
                                           ("model.py", "CHECKPOINT_DIR")])
def test_help(script, expect):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, script), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expect in proc.stdout


def test_unknown_option_fails_loudly():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "gppo.py"), "--learning_rate=1"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0 and "unknown option --learning_rate" in proc.stderr
