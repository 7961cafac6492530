"""The environment registry: ``register`` an id once, ``make`` it anywhere.

Registration is data (:class:`EnvSpec`) plus one :func:`make`. An entry point is a ``"module:Class"`` string
(imported only when the environment is made) or a callable. Third-party packages register through the
Python entry-point group ``skyrl_gym.envs``: the entry point names a module (imported) or a function
(called), and installing the package is enough for :func:`make` to find its environments.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import inspect
import json
import warnings
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Literal

from skyrl_gym.budget import Budget
from skyrl_gym.core import Env
from skyrl_gym.errors import RegistrationError, UnknownEnvironmentError
from skyrl_gym.settings import SettingsError

__all__ = [
    "EnvSpec",
    "registry",
    "register",
    "deregister",
    "make",
    "spec",
    "pprint_registry",
    "load_plugins",
    "load_env_creator",
    "check_env_configs",
    "PLUGIN_GROUP",
]

PLUGIN_GROUP = "skyrl_gym.envs"
"""The Python entry-point group through which installed packages register environments."""


@dataclasses.dataclass
class EnvSpec:
    """How to make one environment.

    Attributes:
        id: the name given to :func:`make`.
        entry_point: ``"module:Class"`` or a callable returning an :class:`~skyrl_gym.Env`.
        kwargs: default keyword arguments for the constructor (``env_config`` defaults merge with the
            ``env_config`` given to ``make``).
        budget: the default :class:`~skyrl_gym.budget.Budget` of every episode.
        description: one line for ``pprint_registry``.
        nondeterministic: the environment's episodes may differ for equal seeds and actions.
        config: ``"module:Class"`` (or the class) of the environment's settings: a class whose
            ``from_env_config(env_config)`` reads and validates them as the environment does, so that a wrong
            setting is found before any environment is made (:meth:`check_config`); ``None``: the environment
            declares none and its settings are not checked.
    """

    id: str
    entry_point: str | Callable[..., Env]
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    budget: Budget = dataclasses.field(default_factory=Budget)
    description: str = ""
    nondeterministic: bool = False
    config: str | type | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or any(c.isspace() for c in self.id) or "/" in self.id:
            raise RegistrationError(
                f"environment id must be a non-empty string without spaces or '/', got {self.id!r}"
            )
        if isinstance(self.entry_point, str):
            if self.entry_point.count(":") != 1 or not all(self.entry_point.split(":")):
                raise RegistrationError(
                    f"malformed entry point {self.entry_point!r} for '{self.id}': "
                    "expected 'package.module:ClassName', e.g. 'my_pkg.env:MyEnv'"
                )
        elif not callable(self.entry_point):
            raise RegistrationError(
                f"entry point of '{self.id}' must be a 'module:Class' string or a callable"
            )
        if isinstance(self.config, str) and (self.config.count(":") != 1 or not all(self.config.split(":"))):
            raise RegistrationError(
                f"malformed settings class {self.config!r} for '{self.id}': expected 'package.module:ClassName'"
            )
        self.budget = Budget.coerce(self.budget)

    @property
    def name(self) -> str:
        return self.id

    def make(self, **kwargs: Any) -> Env:
        """``make(self, **kwargs)``."""
        return make(self, **kwargs)

    def load_creator(self) -> Callable[..., Env]:
        """Import and return the entry point."""
        if callable(self.entry_point):
            return self.entry_point
        try:
            return load_env_creator(self.entry_point)
        except RegistrationError as exc:
            raise RegistrationError(f"entry point of '{self.id}': {exc}") from None

    def check_config(self, env_config: Any = None) -> Any:
        """The environment's settings read from ``env_config`` over the spec's own ``env_config`` defaults,
        as the environment reads them when it is made: what it would raise on a wrong setting is raised here
        (``ValueError`` or ``TypeError``), and nothing is made. ``None`` when the spec declares no settings."""
        if self.config is None:
            return None
        settings = self.config
        if isinstance(settings, str):
            try:
                settings = load_env_creator(settings)
            except RegistrationError as exc:
                raise RegistrationError(f"settings class of '{self.id}': {exc}") from None
        return settings.from_env_config(to_env_config(self.kwargs.get("env_config"), env_config))

    def to_json(self) -> str:
        """The spec as JSON; a callable entry point or a settings class given as an object cannot be
        serialised."""
        if callable(self.entry_point) or isinstance(self.config, type):
            raise ValueError(
                f"'{self.id}' has a callable entry point or settings class, which cannot be serialised to JSON"
            )
        data = dataclasses.asdict(self)
        return json.dumps(data)

    @staticmethod
    def from_json(text: str) -> EnvSpec:
        data = json.loads(text)
        data["budget"] = Budget(**data.get("budget", {}))
        return EnvSpec(**data)

    def pprint(self, disable_print: bool = False, include_entry_points: bool = False) -> str | None:
        out = f"id={self.id}"
        if include_entry_points:
            out += f"\nentry_point={self.entry_point}"
        if self.description:
            out += f"\ndescription={self.description}"
        if disable_print:
            return out
        print(out)
        return None


def load_env_creator(name: str) -> Callable[..., Env]:
    """Import ``"package.module:Name"`` and return ``Name`` (usually the environment class); SkyRL's name."""
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise RegistrationError(f"an entry point must look like 'package.module:Name', got {name!r}")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise RegistrationError(f"{name!r}: module '{module_name}' has no attribute '{attr}'") from None


class EnvRegistry(MutableMapping[str, EnvSpec]):
    """The id -> :class:`EnvSpec` mapping. Environments installed as plugins appear once loaded."""

    def __init__(self) -> None:
        self._specs: dict[str, EnvSpec] = {}

    def __getitem__(self, env_id: str) -> EnvSpec:
        return self._specs[env_id]

    def __setitem__(self, env_id: str, env_spec: EnvSpec) -> None:
        self._specs[env_id] = env_spec

    def __delitem__(self, env_id: str) -> None:
        del self._specs[env_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"EnvRegistry({sorted(self._specs)})"


registry = EnvRegistry()
"""Every registered environment, by id."""

_on_register: list[Callable[[EnvSpec], None]] = []
_on_deregister: list[Callable[[str], None]] = []


def register(
    id: str,
    entry_point: str | Callable[..., Env],
    kwargs: dict[str, Any] | None = None,
    *,
    budget: Budget | dict[str, Any] | None = None,
    description: str = "",
    nondeterministic: bool = False,
    config: str | type | None = None,
) -> EnvSpec:
    """Register an environment under ``id``; see :class:`EnvSpec` for the arguments.

    Registering an id twice is an error, unless the second registration is identical to the first (a module
    imported twice); :func:`deregister` first to replace one.
    """
    new = EnvSpec(
        id=id,
        entry_point=entry_point,
        kwargs=dict(kwargs or {}),
        budget=Budget.coerce(budget),
        description=description,
        nondeterministic=nondeterministic,
        config=config,
    )
    old = registry.get(id)
    if old is not None:
        if old == new:
            return old
        raise RegistrationError(
            f"environment id '{id}' is already registered (entry point {old.entry_point!r}); "
            "choose another id or deregister it first"
        )
    registry[id] = new
    for hook in _on_register:
        hook(new)
    return new


def deregister(id: str) -> None:
    """Remove ``id`` from the registry."""
    if id not in registry:
        raise UnknownEnvironmentError(_unknown_message(id))
    del registry[id]
    for hook in _on_deregister:
        hook(id)


def spec(env_id: str) -> EnvSpec:
    """The :class:`EnvSpec` registered as ``env_id``."""
    if not isinstance(env_id, str):
        raise TypeError(f"environment id must be a string, got {type(env_id).__name__}")
    found = registry.get(env_id)
    if found is None:
        raise UnknownEnvironmentError(_unknown_message(env_id))
    return found


def check_env_configs(env_configs: Any) -> list[str]:
    """Every problem of ``env_configs`` (``env_config`` by environment id, as a trainer's
    ``environment.skyrl_gym`` holds them), one ``"<id>: <message>"`` each: an id no environment is registered
    under (with a did-you-mean), a setting the environment would refuse when made
    (:meth:`EnvSpec.check_config`)."""
    problems = []
    for env_id, env_config in dict(env_configs or {}).items():
        try:
            spec(str(env_id)).check_config(env_config)
        except (UnknownEnvironmentError, ValueError, TypeError) as exc:
            problems.append(f"{env_id}: {exc}")
    return problems


def _unknown_message(env_id: str) -> str:
    known = sorted(registry)
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return (
        f"unknown environment {env_id!r}; {hint}Registered: {', '.join(known) or 'none'}. "
        "An environment from another package is found once that package is installed."
    )


def make(
    id: str | EnvSpec,
    *,
    budget: Budget | dict[str, Any] | None = None,
    errors: Literal["end", "raise"] = "end",
    **kwargs: Any,
) -> Env:
    """Make the environment registered as ``id``: an instance of its class, with a guard installed on it.

    The guard (:mod:`skyrl_gym.guard`) enforces the spec's budget and names how each episode ends; the
    object returned is the environment itself, so ``isinstance`` holds and attributes read and write through.

    Args:
        id: a registered id or an :class:`EnvSpec`.
        budget: overrides of the spec's budget (a :class:`Budget` or a dict of its fields).
        errors: ``"end"`` (default) turns an exception in ``step`` into an episode that ends in error;
            ``"raise"`` lets it propagate.
        kwargs: constructor arguments, usually ``env_config`` (a dict, an OmegaConf ``DictConfig`` or a
            dataclass; the environment receives a ``DictConfig``, or ``None`` when neither the spec nor the
            call gives one, as in SkyRL) and ``extras`` (a dict; when not given, the constructor's default).
    """
    from skyrl_gym.guard import install_guard

    env_spec = id if isinstance(id, EnvSpec) else spec(id)
    creator = env_spec.load_creator()
    call_kwargs = copy.deepcopy(env_spec.kwargs)
    config_default = call_kwargs.pop("env_config", None)
    config_given = kwargs.pop("env_config", None)
    call_kwargs.update(kwargs)

    if config_default is not None or config_given is not None:
        call_kwargs["env_config"] = to_env_config(config_default, config_given)
    elif "env_config" in _accepted_parameters(creator):
        call_kwargs["env_config"] = None

    try:
        env = creator(**call_kwargs)
    except SettingsError:  # wrong settings, in their own words (a TypeError too)
        raise
    except TypeError as exc:
        raise TypeError(f"making '{env_spec.id}' with arguments {sorted(call_kwargs)} failed: {exc}") from exc
    if not isinstance(env, Env):
        raise TypeError(
            f"entry point of '{env_spec.id}' returned {type(env).__name__}, which is not a skyrl_gym.Env; "
            "subclass skyrl_gym.Env or skyrl_gym.envs.base_text_env.BaseTextEnv"
        )
    env.spec = env_spec
    return install_guard(env, env_spec.budget.merged(budget), errors=errors)


def _accepted_parameters(creator: Callable[..., Any]) -> set[str]:
    try:
        target = creator.__init__ if inspect.isclass(creator) else creator
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return set()
    return {name for name, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def to_env_config(*configs: Any) -> Any:
    """Merge configs (dicts, ``DictConfig`` objects, dataclasses; ``None`` skipped) into one ``DictConfig``."""
    from omegaconf import DictConfig, OmegaConf

    parts = []
    for config in configs:
        if config is None:
            continue
        if isinstance(config, DictConfig):
            parts.append(config)
        elif dataclasses.is_dataclass(config):
            parts.append(OmegaConf.structured(config))
        elif isinstance(config, dict):
            parts.append(OmegaConf.create(config, flags={"allow_objects": True}))
        else:
            raise TypeError(
                f"env_config must be a dict, an OmegaConf DictConfig or a dataclass, got {type(config).__name__}"
            )
    if not parts:
        return OmegaConf.create({})
    return parts[0] if len(parts) == 1 else OmegaConf.merge(*parts)


def pprint_registry(
    print_registry: MutableMapping[str, EnvSpec] | None = None,
    *,
    num_cols: int = 3,
    disable_print: bool = False,
) -> str | None:
    """Print (or return, with ``disable_print=True``) the registered ids in columns."""
    ids = sorted(print_registry if print_registry is not None else registry)
    if not ids:
        out = "No environments registered."
    else:
        width = max(len(i) for i in ids) + 2
        rows = [ids[i : i + num_cols] for i in range(0, len(ids), num_cols)]
        out = "\n".join("".join(i.ljust(width) for i in row).rstrip() for row in rows)
    if disable_print:
        return out
    print(out)
    return None


_plugins_loaded = False


def load_plugins(force: bool = False) -> list[str]:
    """Load every installed package's ``skyrl_gym.envs`` entry point; return the names loaded.

    A plugin that fails to load is reported with a warning and skipped, so one broken package cannot
    stop the others. Called once when ``skyrl_gym`` is imported.
    """
    global _plugins_loaded
    if _plugins_loaded and not force:
        return []
    _plugins_loaded = True
    from importlib.metadata import entry_points

    loaded = []
    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            target = entry.load()
            if callable(target):
                target()
            loaded.append(entry.name)
        except Exception as exc:  # a broken plugin must not break the others
            warnings.warn(
                f"skyrl_gym: could not load environment plugin {entry.name!r} ({entry.value}): {exc!r}",
                RuntimeWarning,
                stacklevel=2,
            )
    return loaded
