"""The Docker backend's defaults and the labels that mark its containers."""

from __future__ import annotations

DEFAULT_IMAGE = "local/terminal:latest"
"""The image of the terminal environment, built by ``images/build.sh``."""
RUNTIME_LABEL = "org.skyrl.runtime"
OWNER_LABEL = "org.skyrl.owner"
DEFAULT_USER = "1000:1000"
DEFAULT_LIFETIME_S = 6 * 3600
BUILD_HINT = "build it with images/build.sh"
