#!/usr/bin/env bash
# The whole Klear-Reasoner pipeline: long-CoT SFT -> GPPO RL -> evaluation of both models, one table.
#
#   bash train.sh quick           # a first run: every stage of the toy once, small, 1.5-5 min on 2 cores (out/quick)
#   bash train.sh                 # the Countdown toy on a CPU (a tiny model from scratch): ~23 min on 2 cores
#   TOY=sums bash train.sh        # the old toy, multi-digit sums (docs/toy_sums.md)
#   bash train.sh ablate          # the paper's ablations in miniature on Countdown, 8 paired seeds per arm; resumes,
#                                 # so it can run in parts (--stop_after_minutes=N; --dry_run: the plan and its cost;
#                                 # benchmarks/RESULTS.md has the protocol, the cost and the verdicts;
#                                 # --archive=DIR carries its finished runs to another machine)
#   bash train.sh rehearsal       # Qwen3-0.6B's exact shape through every stage, memory vs budget (docs/scale.md);
#                                 # needs QWEN3_TOKENIZER_DIR, ~13 GB of RAM
#
# The real pipeline is the same script, driven by environment variables (paper hyperparameters by default):
#   BASE_MODEL=/ckpt/Qwen3-8B-Base SFT_DATA=sft.jsonl MATH_DATA=math.jsonl CODE_DATA=code.jsonl \
#   EVAL_MATH=aime24.jsonl,aime25.jsonl EVAL_CODE=lcb_v5.jsonl NPROC=8 bash train.sh
# Several nodes: run it on every node with NNODES=N NODE_RANK=R MASTER_ADDR=host0 MASTER_PORT=29500.
# Extra options for one stage: TOY_ARGS="--k=8" (tools/toy.py), DISTILL_ARGS, SFT_ARGS="--epochs=2",
# GPPO_ARGS="--steps=100", EVAL_ARGS="--k=16".
# OUT (default out/) holds every stage's output; a stage that fails stops the script with its name.
set -euo pipefail
cd "$(dirname "$0")"

if [ "${1:-}" = "quick" ]; then
  # The toy pipeline below with less of everything, each stage's output seen once: 620 prompts distilled, one SFT
  # epoch (~180 steps of 2 rows of 512 tokens), 5 GPPO steps of 16 prompts x 8, 40 held-out problems per set at
  # k = 2. In 3 minutes SFT teaches the format, not yet the arithmetic: GPPO's groups are mostly all wrong and it
  # says so (the full run, bash train.sh, learns the task). A stage's *_ARGS still go last and win.
  shift
  OUT=${OUT:-out/quick}
  TOY_ARGS="--easy_prompts=500 --hard_prompts=100 --code_prompts=20 --code_k=4 --test_problems=40 --test_programs=4 ${TOY_ARGS:-}"
  SFT_ARGS="--row_tokens=512 --log_every=30 ${SFT_ARGS:-}"
  GPPO_ARGS="--steps=5 --prompts_per_step=16 --eval_every=0 ${GPPO_ARGS:-}"
  EVAL_ARGS="--k=2 ${EVAL_ARGS:-}"
fi
OUT=${OUT:-out}
NPROC_SET=${NPROC:-}
NPROC=${NPROC:-1}
NNODES=${NNODES:-1}
TOY_ARGS=${TOY_ARGS:-}
DISTILL_ARGS=${DISTILL_ARGS:-}
SFT_ARGS=${SFT_ARGS:-}
GPPO_ARGS=${GPPO_ARGS:-}
EVAL_ARGS=${EVAL_ARGS:-}

if [ "$NPROC" -gt 1 ] || [ "$NNODES" -gt 1 ]; then
  LAUNCH=(torchrun --nproc_per_node="$NPROC" --nnodes="$NNODES" --node_rank="${NODE_RANK:-0}"
          --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${MASTER_PORT:-29500}")
else
  LAUNCH=(python)
fi

stage() {  # stage NAME command...: run it, time it, stop the pipeline with a clear message if it fails
  local name=$1; shift
  echo "=== [$name] $*"
  local start=$SECONDS
  local status=0
  "$@" || status=$?
  # 128 + SIGINT or SIGTERM: a stop asked for (Ctrl-C, kill), not a failure
  if [ "$status" -eq 130 ] || [ "$status" -eq 143 ]; then
    echo "train.sh: stage '$name' stopped by a signal (exit $status); rerun the same command to go on" \
      "(sft.py, gppo.py and the ablation continue from their checkpoints)." >&2
    exit "$status"
  fi
  if [ "$status" -ne 0 ]; then
    echo "train.sh: stage '$name' failed (command: $*); stopping. Its output is above; fix it and rerun." >&2
    exit 1
  fi
  echo "=== [$name] done in $((SECONDS - start)) s"
}

if [ "${1:-}" = "ablate" ]; then
  shift
  stage ablate python experiments/ablate.py --out_dir="$OUT/ablate" "$@"
  exit 0
fi

if [ "${1:-}" = "rehearsal" ]; then
  shift
  stage rehearsal python experiments/rehearsal.py --out_dir="$OUT/rehearsal" "$@"
  exit 0
fi

T0=$SECONDS
if [ -n "${BASE_MODEL:-}" ]; then
  # --- the real pipeline (paper §2-3): Qwen3 base -> SFT (32K) -> math RL (and code RL) -> eval
  : "${SFT_DATA:?set SFT_DATA to the SFT JSONL (messages or conversations)}"
  : "${MATH_DATA:?set MATH_DATA to the math RL JSONL (problem + answer)}"
  stage sft "${LAUNCH[@]}" sft.py --init_from="$BASE_MODEL" --tokenizer="$BASE_MODEL" --data="$SFT_DATA" \
      --out_dir="$OUT/sft" --max_len=32768 --row_tokens=32768 --rows_per_step=64 --micro_rows=1 \
      --lr=8e-5 --min_lr=4e-5 --warmup_steps=20 --epochs=4 --activation_checkpointing=true --ckpt_minutes=30 --device=cuda $SFT_ARGS
  stage gppo-math "${LAUNCH[@]}" gppo.py --init_from="$OUT/sft/hf" --math_data="$MATH_DATA" --out_dir="$OUT/gppo-math" \
      --prompts_per_step=128 --group_size=8 --mini_batch_prompts=16 --lr=1e-6 --warmup_steps=10 \
      --max_prompt_len=4096 --max_response_len=32768 --train_row_tokens=32768 --activation_checkpointing=true \
      --ckpt_minutes=30 --eval_every=0 --steps=${MATH_STEPS:-500} --device=cuda $GPPO_ARGS
  FINAL="$OUT/gppo-math/hf"
  if [ -n "${CODE_DATA:-}" ]; then
    # code prompts whose tests can be trusted (reference solutions pass them; a stronger model's pass rate if the
    # data has one, e.g. PASS_RATE_FIELD=extra_info.model_difficulty.DeepSeek-R1-Distill-Qwen-32B/16), >= 16 tests
    stage filter-code python tools/filter_code.py --code_data="$CODE_DATA" --out="$OUT/code.filtered.jsonl" \
        --min_tests=16 ${PASS_RATE_FIELD:+--pass_rate_field="$PASS_RATE_FIELD"}
    stage gppo-code "${LAUNCH[@]}" gppo.py --init_from="$FINAL" --code_data="$OUT/code.filtered.jsonl" --out_dir="$OUT/gppo-code" \
        --prompts_per_step=128 --group_size=8 --mini_batch_prompts=32 --lr=5e-7 --warmup_steps=10 \
        --max_prompt_len=4096 --max_response_len=32768 --train_row_tokens=32768 --activation_checkpointing=true \
        --min_tests=16 --ckpt_minutes=30 --eval_every=0 --steps=${CODE_STEPS:-500} --device=cuda $GPPO_ARGS
    FINAL="$OUT/gppo-code/hf"
  fi
  EVAL_SETS=()
  [ -n "${EVAL_MATH:-}" ] && EVAL_SETS+=(--math_data="$EVAL_MATH")
  [ -n "${EVAL_CODE:-}" ] && EVAL_SETS+=(--code_data="$EVAL_CODE")
  [ ${#EVAL_SETS[@]} -gt 0 ] || { echo "train.sh: set EVAL_MATH and/or EVAL_CODE for the evaluation" >&2; exit 1; }
  stage eval-sft "${LAUNCH[@]}" eval.py --model="$OUT/sft/hf" "${EVAL_SETS[@]}" --k=64 --max_tokens=32768 \
      --out_dir="$OUT/eval/sft" $EVAL_ARGS
  stage eval-rl "${LAUNCH[@]}" eval.py --model="$FINAL" "${EVAL_SETS[@]}" --k=64 --max_tokens=32768 \
      --out_dir="$OUT/eval/rl" $EVAL_ARGS
elif [ "${TOY:-countdown}" = "sums" ]; then
  # --- the old toy (docs/toy_sums.md): multi-digit sums; greedy is right after SFT, so RL only sharpens sampling.
  # Its files (tools/toy.py): the teacher's responses, RL prompts and held-out sets of 3-digit sums, programs.
  T="$OUT/toy/sums"
  stage toy python tools/toy.py --task=sums --out="$T" $TOY_ARGS
  stage distill python distill.py --responses="$T/teacher/toy_math.jsonl,$T/teacher/toy_code.jsonl" \
      --benchmarks="$T/test/toy_math.jsonl" --out_dir="$OUT/distill" $DISTILL_ARGS
  [ -n "${NPROC_SET:-}" ] || LAUNCH=(torchrun --standalone --nproc_per_node=2)
  stage sft "${LAUNCH[@]}" sft.py --data="$OUT/distill/sft.jsonl" --tokenizer="$T/tokenizer" --epochs=1 \
      --out_dir="$OUT/sft" $SFT_ARGS
  stage gppo "${LAUNCH[@]}" gppo.py --init_from="$OUT/sft/hf" --out_dir="$OUT/gppo" --math_data="$T/rl/toy_math.jsonl" \
      --eval_data="$T/test/toy_math.jsonl" --max_gen_rounds=2 --lr=2e-5 --max_response_len=192 --steps=60 --eval_k=0 \
      $GPPO_ARGS
  for m in sft:sft gppo:rl; do
    stage eval-${m#*:} "${LAUNCH[@]}" eval.py --model="$OUT/${m%:*}/hf" --out_dir="$OUT/eval/${m#*:}" \
        --math_data="$T/test/toy_math.jsonl" --code_data="$T/test/toy_code.jsonl" --k=4 $EVAL_ARGS
  done
  python experiments/plot_train.py --metrics="$OUT/gppo/metrics.jsonl"
else
  # --- the toy pipeline: a tiny Qwen3 learns Countdown (reach a target from 3 or 4 numbers with + - * /) on a CPU.
  # The SFT data is the paper's recipe (distill.py): a toy teacher whose thinking searches (tries a chain of
  # operations, checks it against the target, tries another, within a budget) answers each of 7,500 prompts 4 times;
  # the answers are verified and the difficulty rule keeps every response of a prompt the teacher solved less than
  # half the time (most 4-number ones), only the correct ones of the others; with them, toy programs whose naive
  # version earns partial credit. The SFT model then solves a 3-number problem about 2 times in 5 at T = 1, greedy
  # no better, 8 samples 9 times in 10 (4-number problems: 1 in 6, 2 in 3): RL's job is to make the searches that
  # sampling finds the ones it samples (docs/toy_countdown.md). The toy's files first (tools/toy.py): its tokenizer,
  # the teacher's responses, RL prompts and held-out sets, in the formats of public data sets.
  T="$OUT/toy/countdown"
  stage toy python tools/toy.py --task=countdown --out="$T" $TOY_ARGS
  stage distill python distill.py --out_dir="$OUT/distill" \
      --responses="$T/teacher/countdown_3.jsonl,$T/teacher/countdown_4.jsonl,$T/teacher/toy_code.jsonl" \
      --benchmarks="$T/test/countdown_3.jsonl,$T/test/countdown_4.jsonl" $DISTILL_ARGS
  # One epoch of rows of 1024 tokens, 2 per step (more, smaller steps learn this best). One thread per process: two
  # processes use two cores better than one process with two threads.
  [ -n "${NPROC_SET:-}" ] || LAUNCH=(torchrun --standalone --nproc_per_node=2)
  stage sft "${LAUNCH[@]}" sft.py --data="$OUT/distill/sft.jsonl" --tokenizer="$T/tokenizer" --epochs=1 \
      --row_tokens=1024 --rows_per_step=2 --out_dir="$OUT/sft" $SFT_ARGS
  # RL on the 3-number prompts, where the SFT model's T = 1 success is in 0.2..0.5 (on the 4-number ones it is below,
  # and RL there plateaus: benchmarks/RESULTS.md), 60 steps; held-out greedy, Avg@4 and pass@4 every 10 steps
  stage gppo "${LAUNCH[@]}" gppo.py --init_from="$OUT/sft/hf" --out_dir="$OUT/gppo" --math_data="$T/rl/countdown_3.jsonl" \
      --eval_data="$T/test/countdown_3.jsonl" --steps=60 $GPPO_ARGS
  # evaluated on held-out 3- and 4-number problems and toy programs
  for m in sft:sft gppo:rl; do
    stage eval-${m#*:} "${LAUNCH[@]}" eval.py --model="$OUT/${m%:*}/hf" --out_dir="$OUT/eval/${m#*:}" \
        --math_data="$T/test/countdown_3.jsonl,$T/test/countdown_4.jsonl" --code_data="$T/test/toy_code.jsonl" --k=8 \
        --max_tokens=400 $EVAL_ARGS
  done
  python experiments/plot_train.py --metrics="$OUT/sft/metrics.jsonl"
  python experiments/plot_train.py --metrics="$OUT/gppo/metrics.jsonl"
fi

echo
echo "=== SFT vs GPPO ($(( (SECONDS - T0) / 60 )) min $(( (SECONDS - T0) % 60 )) s in all)"
python eval.py --compare="$OUT/eval/sft/results.json,$OUT/eval/rl/results.json" --labels=SFT,GPPO
