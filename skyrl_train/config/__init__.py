"""The trainer's configuration: pydantic models, one per concern, YAML recipes and dotted overrides.

The key names are SkyRL's wherever SkyRL has the setting, so a SkyRL command line mostly carries over::

    cfg = load_config("sql_cpu", ["trainer.epochs=2", "generator.n_samples_per_prompt=4"])

Every field has a type, a default and a docstring (the string under it, which pydantic keeps as the
field's description). Loading refuses unknown keys (with a did-you-mean naming the full dotted key), values
of the wrong type or out of range (naming the field), values that are not implemented yet (saying so), and
settings that contradict each other (naming every field involved), so a bad run fails before it starts.
:func:`describe_config` lists every key with its type, default and docstring (``skyrl-train config
--describe``). Every key has a reader: ``tests/train/test_config_wiring.py`` changes each one and checks that
the part built from it changes.

Values may use OmegaConf interpolations (``max_input_length: ${trainer.max_prompt_length}``); they are
resolved against the whole configuration, defaults included, when it is loaded.

- :mod:`~skyrl_train.config.base`: the strict base model, field types, the marker of keys not implemented
  yet, key walking and error messages;
- :mod:`~skyrl_train.config.schema`: the models;
- :mod:`~skyrl_train.config.rules`: the cross-field rules;
- :mod:`~skyrl_train.config.loading`: recipes, overrides, the description of every key.

Nothing here imports torch: checking a recipe is cheap.
"""

from skyrl_train.config.base import ConfigError, NotImplementedYet, PartSettings, Section
from skyrl_train.config.loading import (
    RECIPES_DIR,
    describe_config,
    iter_keys,
    iter_part_keys,
    list_recipes,
    load_config,
)
from skyrl_train.config.rules import BUILTIN_ADVANTAGE_ESTIMATORS, BUILTIN_POLICY_LOSSES
from skyrl_train.config.schema import (
    EMBEDDED_MODEL,
    AlgorithmConfig,
    Config,
    CriticConfig,
    DataConfig,
    EnvironmentConfig,
    FSDPConfig,
    GeneratorConfig,
    ModelConfig,
    OptimizerConfig,
    OptionalModelConfig,
    PlacementConfig,
    PolicyConfig,
    PolicyLoraConfig,
    RecordConfig,
    RefConfig,
    SamplingParams,
    SamplingParamsConfig,
    TrainerConfig,
    WarmupConfig,
)

__all__ = [
    "AlgorithmConfig",
    "BUILTIN_ADVANTAGE_ESTIMATORS",
    "BUILTIN_POLICY_LOSSES",
    "Config",
    "ConfigError",
    "CriticConfig",
    "DataConfig",
    "EMBEDDED_MODEL",
    "EnvironmentConfig",
    "FSDPConfig",
    "GeneratorConfig",
    "ModelConfig",
    "NotImplementedYet",
    "OptimizerConfig",
    "OptionalModelConfig",
    "PlacementConfig",
    "PolicyConfig",
    "PolicyLoraConfig",
    "RECIPES_DIR",
    "RefConfig",
    "SamplingParams",
    "SamplingParamsConfig",
    "PartSettings",
    "Section",
    "TrainerConfig",
    "RecordConfig",
    "WarmupConfig",
    "describe_config",
    "iter_keys",
    "iter_part_keys",
    "list_recipes",
    "load_config",
]
