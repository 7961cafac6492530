"""The database domains of the generator, one module each (see :class:`..schema.Domain`)."""

from __future__ import annotations

from skyrl_gym.datasets.sql.synth.domains import (
    airline,
    company,
    films,
    hospital,
    library,
    real_estate,
    shop,
    university,
)
from skyrl_gym.datasets.sql.synth.schema import check_domains

DOMAINS = (
    shop.DOMAIN,
    university.DOMAIN,
    library.DOMAIN,
    hospital.DOMAIN,
    airline.DOMAIN,
    company.DOMAIN,
    real_estate.DOMAIN,
    films.DOMAIN,
)
"""Every domain, in a fixed order (the order fixes the database ids and the dataset)."""

check_domains(DOMAINS)

__all__ = ["DOMAINS"]
