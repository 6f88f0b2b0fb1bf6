"""The parts: machinery the story files at the top of the repository delegate to (the code sandbox,
the math and Countdown checkers, the public data formats, the chat template and SFT's packing, the
engine's scheduler, KV pool, sampling and decode kernels, the fused logit kernels, the trainer
plumbing, the RL rows and step report, the evaluation estimators, the journal and decontamination
of distillation, the chat-completions client, the command-line parser). A part imports nothing from
this project, only the standard library and the declared dependencies, so each file can be copied
alone into another project (tests/test_copyable.py copies each one into an empty folder and runs
it)."""
