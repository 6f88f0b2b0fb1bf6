"""experiments/ablate_archive.py with ablate.py's real plan on synthetic run directories: what a
save keeps (finished runs; a model only while a run to come reads it, the base model always), that
a restore on a new machine makes the same jobs finished with the same bytes, that the archive only
grows, and that other runs, bad archives and stopped saves are refused or survived."""

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location(
    "ablate", os.path.join(ROOT, "experiments", "ablate.py")
)
ablate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ablate)
archive_mod = ablate.ablate_archive


def cfg(path, **kw):
    kw = dict(arms="alpha,sft", seeds=2, sft_seeds=2, parallel=1) | kw
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
    evaluated, alpha0.2 half-way; sft: seed 0's only-correct run finished and evaluated, seed 1's
    data made but its SFT run not started."""
    c = cfg(tmp_path / "a")
    for name in (
        "toy-s0",
        "toy-s1",
        "distill-sft-mixed-s0",
        "sft-mixed-s0",
        "alpha0-s0",
        "eval_final:alpha0-s0",
        "gppo-s0",
        "distill-sft-correct-s0",
        "sft-correct-s0",
        "eval:sft-correct-s0",
        "distill-sft-correct-s1",
    ):
        finish(c, name, steps=c.steps)
    finish(c, "alpha0.2-s0", steps=5, model=False)
    state = dict(
        settings=ablate.fixed_settings(c),
        wall_minutes=[10.0],
        invocations=[dict(wall_minutes=10.0, commit="abc")],
    )
    write(os.path.join(c.out_dir, "ablate_state.json"), json.dumps(state))
    return c


KEPT = {
    "distill-sft-mixed-s0",  # its SFT run is done: report.json only, not the data
    "sft-mixed-s0",  # the base model: every RL run starts from its hf/
    "alpha0-s0",  # evaluated: metrics only
    "eval_final:alpha0-s0",
    "gppo-s0",  # its eval is still to run: its model is kept
    "distill-sft-correct-s0",
    "sft-correct-s0",  # evaluated: metrics only
    "eval:sft-correct-s0",
}


def archived_files(archive):
    return sorted(
        os.path.relpath(os.path.join(d, n), archive)
        for d, _, names in os.walk(archive)
        for n in names
        if n != "manifest.json"
    )


def test_save_keeps_finished_runs_and_a_model_only_while_a_run_to_come_reads_it(tmp_path):
    c = machine_a(tmp_path)
    archive = str(tmp_path / "archive")
    assert archive_mod.save(archive, c.out_dir, ablate.plan(c)) == len(KEPT)
    manifest = archive_mod.read(archive)
    # not kept: the toys (made again in seconds), alpha0.2 (unfinished), seed 1's only-correct
    # data (its SFT run, to come, reads sft.jsonl, which is not kept)
    assert set(manifest["jobs"]) == KEPT
    assert archived_files(archive) == sorted(
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
            "runs/sft-correct-s0/eval/results.json",
        ]
    )
    for rel in archived_files(archive):
        assert (
            open(os.path.join(c.out_dir, rel), "rb").read()
            == open(os.path.join(archive, rel), "rb").read()
        )
    assert manifest["state"]["invocations"] == [dict(wall_minutes=10.0, commit="abc")]
    # commands with the out_dir left out: the same job on any machine
    assert "--out_dir={out_dir}/runs/alpha0-s0" in manifest["jobs"]["alpha0-s0"]["cmd"]
    # the same runs, the same bytes (an unchanged archive commits nothing); no temporary file left
    first = {
        rel: open(os.path.join(archive, rel), "rb").read()
        for rel in os.listdir(archive)
        if rel.endswith(".json")
    }
    archive_mod.save(archive, c.out_dir, ablate.plan(c))
    assert first == {rel: open(os.path.join(archive, rel), "rb").read() for rel in first}
    assert not [n for _, _, names in os.walk(archive) for n in names if n.endswith(".tmp")]


def test_an_out_dir_given_relative_to_the_working_directory_saves_the_same(tmp_path, monkeypatch):
    machine_a(tmp_path)
    monkeypatch.chdir(tmp_path)
    relative = cfg("a")
    archive = str(tmp_path / "archive")
    archive_mod.save(archive, relative.out_dir, ablate.plan(relative))
    manifest = archive_mod.read(archive)
    assert "runs/sft-mixed-s0/hf/model.safetensors" in archived_files(archive)
    assert "--out_dir={out_dir}/runs/alpha0-s0" in manifest["jobs"]["alpha0-s0"]["cmd"]
    # restored into an absolute out_dir: the commands agree
    b = cfg(tmp_path / "b")
    archive_mod.restore(archive, b.out_dir, ablate.fixed_settings(b), ablate.plan(b))


def test_a_restore_on_a_new_machine_finishes_the_same_jobs_with_the_same_bytes(tmp_path):
    a = machine_a(tmp_path)
    archive = str(tmp_path / "archive")
    archive_mod.save(archive, a.out_dir, ablate.plan(a))
    b = cfg(tmp_path / "b")
    # an unfinished attempt at alpha0-s0 on b: the archive's finished run replaces it
    write(os.path.join(b.out_dir, "runs", "alpha0-s0", "checkpoint", "step_1", "x"), "stale")
    write(os.path.join(b.out_dir, "runs", "alpha0-s0", "metrics.jsonl"), '{"step": 1}\n')
    fixed = ablate.fixed_settings(b)
    assert archive_mod.restore(archive, b.out_dir, fixed, ablate.plan(b)) == len(KEPT)
    assert not os.path.exists(os.path.join(b.out_dir, "runs", "alpha0-s0", "checkpoint"))
    # finished on b as on a, except what is made again in seconds (the toys) and the data whose
    # SFT run is to come
    assert done(b) == done(a) - {"toy-s0", "toy-s1", "distill-sft-correct-s1"}
    for rel in archived_files(archive):
        assert (
            open(os.path.join(b.out_dir, rel), "rb").read()
            == open(os.path.join(archive, rel), "rb").read()
        )
    # alpha0 and sft-correct have no model on b, and need none: their evals are done
    for run in ("alpha0-s0", "sft-correct-s0"):
        assert not os.path.exists(os.path.join(b.out_dir, "runs", run, "hf"))
    # every job still to run finds what it reads: its model, or a job that makes it
    jobs = {j["name"]: j for j in ablate.plan(b)}
    for name in ("eval_final:gppo-s0", "alpha0.2-s0", "alpha0-s1", "eval:sft-mixed-s0"):
        model = [
            x.split("=", 1)[1]
            for x in jobs[name]["cmd"]
            if x.startswith(("--model=", "--init_from="))
        ][0]
        assert os.path.exists(os.path.join(model, "model.safetensors")), name
    assert (
        all(a in done(b) or a.startswith("toy-") for a in jobs["sft-correct-s1"]["after"]) is False
    )
    # a second restore copies nothing; one stopped before its marker is completed
    assert archive_mod.restore(archive, b.out_dir, fixed, ablate.plan(b)) == 0
    os.remove(os.path.join(b.out_dir, "runs", "alpha0-s0", archive_mod.MARKER))
    assert "alpha0-s0" not in done(b)
    assert archive_mod.restore(archive, b.out_dir, fixed, ablate.plan(b)) == 0
    assert "alpha0-s0" in done(b)
    state = json.load(open(os.path.join(b.out_dir, "ablate_state.json")))
    assert state["invocations"] == [dict(wall_minutes=10.0, commit="abc")]


def test_the_base_model_stays_for_more_seeds_and_the_archive_only_grows(tmp_path):
    a = cfg(tmp_path / "a", arms="alpha", seeds=1)
    for name in ("toy-s0", "distill-sft-mixed-s0", "sft-mixed-s0"):
        finish(a, name)
    for run in ("alpha0-s0", "gppo-s0", "alpha0.2-s0"):
        finish(a, run, steps=a.steps)
        finish(a, f"eval_final:{run}")
    assert not [j for j in ablate.plan(a) if not j["done"]()]
    archive = str(tmp_path / "archive")
    archive_mod.save(archive, a.out_dir, ablate.plan(a))
    # nothing left to run, yet the base model is kept: seed 1, later, starts from it
    assert "runs/sft-mixed-s0/hf/model.safetensors" in archived_files(archive)
    b = cfg(tmp_path / "b", arms="alpha", seeds=2)
    archive_mod.restore(archive, b.out_dir, ablate.fixed_settings(b), ablate.plan(b))
    seed1 = [j for j in ablate.plan(b) if j["name"] == "alpha0-s1"][0]
    base = [x.split("=", 1)[1] for x in seed1["cmd"] if x.startswith("--init_from=")][0]
    assert (
        open(os.path.join(base, "model.safetensors"), "rb").read()
        == open(
            os.path.join(a.out_dir, "runs", "sft-mixed-s0", "hf", "model.safetensors"), "rb"
        ).read()
    )
    # a save from an invocation of fewer arms keeps what the archive held
    c = cfg(tmp_path / "b", arms="alpha", seeds=1)
    finish(c, "alpha0.2-s0", steps=c.steps)  # unchanged bytes of a restored run
    assert (
        archive_mod.save(
            archive, c.out_dir, ablate.plan(cfg(tmp_path / "b", arms="filter", seeds=1))
        )
        >= 7
    )
    assert set(archive_mod.read(archive)["jobs"]) >= {
        "alpha0-s0",
        "gppo-s0",
        "eval_final:alpha0.2-s0",
    }


def test_main_checks_before_it_restores_and_saves_at_the_end(tmp_path, monkeypatch, capsys):
    a = machine_a(tmp_path)
    archive = str(tmp_path / "archive")
    monkeypatch.setattr(ablate, "run_jobs", lambda *a, **k: set())
    monkeypatch.setattr(ablate, "report", lambda *a, **k: None)
    ablate.main(ablate.AblateConfig(**{**ablate.asdict(a), "archive": archive}))
    assert f"holds {len(KEPT)} finished run(s)" in capsys.readouterr().out
    b = ablate.AblateConfig(**{**ablate.asdict(cfg(tmp_path / "b")), "archive": archive})
    ablate.main(b)
    assert f"restored {len(KEPT)} finished run(s)" in capsys.readouterr().out
    state = json.load(open(os.path.join(b.out_dir, "ablate_state.json")))
    assert len(state["invocations"]) == 3  # a's first, a's run of main, b's
    assert archive_mod.read(archive)["state"]["invocations"] == state["invocations"]
    # --dry_run on a third machine restores first, so it counts the archive's runs as done
    c = ablate.AblateConfig(
        **{**ablate.asdict(cfg(tmp_path / "c")), "archive": archive, "dry_run": True}
    )
    ablate.main(c)
    planned = len(ablate.plan(c))
    assert f"{planned - len(KEPT)} of {planned} planned jobs to run" in capsys.readouterr().out
    # a changed command (steps are not a fixed setting): refused before out_dir changes
    d = cfg(tmp_path / "d", steps=40)
    write(os.path.join(d.out_dir, "runs", "alpha0-s0", "checkpoint", "step_30", "x"), "mine")
    with pytest.raises(SystemExit) as e:
        ablate.main(ablate.AblateConfig(**{**ablate.asdict(d), "archive": archive}))
    err = capsys.readouterr().err
    assert e.value.code == 2 and "ran with ['--steps=30'], this plan has ['--steps=40']" in err
    assert err.count("\n") == 1
    assert os.listdir(os.path.join(d.out_dir, "runs")) == ["alpha0-s0"]
    assert os.path.exists(
        os.path.join(d.out_dir, "runs", "alpha0-s0", "checkpoint", "step_30", "x")
    )
    # --archive naming a file, or a directory of something else
    for bad in (str(tmp_path / "a" / "ablate_state.json"), str(tmp_path / "a" / "runs")):
        with pytest.raises(SystemExit) as e:
            ablate.main(
                ablate.AblateConfig(**{**ablate.asdict(cfg(tmp_path / "e")), "archive": bad})
            )
        assert e.value.code == 2 and "is neither an ablation archive" in capsys.readouterr().err


def test_other_settings_runs_and_damaged_archives_are_refused_in_one_line(tmp_path, capsys):
    a = machine_a(tmp_path)
    archive = str(tmp_path / "archive")
    archive_mod.save(archive, a.out_dir, ablate.plan(a))

    def refused(fn, words):
        with pytest.raises(SystemExit) as e:
            fn()
        err = capsys.readouterr().err
        assert e.value.code == 2 and words in err and err.count("\n") == 1, err

    other = cfg(tmp_path / "o", lr=1e-4)
    restore = lambda c: archive_mod.restore(  # noqa: E731
        archive, c.out_dir, ablate.fixed_settings(c), ablate.plan(c)
    )
    refused(lambda: restore(other), "'lr': (5e-05, 0.0001)")
    assert not os.path.exists(other.out_dir)
    # an out_dir with invocations of its own that are not the archive's
    b = cfg(tmp_path / "b")
    mine = dict(settings=ablate.fixed_settings(b), invocations=[dict(wall_minutes=3.0)])
    write(os.path.join(b.out_dir, "ablate_state.json"), json.dumps(mine))
    refused(lambda: restore(b), "restore into a new --out_dir")
    refused(lambda: archive_mod.save(archive, b.out_dir, ablate.plan(b)), "does not continue")
    # an older state of the same runs is brought up to date
    older = dict(settings=ablate.fixed_settings(b), invocations=[])
    write(os.path.join(b.out_dir, "ablate_state.json"), json.dumps(older))
    restore(b)
    assert len(json.load(open(os.path.join(b.out_dir, "ablate_state.json")))["invocations"]) == 1
    # damaged archives
    manifest_path = os.path.join(archive, "manifest.json")
    good = open(manifest_path).read()
    rel = "runs/alpha0-s0/metrics.jsonl"
    with open(os.path.join(archive, rel), "a") as f:
        f.write("{}\n")
    refused(lambda: restore(cfg(tmp_path / "c")), f"{rel} of alpha0-s0 is missing or differs")
    os.remove(os.path.join(archive, rel))
    refused(lambda: restore(cfg(tmp_path / "c")), f"{rel} of alpha0-s0 is missing or differs")
    write(os.path.join(archive, rel), open(os.path.join(a.out_dir, rel), "rb").read())
    for text, words in (
        ("{", "not an ablation archive's manifest"),
        ('{"jobs": {}}', "not an ablation archive's manifest"),
        (good.replace('"runs/alpha0-s0/metrics.jsonl"', '"runs/../../escape"'), "unsafe path"),
        (good.replace('"runs/alpha0-s0/metrics.jsonl"', '"/tmp/escape"'), "unsafe path"),
        (good.replace('"dir": "runs/gppo-s0"', '"dir": "../victim"'), "unsafe path"),
    ):
        write(manifest_path, text)
        refused(lambda: restore(cfg(tmp_path / "c")), words)
    assert not os.path.exists(tmp_path / "victim") and not os.path.exists(tmp_path / "c" / "runs")


def test_a_save_stopped_before_its_manifest_leaves_the_old_archive_whole(tmp_path, monkeypatch):
    a = machine_a(tmp_path)
    archive = str(tmp_path / "archive")
    archive_mod.save(archive, a.out_dir, ablate.plan(a))
    finish(a, "eval_final:gppo-s0")  # gppo-s0's model is no longer needed
    finish(a, "alpha0.2-s0", steps=a.steps)
    write_atomic = archive_mod._write_atomic

    def stop_at_manifest(path, data):
        if path.endswith("manifest.json"):
            raise KeyboardInterrupt
        write_atomic(path, data)

    monkeypatch.setattr(archive_mod, "_write_atomic", stop_at_manifest)
    with pytest.raises(KeyboardInterrupt):
        archive_mod.save(archive, a.out_dir, ablate.plan(a))
    monkeypatch.setattr(archive_mod, "_write_atomic", write_atomic)
    assert set(archive_mod.read(archive)["jobs"]) == KEPT  # the old manifest, its files unchanged
    b = cfg(tmp_path / "b")
    assert archive_mod.restore(archive, b.out_dir, ablate.fixed_settings(b), ablate.plan(b)) == len(
        KEPT
    )
    # the next save completes it and drops the model no job needs
    archive_mod.save(archive, a.out_dir, ablate.plan(a))
    assert "runs/gppo-s0/hf/model.safetensors" not in archived_files(archive)
    assert {"alpha0.2-s0", "eval_final:gppo-s0"} <= set(archive_mod.read(archive)["jobs"])


def test_a_plan_of_other_arms_keeps_the_base_model_in_the_archive(tmp_path):
    """An invocation of --arms=sft starts no RL run from the base model, yet the archive keeps it:
    the next invocation of the RL arms starts every run from it."""
    a = machine_a(tmp_path)
    archive = str(tmp_path / "archive")
    archive_mod.save(archive, a.out_dir, ablate.plan(a))
    finish(a, "eval:sft-mixed-s0")  # the base model's own eval done: no sft-arm job reads it now
    sft_only = cfg(tmp_path / "a", arms="sft")
    archive_mod.save(archive, sft_only.out_dir, ablate.plan(sft_only))
    assert "runs/sft-mixed-s0/hf/model.safetensors" in archived_files(archive)
    b = cfg(tmp_path / "b")
    archive_mod.restore(archive, b.out_dir, ablate.fixed_settings(b), ablate.plan(b))
    assert os.path.exists(
        os.path.join(b.out_dir, "runs", "sft-mixed-s0", "hf", "model.safetensors")
    )


def pilot(c, clipped):
    """Finished pilot runs whose clipped fraction after the warmup is `clipped` at every lr."""
    for lr in ablate.pilot_lrs(c):
        rows = [
            dict(step=s, accuracy=0.5, clip_frac_low=clipped, clip_frac_high=0.0)
            for s in range(1, c.pilot_steps + 1)
        ]
        name = f"pilot-lr{lr:g}-s{c.pilot_seed}"
        write(
            os.path.join(c.out_dir, "runs", name, "metrics.jsonl"),
            "".join(json.dumps(r) + "\n" for r in rows),
        )
        write(os.path.join(c.out_dir, "runs", name, "hf", "tokenizer.json"), "{}")


def test_loss_off_runs_are_checked_before_anything_is_restored(tmp_path, capsys, monkeypatch):
    """loss_off's runs are planned from the pilot's metrics, which a new machine has only once
    restored: the check plans them from the archive's own pilot, before writing anything."""
    a = cfg(tmp_path / "a", arms="loss_off", seeds=1)
    for name in ("toy-s0", "toy-s100", "distill-sft-mixed-s0", "sft-mixed-s0"):
        finish(a, name)
    pilot(a, 0.05)
    assert "gppo-off-s0" in {j["name"] for j in ablate.plan(a)}
    finish(a, "gppo-off-s0", steps=a.steps)
    finish(a, "eval_final:gppo-off-s0")
    archive = str(tmp_path / "archive")
    monkeypatch.setattr(ablate, "run_jobs", lambda *a, **k: set())
    monkeypatch.setattr(ablate, "report", lambda *a, **k: None)
    ablate.main(ablate.AblateConfig(**{**ablate.asdict(a), "archive": archive}))
    assert "gppo-off-s0" in archive_mod.read(archive)["jobs"]
    longer = cfg(tmp_path / "b", arms="loss_off", seeds=1, steps=40, archive=archive)
    with pytest.raises(SystemExit) as e:
        ablate.main(longer)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "job gppo-off-s0 ran with ['--steps=30']" in err
    assert not os.path.exists(longer.out_dir)


def test_an_archive_overlapping_the_out_dir_is_refused(tmp_path, capsys, monkeypatch):
    a = machine_a(tmp_path)
    monkeypatch.setattr(ablate, "run_jobs", lambda *a, **k: set())
    monkeypatch.setattr(ablate, "report", lambda *a, **k: None)
    for archive in (a.out_dir, os.path.join(a.out_dir, "archive"), str(tmp_path)):
        c = ablate.AblateConfig(**{**ablate.asdict(a), "archive": archive})
        with pytest.raises(SystemExit) as e:
            ablate.main(c)
        assert e.value.code == 2 and "overlap" in capsys.readouterr().err
    assert done(a) >= KEPT


def test_a_failed_save_still_reports_and_says_so(tmp_path, monkeypatch, capsys):
    a = machine_a(tmp_path)
    reported = []
    monkeypatch.setattr(ablate, "run_jobs", lambda *a, **k: set())
    monkeypatch.setattr(ablate, "report", lambda *a, **k: reported.append(1))

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(archive_mod, "save", full_disk)
    c = ablate.AblateConfig(**{**ablate.asdict(a), "archive": str(tmp_path / "archive")})
    with pytest.raises(SystemExit) as e:
        ablate.main(c)
    assert reported == [1] and "was not saved" in str(e.value.code)
    assert "No space left on device" in capsys.readouterr().err


def test_manifests_and_states_of_the_wrong_shape_are_refused_in_one_line(tmp_path, capsys):
    a = machine_a(tmp_path)
    archive = str(tmp_path / "archive")
    archive_mod.save(archive, a.out_dir, ablate.plan(a))
    manifest_path = os.path.join(archive, "manifest.json")
    good = json.load(open(manifest_path))
    b = cfg(tmp_path / "b")

    def refused(words):
        with pytest.raises(SystemExit) as e:
            archive_mod.restore(archive, b.out_dir, ablate.fixed_settings(b), ablate.plan(b))
        err = capsys.readouterr().err
        assert e.value.code == 2 and words in err and err.count("\n") == 1, err

    for change in (
        lambda m: m["jobs"]["alpha0-s0"].pop("cmd"),
        lambda m: m["jobs"]["alpha0-s0"].update(cmd=3),
        lambda m: m["state"].update(settings=[1]),
        lambda m: m["jobs"]["alpha0-s0"].update(files=["runs/x"]),
    ):
        m = json.loads(json.dumps(good))
        change(m)
        write(manifest_path, json.dumps(m))
        refused("not an ablation archive's manifest")
    write(manifest_path, json.dumps(good))
    # a link in place of a file, even to the right bytes
    rel = os.path.join(archive, "runs", "alpha0-s0", "metrics.jsonl")
    copy = str(tmp_path / "copy.jsonl")
    os.replace(rel, copy)
    os.symlink(copy, rel)
    refused("is not a plain file")
    os.remove(rel)
    os.replace(copy, rel)
    # a damaged state in the out_dir
    write(os.path.join(b.out_dir, "ablate_state.json"), "[1, 2]")
    refused("not an ablation state")
    assert not os.path.exists(os.path.join(b.out_dir, "runs"))


def test_main_saves_after_each_finished_job(tmp_path, monkeypatch):
    """A machine lost mid-invocation (no finally runs) leaves an archive of the jobs finished so
    far: main hands run_jobs a save to call after each."""
    a = machine_a(tmp_path)
    archive = str(tmp_path / "archive")
    saved_mid_way = []

    def run_jobs(*args, after_each=None, **kw):
        after_each()
        saved_mid_way.append(set(archive_mod.read(archive)["jobs"]))
        return set()

    monkeypatch.setattr(ablate, "run_jobs", run_jobs)
    monkeypatch.setattr(ablate, "report", lambda *a, **k: None)
    ablate.main(ablate.AblateConfig(**{**ablate.asdict(a), "archive": archive}))
    assert saved_mid_way == [KEPT]


def test_the_committed_rerun_restores_under_todays_defaults(tmp_path):
    """experiments/results/ablate_rerun, the 2026-12-07 rerun's finished runs: whole (every file's
    sha256), made with today's default settings and commands, so that `bash train.sh ablate
    --archive=experiments/results/ablate_rerun` goes on with it; a change to a job's command
    fails here, not hours into the next invocation."""
    archive = os.path.join(ROOT, "experiments", "results", "ablate_rerun")
    c = ablate.AblateConfig(out_dir=str(tmp_path / "out"))
    fixed = ablate.fixed_settings(c)
    in_archive = ablate.plan(ablate.AblateConfig(**{**ablate.asdict(c), "out_dir": archive}))
    manifest = archive_mod.check(archive, c.out_dir, fixed, in_archive, planned_in=archive)
    assert archive_mod.restore(archive, c.out_dir, fixed, ablate.plan(c)) == len(manifest["jobs"])
    planned = ablate.plan(c)
    assert set(manifest["jobs"]) <= {j["name"] for j in planned if j["done"]()}
    # the base model travels (every RL run starts from it)
    assert manifest["jobs"]["sft-mixed-s0"]["base"]
