"""An ablation that outlives its machine: the finished runs' results in one file to commit.

The default ablation costs about 1,300 core-minutes, several sessions of a 2-core machine, and a
machine (its out_dir with it) may not outlive a session. `save` packs into one .tar.gz what the
report reads of every finished job, and what an unfinished job still needs of it:

  gppo.py, sft.py    metrics.jsonl                 eval.py    results.json
  distill.py         report.json                   the state  ablate_state.json (the invocations)
  a model a job still to run starts from (the base SFT model of every RL run): its hf/ directory

and `restore` unpacks it into an out_dir, marking each run it holds finished (a file RESTORED in
its directory), so ablate.py skips it. A finished job is kept only where no job still to run needs
more of it than that: an RL run once its eval is done (the eval reads its weights), distill.py's
data once its SFT run is done. tools/toy.py's files are never kept: the toy is made again from its
seed in seconds. Unfinished runs are not kept; they start again from step 0.

The same seeds on the same base model keep the arms paired however many machines the runs took:
the base model travels as bits. The archive holds each job's command (paths relative to the
out_dir) and the state's settings; restoring into a plan with other settings or other commands
stops with one line.

Run (ablate.py restores at its start and saves at its end):
  bash train.sh ablate --archive=experiments/results/ablate_rerun/runs.tar.gz --stop_after_minutes=100
"""

import gzip
import io
import json
import os
import shutil
import tarfile

from parts.cli import CommandLineError

MARKER = "RESTORED"  # in a run's directory: finished on another machine, its results restored
KEPT_FILES = ("metrics.jsonl", "results.json", "report.json")
STATE = "ablate_state.json"


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


def models_needed(jobs: list, out_dir: str) -> set:
    """The directories (relative to out_dir) of the finished jobs' models that a job still to run
    reads: an hf/ dir named in the command of a job not done."""
    needed = set()
    for job in jobs:
        if job["done"]():
            continue
        for arg in job["cmd"]:
            value = arg.split("=", 1)[-1].rstrip("/")
            rel = under(value, out_dir) if os.sep in value else None
            if rel and os.path.basename(rel) == "hf":
                needed.add(rel)
    return needed


def kept_jobs(jobs: list, out_dir: str) -> dict:
    """{name: (job, [files relative to out_dir])}: the finished jobs to keep and their files (see
    the module's docstring for the rule)."""
    root = os.path.abspath(out_dir)
    by_name = {j["name"]: j for j in jobs}
    done = {j["name"] for j in jobs if j["done"]()}
    dependents = {}
    for j in jobs:
        for a in j["after"]:
            dependents.setdefault(a, []).append(j["name"])
    models = models_needed(jobs, out_dir)
    kept = {}
    for name in sorted(done):
        job = by_name[name]
        if job["cmd"][0] == "tools/toy.py":
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
        kept[name] = (job, files)
    return kept


def _add_bytes(tar, name: str, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0  # the same runs make the same bytes: a commit of an unchanged archive is empty
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def save(archive: str, out_dir: str, jobs: list) -> int:
    """Write `archive` (.tar.gz) from out_dir: the kept jobs' files, the state and a manifest of the
    kept jobs (command, directory, files). Written to a temporary file and then renamed, so a stop
    mid-write leaves the old archive whole. Returns the number of jobs kept."""
    root = os.path.abspath(out_dir)
    kept = kept_jobs(jobs, out_dir)
    manifest = dict(
        jobs={
            name: dict(
                cmd=relative_cmd(job["cmd"], out_dir),
                dir=os.path.relpath(os.path.abspath(job["dir"]), root),
                files=files,
            )
            for name, (job, files) in kept.items()
        }
    )
    tmp = archive + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(archive)), exist_ok=True)
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w") as tar:
                _add_bytes(tar, "manifest.json", json.dumps(manifest, indent=1).encode())
                state = os.path.join(root, STATE)
                if os.path.exists(state):
                    _add_bytes(tar, STATE, open(state, "rb").read())
                paths = sorted({rel for _, files in kept.values() for rel in files})
                for rel in paths:
                    _add_bytes(tar, "out/" + rel, open(os.path.join(root, rel), "rb").read())
    os.replace(tmp, archive)
    return len(kept)


def read(archive: str) -> tuple:
    """(manifest, state or None, {path relative to out_dir: bytes}) of an archive."""
    files = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or member.name.startswith("/") or ".." in member.name.split("/"):
                raise CommandLineError(f"error: {archive}: unexpected member {member.name!r}")
            files[member.name] = tar.extractfile(member).read()
    if "manifest.json" not in files:
        raise CommandLineError(
            f"error: {archive}: no manifest.json (not written by ablate_archive.save)"
        )
    manifest = json.loads(files.pop("manifest.json"))
    state = json.loads(files.pop(STATE)) if STATE in files else None
    out = {name[len("out/") :]: data for name, data in files.items() if name.startswith("out/")}
    return manifest, state, out


def restore(archive: str, out_dir: str, settings: dict) -> int:
    """Unpack `archive` into out_dir: each job it holds whose files out_dir lacks or holds otherwise,
    marked RESTORED (its unfinished checkpoint here, if any, removed); its state where out_dir has
    none. `settings`: ablate.py's fixed settings of this invocation, which must be the archive's.
    An out_dir whose state does not begin with the archive's invocations holds other runs:
    refused. Returns the number of jobs restored."""
    manifest, state, files = read(archive)
    state_path = os.path.join(out_dir, STATE)
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
        if os.path.exists(state_path):
            mine = json.load(open(state_path)).get("invocations", [])
            if mine[: len(state["invocations"])] != state["invocations"]:
                raise CommandLineError(
                    f"error: {out_dir} holds runs that are not {archive}'s (its invocations "
                    "differ); restore into a new --out_dir"
                )
        else:
            os.makedirs(out_dir, exist_ok=True)
            with open(state_path + ".tmp", "w") as f:
                json.dump(state, f, indent=1)
            os.replace(state_path + ".tmp", state_path)
    restored = 0
    for name, job in manifest["jobs"].items():
        here = lambda rel: os.path.join(out_dir, rel)  # noqa: E731
        same = all(
            os.path.exists(here(rel)) and open(here(rel), "rb").read() == files[rel]
            for rel in job["files"]
        )
        if same:  # finished here, or restored before
            continue
        for rel in job["files"]:
            os.makedirs(os.path.dirname(here(rel)), exist_ok=True)
            with open(here(rel) + ".tmp", "wb") as f:
                f.write(files[rel])
            os.replace(here(rel) + ".tmp", here(rel))
        checkpoint = here(os.path.join(job["dir"], "checkpoint"))
        if os.path.isdir(checkpoint):  # an unfinished attempt here: the archive's run replaces it
            shutil.rmtree(checkpoint)
        with open(here(os.path.join(job["dir"], MARKER)), "w") as f:
            json.dump(dict(archive=archive, name=name), f)
        restored += 1
    return restored


def restored(run_dir: str) -> bool:
    """Whether a run was restored from an archive (finished on another machine)."""
    return os.path.exists(os.path.join(run_dir, MARKER))


def check_commands(archive: str, jobs: list, out_dir: str):
    """Every archived job that the plan holds must have the plan's command: a job restored under a
    changed command would mix two experiments. One line and exit 2 otherwise."""
    manifest, _, _ = read(archive)
    planned = {j["name"]: relative_cmd(j["cmd"], out_dir) for j in jobs}
    for name, job in manifest["jobs"].items():
        if name in planned and planned[name] != job["cmd"]:
            raise CommandLineError(
                f"error: {archive}: job {name}'s command differs from this plan's "
                f"(archived {job['cmd']}, planned {planned[name]}); use the archive's options "
                "or another archive"
            )
