"""Builder of the ``swe`` instances: bugs injected into the pinned projects, validated by their own suites."""
