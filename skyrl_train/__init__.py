"""skyrl_train: multi-turn RL training of language models on skyrl_gym environments."""
