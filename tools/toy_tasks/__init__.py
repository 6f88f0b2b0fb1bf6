"""The toy tasks' content: Countdown (countdown.py), multi-digit sums (sums.py), toy programs
(programs.py) and the Qwen3-shaped tokenizer trained on them (tokenizer.py). `python tools/toy.py`
writes them as files; the training and evaluation scripts read those files and never import this
folder."""
