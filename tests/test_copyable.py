"""The files the README calls copyable import alone: in an empty directory holding only that file (and its
third-party dependencies installed), `import FILE` works. A new import of another project file fails this."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("name", ["model", "rollout", "gppo_loss", "reward", "data", "distill"])
def test_file_imports_alone(name, tmp_path):
    shutil.copy(os.path.join(ROOT, f"{name}.py"), tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
