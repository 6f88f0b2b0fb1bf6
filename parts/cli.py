"""The command line of every entry point: `--key=value` options into a config dataclass, and --help
from its comments.

    cfg = parse_config(TrainConfig)                      # sys.argv[1:]; unknown keys and bad values: one-line errors
    cfg = parse_config({"": TrainConfig, "stats": StatsConfig}, argv)   # a script with commands
A field's type (int, float, str, bool) converts its value; `--flag` alone means true; -h / --help
prints the usage, the dataclass's docstring and every option with its default and the comment
written beside it in the code. A bad command line (unknown key, wrong type, a failed check of the
config) is one line on stderr, exit status 2. Standard library only: copy this file into any
project.
"""

import inspect
import io
import os
import re
import sys
import textwrap
import tokenize
from dataclasses import fields


def parse_config(config, argv=None, usage: str = ""):
    """The command line of every entry point here: `--key=value` options into a config dataclass.

    config: a dataclass, or {command: dataclass} for a script with commands (`python tool.py stats
    FILE`); the key "" is the dataclass used when the first argument is no command (`python tool.py
    --steps=5` beside `python tool.py stats FILE`). A value is converted to its field's type; a bool
    takes true/false/1/0, and a bare `--flag` means true. A dataclass with a class variable
    `positional = "name"` takes one bare argument as that field (`stats FILE`). Unknown keys, bad
    values, stray words and a ValueError(message) from the dataclass's own checks (its
    __post_init__) raise CommandLineError (exit status 2) after printing one line, "error: message".
    -h / --help prints a usage line (`usage` replaces the one of a run without a command word), the
    dataclass's docstring if it has one, and every option with its default and the comment beside
    it; exit status 0. Returns the config (its __post_init__ checks combinations); with commands,
    its class says which one ran."""
    argv = sys.argv[1:] if argv is None else list(argv)
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".py") else "SCRIPT"
    commands = config if isinstance(config, dict) else {"": config}
    command = argv[0] if argv and argv[0] in commands else ""
    argv = argv[1:] if command else argv
    if command not in commands:  # no default command: every run names one
        if argv[:1] in (["-h"], ["--help"]):
            _print_help(script, commands, None, usage)
        raise CommandLineError(
            f"error: python {script} needs a command first: {' | '.join(commands)} "
            "(--help for more)"
        )
    cls = commands[command]
    positional = getattr(cls, "positional", None)
    types = {f.name: f.type for f in fields(cls)}
    values = {}
    for arg in argv:
        if arg in ("-h", "--help"):
            _print_help(script, commands, command, usage)
        if not arg.startswith("--"):
            if positional is None or positional in values:
                raise CommandLineError(f"error: argument {arg!r} is not of the form --key=value")
            key = positional
            raw = arg
        else:
            key, _, raw = arg[2:].partition("=")
            if key in types and "=" not in arg:  # a bare --flag: true
                if _field_type(types[key]) is not bool:
                    raise CommandLineError(f"error: --{key} needs a value: --{key}=VALUE")
                raw = "true"
        if key not in types:
            close = [k for k in types if k.split("_")[0] == key.split("_")[0]]
            raise CommandLineError(
                f"error: unknown option --{key} for {cls.__name__}"
                + (f" (did you mean {', '.join('--' + k for k in close)}?)" if close else "")
            )
        values[key] = _option_value(key, raw, _field_type(types[key]))
    try:
        return cls(**values)
    except ValueError as e:  # its __post_init__ refused a value or combination
        raise CommandLineError(f"error: {e}") from None


class CommandLineError(SystemExit):
    """A bad command line: one line on stderr (printed here, on the first process of a torchrun job
    only), exit status 2 as argparse gives; str() of it is the line. A SystemExit exits 2 only with
    an int code, and a string code would be printed again and exit 1."""

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 2
        if os.environ.get("RANK", "0") == "0":
            print(message, file=sys.stderr, flush=True)


def _option_value(key: str, raw: str, typ):
    if typ is bool:
        if raw.lower() not in ("true", "false", "1", "0"):
            raise CommandLineError(f"error: --{key}={raw!r} is not true or false")
        return raw.lower() in ("true", "1")
    try:
        return typ(raw)
    except ValueError:
        raise CommandLineError(f"error: --{key}={raw!r}: not a valid {typ.__name__}") from None


def _field_type(annotation):
    """int, float, str or bool from a field's annotation (a class, or its name when annotations are
    strings)."""
    typ = {"int": int, "float": float, "str": str, "bool": bool}.get(annotation, annotation)
    if typ not in (int, float, str, bool):
        raise TypeError(
            f"parse_config: option fields must be int, float, str or bool, not {annotation!r}"
        )
    return typ


def _print_help(script: str, commands: dict, command, usage: str):
    """--help, then exit 0: with no command chosen (command None) the list of commands; else the
    usage line, the dataclass's own docstring if it has one, and its options."""
    if command is None:
        print(
            usage
            or f"usage: python {script} {'|'.join(commands)} [--key=value ...]   "
            f"(python {script} COMMAND --help: its options)"
        )
        print(
            "\n".join(
                f"  {name:8s} {(cls.__doc__ or '').strip().splitlines()[0]}"
                for name, cls in commands.items()
            )
        )
        raise SystemExit(0)
    cls = commands[command]
    others = "|".join(c for c in commands if c)
    positional = getattr(cls, "positional", None)
    words = [
        "usage: python",
        script,
        command or (f"[{others}]" if others else ""),
        positional.upper() if positional else "",
        "[--key=value ...]",
    ]
    print(usage if usage and not command else " ".join(w for w in words if w))
    # written by hand, not dataclass's own
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
        print(inspect.cleandoc(cls.__doc__))
    print("\n".join(option_help(cls)))
    raise SystemExit(0)


def option_help(cls) -> list:
    """--help text of a config dataclass: every field with its default and the comment written
    beside it; a full-line comment above fields is a section heading. Read from the class's source,
    so the comments in the code are the documentation and cannot drift from it."""
    source = textwrap.dedent(inspect.getsource(cls))  # a class nested in another: indented
    comments = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    # `# fmt: off` / `# fmt: on` keep a table of options aligned (ruff format): not a heading
    comments = {n: text for n, text in comments.items() if text not in ("fmt: off", "fmt: on")}
    defaults = {f.name: f.default for f in fields(cls)}
    lines = []
    last = None
    for number, line in enumerate(source.splitlines(), 1):
        if re.match(r"\s+(def|@)\b", line):  # the fields end where the methods begin
            break
        field = re.match(r"\s+(\w+)\s*:", line)
        if field and field.group(1) in defaults:
            last = f"  --{field.group(1)}={defaults[field.group(1)]!r}"
            lines.append(
                last.ljust(34) + "  " + comments.get(number, "") if number in comments else last
            )
        elif number in comments and line.strip().startswith("#"):
            indent = len(line) - len(line.lstrip())
            # a comment continued under the one beside a field: indented past the fields, or written
            # `#   more`
            if last is not None and (indent > 8 or line.lstrip().startswith("#  ")):
                lines[-1] += " " + comments[number]
            else:  # a heading for the fields below it
                lines.append(comments[number])
                last = None
    while lines and not lines[-1].startswith("  --"):  # a comment above no field heads nothing
        lines.pop()
    return lines
