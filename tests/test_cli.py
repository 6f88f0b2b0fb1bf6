"""What a user meets first: --help explains every option, bad input is one line naming the
file:line:field or the option (exit status 2, no traceback), from every entry point."""

import inspect
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import data  # noqa: E402
from tools import data_stats, toy  # noqa: E402
from parts.cli import option_help, parse_config  # noqa: E402
import distill  # noqa: E402
import eval as ev  # noqa: E402
import gppo  # noqa: E402
import sft  # noqa: E402
from parts import trainer  # noqa: E402


def run(script, *args, timeout=300):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


ENTRY_POINTS = [
    ("sft.py", "--lr="),
    ("gppo.py", "--loss_mode="),
    ("tools/filter_code.py", "--code_data="),
    ("eval.py", "--k="),
    ("reward.py", "--math_timeout_s="),
    ("distill.py", "--keep="),
    ("model.py", "CHECKPOINT_DIR"),
]
BENCHMARKS = [
    pytest.param(f"{folder}/{f}", "usage")
    for folder in ("benchmarks", "tools", "experiments")
    if os.path.isdir(os.path.join(ROOT, folder))
    for f in sorted(os.listdir(os.path.join(ROOT, folder)))
    if f.endswith(".py")
    # the scripts
    and 'if __name__ == "__main__":' in open(os.path.join(ROOT, folder, f)).read()
]


@pytest.mark.parametrize("command,expect", ENTRY_POINTS + BENCHMARKS)
def test_every_entry_point_and_benchmark_answers_help(command, expect, run_here):
    """Every script parses its command line with parts.cli.parse_config and answers --help with its
    usage and options, exit status 0 (in this process: ~20 scripts cost a second, not a torch
    import each)."""
    script, *words = command.split()
    proc = run_here(script, *words, "--help")
    assert proc.returncode == 0 and expect in proc.stdout, (
        command,
        proc.returncode,
        proc.stderr[-2000:],
    )


def test_help_from_the_shell():
    """The same as a user types it (the subcommand form failed once with "'--help' is not of the
    form --key=value")."""
    proc = run("tools/toy.py", "--help")
    assert proc.returncode == 0 and "--task=" in proc.stdout, proc.stderr[-2000:]


def test_one_parser_for_commands_flags_and_a_positional_argument():
    assert parse_config(
        data_stats.StatsConfig, ["f.parquet", "--skip_bad_rows"]
    ) == data_stats.StatsConfig(file="f.parquet", skip_bad_rows=True)  # bare --flag of a bool: true
    cfg = parse_config(
        {"": gppo.GPPOConfig, "stats": data_stats.StatsConfig}, ["stats", "--file=x"]
    )
    assert cfg == data_stats.StatsConfig(file="x")
    assert (
        parse_config({"": gppo.GPPOConfig, "stats": data_stats.StatsConfig}, ["--steps=3"]).steps
        == 3
    )
    # ToyConfig takes no bare argument
    for argv, message in [
        (["toy", "x"], "not of the form --key=value"),
        # one positional at most
        (["stats", "a", "b"], "'b' is not of the form"),
        (["--seed=1"], "needs a command first: toy | stats"),
        (["toy", "--seed"], "--seed needs a value"),
    ]:
        with pytest.raises(SystemExit, match=message):
            parse_config({"toy": toy.ToyConfig, "stats": data_stats.StatsConfig}, argv)


@pytest.mark.parametrize(
    "config", [sft.SFTConfig, gppo.GPPOConfig, ev.EvalConfig, distill.DistillConfig]
)
def test_help_describes_every_option(config):
    """Each option line carries the comment written beside its field (the help is read from the
    source)."""
    lines = [line for line in option_help(config) if line.startswith("  --")]
    assert len(lines) == len(config.__dataclass_fields__)
    undescribed = [line.split("=")[0].strip() for line in lines if len(line.split(None, 1)) < 2]
    assert not undescribed, f"options without a description: {undescribed}"


@dataclass
class Checked:
    # a heading
    steps: int = 3  # how many

    # the checks below are code, not options: not headings
    def __post_init__(self):
        # a comment in a method
        if self.steps < 1:
            raise ValueError("Checked: steps must be >= 1")


@dataclass
class Deep:
    steps: int = 3  # how many

    def __post_init__(self):
        if self.steps < 1:
            # a comment in a method, not --steps's help
            raise ValueError("Deep: steps must be >= 1")


class Outer:
    @dataclass
    class Nested:
        # a heading
        steps: int = 3  # how many


def test_comments_in_a_configs_methods_are_not_help():
    steps = "  --steps=3".ljust(34) + "  how many"
    assert option_help(Checked) == ["a heading", steps]
    assert option_help(Deep) == [steps]
    # a config nested in a class: its source is indented
    assert option_help(Outer.Nested) == ["a heading", steps]


def test_help_text_is_the_comment_beside_the_field():
    line = next(line for line in option_help(gppo.GPPOConfig) if line.startswith("  --alpha="))
    assert "weight of the SFT term on fully correct responses" in line


@pytest.mark.parametrize(
    "script,config",
    [
        ("sft.py", "SFTConfig"),
        ("gppo.py", "GPPOConfig"),
        ("eval.py", "EvalConfig"),
        ("distill.py", "DistillConfig"),
    ],
)
def test_help_of_each_script_shows_every_description_and_only_headings_flush_left(script, config):
    """`python X.py --help` as a user runs it: one described line per option; a line that is not an
    option is a section heading, i.e. a full-line comment above fields (a comment continued under a
    field's must join it)."""
    out = run(script, "--help").stdout.splitlines()
    cls = getattr(
        {"sft.py": sft, "gppo.py": gppo, "eval.py": ev, "distill.py": distill}[script], config
    )
    options = [line for line in out[1:] if line.startswith("  --")]
    assert len(options) == len(cls.__dataclass_fields__) and all(
        len(o.split(None, 1)) == 2 for o in options
    ), out
    source = inspect.getsource(cls)
    headings = {
        line.strip().lstrip("#").strip()
        for line in source.splitlines()
        if re.match(r"    # \S", line)
    }
    assert {line for line in out[1:] if not line.startswith("  --")} <= headings, out
    option, words = (
        ("--sft_prompts=", "else kept unverified")
        if script == "distill.py"
        else ("--toy=", "none: no toy")
    )
    # a comment continued on its own lines
    assert words in next(o for o in options if o.startswith("  " + option))


def test_unknown_option_fails_loudly():
    """A bad command line is an input error: one line, exit status 2 (as argparse), from the shell
    as in-process."""
    proc = run("gppo.py", "--learning_rate=1")
    assert (
        proc.returncode == 2
        and proc.stderr.strip() == "error: unknown option --learning_rate for GPPOConfig"
    ), proc.stderr[-2000:]
    for argv, message in [
        (["--steps=two"], "not a valid int"),
        (["--resume=maybe"], "is not true or false"),
        (["--loss_mode=ppo"], "loss_mode must be one of"),
        (["stray"], "not of the form"),
    ]:
        with pytest.raises(SystemExit, match=message) as stop:
            parse_config(gppo.GPPOConfig, argv)
        assert stop.value.code == 2, (argv, stop.value.code)


def one_error_line(proc) -> str:
    """The single line a failed run printed on stderr (torch may print unrelated warnings on stderr
    first)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "[rank" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


def test_a_config_check_is_one_line():
    """A config's own check, its __post_init__ raising ValueError (any entry point's config does
    so), is one line and exit status 2: in-process from parse_config, and from the shell (gppo.py's
    loss settings, checked by gppo_loss.LossConfig)."""
    from dataclasses import dataclass

    @dataclass
    class StepsConfig:
        # fmt: off
        steps: int = 1   # how many
        # fmt: on

        def __post_init__(self):
            if self.steps < 1:
                raise ValueError("StepsConfig: steps must be >= 1")

    with pytest.raises(SystemExit, match="^error: StepsConfig: steps must be >= 1$") as stop:
        parse_config(StepsConfig, ["--steps=0"])
    assert stop.value.code == 2
    line = one_error_line(run("gppo.py", "--eps_low=2"))
    assert "eps_low" in line and "1−eps_low" in line, line


def test_only_an_entry_point_exits():
    """One way to fail: code below an entry point raises (InputError for bad input, ValueError from
    a config's check, anything else a bug with its traceback); only the entry point itself, its
    main() or its `if __name__ == "__main__":` block, raises SystemExit or calls sys.exit. Checked
    in every story file."""
    import ast

    exits = []
    for story in sorted(f for f in os.listdir(ROOT) if f.endswith(".py")):
        tree = ast.parse(open(os.path.join(ROOT, story)).read())
        allowed = set()  # the nodes of main() and of the __main__ block
        for node in tree.body:
            if (isinstance(node, ast.FunctionDef) and node.name == "main") or (
                isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
            ):
                allowed |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            raised = (
                isinstance(node, ast.Raise)
                and node.exc is not None
                and "SystemExit" in ast.unparse(node.exc)
            )
            called = isinstance(node, ast.Call) and ast.unparse(node.func) == "sys.exit"
            if (raised or called) and id(node) not in allowed:
                exits.append(f"{story}:{node.lineno}")
    assert exits == [], exits


def test_a_checkpoint_that_is_not_qwen3_is_one_line(tmp_path):
    """A --init_from whose config.json is another architecture (model.CheckpointError, turned into
    an InputError by data.read): one line naming the option and the file, exit status 2, before any
    data is built."""
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(
        '{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}'
    )
    proc = run("sft.py", f"--init_from={tmp_path}/llama", f"--out_dir={tmp_path}/out")
    line = one_error_line(proc)
    assert line.startswith(
        f"error: --init_from={tmp_path}/llama: {tmp_path}/llama/config.json: model_type='llama'"
    )
    assert "data: " not in proc.stdout, proc.stdout[-2000:]


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    files = {
        "malformed": '{"messages": [{"role": "user", "content": "hi"}, \n',
        "missing_field": '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}\n'
        '{"conversation": []}\n',
        "empty": "",
        "math_malformed": '{"problem": "1+1?", "answer": "2"}\n{"problem": \n',
        "math_missing": '{"problem": "1+1?", "answer": "2"}\n{"problem": "2+2?"}\n',
    }
    for name, text in files.items():
        (d / f"{name}.jsonl").write_text(text)
    return d


def test_sft_bad_input_is_one_line(bad_files, tmp_path, run_here):
    tok = os.environ.get("QWEN3_TOKENIZER_DIR") or ""
    out = f"--out_dir={tmp_path}/out"
    # as the qwen3_tokenizer_dir fixture: a set but absent dir
    if os.path.exists(os.path.join(tok, "tokenizer.json")):
        #   (a checkout with no ../shared beside it, run by .ci/run) leaves these checks out instead
        #   of failing them
        line = one_error_line(
            run_here("sft.py", f"--data={bad_files}/malformed.jsonl", f"--tokenizer={tok}", out)
        )
        assert "malformed.jsonl:1: malformed JSON" in line and "--data" in line
        line = one_error_line(
            run_here("sft.py", f"--data={bad_files}/missing_field.jsonl", f"--tokenizer={tok}", out)
        )
        assert "missing_field.jsonl:2" in line and "'messages'" in line
        line = one_error_line(
            run_here("sft.py", f"--data={bad_files}/nothing_here.jsonl", f"--tokenizer={tok}", out)
        )
        assert "nothing_here.jsonl" in line
        line = one_error_line(
            run_here("sft.py", f"--data={bad_files}/empty.jsonl", f"--tokenizer={tok}", out)
        )
        assert "empty.jsonl" in line
    line = one_error_line(
        run_here(
            "sft.py", f"--data={bad_files}/malformed.jsonl", f"--tokenizer={tmp_path}/no_tok", out
        )
    )
    assert f"--tokenizer={tmp_path}/no_tok" in line
    line = one_error_line(run_here("sft.py", f"--init_from={bad_files}", out))
    assert f"--init_from={bad_files}" in line and "config.json" in line
    line = one_error_line(run_here("sft.py", "--rows_per_step=3", "--micro_rows=2", out))
    assert "--rows_per_step=3" in line


def test_gppo_bad_input_is_one_line(bad_files, tiny_checkpoint, tmp_path, run_here):
    out = f"--out_dir={tmp_path}/out"
    ckpt = f"--init_from={tiny_checkpoint}"
    line = one_error_line(
        run_here("gppo.py", ckpt, f"--math_data={bad_files}/math_malformed.jsonl", out)
    )
    assert "math_malformed.jsonl:2: malformed JSON" in line and "--math_data" in line
    line = one_error_line(
        run_here("gppo.py", ckpt, f"--math_data={bad_files}/math_missing.jsonl", out)
    )
    assert "math_missing.jsonl:2" in line and "'answer'" in line
    line = one_error_line(
        run_here("gppo.py", ckpt, f"--math_data={bad_files}/nothing_here.jsonl", out)
    )
    assert "nothing_here.jsonl" in line
    line = one_error_line(run_here("gppo.py", ckpt, f"--math_data={bad_files}/empty.jsonl", out))
    assert "empty.jsonl" in line  # not silently replaced by the toy task
    line = one_error_line(run_here("gppo.py", ckpt, f"--code_data={bad_files}/empty.jsonl", out))
    assert "empty.jsonl" in line
    line = one_error_line(run_here("gppo.py", f"--init_from={bad_files}", out))
    assert f"--init_from={bad_files}" in line and "run `python sft.py` first" in line


def test_a_hub_id_instead_of_a_path_says_how_to_download_it_before_any_work(
    tiny_checkpoint, tmp_path, run_here
):
    """A Hugging Face Hub id where a local path is expected: one line with the download command of
    the usual tools, for a model and for a data set, from every entry point; sft.py says it before
    reading its data (whose report line would come first)."""
    out = f"--out_dir={tmp_path}/out"
    model = "hf download Qwen/Qwen3-0.6B --local-dir Qwen3-0.6B"
    dataset = "hf download openai/gsm8k --repo-type dataset --local-dir gsm8k"
    for script, args, command in [
        ("gppo.py", ["--init_from=Qwen/Qwen3-0.6B"], model),
        ("gppo.py", [f"--init_from={tiny_checkpoint}", "--math_data=openai/gsm8k"], dataset),
        ("sft.py", ["--init_from=Qwen/Qwen3-0.6B"], model),
        ("eval.py", ["--model=Qwen/Qwen3-0.6B"], model),
        (
            "distill.py",
            ["--server=http://127.0.0.1:9/v1", "--served_model=x", "--math_prompts=openai/gsm8k"],
            dataset,
        ),
    ]:
        proc = run_here(script, *args, out)
        line = one_error_line(proc)
        assert command in line and "huggingface-cli download" in line, (script, line)
        # sft.py: no data was built
        assert "data: " not in proc.stdout, (script, proc.stdout[-2000:])


def test_the_toy_without_its_files_says_which_command_writes_them(
    tiny_checkpoint, tmp_path, run_here
):
    """No data option and no toy files where --toy looks (out/ of the working directory, here an
    empty one): one line naming the command that writes them."""

    def error(script, *args):
        return one_error_line(run_here(script, *args, cwd=tmp_path))

    line = error("gppo.py", f"--init_from={tiny_checkpoint}")
    assert "--toy=countdown" in line and "out/toy/countdown/rl/countdown_3.jsonl" in line, line
    assert "`python tools/toy.py --task=countdown`" in line, line
    line = error("eval.py", f"--model={tiny_checkpoint}", "--toy=sums")
    assert "--toy=sums" in line and "`python tools/toy.py --task=sums`" in line, line
    line = error("sft.py")
    assert "--toy=countdown" in line and "out/distill/sft.jsonl" in line, line
    assert "`python tools/toy.py --task=countdown`" in line, line


def test_eval_bad_model(bad_files, run_here):
    line = one_error_line(run("eval.py", f"--model={bad_files}/missing_model"))
    assert "--model=" in line and "missing_model" in line
    # one-prompt mode (in this process: the line above ran eval.py as a process)
    line = one_error_line(run_here("eval.py", f"--model={bad_files}/missing_model", "--prompt=hi"))
    assert "--model=" in line and "missing_model" in line


def test_threads_are_chosen_and_printed(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        cores = len(os.sched_getaffinity(0))
        assert (
            trainer.set_threads(0, torch.device("cpu"))
            == max(1, cores // 2)
            == torch.get_num_threads()
        )
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert trainer.set_threads(0, torch.device("cpu")) == 1
        assert trainer.set_threads(3, torch.device("cpu")) == 3 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_eval_labels_and_scoring_progress(capsys):
    import time
    from concurrent.futures import ThreadPoolExecutor

    assert ev.model_label(os.path.join(os.getcwd(), "out", "gppo", "hf")) == os.path.join(
        "out", "gppo", "hf"
    )
    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(time.sleep, 0.3) for _ in range(4)]
        ev.wait_for_scores(jobs, "bench", rank=0, every_s=0.1)
    assert all(job.done() for job in jobs)
    assert "bench: scoring," in capsys.readouterr().out
    table = ev.format_table(
        [
            {"model_label": "out/sft/hf", "benchmarks": {}},
            {"model_label": "out/gppo/hf", "benchmarks": {}},
        ]
    )
    assert "out/sft/hf" in table and "out/gppo/hf" in table


def test_only_declared_input_errors_become_one_line(tmp_path):
    """data.read, what every entry point reads its inputs with: the declared input errors
    (data.DataError, a path that is not there, model.CheckpointError) become one InputError naming
    the option; any other exception is a bug and keeps its type and traceback."""
    from model import from_pretrained

    def bad_rows():
        raise data.DataError("x.jsonl:3: field 'answer' is missing")

    with pytest.raises(trainer.InputError, match="^--math_data: x.jsonl:3: field 'answer'"):
        data.read("--math_data", bad_rows)
    with pytest.raises(trainer.InputError, match="^--tokenizer=T: no tokenizer at .*no_such_dir"):
        data.read("--tokenizer=T", data.load_tokenizer, str(tmp_path / "no_such_dir"))
    (tmp_path / "config.json").write_text(
        '{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}'
    )
    with pytest.raises(
        trainer.InputError,
        match=r"^--init_from=D: .*config.json: model_type='llama'.*Qwen3 \(dense\) only",
    ):
        data.read("--init_from=D", from_pretrained, str(tmp_path))

    def buggy_loader():
        return {}["a key the code forgot"]  # a KeyError no input check raised: a bug

    with pytest.raises(KeyError) as bug:
        data.read("--data", buggy_loader)
    assert "buggy_loader" in [entry.name for entry in bug.traceback]


def test_a_bug_in_model_building_keeps_its_traceback(tmp_path, monkeypatch, toy_files):
    """The whole entry point: a ValueError raised inside model building (not an input check) is not
    turned into `error: --init_from=...: ...` (exit status 2) but reaches the user as the ValueError
    it is."""

    def broken_init_weights(self, std=0.02, seed=None):
        raise ValueError("a bug in init_weights")

    monkeypatch.setattr(sft.Qwen3, "init_weights", broken_init_weights)
    cfg = parse_config(
        sft.SFTConfig,
        [
            *toy_files["sft"],
            "--n_layer=1",
            "--hidden=32",
            "--n_head=2",
            "--n_kv_head=1",
            "--head_dim=16",
            "--intermediate=64",
            f"--out_dir={tmp_path}",
        ],
    )
    with pytest.raises(ValueError, match="a bug in init_weights") as bug:
        trainer.run_entry_point(sft.main, cfg)
    assert "broken_init_weights" in [entry.name for entry in bug.traceback]
