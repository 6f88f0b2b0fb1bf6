"""The parts: machinery the story files at the top of the repository delegate to (the code sandbox,
the public data formats, the decode kernels, the trainer plumbing, the chat-completions client, the
command-line parser, the toy tasks). A part imports nothing from this project, only the standard
library and the declared dependencies, so each file can be copied alone into another project
(tests/test_copyable.py copies each one into an empty folder and runs it)."""
