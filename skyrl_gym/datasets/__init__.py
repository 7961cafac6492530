"""The datasets layer: code that builds and reads the training and test sets, apart from the environments.

- :mod:`.rows`: reading and writing dataset rows as JSONL or parquet (:func:`~.rows.read_rows`,
  :func:`~.rows.write_rows`);
- :mod:`.sql`: builders of text-to-SQL data (the question synthesiser, real databases, importers of
  downloaded sets);
- :mod:`.search`: the builder of the ``search`` environment's offline corpus and questions (WordNet and
  ``countryinfo`` readers, question synthesis, split drawing).

The environments' runtime packages (``skyrl_gym.envs.*``) only load a built split; everything that makes
one lives here. Importing this package imports nothing heavy (no pyarrow, duckdb or sqlglot).
"""
