"""experiments/ablate_archive.py with ablate.py's real plan on synthetic run directories: what a
save keeps (finished runs, and a model only while a run still to run reads it), that a restore on
a new machine makes the same jobs finished with the same bytes, and that other runs are refused."""

import importlib.util
import json
import os
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location(
    "ablate", os.path.join(ROOT, "experiments", "ablate.py")
)
ablate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ablate)
archive_mod = ablate.ablate_archive


def cfg(path, **kw):
    kw = dict(arms="alpha,sft", seeds=2, sft_seeds=1, parallel=1) | kw
    return ablate.AblateConfig(out_dir=str(path), **kw)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())


def finish(c, name, steps=None, model=True):
    """Make ablate's job `name` look finished (what its done() reads, and what a run writes)."""
    run = os.path.join(c.out_dir, "runs", name)
    if name.startswith("toy-"):
        write(os.path.join(run, "test", "toy_code.jsonl"), "{}\n")
    elif name.startswith("distill-"):
        write(os.path.join(run, "report.json"), json.dumps({"kept": 1, "name": name}))
        write(os.path.join(run, "sft.jsonl"), "{}\n" * 100)  # the data: not kept
    elif ":" in name:  # an eval: results.json in its own directory
        of = name.split(":")[1]
        eval_dir = [j["dir"] for j in ablate.plan(c) if j["name"] == name][0]
        write(os.path.join(eval_dir, "results.json"), json.dumps({"of": of}))
    else:
        lines = "".join(
            json.dumps({"step": s, "accuracy": s / 100}) + "\n" for s in range(1, (steps or 1) + 1)
        )
        write(os.path.join(run, "metrics.jsonl"), lines)
        write(os.path.join(run, "log.txt"), "a log: not kept\n")
        if model:
            write(os.path.join(run, "hf", "tokenizer.json"), "{}")
            write(os.path.join(run, "hf", "model.safetensors"), os.urandom(256))
        write(os.path.join(run, "checkpoint", "step_1", "x"), "a checkpoint: not kept")


def done(c):
    return {j["name"] for j in ablate.plan(c) if j["done"]()}


def machine_a(tmp_path):
    """Seed 0 of alpha: alpha0 finished and evaluated, the base α run (gppo) finished but not yet
    evaluated, alpha0.2 half-way; the sft arm's run finished, its eval not."""
    c = cfg(tmp_path / "a")
    for name in (
        "toy-s0",
        "distill-sft-mixed-s0",
        "sft-mixed-s0",
        "alpha0-s0",
        "eval_final:alpha0-s0",
    ):
        finish(c, name, steps=c.steps)
    finish(c, "gppo-s0", steps=c.steps)
    finish(c, "alpha0.2-s0", steps=5, model=False)
    finish(c, "toy-s1")
    finish(c, "distill-sft-correct-s0")
    finish(c, "sft-correct-s0")
    os.makedirs(c.out_dir, exist_ok=True)
    state = dict(
        settings=ablate.fixed_settings(c),
        wall_minutes=[10.0],
        invocations=[dict(wall_minutes=10.0, commit="abc")],
    )
    write(os.path.join(c.out_dir, "ablate_state.json"), json.dumps(state))
    return c


def test_save_keeps_finished_runs_and_a_model_only_while_a_run_to_come_reads_it(tmp_path):
    c = machine_a(tmp_path)
    path = str(tmp_path / "runs.tar.gz")
    assert archive_mod.save(path, c.out_dir, ablate.plan(c)) == 7
    manifest, state, files = archive_mod.read(path)
    assert set(manifest["jobs"]) == {
        "distill-sft-mixed-s0",  # its SFT run is done: report.json only, not the data
        "sft-mixed-s0",  # the base model: every RL run still to run starts from its hf/
        "alpha0-s0",  # evaluated: metrics only
        "eval_final:alpha0-s0",
        "gppo-s0",  # its eval is still to run: its model is kept
        "distill-sft-correct-s0",
        "sft-correct-s0",  # its eval is still to run
    }
    assert sorted(files) == sorted(
        [
            "runs/distill-sft-mixed-s0/report.json",
            "runs/distill-sft-correct-s0/report.json",
            "runs/sft-mixed-s0/metrics.jsonl",
            "runs/sft-mixed-s0/hf/model.safetensors",
            "runs/sft-mixed-s0/hf/tokenizer.json",
            "runs/alpha0-s0/metrics.jsonl",
            "runs/alpha0-s0/eval_final/results.json",
            "runs/gppo-s0/metrics.jsonl",
            "runs/gppo-s0/hf/model.safetensors",
            "runs/gppo-s0/hf/tokenizer.json",
            "runs/sft-correct-s0/metrics.jsonl",
            "runs/sft-correct-s0/hf/model.safetensors",
            "runs/sft-correct-s0/hf/tokenizer.json",
        ]
    )
    for rel, data in files.items():
        assert open(os.path.join(c.out_dir, rel), "rb").read() == data
    assert state["invocations"] == [dict(wall_minutes=10.0, commit="abc")]
    # commands with the out_dir left out: the same job on any machine
    assert "--out_dir={out_dir}/runs/alpha0-s0" in manifest["jobs"]["alpha0-s0"]["cmd"]
    # the same runs, the same bytes (an unchanged archive commits nothing)
    first = open(path, "rb").read()
    archive_mod.save(path, c.out_dir, ablate.plan(c))
    assert open(path, "rb").read() == first and not os.path.exists(path + ".tmp")


def test_an_out_dir_given_relative_to_the_working_directory_saves_the_same(tmp_path, monkeypatch):
    machine_a(tmp_path)
    monkeypatch.chdir(tmp_path)
    relative = cfg("a")
    path = str(tmp_path / "runs.tar.gz")
    archive_mod.save(path, relative.out_dir, ablate.plan(relative))
    manifest, _, files = archive_mod.read(path)
    assert "runs/sft-mixed-s0/hf/model.safetensors" in files
    assert "--out_dir={out_dir}/runs/alpha0-s0" in manifest["jobs"]["alpha0-s0"]["cmd"]
    # restored into an absolute out_dir: the commands agree
    b = cfg(tmp_path / "b")
    archive_mod.restore(path, b.out_dir, ablate.fixed_settings(b))
    archive_mod.check_commands(path, ablate.plan(b), b.out_dir)


def test_a_restore_on_a_new_machine_finishes_the_same_jobs_with_the_same_bytes(tmp_path, capsys):
    a = machine_a(tmp_path)
    path = str(tmp_path / "runs.tar.gz")
    archive_mod.save(path, a.out_dir, ablate.plan(a))
    b = cfg(tmp_path / "b")
    # an unfinished attempt at alpha0-s0 on b: the archive's finished run replaces it
    write(os.path.join(b.out_dir, "runs", "alpha0-s0", "checkpoint", "step_1", "x"), "stale")
    write(os.path.join(b.out_dir, "runs", "alpha0-s0", "metrics.jsonl"), '{"step": 1}\n')
    assert archive_mod.restore(path, b.out_dir, ablate.fixed_settings(b)) == 7
    assert not os.path.exists(os.path.join(b.out_dir, "runs", "alpha0-s0", "checkpoint"))
    # finished on b as on a, except what is made again in seconds (the toy's files)
    assert done(b) == done(a) - {"toy-s0", "toy-s1"}
    for rel, data in archive_mod.read(path)[2].items():
        assert open(os.path.join(b.out_dir, rel), "rb").read() == data
    # alpha0 has no model on b, and needs none: its eval is done
    assert not os.path.exists(os.path.join(b.out_dir, "runs", "alpha0-s0", "hf"))
    # every job still to run finds what it reads: its model, or a job that makes it
    jobs = {j["name"]: j for j in ablate.plan(b)}
    for name in {"eval_final:gppo-s0", "alpha0.2-s0", "eval:sft-correct-s0"}:
        model = [
            x.split("=", 1)[1]
            for x in jobs[name]["cmd"]
            if x.startswith(("--model=", "--init_from="))
        ][0]
        assert os.path.exists(os.path.join(model, "model.safetensors")), name
    # a second restore changes nothing
    assert archive_mod.restore(path, b.out_dir, ablate.fixed_settings(b)) == 0
    # the state travels: b's next invocation adds to a's
    state = json.load(open(os.path.join(b.out_dir, "ablate_state.json")))
    assert state["invocations"] == [dict(wall_minutes=10.0, commit="abc")]


def test_main_restores_first_and_saves_at_the_end(tmp_path, monkeypatch, capsys):
    a = machine_a(tmp_path)
    path = str(tmp_path / "runs.tar.gz")
    monkeypatch.setattr(ablate, "run_jobs", lambda *a, **k: set())
    monkeypatch.setattr(ablate, "report", lambda *a, **k: None)
    ablate.main(ablate.AblateConfig(**{**ablate.asdict(a), "archive": path}))
    assert "holds 7 finished run(s)" in capsys.readouterr().out
    b = ablate.AblateConfig(**{**ablate.asdict(cfg(tmp_path / "b")), "archive": path})
    ablate.main(b)
    assert "restored 7 finished run(s)" in capsys.readouterr().out
    state = json.load(open(os.path.join(b.out_dir, "ablate_state.json")))
    assert [i["wall_minutes"] for i in state["invocations"]][0] == 10.0
    assert len(state["invocations"]) == 3  # a's first, a's run of main, b's
    saved = archive_mod.read(path)[1]
    assert saved["invocations"] == state["invocations"]
    # --dry_run with the archive on a third machine counts the restored runs as done
    c = ablate.AblateConfig(
        **{**ablate.asdict(cfg(tmp_path / "c")), "archive": path, "dry_run": True}
    )
    ablate.main(c)
    out = capsys.readouterr().out
    planned = len(ablate.plan(c))
    assert f"{planned - 7} of {planned} planned jobs to run" in out


def test_other_settings_other_commands_and_other_runs_are_refused(tmp_path, capsys):
    a = machine_a(tmp_path)
    path = str(tmp_path / "runs.tar.gz")
    archive_mod.save(path, a.out_dir, ablate.plan(a))
    other = cfg(tmp_path / "b", lr=1e-4)
    with pytest.raises(SystemExit) as e:
        archive_mod.restore(path, other.out_dir, ablate.fixed_settings(other))
    assert e.value.code == 2 and "'lr': (5e-05, 0.0001)" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(other.out_dir, "runs"))
    # a command the plan now writes otherwise (a code change, not a setting)
    b = cfg(tmp_path / "b")
    jobs = ablate.plan(b)
    [j for j in jobs if j["name"] == "alpha0-s0"][0]["cmd"].append("--new_option=1")
    with pytest.raises(SystemExit) as e:
        archive_mod.check_commands(path, jobs, b.out_dir)
    assert e.value.code == 2 and "job alpha0-s0's command differs" in capsys.readouterr().err
    # an out_dir with invocations of its own that are not the archive's
    write(
        os.path.join(b.out_dir, "ablate_state.json"),
        json.dumps(dict(settings=ablate.fixed_settings(b), invocations=[dict(wall_minutes=3.0)])),
    )
    with pytest.raises(SystemExit) as e:
        archive_mod.restore(path, b.out_dir, ablate.fixed_settings(b))
    assert e.value.code == 2 and "restore into a new --out_dir" in capsys.readouterr().err
    # an archive with a path out of the out_dir
    bad = str(tmp_path / "bad.tar.gz")
    with tarfile.open(bad, "w:gz") as tar:
        tar.add(path, arcname="../escape")
    with pytest.raises(SystemExit) as e:
        archive_mod.read(bad)
    assert e.value.code == 2 and "unexpected member '../escape'" in capsys.readouterr().err
