"""docs/settings.md, generated from server/config.py: every setting with its TOML key, HONGBAO_*
variable, flags, default, unit, allowed values and meaning.

    python -m hongbao.server.settings_doc > docs/settings.md

The meaning is the setting's docstring (the string under its field in ``Settings`` or ``Limits``),
the unit comes from its name's suffix (config.py's rule), the range from ``RANGES``,
``LIMIT_RANGES`` and ``CHOICES``, the flags from the ``hongbao`` parser. Defaults go through
``redact`` like every other echo of a setting. tests/server/test_cli_config.py fails while the
page differs from this module's output.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import sys
import textwrap
from dataclasses import fields
from typing import Any

from hongbao.core.redact import redact
from hongbao.core.rules import LIMIT_RANGES, Limits, range_text
from hongbao.server.cli import parser
from hongbao.server.config import CHOICES, ENV_PREFIX, RANGES, Settings

# name suffix -> unit, the first that matches (config.py: units are in the names)
UNITS = (
    ("_per_s", "per second"),
    ("_ms", "milliseconds"),
    ("_s", "seconds"),
    ("_bytes", "bytes"),
    ("_fen", "fen"),
    ("_days", "days"),
    ("_chars", "characters"),
)

HEADER = """# Settings

<!-- Generated from server/config.py by `python -m hongbao.server.settings_doc > docs/settings.md`:
edit the settings' docstrings there, not this page (tests/server/test_cli_config.py compares them). -->

Every setting of `hongbao`, in the order of `server/config.py`. Each one is read from, the last
one winning: its default, `hongbao.toml` in the current directory (or `--config FILE`), its
`HONGBAO_*` environment variable, and its flag where a command has one. Numbers must lie in
their allowed range and words be one of their values, or the command exits 2 with one line
naming the setting (docs/operations.md says what the settings trade).

- **TOML**: `key = value` at the top level or under any `[section]`: sections such as `[server]`
  or `[mysql]` are for readability only, their keys read as top-level ones (a key set twice warns,
  and the last one counts). An unknown key stops the command, naming the setting it probably
  meant. The limits may sit under `[limits]` or at the top level.
- **Environment**: `HONGBAO_` and the name in capitals; a list is comma-separated, a boolean one of
  1/0, true/false, yes/no, on/off. A `HONGBAO_*` variable that names no setting is ignored with a
  warning naming it (and the setting it probably meant), never its value.
- **Secrets**: `jwt_secret`, `internal_secret` and the passwords inside `mysql_dsn` and `redis_url`
  are shown as `***` in every error, warning and log line.
"""


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of the dataclass ``cls``, on one line in Markdown; ValueError
    naming a field that has none (a new setting must say what it does)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split()).replace("``", "`")
    missing = [f.name for f in fields(cls) if f.name not in docs and f.name != "limits"]
    if missing:
        raise ValueError(f"{cls.__name__}.{missing[0]} has no docstring: say what the setting does under it")
    return docs


def setting_flags() -> dict[str, list[str]]:
    """Setting name -> its flags with the commands that take them: ``--mysql-dsn (serve, migrate, ...)``."""
    names = {f.name for f in fields(Settings)}
    commands: dict[str, dict[str, list[str]]] = {}  # name -> flag -> commands
    for action in parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                for option in sub._actions:
                    if option.option_strings and option.dest in names:
                        flag = max(option.option_strings, key=len)
                        commands.setdefault(option.dest, {}).setdefault(flag, []).append(command)
    return {
        name: [f"`{flag}` ({', '.join(cmds)})" for flag, cmds in by_flag.items()] for name, by_flag in commands.items()
    }


def unit(name: str) -> str:
    """The unit setting ``name`` is in, from its suffix; "" for a count, a word or a switch."""
    return next((label for suffix, label in UNITS if name.endswith(suffix)), "")


def toml_value(value: Any, name: str) -> str:
    """``value`` as a TOML file would write it, redacted: ``"var"``, ``8080``, ``0.05``, ``false``, ``[]``."""
    value = redact(value, name)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(toml_value(item, name) for item in value) + "]"
    return f'"{value}"'


def allowed(name: str, kind: type) -> str:
    """The values setting ``name`` (of type ``kind``) accepts, as its ConfigError would say them."""
    if name in RANGES:
        low, high, note = RANGES[name]
        return range_text(low, high, note)
    if name in LIMIT_RANGES:
        return range_text(*LIMIT_RANGES[name])
    if name in CHOICES:
        return ", ".join(CHOICES[name])
    return "true, false" if kind is bool else ""


def _rows(cls: type, toml_prefix: str, flags: dict[str, list[str]]) -> list[str]:
    """One table row per field of the settings dataclass ``cls``."""
    docs, defaults = attribute_docs(cls), cls()
    rows = []
    for f in fields(cls):
        if f.name == "limits":
            continue
        default = getattr(defaults, f.name)
        cells = (
            f"`{toml_prefix}{f.name}`",
            f"`{ENV_PREFIX}{f.name.upper()}`",
            "<br>".join(flags.get(f.name, [])),
            f"`{toml_value(default, f.name)}`",
            unit(f.name),
            allowed(f.name, type(default)),
            docs[f.name],
        )
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return rows


def render() -> str:
    """The whole of docs/settings.md."""
    head = "| TOML key | environment | flag | default | unit | allowed | meaning |\n" + "| --- " * 7 + "|"
    flags = setting_flags()
    settings = "\n".join(_rows(Settings, "", flags))
    limits = "\n".join(_rows(Limits, "[limits] ", flags))
    return (
        f"{HEADER}\n## Server, storage and push\n\n{head}\n{settings}\n\n"
        "## Limits\n\nThe packet and group limits (core/rules.py, docs/architecture.md section 3), "
        "under `[limits]` or at the top level of the TOML file.\n\n"
        f"{head}\n{limits}\n"
    )


def main() -> None:
    """Print docs/settings.md on stdout."""
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
