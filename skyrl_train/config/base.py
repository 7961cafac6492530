"""What every configuration model is built from: the strict base model, field types, the marker of keys not
implemented yet, the walk over a schema's keys, and the messages of a failed validation."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, Union

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError, core_schema

__all__ = [
    "ConfigError",
    "Float",
    "NotImplementedYet",
    "PartSettings",
    "Section",
    "StrList",
    "accepts_str",
    "deep_merge",
    "field_named",
    "has_interpolation",
    "is_free_dict",
    "is_part",
    "is_section",
    "one_as_list",
    "resolve_interpolations",
    "type_name",
    "unknown_key_message",
    "validation_messages",
    "walk_keys",
]


class ConfigError(ValueError):
    """A configuration that cannot run: unknown keys, wrong types or contradicting settings.

    ``errors`` holds one message per problem; the exception's text lists them all.
    """

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        if len(self.errors) == 1:
            text = f"invalid config: {self.errors[0]}"
        else:
            text = "invalid config:\n" + "\n".join(f"  - {e}" for e in self.errors)
        super().__init__(text)


def _number_from_text(value: Any) -> Any:
    # PyYAML reads `1e-6` (no dot) as a string; a float field takes it as the number it spells.
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def one_as_list(value: Any) -> Any:
    """A single string as a list of one (``trainer.logger=wandb``); anything else unchanged."""
    return [value] if isinstance(value, str) else value


Float = Annotated[float, BeforeValidator(_number_from_text)]
"""A float that also takes an int and a numeric string (``1e-6`` in YAML)."""

StrList = Annotated[list[str], BeforeValidator(one_as_list)]
"""A list of strings; a single string stands for a list of one."""


@dataclasses.dataclass(frozen=True)
class NotImplementedYet:
    """Marks a key of which only ``allowed`` values are implemented; any other value is refused, saying so.

    Kept in the schema because SkyRL has the key (recipes and command lines carry it over); the refusal
    names what is missing, so that setting it never silently does nothing.
    """

    allowed: tuple[Any, ...]
    reason: str

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def _check(self, value: Any) -> Any:
        if not any(value == a and type(value) is type(a) for a in self.allowed):
            raise PydanticCustomError(
                "not_implemented",
                "{value} is not implemented yet: {reason}",
                {"value": value, "reason": self.reason},
            )
        return value


class Section(BaseModel):
    """Base of every configuration model: unknown keys are refused, types are strict (no ``1`` for
    ``true``, no ``1.5`` for an int), and each field's docstring is its description."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    @classmethod
    def coerce(cls, value: Any) -> Any:
        """``value`` as this model: None gives the defaults, a mapping is validated, an instance is kept."""
        if value is None:
            return cls()
        if isinstance(value, Mapping):
            return cls.model_validate(dict(value))
        return value


class PartSettings(Section):
    """Settings of a swappable part chosen by name (``generator.dispatcher``, ``generator.agent``): ``type``
    names the part in its registry, and the part's own settings class (its ``settings`` attribute, a subclass
    of this one declared beside the part) takes the rest of the section. A bare name stands for
    ``{type: name}``."""

    type: str
    """The part's name in its registry."""


def is_part(tp: Any) -> bool:
    """Whether ``tp`` is a part's settings (a section chosen by its ``type``)."""
    return isinstance(tp, type) and issubclass(tp, PartSettings)


def is_section(tp: Any) -> bool:
    """Whether ``tp`` is a configuration model (a section)."""
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def is_free_dict(tp: Any) -> bool:
    """Whether ``tp`` is a free-form mapping (``environment.skyrl_gym``)."""
    return tp is dict or typing.get_origin(tp) is dict


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return typing.get_args(tp)
    return None


def _strip_annotated(tp: Any) -> Any:
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def accepts_str(tp: Any) -> bool:
    """Whether a field of type ``tp`` takes a string (overrides then keep ``2024`` as text)."""
    tp = _strip_annotated(tp)
    if tp is str:
        return True
    args = _union_args(tp)
    return bool(args) and str in args


def type_name(tp: Any) -> str:
    """``tp`` as the schema description shows it (``int | null``, ``'a' | 'b'``, ``list[str]``)."""
    tp = _strip_annotated(tp)
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    args = _union_args(tp)
    if args:
        return " | ".join(type_name(a) for a in args)
    if typing.get_origin(tp) is list:
        return f"list[{type_name(typing.get_args(tp)[0])}]"
    if is_free_dict(tp):
        return "mapping"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp)


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def field_named(model: type[BaseModel], name: str) -> Any:
    """The field of ``model`` called ``name`` or taking it as an alias (``max_tokens``), or None."""
    field = model.model_fields.get(name)
    if field is not None:
        return field
    for candidate in model.model_fields.values():
        alias = candidate.validation_alias
        if isinstance(alias, AliasChoices) and name in alias.choices:
            return candidate
    return None


def walk_keys(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf key of the schema ``model`` as ``(dotted key, pydantic FieldInfo)``, in schema order.

    Sections are walked into; a free-form mapping (``environment.skyrl_gym``) is one leaf.
    """
    for name, field in model.model_fields.items():
        full = f"{prefix}{name}"
        if is_section(field.annotation):
            yield from walk_keys(field.annotation, f"{full}.")
        else:
            yield full, field


def unknown_key_message(key: str, root: type[BaseModel]) -> str:
    """``unknown key 'a.b'; did you mean 'a.c'?`` with the closest keys of the schema ``root``."""
    known = [k for k, _ in walk_keys(root)]
    section, _, leaf = key.rpartition(".")
    by_leaf: dict[str, list[str]] = {}
    for k in known:
        by_leaf.setdefault(k.rpartition(".")[2], []).append(k)
    # 1. The key exists under another section (data.max_prompt_length -> trainer.max_prompt_length).
    close = by_leaf.get(leaf, [])
    # 2. A misspelling of a key of the same section.
    if not close:
        siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == section}
        close = [siblings[m] for m in difflib.get_close_matches(leaf, list(siblings), n=3, cutoff=0.6)]
    # 3. A close misspelling anywhere.
    if not close:
        close = [
            k for m in difflib.get_close_matches(leaf, list(by_leaf), n=3, cutoff=0.8) for k in by_leaf[m]
        ]
    hint = f"; did you mean {' or '.join(repr(c) for c in close[:3])}?" if close else ""
    return f"unknown key {key!r}{hint} (see skyrl-train config --describe for every key)"


def validation_messages(error: ValidationError, root: type[BaseModel]) -> list[str]:
    """One message per problem of a pydantic error in the schema ``root``, each naming the full dotted key."""
    out: list[str] = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        kind, value = item["type"], item.get("input")
        if kind == "rules":
            out += list(item["ctx"]["problems"])
        elif kind == "part_setting":
            ctx = item["ctx"]
            out += [
                f"{key}.{name} is not a setting of {ctx['part']} ({ctx['known']})" for name in ctx["names"]
            ]
        elif kind == "extra_forbidden":
            out.append(unknown_key_message(key, root))
        elif kind == "unknown_part":
            out.append(item["ctx"]["message"])
        elif kind == "not_implemented":
            out.append(f"{key}={value!r} is not implemented yet: {item['ctx']['reason']}")
        elif kind == "model_type":
            out.append(f"{key or 'config'} must be a mapping, got {_show(value)}")
        else:
            message = item["msg"].removeprefix("Value error, ")
            out.append(f"{key}: {message}, got {_show(value)}")
    return out


def deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` merged in, section by section."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def has_interpolation(value: Any) -> bool:
    """Whether a value (or any value inside it) holds an OmegaConf ``${...}`` interpolation."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, Mapping):
        return any(has_interpolation(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_interpolation(v) for v in value)
    return False


def resolve_interpolations(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every ``${...}`` resolved against the whole of it (OmegaConf's rules)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(OmegaConf.create(data), resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        raise ConfigError([f"cannot resolve an interpolation: {e}"]) from None
