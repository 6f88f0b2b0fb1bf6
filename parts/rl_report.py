"""What the RL loop tells its user, step by step: the step's record (step_counts: what this rank
saw, to be summed and maximized over the ranks; step_record: the record from those totals;
grad_clip_metrics: how often the grad-norm clip acted), the line each step prints (step_line), the
warning after NO_UPDATE_WARNING_STEPS steps in a row that updated nothing (no_update_warning:
GRPO's advantage A = (R - mean) / (std + eps) is 0 for every response of a group whose rewards are
all equal, so a step where every group is like that has nothing to learn from), and the responses
it logs to samples.jsonl (log_samples). Python only:
    sums, highest = step_counts(sampled, kept, mini_batches, gap)   # then summed / max over ranks
    record = step_record(sums, highest, world=1, prompts_per_step=32, updates=8, lr=1e-6)
    print(step_line(record, steps=30, eta_s=95.0))   # record: gppo.py's metrics of the step
    log_samples(log, groups, step, cfg, tokenizer)   # cfg.log_samples of them, drawn by a seeded rng
"""

import random


def step_line(record: dict, steps: int, eta_s: float) -> str:
    """The line a step prints: its rewards, the groups it kept, the loss's metrics (or why there
    was no update), where the time went."""
    if record["updates"]:
        trained = (
            "loss {loss:.4f} ent {entropy:.3f} (clipped {entropy_clipped:.3f}) "
            "clip_hi {clip_frac_high:.3f} clip_lo {clip_frac_low:.3f} kl {approx_kl:.2e} "
            "gnorm {grad_norm:.2f} "
        ).format(**record)
    else:
        trained = "no update this step (every group's rewards are equal) "
    train_s = record["time_old_logprobs"] + record["time_train"]
    return (
        f"step {record['step']}/{steps} reward {record['reward']:.3f} "
        f"acc {record['accuracy']:.3f} "
        f"kept {record['groups_trained']}/{record['prompts_sampled']} "
        f"({record['gen_rounds']} round(s)) len {record['response_len_mean']:.0f} {trained}"
        f"| gen+rew {record['time_generate_and_reward']:.1f}s train {train_s:.1f}s "
        f"sync {record['time_sync']:.1f}s ({record['rollout_tok_s']:.0f} tok/s) "
        f"eta {eta_s / 60:.1f}min"
    )


def step_counts(sampled: list, kept: list, mini_batches: list, gap: dict) -> tuple:
    """What this rank saw in a step, to be summed (the first dict) and maximized (the second) over
    the ranks before step_record. sampled, kept: groups (.samples with .token_ids and
    .finish_reason, .rewards, .correct); mini_batches: lists of this rank's training sequences
    (.ids); gap: the logprob gap's gap_sum, gap_tokens, gap_max."""
    samples = [s for g in sampled for s in g.samples]
    lengths = [len(s.token_ids) for s in samples]
    trained = sum(len(seq.ids) for seqs in mini_batches for seq in seqs)
    sums = dict(
        reward=sum(r for g in sampled for r in g.rewards),
        correct=sum(c for g in sampled for c in g.correct),
        responses=len(samples),
        tokens=sum(lengths),
        truncated=sum(s.finish_reason == "length" for s in samples),
        kept=len(kept),
        sampled=len(sampled),
        gap_sum=gap["gap_sum"],
        gap_tokens=gap["gap_tokens"],
        train_tokens=trained,
    )
    highest = dict(train_tokens=trained, length=max(lengths, default=0), gap=gap["gap_max"])
    return sums, highest


def step_record(totals: dict, highest: dict, world: int, prompts_per_step: int, updates: int, lr):
    """A step's record from step_counts' dicts, summed and maximized over the `world` ranks: mean
    reward and accuracy over every sampled response, groups kept and dropped, response lengths,
    the busiest rank's share of the training tokens (1.0: balanced), the engine-trainer gap."""
    responses = max(totals["responses"], 1)
    groups = int(totals["sampled"])
    survived = int(totals["kept"])
    return dict(
        reward=totals["reward"] / responses,
        accuracy=totals["correct"] / responses,
        prompts_sampled=groups,
        groups_kept=survived / max(groups, 1),
        groups_dropped=groups - survived,
        groups_trained=min(survived, prompts_per_step),
        response_len_mean=totals["tokens"] / responses,
        response_len_max=int(highest["length"]),
        truncated=int(totals["truncated"]),
        rank_load_max=highest["train_tokens"] * world / max(totals["train_tokens"], 1),
        logprob_diff_mean=totals["gap_sum"] / max(totals["gap_tokens"], 1),
        logprob_diff_max=highest["gap"],
        updates=updates,
        lr=lr,
    )


def grad_clip_metrics(norms: list, grad_clip: float) -> dict:
    """How often the grad-norm clip acted over a step's updates (their norms before clipping), and
    the largest norm."""
    return dict(
        grad_clipped_frac=sum(n > grad_clip for n in norms) / len(norms),
        grad_norm_max=max(norms),
    )


# steps in a row without an update before the run says why and what to do
NO_UPDATE_WARNING_STEPS = 3


def no_update_warning(record: dict, streak: int, cfg) -> str:
    """Why `streak` steps in a row updated nothing, and what to change: every group's rewards were
    equal, so every advantage was 0 (GRPO compares a prompt's samples with each other) and the
    filter dropped every group. cfg: the run's settings (.group_size, .max_gen_rounds)."""
    accuracy = record["accuracy"]
    if accuracy == 0:
        cause = "The policy never solves these prompts: train the SFT model longer, or give easier prompts"
    elif accuracy == 1:
        cause = "The policy always solves these prompts: give harder prompts"
    else:
        cause = "Each prompt is solved by all of its samples or by none: give prompts of middling difficulty"
    return (
        f"warning: {streak} steps in a row without an update: every group's {cfg.group_size} rewards were equal "
        f"(on-policy accuracy {accuracy:.3f}), so no advantage was nonzero. {cause}; a larger "
        f"--group_size (now {cfg.group_size}) or --max_gen_rounds=3 (more prompts sampled until groups survive; "
        f"now {cfg.max_gen_rounds}) finds more groups that differ."
    )


def log_samples(log, groups: list, step: int, cfg, tokenizer):
    """cfg.log_samples of the step's responses (all rounds), drawn at random (seeded by cfg.seed and
    the step, so a resumed run draws the same), written to `log` (anything with write(dict)) in
    stream order: what the policy writes, with its reward and advantage. groups: each with
    .position, .task["prompt_ids"], .samples (.token_ids, .finish_reason), .rewards, .advantages,
    .correct, .keep."""
    responses = [(g, j) for g in groups for j in range(len(g.samples))]
    drawn = random.Random(cfg.seed * 1_000_003 + step).sample(
        responses, min(cfg.log_samples, len(responses))
    )
    for g, j in sorted(drawn, key=lambda pair: (pair[0].position, pair[1])):
        s = g.samples[j]
        log.write(
            dict(
                step=step,
                prompt_position=g.position,
                sample=j,
                reward=g.rewards[j],
                advantage=float(g.advantages[j]),
                correct=bool(g.correct[j]),
                group_kept=g.keep,
                finish_reason=s.finish_reason,
                response_tokens=len(s.token_ids),
                prompt=tokenizer.decode(g.task["prompt_ids"], skip_special_tokens=False),
                response=tokenizer.decode(s.token_ids, skip_special_tokens=False),
            )
        )
