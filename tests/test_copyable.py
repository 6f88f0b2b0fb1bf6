"""Copyable for real: each part (parts/*.py) is copied ALONE into an empty folder and, in a fresh
interpreter that sees only the installed dependencies, imports, answers its command line where it
has one, and does one small real thing, and answers --help with exit status 0; each story file at
the top is copied with the project files it imports (and theirs) and answers --help (or imports,
where it has no command line). A part that imports another project file fails here."""

import ast
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = sorted(
    f[:-3]
    for f in os.listdir(os.path.join(ROOT, "parts"))
    if f.endswith(".py") and f != "__init__.py"
)
STORIES = sorted(f for f in os.listdir(ROOT) if f.endswith(".py"))

# One small real call per part, run in the folder that holds only that part. fp32 decode attention over <= 64 tokens
# of values |v| < 5: 64 additions, each off by at most 2^-24 of a partial sum < 5, bound the error by 64 * 5 * 2^-24.
CHECKS = {
    # the last assistant turn's span: its reasoning in a think block, through <|im_end|>; the
    # generation prompt with thinking off ends in an empty think block
    "chat_template": (
        "import chat_template as c\n"
        "m = [{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': '<think>r</think>ok'}]\n"
        "text, (s, e) = c.render(m)\n"
        "print(repr(text[s:e]), repr(c.render_chat(m[:1], True, False)))",
        "'<think>\\nr\\n</think>\\n\\nok<|im_end|>' "
        "'<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'",
    ),
    "cli": (
        "from dataclasses import dataclass\nfrom cli import parse_config\n@dataclass\nclass C:\n"
        "    steps: int = 1   # how many\nprint(parse_config(C, ['--steps=3']).steps)",
        "3",
    ),
    "chat_client": (
        "import chat_client\nprint(chat_client.assistant_turn({'content': 'x</think> y'}))",
        "('<think>\\nx\\n</think>\\n\\ny', True)",
    ),
    "countdown_check": (
        "import countdown_check as c\nprint(c.countdown_reward('<think></think> \\\\boxed{2*3+4}', "
        "[4, 3, 2], 10), c.countdown_reward('</think> \\\\boxed{2*3+4}', [4, 3, 3], 10))",
        "1.0 0.0",
    ),
    "cuda_graphs": (
        "import torch, cuda_graphs\ng = cuda_graphs.BucketedGraphs(lambda x: x * 2, dict(x=torch.zeros(20)), "
        "dict(x=-1.0), capture=False)\nprint(g.buckets, g.run(3, x=torch.ones(3)).tolist(), "
        "g.buffers['x'][:5].tolist())",
        "[1, 2, 4, 8, 16, 20] [2.0, 2.0, 2.0] [1.0, 1.0, 1.0, -1.0, 0.0]",
    ),
    # a benchmark item of 3 words (shorter than n = 8) is matched whole; the same prompt twice is a duplicate
    "decontamination": (
        "import decontamination as d\nf = d.PromptFilter(d.Decontaminator([('b', 1, 'What is 2+3?')]))\n"
        "print([f.keep('s', k, t) for k, t in (('1', 'Q: what is 2 + 3 ?'), ('2', 'Sum 4, 5'), "
        "('3', 'sum 4 5'))], f.report()['sources'])",
        "[False, True, False] {'s': {'read': 3, 'contaminated': 1, 'kept': 1, 'duplicates': 1}}",
    ),
    "decode_kernels": (None, None),  # its own self-check: `python decode_kernels.py`, below
    "formats": (
        "import formats\nrows = formats.load('math', 'aime24.jsonl')\nprint(len(rows), rows[0]['answer'])",
        "1 ",
    ),
    # a record appended twice is written once; a torn last line (no newline) is dropped on reopening;
    # a changed setting is named
    "journal": (
        "import journal as j\nJ = j.Journal('s.jsonl')\nprint(J.append({'id': 'p', 'sample': 0}), "
        "J.append({'id': 'p', 'sample': 0}))\nJ.close()\nopen('s.jsonl', 'a').write('{\"id\"')\n"
        "J = j.Journal('s.jsonl')\nprint(len(J), J.torn, J.read(('p', 0)), j.lock_folder('.') is not None)\n"
        "print(j.changed_settings('r.json', {'s': {'t': 1}}), j.changed_settings('r.json', {'s': {'t': 2}}))",
        "True False\n1 5 {'id': 'p', 'sample': 0} True\n[] ['t']",
    ),
    "memory_plan": (
        "import types, memory_plan\nc = types.SimpleNamespace(**memory_plan.QWEN3['8B'])\n"
        # Qwen3-8B's published count
        "print(memory_plan.param_counts(c)['total'])",
        "8190735360",
    ),
    "norm_kernels": (
        "import torch, norm_kernels\nx = torch.tensor([[3.0, 4.0]])\n"
        "print(norm_kernels.rms_norm(x, torch.ones(2), 0.0).tolist())",
        "[[0.8485281",
    ),  # (3, 4) / sqrt(12.5)
    "hf_checkpoint": (
        "import types, torch, hf_checkpoint as h\nm = torch.nn.Linear(2, 3, bias=False)\n"
        "m.config = types.SimpleNamespace(tie_word_embeddings=False, to_hf_dict=dict)\n"
        "h.save_pretrained(m, 'ck', str)\nw = h.read_weights('ck', m, str, torch.bfloat16)\n"
        "print(h.checked_dtype('ck', m, str), w['weight'].dtype, torch.equal(w['weight'], "
        "m.weight.detach().bfloat16()))",
        "torch.float32 torch.bfloat16 True",
    ),
    # a pool of 3 blocks of 2 tokens, 2 layers of 1 KV head of 4: slot 5 is block 2, offset 1;
    # 2 x 48 fp32 values = 384 bytes; bf16 blocks of 64 bytes: 1000 // 64 = 15, capped at 4 x 3 = 12
    "kv_cache": (
        "import types, torch, kv_cache as c\n"
        "cfg = types.SimpleNamespace(num_hidden_layers=2, num_key_value_heads=1, head_dim=4)\n"
        "pool = c.PagedKVCache(cfg, 3, 2, dtype=torch.float32, device='cpu')\n"
        "pool.write(1, torch.tensor([5]), torch.ones(1, 1, 4), 2 * torch.ones(1, 1, 4))\n"
        "print(pool.nbytes, pool.k_pool[1, 0, 2, 1].tolist(), pool.v_pool.sum().item(),\n"
        "      c.kv_cache_blocks(cfg, torch.bfloat16, 1000, 2, 4, 5))",
        "384 [1.0, 1.0, 1.0, 1.0] 8.0 12",
    ),
    # logits (0, 1, 2), target 2: logπ = 2 - log(1 + e + e^2); the loss -logπ (coef -1) has the
    # gradient softmax - onehot = (0.0900, 0.2447, -0.3348) at the logits
    "logit_kernels": (
        "import torch, logit_kernels as k\n"
        "z = torch.tensor([[0.0, 1.0, 2.0]], requires_grad=True)\n"
        "t = torch.tensor([2])\n"
        "kernels = k.LogitKernels(chunk_size=1)\n"
        "nll = lambda logprobs: (-logprobs.sum(), -torch.ones_like(logprobs))\n"
        "loss, logprobs, entropy = k.LossFromLogits.apply(z, t, nll, kernels, False)\n"
        "loss.backward()\n"
        "print(round(logprobs.item(), 4), [round(x, 4) for x in z.grad[0].tolist()])",
        "-0.4076 [0.09, 0.2447, -0.3348]",
    ),
    "math_checker": (
        "import math_checker\nprint(math_checker.compare('\\\\frac12', '0.5'))",
        "(True, True)",
    ),
    # 1 - C(3, 2) / C(5, 2) = 0.7; two problems, 1 and 0 of 2 samples correct: Avg@2 = 0.25, pass@2 = 0.5
    "pass_at_k": (
        "import pass_at_k as p\ns = [dict(problem_index=i, problem_id=i, correct=c, reward=float(c), "
        "format_failure=False, length=3, finish_reason='stop') for i, c in ((0, 1), (0, 0), (1, 0), (1, 0))]\n"
        "r = p.summarize(s, [1, 2])\nprint(round(p.pass_at_k(5, 2, 2), 12), r['avg_at_k'], r['pass_at_k'])",
        "0.7 0.25 {'1': 0.25, '2': 0.5}",
    ),
    # best-fit decreasing by hand: 5 opens row 0, 4 row 1, 3 fills row 1, 2 fills row 0; two
    # documents of 3 and 2 tokens in a row of 6: positions restart, the padding is document 2
    "packing": (
        "import packing\n"
        "print(packing.plan_packing([3, 5, 2, 4], 7))\n"
        "rows = packing.pack_examples([([1, 2, 3], [0, 1, 1]), ([4, 5], [1, 1])], 6, pad_id=0)\n"
        "print(rows[0]['position_ids'].tolist(), rows[0]['document_ids'].tolist())",
        "[[1, 2], [3, 0]]\n[0, 1, 2, 0, 1, 0] [0, 0, 0, 1, 1, 2]",
    ),
    "results_table": (
        "import results_table\nb = dict(problems=2, k=4, avg_at_k=0.5, pass_at_k={'1': 0.5, '4': 1.0}, "
        "mean_reward=0.5, format_failure_rate=0.0, mean_length=9.0, truncated_rate=0.0)\n"
        "t = results_table.format_table([{'model_label': 'm', 'benchmarks': {'b': b}}])\n"
        "print([line.split()[-1] for line in t.splitlines() if 'pass@4' in line])",
        "['100.00']",
    ),
    # the warning's cause follows the accuracy; two of 2 groups x 2 responses drawn, in stream order
    "rl_report": (
        "import rl_report as r\nfrom types import SimpleNamespace as N\nc = N(group_size=8, max_gen_rounds=1, "
        "log_samples=2, seed=0)\nprint('always solves' in r.no_update_warning({'accuracy': 1.0}, 3, c))\n"
        "s = N(token_ids=[5], finish_reason='stop')\ngs = [N(position=p, task={'prompt_ids': [1]}, samples=[s, s], "
        "rewards=[0.0, 1.0], advantages=[-1.0, 1.0], correct=[False, True], keep=True) for p in (7, 3)]\n"
        "out = []\nr.log_samples(N(write=out.append), gs, 1, c, N(decode=lambda ids, **k: str(ids)))\n"
        "print(len(out), sorted(out, key=lambda o: (o['prompt_position'], o['sample'])) == out)",
        "True\n2 True",
    ),
    # a row of one response (2 prompt + 2 response tokens); a policy whose hidden state is the token id: the
    # states at the logit positions 1, 2 are those of tokens 2, 3; the dummy row adds no token
    "rl_rows": (
        "import torch, rl_rows as r\ns = r.TrainSeq([1, 2, 3, 4], 2, 0, 0.5, True, [0.0, 0.0], [-0.1, -0.2])\n"
        "layout = dict(input_ids=[1, 2, 3, 4], position_ids=[0, 1, 2, 3], document_ids=[0] * 4, "
        "prefix_docs=[-1], logit_positions=[1, 2], targets=[3, 4])\nt = r.row_tensors([s], layout, 'cpu')\n"
        "policy = lambda ids, **k: ids[..., None].float()\nprint(t['adv'].tolist(), t['sft'].tolist(), "
        "t['num_tokens'], r.hidden_at_targets(policy, t)[:, 0].tolist(), r.row_tensors(None, None, 'cpu')['num_tokens'])",
        "[0.5, 0.5] [1.0, 1.0] 2 [2.0, 3.0] 0",
    ),
    # greedy: the argmax, logprob log_softmax([0, 1, 2])[2] = 2 - log(1 + e + e^2);
    # top-k 1: the top token, logprob 0
    "sampling": (
        "import torch, sampling\nfrom types import SimpleNamespace as P\n"
        "logits = torch.tensor([[0.0, 1.0, 2.0], [5.0, 0.0, 0.0]])\n"
        "greedy = P(temperature=0, top_k=0, top_p=1.0)\n"
        "top1 = P(temperature=1.0, top_k=1, top_p=1.0)\n"
        "t, lp = sampling.sample(logits, [greedy, top1], [0.5, 0.9])\n"
        "print(t.tolist(), [round(x, 4) for x in lp.tolist()])",
        "[2, 0] [-0.4076, 0.0]",
    ),
    # a pool of 4 blocks of 2 tokens: a prompt of 3 tokens with 2 samples takes 2 blocks, shared;
    # the next group waits (no block left for its first decode); a decode step copies the shared
    # last block for the first sample
    "scheduler": (
        "import scheduler as s\n"
        "class Seq:\n"
        "    def __init__(self, n):\n"
        "        self.token_ids = [0] * n\n"
        "        self.block_table, self.finish_reason, self.preempted = [], None, False\n"
        "sch = s.Scheduler(s.BlockManager(4, 2), max_num_seqs=4,\n"
        "                  max_num_batched_tokens=8)\n"
        "sch.start([[Seq(3), Seq(3)], [Seq(4)]])\n"
        "admitted = sch.admit()\n"
        "print([q.block_table for group in admitted for q in group], len(sch.waiting))\n"
        "plan = sch.decode_slots()\n"
        "print(plan.slots, plan.copies, [seq.block_table for seq in sch.running])",
        "[[0, 1], [0, 1]] 1\n[4, 2] [(1, 2)] [[0, 2], [0, 1]]",
    ),
    "sandbox": (
        "import sandbox\ntests = [{'input': '1 2', 'output': '3'}]\n"
        "print([sandbox.run_tests(p, tests)[0].passed for p in ('print(sum(map(int, input().split())))',"
        " 'print(0)')])",
        "[True, False]",
    ),
    "tracking": (
        "import tracking\ntracking.Tracker('none', '.', {}).log({'step': 1, 'loss': 0.5})\n"
        "print(tracking.backends(''))",
        "[]",
    ),
    "trainer": (
        "import os, torch, trainer\ntrainer.init_distributed('cpu')\nm = torch.nn.Linear(2, 2)\n"
        "o = torch.optim.AdamW(m.parameters())\nc = trainer.Checkpointer('ck', background=False)\n"
        "c.save(m, o, {'step': 3})\nprint('step', c.resume(m, o)['step'])",
        "step 3",
    ),
}


def fresh_env():
    """This interpreter's installed packages, none of the project (no PYTHONPATH); Triton runs on
    the CPU."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    return env


def project_imports(path: str) -> set:
    """The project files `path` imports, anywhere in it (functions too), as paths relative to
    ROOT."""
    found = set()
    for node in ast.walk(ast.parse(open(os.path.join(ROOT, path)).read())):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
            else []
        )
        for name in names:
            file = name.replace(".", "/") + ".py"
            if os.path.isfile(os.path.join(ROOT, file)) and file != path:
                found.add(file)
    return found


def closure(path: str) -> set:
    todo = [path]
    seen = {path}
    while todo:
        for dep in project_imports(todo.pop()) - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


def test_every_part_is_checked_here():
    assert set(PARTS) == set(CHECKS), set(PARTS) ^ set(CHECKS)


@pytest.mark.parametrize("part", PARTS)
def test_a_part_imports_nothing_of_the_project(part):
    assert project_imports(f"parts/{part}.py") == set(), (
        f"parts/{part}.py imports other project files"
    )


@pytest.mark.parametrize("part", PARTS)
def test_a_part_runs_alone(part, tmp_path):
    shutil.copy(os.path.join(ROOT, "parts", f"{part}.py"), tmp_path)
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "data_sets", "aime24.jsonl"), tmp_path)
    code, expected = CHECKS[part]
    argv = [sys.executable, f"{part}.py"] if code is None else [sys.executable, "-c", code]
    proc = subprocess.run(
        argv, cwd=tmp_path, env=fresh_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    if code is None:  # decode_kernels: every path it has here, against masked SDPA
        errors = [float(x) for x in re.findall(r"= ([0-9.e+-]+)", proc.stdout)]
        assert errors and max(errors) <= 64 * 5 * 2**-24, proc.stdout
    else:
        assert expected in proc.stdout, proc.stdout + proc.stderr[-2000:]


@pytest.mark.parametrize("part", PARTS)
def test_a_part_answers_help_alone(part, tmp_path):
    """`python PART.py --help` in a folder holding only that part: exit status 0 (a part without a
    command line does nothing; one with its own self-check runs it); a part whose command line takes
    arguments prints its usage."""
    shutil.copy(os.path.join(ROOT, "parts", f"{part}.py"), tmp_path)
    proc = subprocess.run(
        [sys.executable, f"{part}.py", "--help"],
        cwd=tmp_path,
        env=fresh_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # python math_checker.py GOLD ANSWER, results_table.py FILES
    if part in ("math_checker", "results_table"):
        assert proc.stdout.startswith("usage: python"), proc.stdout


@pytest.mark.parametrize("story", STORIES)
def test_a_story_file_runs_with_what_it_imports(story, tmp_path):
    for file in closure(story):
        os.makedirs(tmp_path / os.path.dirname(file), exist_ok=True)
        shutil.copy(os.path.join(ROOT, file), tmp_path / file)
    if os.path.isdir(tmp_path / "parts"):
        shutil.copy(os.path.join(ROOT, "parts", "__init__.py"), tmp_path / "parts")
    has_cli = 'if __name__ == "__main__":' in open(os.path.join(ROOT, story)).read()
    argv = (
        [sys.executable, story, "--help"]
        if has_cli
        else [sys.executable, "-c", f"import {story[:-3]}"]
    )
    proc = subprocess.run(
        argv, cwd=tmp_path, env=fresh_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not has_cli or "usage" in proc.stdout, proc.stdout
