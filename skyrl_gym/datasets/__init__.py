"""The datasets layer: code that builds the training and test sets, apart from the environments.

- :mod:`.sql`: builders of text-to-SQL data (the question synthesiser, real databases, importers of
  downloaded sets);
- :mod:`.search`: the builder of the ``search`` environment's offline corpus and questions (WordNet and
  ``countryinfo`` readers, question synthesis, split drawing).

The environments (``skyrl_gym.envs.*``) only load a built split and never import this package: a bundled
dataset's builder is found by name through :mod:`skyrl_gym.bundled` (``tests/test_structure.py`` holds them to
it); rows are read and written by :mod:`skyrl_gym.rows`, the row format being the contract between the two.
Everything that makes a dataset lives here. Importing this package imports nothing heavy (no pyarrow, duckdb
or sqlglot).
"""
