"""Fixtures of the agent-layer tests: a small real repository on disk, and the Docker engine for terminal tasks."""

from __future__ import annotations

import pytest

REPO_FILES = {
    "shop/__init__.py": "from shop.cart import Cart\n",
    "shop/cart.py": (
        "class Cart:\n"
        '    """A shopping cart."""\n'
        "\n"
        "    def __init__(self):\n"
        "        self.items = []\n"
        "\n"
        "    def add_item(self, name, price):\n"
        "        self.items.append((name, price))\n"
        "\n"
        "    def total(self):\n"
        "        return sum(price for _, price in self.items)\n"
        "\n"
        "\n"
        "def apply_discount(total, percent):\n"
        "    return total * (1 - percent / 100)\n"
    ),
    "shop/tax.py": "RATE = 0.2\n\n\nasync def fetch_rate(region):\n    return RATE\n",
    "tests/test_cart.py": (
        "from shop.cart import Cart\n\n\ndef test_total():\n    cart = Cart()\n    cart.add_item('a', 2)\n"
        "    cart.add_item('b', 3)\n    assert cart.total() == 5\n"
    ),
    "README.md": "# shop\n\nA tiny shop with a cart and a discount rule.\n",
    "broken.py": "def oops(:\n",
}


@pytest.fixture()
def repo(tmp_path):
    """A :class:`LocalDirWorkspace` over a small real Python project written in ``tmp_path``."""
    from skyrl_gym.tools.workspace import LocalDirWorkspace

    workspace = LocalDirWorkspace(tmp_path / "repo", files=REPO_FILES)
    yield workspace
    workspace.close()


@pytest.fixture(scope="session")
def docker_engine():
    """The Docker engine with the terminal image, or a skip saying how to get them."""
    from skyrl_gym.runtime.docker import docker_available, engine

    ok, why = docker_available()
    if not ok:
        pytest.skip(f"no Docker engine: {why} (make docker, or images/start-dockerd.sh && images/build.sh)")
    found = engine()
    try:
        found.api.inspect_image("local/terminal:latest")
    except Exception:
        pytest.skip("image local/terminal:latest not found; build it with images/build.sh")
    return found
