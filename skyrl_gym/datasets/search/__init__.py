"""The builder of the ``search`` environment's offline question-answering data: a passage corpus and QA splits.

Everything is built offline from two sources that install as ordinary packages:

- WordNet 3.0 (Debian's ``wordnet-base``), read by :mod:`.wordnet`, and the ``countryinfo`` package's facts on
  about 250 countries and territories, read by :mod:`.countries`;
- :mod:`.corpus` writes them as passages in the format of Search-R1's wiki-18;
- :mod:`.questions` makes the candidate questions, and :mod:`.splits` draws the train and test splits from
  them; :mod:`.row_format` writes a question as a row in SkyRL's format;
- :mod:`.build` writes the corpus and the splits into a folder (``datasets/search/build.py`` is its command
  line; :func:`skyrl_gym.envs.search.tasks.ensure_dataset` runs it on first use).

Every answer needs retrieval: the question never contains an answer, exactly one entity satisfies it, and its
``extra_info["supporting_ids"]`` name the passages that hold the answer chain (one for single-hop questions,
two for multi-hop ones). No passage contains a question. Importing this package imports nothing.
"""
