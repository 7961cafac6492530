"""Loading a configuration: shipped recipes by name or YAML files, dotted command-line overrides, and the
one-line-per-key description of the schema (``skyrl-train config --describe``)."""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from skyrl_train.config.base import (
    ConfigError,
    accepts_str,
    field_named,
    is_free_dict,
    is_part,
    is_section,
    type_name,
    unknown_key_message,
    walk_keys,
)
from skyrl_train.config.schema import OLD_PART_SECTIONS, Config, PartOf, settings_of

__all__ = ["RECIPES_DIR", "describe_config", "iter_keys", "iter_part_keys", "list_recipes", "load_config"]

RECIPES_DIR = Path(__file__).parent.parent / "recipes"
"""Where the recipes shipped with the package live (``load_config("sql_cpu")`` reads ``sql_cpu.yaml``)."""


def iter_keys(model: type[BaseModel] = Config, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf key of the configuration (or of the section ``model``) as ``(dotted key, pydantic
    FieldInfo)``, in schema order; a free-form mapping (``environment.skyrl_gym``) is one leaf."""
    return walk_keys(model, prefix)


def iter_part_keys(model: type[BaseModel] = Config, prefix: str = "") -> Iterator[tuple[str, Any, str]]:
    """Every setting of every built-in part that a section chooses by name (``generator.dispatcher``,
    ``generator.agent``) as ``(dotted key, pydantic FieldInfo, the part's name)``; ``type`` itself is one of
    :func:`iter_keys`. Imports the built-in parts."""
    for name, field in model.model_fields.items():
        marker = next((m for m in field.metadata if isinstance(m, PartOf)), None)
        if marker is not None:
            for part in marker.registry.builtin_names():
                settings = settings_of(marker.registry, part)
                for key, setting in settings.model_fields.items():
                    if key != "type":
                        yield f"{prefix}{name}.{key}", setting, part
        elif is_section(field.annotation):
            yield from iter_part_keys(field.annotation, f"{prefix}{name}.")


def list_recipes() -> list[str]:
    """Names of the recipes shipped in ``skyrl_train/recipes`` (``load_config(name)`` loads one)."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def load_config(recipe_or_path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Load a recipe (a shipped name like ``"sql_cpu"`` or a YAML path), apply overrides, validate.

    ``overrides`` are ``dotted.key=value`` strings; values are parsed as YAML (``2``, ``1e-6``, ``true``,
    ``[a, b]``, ``null``), and kept as written for string fields (``trainer.run_name=2024``). A leading
    ``+`` (Hydra's "add a key") is accepted. ``None`` starts from the defaults.
    """
    data: dict[str, Any] = {}
    if recipe_or_path is not None:
        data = _read_recipe(recipe_or_path)
    errors: list[str] = []
    for override in overrides:
        _apply_override(data, override, errors)
    try:
        config = Config.from_dict(data)
    except ConfigError as e:
        raise ConfigError(errors + e.errors) from None
    if errors:
        raise ConfigError(errors)
    return config


def _read_recipe(recipe_or_path: str | Path) -> dict[str, Any]:
    path = Path(recipe_or_path)
    is_name = isinstance(recipe_or_path, str) and "/" not in recipe_or_path and path.suffix == ""
    if is_name:
        path = RECIPES_DIR / f"{recipe_or_path}.yaml"
        if not path.is_file():
            known = list_recipes()
            close = difflib.get_close_matches(str(recipe_or_path), known, n=3, cutoff=0.5)
            hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
            raise ConfigError(
                [f"unknown recipe {str(recipe_or_path)!r}; {hint}Shipped recipes: {', '.join(known)}"]
            )
    elif not path.is_file():
        raise ConfigError([f"recipe file {str(path)!r} does not exist"])
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError([f"recipe {str(path)!r} is not valid YAML: {e}"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"recipe {str(path)!r} must be a mapping of sections, got {type(data).__name__}"])
    return data


def _apply_override(data: dict[str, Any], override: str, errors: list[str]) -> None:
    key, sep, raw = override.partition("=")
    key = key.strip().lstrip("+")
    if not sep or not key:
        errors.append(f"override {override!r} must look like dotted.key=value")
        return
    parts = key.split(".")
    annotation, free_form = _annotation_at(parts)
    if annotation is None and not free_form:
        errors.append(unknown_key_message(key, Config))
        return
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if annotation is not None and accepts_str(annotation) and not isinstance(value, (str, type(None))):
        # `trainer.run_name=2024` is the string "2024", not the integer.
        if not isinstance(value, (list, dict)):
            value = raw
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if isinstance(child, str) and is_part(_annotation_at(parts[: i + 1])[0]):
            child = node[part] = {"type": child}  # `dispatcher: fixed_pool` then `dispatcher.num_workers=2`
        if not isinstance(child, dict):
            errors.append(f"override {override!r}: {'.'.join(parts[: i + 1])} is not a section")
            return
        node = child
    if isinstance(value, str) and isinstance(node.get(parts[-1]), dict) and is_part(annotation):
        node[parts[-1]]["type"] = value  # a part's name keeps the settings already given for it
    else:
        node[parts[-1]] = value


def _annotation_at(parts: Sequence[str]) -> tuple[Any, bool]:
    """The schema annotation at a dotted path, and whether the path falls inside a free-form dict."""
    if len(parts) >= 2 and parts[0] == "generator" and parts[1] in OLD_PART_SECTIONS:
        return None, True  # read into the part's own section, with a DeprecationWarning
    model: Any = Config
    annotation: Any = None
    for part in parts:
        if annotation is not None and is_free_dict(annotation):
            return None, True
        if not is_section(model):
            return None, False
        field = field_named(model, part)
        if field is None:
            # the rest of a part's section is that part's own settings, which its class checks
            return None, is_part(model)
        annotation = field.annotation
        model = annotation
    return annotation, False


def describe_config(config: Config | None = None) -> list[str]:
    """One line per key, in schema order: ``dotted.key (type, default d): docstring``.

    With a ``config``, each line also shows that config's value where it differs from the default:
    ``dotted.key = value (type, default d): docstring``.
    """
    defaults = Config()
    lines: list[str] = []
    for key, field in iter_keys():
        value = _UNSET if config is None else _value_at(config, key)
        lines.append(_describe(key, field, _value_at(defaults, key), value))
    for key, field, part in iter_part_keys():
        section, _, leaf = key.rpartition(".")
        chosen = None if config is None else _value_at(config, section)
        value = getattr(chosen, leaf) if chosen is not None and chosen.type == part else _UNSET
        default = field.get_default(call_default_factory=True)
        lines.append(_describe(key, field, default, value, f" [{section}.type={part}]"))
    return lines


_UNSET = object()
"""No value to show: :func:`describe_config` was given no config, or the config chose another part."""


def _describe(key: str, field: Any, default: Any, value: Any, where: str = "") -> str:
    """One line of :func:`describe_config`: ``value`` is shown where it is given and is not the default."""
    shown = f" = {value!r}" if value is not _UNSET and value != default else ""
    doc = " ".join((field.description or "").split())
    return f"{key}{shown}{where} ({type_name(field.annotation)}, default {default!r}): {doc}"


def _value_at(config: BaseModel, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value
