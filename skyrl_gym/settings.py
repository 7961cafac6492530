"""Typed environment settings: each environment's ``env_config`` is a dataclass whose field types say what a
value may be, validated by pydantic when the settings are made.

An environment declares its settings with :func:`settings` (a pydantic dataclass) and the field types below,
which are strict where a YAML or JSON value could silently mean something else: a flag takes ``true`` or
``false`` only (not ``1`` or ``"yes"``), a count an integer that is not a bool (not ``2.5``, not ``true``), a
number an int or a float that is finite (not ``"3"``, not ``.inf``). Checks that relate one field to another
stay in the dataclass's ``__post_init__``, which runs after the fields are validated.

:func:`read_settings` reads an ``env_config`` (``None``, a dict, an OmegaConf ``DictConfig`` or a dataclass)
into such a class: an unknown key names the closest valid one, and every wrong value is reported in one
:class:`SettingsError`, ``env_config.<field> <what it must be>, got <value>``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, ConfigDict, Field, Strict, ValidationError
from pydantic.dataclasses import dataclass as _pydantic_dataclass

__all__ = [
    "Count",
    "Flag",
    "Megabytes",
    "Name",
    "NonNegativeInt",
    "PathText",
    "NonNegativeNumber",
    "Number",
    "PositiveNumber",
    "SettingsError",
    "env_config_values",
    "Share",
    "read_settings",
    "settings",
]

T = TypeVar("T")


def _number(value: Any) -> Any:
    # a bool is an int to Python, and "3" a number to pydantic's lax mode: neither is a number of seconds
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    return value


Flag = Annotated[bool, Strict()]
"""``true`` or ``false``."""
Count = Annotated[int, Strict(), Field(ge=1)]
"""A positive integer (not a bool)."""
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
"""An integer from 0 (not a bool)."""
Number = Annotated[float, BeforeValidator(_number), Field(allow_inf_nan=False)]
"""A finite int or float (not a bool, not a string)."""
NonNegativeNumber = Annotated[float, BeforeValidator(_number), Field(ge=0, allow_inf_nan=False)]
"""A finite number from 0 (a tolerance)."""
PositiveNumber = Annotated[float, BeforeValidator(_number), Field(gt=0, allow_inf_nan=False)]
"""A finite number above 0 (seconds, megabytes of a cap)."""
Share = Annotated[float, BeforeValidator(_number), Field(ge=0, le=1)]
"""A number from 0 to 1."""
Megabytes = Annotated[int, Strict(), Field(ge=16)]
"""A memory limit in MiB: an integer of at least 16."""
Name = Annotated[str, Strict(), Field(min_length=1)]
"""A non-empty string."""
PathText = Annotated[
    str, BeforeValidator(lambda value: os.fspath(value) if isinstance(value, os.PathLike) else value)
]
"""A file or folder path, kept as a string (a ``pathlib.Path`` is accepted)."""

_CONFIG = ConfigDict(arbitrary_types_allowed=True)


def settings(cls: type[T] | None = None, /, *, frozen: bool = False) -> Any:
    """Make ``cls`` an environment's settings class: a pydantic dataclass that validates its fields when
    made (``@settings`` or ``@settings(frozen=True)``), raising :class:`SettingsError`."""

    def wrap(target: type[T]) -> type[T]:
        made = _pydantic_dataclass(target, frozen=frozen, config=_CONFIG)
        validate = made.__init__

        @functools.wraps(validate)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                validate(self, *args, **kwargs)
            except ValidationError as exc:
                raise SettingsError([_problem(error) for error in exc.errors()]) from None

        made.__init__ = __init__
        return made

    return wrap if cls is None else wrap(cls)


class SettingsError(ValueError, TypeError):
    """Wrong environment settings: every wrong value, one per line. Both a ``ValueError`` and a
    ``TypeError``, as a hand-written check of either kind was before."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


_WORDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "bool_type": lambda ctx: "must be true or false",
    "int_type": lambda ctx: "must be an integer",
    "string_type": lambda ctx: "must be a string",
    "string_too_short": lambda ctx: "must not be empty",
    "greater_than": lambda ctx: (
        "must be a positive number" if ctx.get("gt") == 0 else f"must be greater than {ctx['gt']}"
    ),
    "greater_than_equal": lambda ctx: (
        "must be a positive integer"
        if ctx.get("ge") == 1
        else "must not be negative"
        if ctx.get("ge") == 0
        else f"must be at least {ctx['ge']}"
    ),
    "less_than_equal": lambda ctx: f"must be at most {ctx['le']}",
    "less_than": lambda ctx: f"must be less than {ctx['lt']}",
    "finite_number": lambda ctx: "must be finite",
}


def _problem(error: Mapping[str, Any]) -> str:
    if not error["loc"]:  # a check of __post_init__, in its own words
        return str(error["msg"]).removeprefix("Value error, ")
    where = ".".join(str(part) for part in error["loc"] if not isinstance(part, int) or len(error["loc"]) > 1)
    words = _WORDS.get(error["type"])
    what = words(error.get("ctx") or {}) if words else str(error["msg"]).removeprefix("Value error, ")
    return f"env_config.{where} {what}, got {error['input']!r:.200}"


def read_settings(cls: type[T], env_config: Any, env_name: str, aliases: dict[str, str] | None = None) -> T:
    """``env_config`` read into the settings class ``cls`` (see the module docstring); ``aliases`` maps
    another framework's key to ours. An instance of ``cls`` is returned as it is."""
    if isinstance(env_config, cls):
        return env_config
    values = env_config_values(env_config, cls, env_name, aliases=aliases)
    return cls(**_plain(values))


def _plain(value: Any) -> Any:
    """OmegaConf containers (and other mappings and sequences) as dicts and lists, for the validator."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value
    if isinstance(value, Mapping):  # a DictConfig is one
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):  # a ListConfig is one
        return [_plain(item) for item in value]
    return value


def env_config_values(
    env_config: Any, config_class: type, env_name: str, aliases: dict[str, str] | None = None
) -> dict[str, Any]:
    """The fields of ``env_config`` (``None``, a dict, an OmegaConf ``DictConfig`` or a dataclass) as a dict
    for the dataclass ``config_class``.

    Keys in ``aliases`` (another framework's name -> ours) are renamed; ``env_class`` (SkyRL's configs name
    their environment) is dropped unless ``config_class`` has such a field; an unknown key is a ``ValueError``
    that names the closest valid key and lists them all.
    """
    if env_config is None:
        return {}
    if dataclasses.is_dataclass(env_config) and not isinstance(env_config, type):
        values = dataclasses.asdict(env_config)
    elif hasattr(env_config, "items"):
        values = dict(env_config.items())
    else:
        raise TypeError(f"env_config must be a mapping or a dataclass, got {type(env_config).__name__}")
    for alias, name in (aliases or {}).items():
        if alias in values:
            value = values.pop(alias)
            values.setdefault(name, value)
    names = [f.name for f in dataclasses.fields(config_class)]
    if "env_class" not in names:
        # SkyRL's configs may carry the id of the environment they configure (its tests pass
        # {"env_class": "gsm8k"}): that names the environment, it is not one of its settings
        values.pop("env_class", None)
    unknown = sorted(set(values) - set(names))
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), names, n=1)
            hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
        raise ValueError(
            f"unknown {env_name} env_config key(s) {', '.join(hints)}; valid keys: {', '.join(names)}"
        )
    return values
