"""An ablation that outlives its machine: the finished runs' results in one directory to commit.

The default ablation costs about 1,300 core-minutes, several sessions of a 2-core machine, and a
machine (its out_dir with it) may not outlive a session. `save` copies into an archive directory
what the report reads of every finished job, and what a job still to run needs of it:

  gppo.py, sft.py    metrics.jsonl                 eval.py    results.json
  distill.py         report.json                   the state  ablate_state.json, inside the manifest
  the base model every RL run starts from, and a finished RL run's model while its eval is to run:
  the hf/ directory

and `restore` copies them into an out_dir, marking each run finished (a file RESTORED in its
directory), so ablate.py skips it. A finished job is kept only where no job still to run needs more
of it than that: an RL run once its eval is done or with its model, distill.py's data once its SFT
run is done. tools/toy.py's files are never kept: the toy is made again from its seed in seconds.
Unfinished runs are not kept (no checkpoint travels); they start again from step 0.

The base model travels as bits, so the arms stay paired however many machines the runs took: a
model trained again from the same seed need not be the same bits (another CPU, another commit). The archive only grows: a save keeps
every job an earlier save kept that this plan does not (other --arms, fewer --seeds), and a base
model for good; only an RL model whose eval is done leaves it. manifest.json, written last, names each file with its sha256; a restore
checks them, the settings and each job's command before it changes anything, and refuses with one
line (exit 2). One file per result, so git stores an unchanged file (the base model) once.

Run (ablate.py restores at its start, saves after each finished job and at its end):
  bash train.sh ablate --archive=experiments/results/ablate_rerun --stop_after_minutes=100
"""

import hashlib
import json
import os
import shutil

from parts.cli import CommandLineError

MARKER = "RESTORED"  # in a run's directory: finished on another machine, its results restored
KEPT_FILES = ("metrics.jsonl", "results.json", "report.json")
MANIFEST = "manifest.json"
STATE = "ablate_state.json"  # ablate.py's state in out_dir: the settings and the invocations


def under(path: str, out_dir: str) -> str | None:
    """`path` relative to out_dir if it lies in it (given relative to the working directory or
    absolute), else None."""
    root = os.path.abspath(out_dir)
    full = os.path.abspath(path)
    return os.path.relpath(full, root) if full.startswith(root + os.sep) else None


def relative_cmd(cmd: list, out_dir: str) -> list:
    """A job's command with every path in out_dir written {out_dir}/...: the same job on any
    machine, whatever its out_dir (values may be comma-separated lists of paths)."""
    out = []
    for arg in cmd:
        key, eq, value = arg.partition("=")
        paths = [
            "{out_dir}/" + under(v, out_dir) if os.sep in v and under(v, out_dir) else v
            for v in value.split(",")
        ]
        out.append(key + eq + ",".join(paths) if eq else arg)
    return out


def models_needed(jobs: list, out_dir: str) -> tuple:
    """(the model directories, hf/ relative to out_dir, that a job still to run reads; the base
    models, every gppo.py run's --init_from, which a larger --seeds reads later)."""
    pending = set()
    base = set()
    for job in jobs:
        for arg in job["cmd"]:
            key, _, value = arg.partition("=")
            value = value.rstrip("/")
            rel = under(value, out_dir) if os.sep in value else None
            if rel and os.path.basename(rel) == "hf":
                if not job["done"]():
                    pending.add(rel)
                if key == "--init_from":
                    base.add(rel)
    return pending, base


def kept_jobs(jobs: list, out_dir: str) -> dict:
    """{name: (job, [files relative to out_dir], whether it is a base model)}: the finished jobs to
    keep and their files (see the module's docstring for the rule)."""
    root = os.path.abspath(out_dir)
    done = {j["name"] for j in jobs if j["done"]()}
    dependents = {}
    for j in jobs:
        for a in j["after"]:
            dependents.setdefault(a, []).append(j["name"])
    pending, base = models_needed(jobs, out_dir)
    models = pending | base
    kept = {}
    for job in jobs:
        name = job["name"]
        if name not in done or job["cmd"][0] == "tools/toy.py":
            continue
        rel = os.path.relpath(os.path.abspath(job["dir"]), root)
        model = os.path.join(rel, "hf")
        waiting = [d for d in dependents.get(name, []) if d not in done]
        # a job still to run needs this one: keep it only where what it needs is its model
        if waiting and model not in models:
            continue
        files = [
            os.path.join(rel, f) for f in KEPT_FILES if os.path.exists(os.path.join(root, rel, f))
        ]
        if model in models:
            files += [
                os.path.join(model, f)
                for f in sorted(os.listdir(os.path.join(root, model)))
                if os.path.isfile(os.path.join(root, model, f))
            ]
        kept[name] = (job, files, model in base)
    return kept


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _write_atomic(path: str, data: bytes):
    """Write whole or not at all (a stop leaves the old file, or none)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    finally:
        if os.path.exists(path + ".tmp"):
            os.remove(path + ".tmp")


def _safe(archive: str, rel) -> str:
    """A path the manifest names, checked to lie inside (runs/ ...): no absolute path, no '..'."""
    parts = rel.split("/") if isinstance(rel, str) else [""]
    if (
        not rel
        or rel.startswith("/")
        or parts[0] != "runs"
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise CommandLineError(f"error: {archive}/{MANIFEST}: unsafe path {rel!r}")
    return rel


def apart(archive: str, out_dir: str):
    """Refuse an archive and an out_dir that overlap: a save removes every file of the archive that
    no job names, which would be out_dir's checkpoints, logs and unfinished runs."""
    a = os.path.realpath(archive)
    o = os.path.realpath(out_dir)
    if a == o or a.startswith(o + os.sep) or o.startswith(a + os.sep):
        raise CommandLineError(
            f"error: --archive={archive} and --out_dir={out_dir} overlap; keep the archive apart"
        )


def load_state(path: str):
    """An ablate_state.json, or None where there is none; a damaged one is refused in one line."""
    if not os.path.exists(path):
        return None
    try:
        state = json.load(open(path))
        shapes = isinstance(state.get("settings"), dict) and isinstance(
            state.get("invocations", []), list
        )
        if not shapes:
            raise ValueError("settings or invocations of the wrong type")
    except (OSError, ValueError, AttributeError) as e:
        raise CommandLineError(
            f"error: {path}: not an ablation state ({type(e).__name__}: {e})"
        ) from None
    return state


def read(archive: str) -> dict:
    """The manifest of an archive, every path checked safe and every file present with its sha256
    (a save stopped half-way leaves the old manifest, whose files are unchanged, or a mismatch)."""
    path = os.path.join(archive, MANIFEST)
    try:
        manifest = json.load(open(path))
        state = manifest["state"]
        shapes = [isinstance(manifest["jobs"], dict)]
        if state is not None:
            shapes += [isinstance(state["settings"], dict), isinstance(state["invocations"], list)]
        for job in manifest["jobs"].values():
            shapes += [
                isinstance(job["cmd"], list) and all(isinstance(a, str) for a in job["cmd"]),
                isinstance(job["files"], dict),
                isinstance(job.get("base", False), bool),
            ]
        if not all(shapes):
            raise ValueError("a field of the wrong type")
        if os.path.islink(os.path.join(archive, "runs")):
            raise CommandLineError(
                f"error: {archive}/runs is a link (an archive holds plain files)"
            )
        for name, job in manifest["jobs"].items():
            _safe(archive, f"{job['dir']}/x")
            for rel, digest in job["files"].items():
                full = os.path.join(archive, _safe(archive, rel))
                if os.path.islink(full) or (os.path.exists(full) and not os.path.isfile(full)):
                    raise CommandLineError(
                        f"error: {archive}: {rel} of {name} is not a plain file "
                        "(an archive holds plain files)"
                    )
                if not os.path.isfile(full) or sha256(full) != digest:
                    raise CommandLineError(
                        f"error: {archive}: {rel} of {name} is missing or differs from "
                        f"{MANIFEST}'s sha256 (an edit, or a copy of part of it)"
                    )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CommandLineError(
            f"error: {path}: not an ablation archive's manifest ({type(e).__name__}: {e})"
        ) from None
    return manifest


def save(archive: str, out_dir: str, jobs: list) -> int:
    """Copy into `archive` (a directory) the kept jobs' files, then write its manifest (their
    commands, directories, files with sha256, and out_dir's state), then remove the files no job
    names any more. Jobs of an earlier manifest that this plan does not keep stay. Returns the
    number of jobs the archive holds."""
    apart(archive, out_dir)
    root = os.path.abspath(out_dir)
    state = load_state(os.path.join(root, STATE))
    old = read(archive) if os.path.exists(os.path.join(archive, MANIFEST)) else dict(jobs={})
    theirs = (old.get("state") or {}).get("invocations", [])
    mine = (state or {}).get("invocations", [])
    if mine[: len(theirs)] != theirs:  # runs not restored from it: another base model, unpaired
        raise CommandLineError(
            f"error: {out_dir} does not continue {archive} (its invocations do not begin with the "
            "archive's); restore the archive first or save to another one"
        )
    entries = dict(old["jobs"])
    for name, (job, files, base) in kept_jobs(jobs, out_dir).items():
        was = entries.get(name, {})
        if was.get("base") and was["cmd"] == relative_cmd(job["cmd"], out_dir):
            # a base model stays, even where this plan (other --arms) starts no run from it
            files = sorted(set(files) | set(was["files"]))
            base = True
        digests = {rel: sha256(os.path.join(root, rel)) for rel in sorted(files)}
        for rel, digest in digests.items():
            target = os.path.join(archive, rel)
            if not (os.path.isfile(target) and sha256(target) == digest):
                _write_atomic(target, open(os.path.join(root, rel), "rb").read())
        entries[name] = dict(
            cmd=relative_cmd(job["cmd"], out_dir),
            dir=os.path.relpath(os.path.abspath(job["dir"]), root),
            files=digests,
            base=base,
        )
    manifest = dict(state=state, jobs=dict(sorted(entries.items())))
    _write_atomic(os.path.join(archive, MANIFEST), json.dumps(manifest, indent=1).encode())
    named = {rel for job in entries.values() for rel in job["files"]}
    for folder, _, names in os.walk(os.path.join(archive, "runs"), topdown=False):
        for n in names:
            rel = os.path.relpath(os.path.join(folder, n), archive).replace(os.sep, "/")
            if rel not in named:
                os.remove(os.path.join(folder, n))
        if not os.listdir(folder):
            os.rmdir(folder)
    return len(entries)


def check(archive: str, out_dir: str, settings: dict, jobs: list, planned_in: str = "") -> dict:
    """Refuse (one line, exit 2) an archive made with other settings, holding a job whose command
    this plan writes otherwise, or whose invocations are not the out_dir's (one must begin with
    the other's), or overlapping out_dir. `jobs` were planned in planned_in (default out_dir; or
    the archive itself, whose runs/ holds the pilot that plans loss_off's runs). Changes nothing.
    Returns the manifest."""
    apart(archive, out_dir)
    manifest = read(archive)
    state = manifest["state"]
    if state is not None:
        diff = {
            k: (state["settings"].get(k), v)
            for k, v in settings.items()
            if state["settings"].get(k) != v
        }
        if diff:
            raise CommandLineError(
                f"error: {archive} holds runs made with other settings, "
                f"{{option: (archived, now)}} = {diff}"
            )
        local = load_state(os.path.join(out_dir, STATE))
        if local is not None:
            mine = local.get("invocations", [])
            theirs = state["invocations"]
            if mine[: len(theirs)] != theirs and theirs[: len(mine)] != mine:
                raise CommandLineError(
                    f"error: {out_dir} holds runs that are not {archive}'s (its invocations "
                    "differ from the archive's); restore into a new --out_dir"
                )
    planned = {j["name"]: relative_cmd(j["cmd"], planned_in or out_dir) for j in jobs}
    for name, job in manifest["jobs"].items():
        if name in planned and planned[name] != job["cmd"]:
            archived = sorted(set(job["cmd"]) - set(planned[name]))
            now = sorted(set(planned[name]) - set(job["cmd"]))
            raise CommandLineError(
                f"error: {archive}: job {name} ran with {archived}, this plan has {now}; a "
                "restored run cannot change (no checkpoint travels): use the archive's options"
            )
    return manifest


def restore(archive: str, out_dir: str, settings: dict, jobs: list) -> int:
    """check(), then copy into out_dir each archived job's files and mark it RESTORED (an
    unfinished attempt's checkpoint here removed); the archive's state where out_dir has none or
    an older one. Returns the number of jobs whose files it copied (0 when out_dir has them all)."""
    manifest = check(archive, out_dir, settings, jobs)
    try:
        return _copy_in(archive, out_dir, manifest)
    except OSError as e:
        raise CommandLineError(f"error: restoring {archive} into {out_dir}: {e}") from None


def _copy_in(archive: str, out_dir: str, manifest: dict) -> int:
    """restore()'s copying, after its checks."""
    state_path = os.path.join(out_dir, STATE)
    state = manifest["state"]
    if state is not None:
        mine = load_state(state_path)
        if mine is None or len(mine.get("invocations", [])) < len(state["invocations"]):
            _write_atomic(state_path, json.dumps(state, indent=1).encode())
    here = lambda rel: os.path.join(out_dir, rel)  # noqa: E731
    restored = 0
    for name, job in manifest["jobs"].items():
        marker = here(os.path.join(job["dir"], MARKER))
        same = all(
            os.path.isfile(here(rel)) and sha256(here(rel)) == digest
            for rel, digest in job["files"].items()
        )
        if not same:
            for rel in job["files"]:
                _write_atomic(here(rel), open(os.path.join(archive, rel), "rb").read())
            # an unfinished attempt here: the archive's finished run replaces it
            checkpoint = here(os.path.join(job["dir"], "checkpoint"))
            if os.path.isdir(checkpoint):
                shutil.rmtree(checkpoint)
            restored += 1
        if not os.path.exists(marker):  # also after a restore stopped before its marker
            _write_atomic(marker, json.dumps(dict(archive=archive, name=name)).encode())
    return restored


def restored(run_dir: str) -> bool:
    """Whether a run was restored from an archive (finished on another machine)."""
    return os.path.exists(os.path.join(run_dir, MARKER))
