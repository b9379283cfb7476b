"""The one settings record of every trainer: a setting is a dataclass field whose metadata
is a `Setting` (its help line, role, command-line group, check and choices), read by
attribute, never by a string key; `check_value` refuses a setting's value in one line, the
same way for a flag and for a run's saved `config.json`.

Roles:

- `"binds"`: the run's trajectory depends on it (`--resume` refuses to change it);
- `"program"`: it shapes the compiled program but not the trajectory;
- `"run"`: where the data is and what is logged or saved when (may change on `--resume`);
- `"record"`: written by the trainer (no flag).

Importing this module does not import JAX (a command's `--help` stays fast).
"""

import argparse
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from .errors import ConfigError

__all__ = ["Role", "Setting", "setting", "setting_of", "settings", "check_value", "typed"]

Role = Literal["binds", "program", "run", "record"]
_KEY = "setting"


@dataclasses.dataclass(frozen=True)
class Setting:
    """What the command line and the checks read of one setting.

    - `help`: its `--help` line (the default is appended by the command line);
    - `role`: see the module docstring;
    - `group`: the command line's group of flags it is listed under;
    - `check`: an argparse type (the text of a flag to its value, `ValueError` or
      `argparse.ArgumentTypeError` when refused), or None;
    - `choices`: the values allowed, or a function returning them (read when used, so a
      registry can grow), or None;
    - `program`: whether the compiled program depends on it (default: every binding or
      program setting);
    - `cli`: argparse options replacing the generated ones (e.g. other flag names);
    - `default_text`: the default as `--help` shows it (default: the value itself).
    """

    help: str
    role: Role
    group: str = "run"
    check: Callable[[str], Any] | None = None
    choices: Callable[[], tuple] | tuple | None = None
    program: bool = False
    cli: Mapping[str, Any] | None = None
    default_text: str | None = None

    def allowed(self) -> tuple | None:
        """The values allowed (`choices`, called if it is a function), or None."""
        return self.choices() if callable(self.choices) else self.choices


def setting(
    help: str,
    *,
    role: Role,
    group: str = "run",
    default: Any = None,
    check: Callable[[str], Any] | None = None,
    choices: Callable[[], tuple] | tuple | None = None,
    program: bool | None = None,
    cli: Mapping[str, Any] | None = None,
    default_text: str | None = None,
) -> Any:
    """A dataclass field holding a setting (`Setting`'s fields; `default` its value)."""
    record = Setting(
        help=help,
        role=role,
        group=group,
        check=check,
        choices=choices,
        program=(role in ("binds", "program")) if program is None else program,
        cli=cli,
        default_text=default_text,
    )
    return dataclasses.field(default=default, metadata={_KEY: record})


def setting_of(field: dataclasses.Field) -> Setting:
    """The `Setting` of a field made by `setting`."""
    record = field.metadata.get(_KEY)
    if not isinstance(record, Setting):
        raise TypeError(f"field {field.name!r} is not a setting (made by `runs.settings.setting`)")
    return record


def settings(config_type: type) -> Iterator[tuple[dataclasses.Field, Setting]]:
    """Each field of the settings dataclass `config_type`, with its `Setting`, in order."""
    for field in dataclasses.fields(config_type):
        yield field, setting_of(field)


def check_value(value: Any, field: dataclasses.Field, *, name: str) -> None:
    """Refuse `value` (not None) of the setting `field` in one line naming it as `name`:
    not one of its choices, a bool setting that is not a bool, a text setting (`str` or
    `str | None`) not in the canonical form its check gives, a number its check refuses
    (checked as its text, as the flag would be)."""
    record = setting_of(field)
    kind = "bool" if field.type is bool else "str" if field.type in (str, str | None) else "num"
    allowed = record.allowed()
    if allowed is not None and value not in allowed:
        raise ConfigError(f"{name}: expected one of {allowed}, got {value!r}.")
    if kind == "bool" and not isinstance(value, bool):
        raise ConfigError(f"{name}: expected true or false, got {value!r}.")
    if record.check is None:
        return
    if kind == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{name}: expected text, got {value!r}.")
        try:
            canonical = record.check(value)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{name}: {e}.") from None
        if canonical != value:
            raise ConfigError(f"{name}: expected {canonical!r}, got {value!r}.")
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name}: expected a number, got {value!r}.")
    try:
        record.check(str(value))
    except Exception as e:  # argparse.ArgumentTypeError, in the check's words
        raise ConfigError(f"{name}: {e}.") from None


def typed(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """`check` as an argparse `type`: its `ValueError` becomes argparse's one-line error
    (under the check's name)."""

    def parse(text: str):
        try:
            return check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = getattr(check, "__name__", "value")
    return parse
