"""Built-in environments and the registry functions (also importable from ``skyrl_gym``).

Each built-in lives in its own sub-package and is registered here by a ``"module:Class"`` string, so nothing
below is imported until the environment is made (or its settings, the ``config`` class, are checked).
"""

from skyrl_gym.envs.registration import (
    EnvSpec,
    check_env_configs,
    deregister,
    load_plugins,
    make,
    pprint_registry,
    register,
    registry,
    spec,
)

__all__ = [
    "EnvSpec",
    "check_env_configs",
    "deregister",
    "load_plugins",
    "make",
    "pprint_registry",
    "register",
    "registry",
    "spec",
]

register(
    id="math",
    entry_point="skyrl_gym.envs.math.env:MathEnv",
    budget={"max_turns": 1, "step_timeout_s": 10.0, "max_observation_chars": 4096},
    description="single-turn arithmetic word problems; answer as '#### N' or \\boxed{N}",
)
register(
    id="math_multi_turn",
    entry_point="skyrl_gym.envs.math.multi_turn:MultiTurnMathEnv",
    budget={"step_timeout_s": 10.0, "episode_timeout_s": 120.0, "max_observation_chars": 4096},
    description="arithmetic word problems with feedback after each wrong answer",
)
register(
    id="text2sql",
    entry_point="skyrl_gym.envs.sql.env:Text2SQLEnv",
    config="skyrl_gym.envs.sql.env:Text2SQLConfig",
    # SkyRL shows results of up to 9000 characters whole; the observation around one is about 9100.
    budget={"step_timeout_s": 30.0, "max_observation_chars": 10240},
    description="multi-turn text-to-SQL on a DuckDB or SQLite database (SkyRL-SQL's <sql>/<solution> protocol)",
)
register(
    id="python",
    entry_point="skyrl_gym.envs.python.env:PythonEnv",
    config="skyrl_gym.envs.python.env:PythonEnvConfig",
    budget={"step_timeout_s": 60.0, "episode_timeout_s": 600.0, "max_observation_chars": 8192},
    description="math with a sandboxed Python interpreter (ToRL style); tasks from reasoning-gym; \\boxed{} answer",
)
register(
    id="code",
    entry_point="skyrl_gym.envs.code.env:CodeEnv",
    config="skyrl_gym.envs.code.env:CodeConfig",
    budget={"step_timeout_s": 120.0, "episode_timeout_s": 900.0, "max_observation_chars": 8192},
    description="code generation judged by tests in a sandbox: HumanEval and stdin/stdout problems",
)
register(
    id="search",
    entry_point="skyrl_gym.envs.search.env:SearchEnv",
    config="skyrl_gym.envs.search.env:SearchConfig",
    budget={"step_timeout_s": 60.0, "max_observation_chars": 8192},
    description="question answering with a search engine (Search-R1's <search>/<information>/<answer> protocol)",
)
register(
    id="gsm8k",
    entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv",
    config="skyrl_gym.envs.gsm8k.env:GSM8kConfig",
    budget={"max_turns": 1, "step_timeout_s": 10.0, "max_observation_chars": 4096},
    description="SkyRL's GSM8K: one answer after '#### ', strict match with the ground truth",
)
register(
    id="gsm8k_multi_turn",
    entry_point="skyrl_gym.envs.gsm8k.multi_turn_env:GSM8kMultiTurnEnv",
    config="skyrl_gym.envs.gsm8k.multi_turn_env:GSM8kMultiTurnConfig",
    budget={"step_timeout_s": 10.0, "episode_timeout_s": 120.0, "max_observation_chars": 4096},
    description="SkyRL's multi-turn GSM8K: per-turn rewards (1.0 right, a format share), up to 5 answers",
)
register(
    id="aime",
    entry_point="skyrl_gym.envs.aime.env:AIMEEnv",
    budget={"max_turns": 1, "step_timeout_s": 10.0, "max_observation_chars": 4096},
    description="SkyRL's AIME: 'Answer: N' checked by Minerva's normalisation, reward 1.0 or -1.0",
)
register(
    id="lcb",
    entry_point="skyrl_gym.envs.lcb.env:LCBEnv",
    config="skyrl_gym.envs.lcb.env:LCBConfig",
    budget={"max_turns": 1, "step_timeout_s": 120.0, "max_observation_chars": 8192},
    description="SkyRL's LiveCodeBench: a program judged by stdin/stdout or functional tests in a sandbox",
)
register(
    id="searchcode",
    entry_point="skyrl_gym.envs.searchcode.env:SearchCodeEnv",
    config="skyrl_gym.envs.searchcode.env:SearchCodeConfig",
    budget={"step_timeout_s": 60.0, "episode_timeout_s": 600.0, "max_observation_chars": 8192},
    description="SkyRL's search + Python tools: <tool><search>/<python></tool> calls, '#### N' in a <solution>",
)
register(
    id="rlm",
    entry_point="skyrl_gym.envs.rlm.env:RLMEnv",
    config="skyrl_gym.envs.rlm.env:RLMEnvConfig",
    budget={"step_timeout_s": 240.0, "episode_timeout_s": 1800.0, "max_observation_chars": 32768},
    description="recursive language model: code in a sandboxed REPL over a long context, with llm_query "
    "callbacks (SkyRL's RLM protocol); bundled needle-in-a-logbook tasks",
)
register(
    id="terminal",
    entry_point="skyrl_gym.envs.terminal.env:TerminalEnv",
    config="skyrl_gym.envs.terminal.env:TerminalEnvConfig",
    budget={"step_timeout_s": 300.0, "episode_timeout_s": 3600.0, "max_observation_chars": 16384},
    description="Linux terminal tasks (Harbor / Terminal-Bench 2 folders) in a Docker container: <bash> "
    "commands, <submit/>, the task's tests after the episode; offline task set in datasets/terminal",
    nondeterministic=True,
)
register(
    id="swe",
    entry_point="skyrl_gym.envs.swe.env:SWEEnv",
    config="skyrl_gym.envs.swe.env:SWEEnvConfig",
    budget={"step_timeout_s": 900.0, "episode_timeout_s": 3600.0, "max_observation_chars": 16384},
    description="fix a real Python repository at a bugged state (<bash> commands, <submit/>); its hidden tests "
    "run on the agent's diff in a fresh container (docker) or folder (bwrap); instances in datasets/swe",
    nondeterministic=True,
)
