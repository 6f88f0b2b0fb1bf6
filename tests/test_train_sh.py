"""train.sh passes only options its scripts know: the real pipeline cannot run here (it needs GPUs and data), so a
renamed or removed option would otherwise only fail on a cluster."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import distill  # noqa: E402
import eval as ev  # noqa: E402
import gppo  # noqa: E402
import sft  # noqa: E402
from tools import filter_code  # noqa: E402


def commands():
    """(script, [option names]) for every call of distill.py / sft.py / gppo.py / eval.py / filter_code.py in train.sh."""
    text = open(os.path.join(ROOT, "train.sh")).read().replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for m in re.finditer(r"\b(distill|sft|gppo|eval|filter_code)\.py\b", line):
            rest = re.split(r"\bstage\b|;|&&|\|\|", line[m.end():])[0]
            script = m.group(1)
            found.append((script, re.findall(r"(?<![\w-])--(\w+)=", rest)))
    return found


CONFIGS = {"distill": distill.DistillConfig, "sft": sft.SFTConfig, "gppo": gppo.GPPOConfig, "eval": ev.EvalConfig,
           "filter_code": filter_code.CodeFilterConfig}


def test_train_sh_uses_only_known_options():
    calls = commands()
    assert {script for script, _ in calls} == set(CONFIGS), calls     # the parser sees every stage
    for script, options in calls:
        unknown = set(options) - set(CONFIGS[script].__dataclass_fields__)
        assert not unknown, f"train.sh passes unknown options to {script}: {sorted(unknown)}"


def test_train_sh_syntax():
    assert subprocess.run(["bash", "-n", os.path.join(ROOT, "train.sh")]).returncode == 0
