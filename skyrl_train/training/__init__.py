"""Training: tensors in, tensors out. The workers that hold a model and step it (``workers/``), the losses,
advantages and KL terms (``algorithms/``), the batches trajectories become (``batch.py``), checkpoints
(``checkpoint.py``) and LoRA adapters (``lora.py``).

Nothing here rolls out, evaluates or runs the loop: ``tests/test_structure.py`` holds the package off
:mod:`skyrl_train.rollout`, :mod:`skyrl_train.evaluation` and :mod:`skyrl_train.loop`.
"""
