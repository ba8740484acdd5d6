"""What every esverify command shares on its command line.

- `CONTEXT`: `-h` as well as `--help`, and help text wide enough for the option lists;
- `SIZE` / `parse_size`: sizes with the same binary units everywhere (`20M`, `8G`, `512k`, `1024`, `0`);
- `Choice`: click's Choice whose error suggests the nearest valid value; `suggest` for the
  comma-separated lists a command checks itself (`--dtypes f17` -> "did you mean 'f16'?");
- `progress_enabled`: a progress bar only when stderr is a terminal (a CI log gets none);
- `Settings` / `resolve`: the settings a team puts in `[tool.esverify]` of pyproject.toml or in
  `ESVERIFY_*` environment variables, with the precedence pytest and ruff use (command line >
  environment > config file > default) and where each value came from (docs/parity.md
  "Configuration").

This module imports no other esverify module (it is loaded by `esverify --help`).
"""
from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

#: every command: `-h` is `--help`; click wraps help at 100 columns instead of 80
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text) -> int:
    """Bytes from '20M', '8G', '512k', '1.5G', '1024' or 0 (binary units, an optional B or iB);
    ValueError on anything else or a negative size."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        s = str(text).strip().upper().removesuffix("B").removesuffix("I")
        scale = _UNITS.get(s[-1:] if s else "", 1)
        number = s[:-1] if scale != 1 else s
        try:
            value = int(float(number) * scale)
        except ValueError:
            raise ValueError(f"not a size: {text!r} (write e.g. 20M, 8G or 0)") from None
    if value < 0:
        raise ValueError(f"a size must be >= 0, got {text!r}")
    return value


class SizeType(click.ParamType):
    """A size in bytes with binary units (parse_size); shown as SIZE in the help."""
    name = "size"

    def convert(self, value, param, ctx):
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = SizeType()


def suggest(value: str, choices) -> str:
    """"; did you mean 'f16'?" when a valid value is close to `value`, else ""."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


class Choice(click.Choice):
    """click.Choice whose error names the valid values and suggests the nearest one."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            from . import registry
            left_out = registry.unusable(str(value))   # a plug-in reference of that name that failed to register
            if left_out:
                self.fail(left_out, param, ctx)
            self.fail(f"{value!r} is not one of {', '.join(map(repr, self.choices))}{suggest(value, self.choices)}",
                      param, ctx)


def progress_enabled(quiet: bool, stream=None) -> bool:
    """A progress bar is drawn only when not `quiet` and `stream` (stderr) is a terminal: in a CI log
    a bar is a hundred lines of frames."""
    stream = sys.stderr if stream is None else stream
    try:
        return not quiet and stream.isatty()
    except (AttributeError, ValueError):
        return False


#: a reference's name in a `--python NAME=PATH` entry (esverify.oracle.interpreters parses the same form)
PYTHON_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def config_paths(value: str, base) -> str:
    """The [tool.esverify] python value with each entry's path made absolute: `~` expanded, a path with a
    '/' taken relative to `base` (the pyproject.toml's folder, as ruff's paths are), a bare name such as
    `python3` left to be looked up on PATH; entries kept in order, separated by commas."""
    out = []
    for item in (part.strip() for part in value.split(",")):
        name, sep, where = item.partition("=")
        if not (sep and PYTHON_NAME.match(name) and "/" not in name):
            name, sep, where = "", "", item
        where = os.path.expanduser(where)
        if "/" in where and not os.path.isabs(where):
            where = os.path.join(str(base), where)
        out.append(f"{name}{sep}{where}")
    return ",".join(out)


# ----------------------------------------------------------------- configuration

#: setting -> (environment variable, key of [tool.esverify]); the settings every command may read
CORE_SETTINGS = {
    "ref": ("ESVERIFY_REF", "ref"),
    "python": ("ESVERIFY_PYTHON", "python"),
    "formats": ("ESVERIFY_FORMAT", "format"),
    "reports": ("ESVERIFY_REPORTS", "reports"),
}


def settings_table() -> dict:
    """setting -> (environment variable, key of [tool.esverify]): CORE_SETTINGS, plus after "ref" one per
    reference with an alias option (its deprecated option naming its clone, e.g. "--x-ref" -> setting
    "x_ref", key "x-ref", the record's environment variable). Read from the references' records, not
    their adapters: a command line answers its usage errors without importing an adapter."""
    from . import registry
    table = {"ref": CORE_SETTINGS["ref"]}
    for name in registry.adapter_names():
        option = registry.get(name).alias_option
        if option:
            flag, env_var, _ = option
            key = flag.lstrip("-")
            table[key.replace("-", "_")] = (env_var, key)
    table.update(CORE_SETTINGS)
    return table


def path_keys(table: dict) -> set:
    """The [tool.esverify] keys whose values are paths: the clones (ref and every alias) and reports."""
    return {key for name, (_, key) in table.items() if name not in ("python", "formats")}


class ConfigError(click.UsageError):
    """A pyproject.toml whose [tool.esverify] table cannot be used (exit 2, one line)."""


def find_config(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml at or above `start` (default: the current folder) that has a
    [tool.esverify] table, as pytest and ruff look for theirs; None when there is none."""
    import tomllib
    folder = Path(start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read it as TOML ({exc}); fix or remove its [tool.esverify] table")
        if isinstance(data.get("tool"), dict) and "esverify" in data["tool"]:
            return path
    return None


def read_config(path: Path | None) -> dict:
    """The [tool.esverify] table of `path` ({} for None); ConfigError for an unknown key or a value
    that is not a string (or, for `format`, a list of strings)."""
    import tomllib
    if path is None:
        return {}
    table = tomllib.loads(path.read_text(encoding="utf-8"))["tool"]["esverify"]
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.esverify] must be a table")
    settings = settings_table()
    keys = {key: name for name, (_, key) in settings.items()}
    out = {}
    for key, value in table.items():
        if key not in keys:
            raise ConfigError(f"{path}: [tool.esverify] has an unknown key {key!r}{suggest(key, keys)} "
                              f"(known: {', '.join(keys)})")
        if isinstance(value, list) and key in ("format", "python") and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if not isinstance(value, str):
            raise ConfigError(f"{path}: [tool.esverify] {key} must be a string, got {value!r}")
        if key == "python":   # [NAME=]PATH entries, each path relative to the file (esverify.oracle.interpreters)
            out[keys[key]] = config_paths(value, path.parent)
            continue
        value = os.path.expanduser(value) if key != "format" else value
        # a relative path is relative to the pyproject.toml, as ruff's are; a bare `python3` is looked up on PATH
        is_path = key in path_keys(settings) or (key == "python" and "/" in value)
        if is_path and not os.path.isabs(value):
            value = str(path.parent / value)
        out[keys[key]] = value
    return out


@dataclass
class Settings:
    """Resolved settings: `values` {name: value or None} and `sources` {name: where it came from}."""
    values: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)

    def get(self, name, default=None):
        value = self.values.get(name)
        return default if value is None else value

    def metadata(self) -> dict:
        """{name: {"value": ..., "source": ...}} for the report's metadata."""
        return {name: {"value": self.values.get(name), "source": self.sources[name]} for name in self.sources}


def resolve(ctx: click.Context, names, config_path: Path | None = None, environ=None) -> Settings:
    """Each setting in `names` from the command line (click's parameter of the same name, when given
    there), else its ESVERIFY_* variable, else [tool.esverify] (the nearest pyproject.toml, or
    `config_path`), else None (the command's default)."""
    environ = os.environ if environ is None else environ
    path = config_path if config_path is not None else find_config()
    config = read_config(path)
    settings = Settings()
    table = settings_table()
    for name in names:
        env_var, key = table[name]
        given = ctx.params.get(name)
        source = ctx.get_parameter_source(name) if name in ctx.params else None
        if given is not None and source is click.core.ParameterSource.COMMANDLINE:
            settings.values[name], settings.sources[name] = given, "command line"
        elif environ.get(env_var):
            settings.values[name], settings.sources[name] = environ[env_var], f"environment ${env_var}"
        elif name in config:
            settings.values[name], settings.sources[name] = config[name], f"{path} [tool.esverify] {key}"
        else:
            settings.values[name], settings.sources[name] = None, "default"
    return settings
