"""The ``swe`` environment: real Python repositories with injected bugs, their own tests as the reward."""
