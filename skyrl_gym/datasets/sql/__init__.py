"""Builders of text-to-SQL datasets for the ``text2sql`` environment (run by ``datasets/sql/build.py``).

- :mod:`.synth`: the question synthesiser (synthetic databases and checked questions of four levels), which
  also builds the bundled dataset that :mod:`skyrl_gym.envs.sql.tasks` loads;
- :mod:`.realdb`: real databases (Chinook, the periodic table) with hand-written questions;
- :mod:`.importers`: rows from Spider, BIRD and SkyRL-SQL-653 files a user downloaded.

Importing this package imports nothing heavy; duckdb and sqlglot are imported by the builders that use them.
"""
