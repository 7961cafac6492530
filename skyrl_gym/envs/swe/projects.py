"""The pinned Python projects whose repositories the ``swe`` instances are made from.

Each :class:`Project` is one source distribution on PyPI at one version, checked by its sha256, with the
pytest suite it ships: where the tests are (``test_paths``), the options its suite needs under Debian's
``python3 -m pytest`` (``pytest_args``) and where bugs may be injected (``source_dirs``). An instance names
its project by ``repo`` (the PyPI name) and ``version``; :func:`get_project` finds it.

All of them are pure Python with no runtime dependencies and suites that run in a second or two, so a whole
suite can be run to validate every candidate bug and to verify every episode.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

__all__ = ["PROJECTS", "Project", "get_project"]

#: The command that runs a suite, from the repository root (``/testbed`` in a container). The report plugin
#: and its environment are added by :func:`skyrl_gym.envs.swe.testrun.test_shell_command`.
PYTEST = "python3 -m pytest -p no:cacheprovider"


@dataclass(frozen=True)
class Project:
    """One pinned project: a PyPI source distribution and how its own tests are run.

    ``name`` is the PyPI name (an instance's ``repo``), ``sdist`` the file name on PyPI and ``sha256`` its
    digest. ``test_paths`` are the test files or folders relative to the repository root, ``pytest_args``
    the options the suite needs (before the paths), ``source_dirs`` the files or folders where bugs may be
    injected (tests inside them are never mutated).
    """

    name: str
    version: str
    sdist: str
    sha256: str
    test_paths: tuple[str, ...]
    pytest_args: tuple[str, ...] = ("-o", "addopts=")
    source_dirs: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``name-version``: the project's folder and cache name."""
        return f"{self.name}-{self.version}"

    @property
    def image_name(self) -> str:
        """The Docker image of this repository version (one per version): ``local/swe-<name>:<version>``."""
        return f"local/swe-{self.name}:{self.version}"

    def pytest_command(self, targets: tuple[str, ...] | list[str] | None = None) -> str:
        """The shell command that runs ``targets`` (node ids or paths; the whole suite when ``None``)."""
        targets = self.test_paths if targets is None else tuple(targets)
        return " ".join([PYTEST, *map(shlex.quote, self.pytest_args), *map(shlex.quote, targets)])

    @property
    def test_command(self) -> str:
        """The command that runs the whole suite from the repository root (an instance's ``test_command``)."""
        return self.pytest_command()

    def is_test_file(self, path: str) -> bool:
        """Whether a repository path is part of the test suite (a test file, a conftest or under a test path)."""
        name = path.rsplit("/", 1)[-1]
        if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
            return True
        parts = path.split("/")
        if "tests" in parts[:-1] or "test" in parts[:-1]:
            return True
        return any(path == tp or path.startswith(tp.rstrip("/") + "/") for tp in self.test_paths)


def _projects(*projects: Project) -> dict[str, Project]:
    return {p.name: p for p in projects}


#: The projects by PyPI name. Versions were checked downloadable as sdists and their suites green under
#: Debian bookworm's python3 (3.11) with python3-pytest (7.2).
PROJECTS: dict[str, Project] = _projects(
    Project(
        "tinydb",
        "4.8.2",
        "tinydb-4.8.2.tar.gz",
        "f7dfc39b8d7fda7a1ca62a8dbb449ffd340a117c1206b68c50b1a481fb95181d",
        test_paths=("tests",),
        source_dirs=("tinydb",),
    ),
    Project(
        "inflection",
        "0.5.1",
        "inflection-0.5.1.tar.gz",
        "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
        test_paths=("test_inflection.py",),
        source_dirs=("inflection",),
    ),
    Project(
        "parse",
        "1.20.2",
        "parse-1.20.2.tar.gz",
        "b41d604d16503c79d81af5165155c0b20f6c8d6c559efa66b4b695c3e5a0a0ce",
        test_paths=("tests",),
        source_dirs=("parse.py",),
    ),
    Project(
        "toolz",
        "1.0.0",
        "toolz-1.0.0.tar.gz",
        "2c86e3d9a04798ac556793bced838816296a2f085017664e4995cb40a1047a02",
        test_paths=("toolz/tests",),
        source_dirs=("toolz",),
    ),
    Project(
        "cachetools",
        "5.5.2",
        "cachetools-5.5.2.tar.gz",
        "1a661caa9175d26759571b2e19580f9d6393969e5dfca11fdb1f947a23e640d4",
        test_paths=("tests",),
        # a src layout: pytest's ``pythonpath`` option (which needs an ini file; tox.ini has no [pytest]
        # section, so it sets nothing else) puts src/ on sys.path; --rootdir keeps node ids repository-relative
        pytest_args=("-c", "tox.ini", "--rootdir=.", "-o", "pythonpath=src", "-o", "addopts="),
        source_dirs=("src/cachetools",),
    ),
    Project(
        "boltons",
        "25.0.0",
        "boltons-25.0.0.tar.gz",
        "e110fbdc30b7b9868cb604e3f71d4722dd8f4dcb4a5ddd06028ba8f1ab0b5ace",
        test_paths=("tests",),
        source_dirs=("boltons",),
    ),
    Project(
        "more-itertools",
        "10.5.0",
        "more-itertools-10.5.0.tar.gz",
        "5482bfef7849c25dc3c6dd53a6173ae4795da2a41a80faea6700d9f5846c5da6",
        test_paths=("tests",),
        source_dirs=("more_itertools",),
    ),
)


def get_project(name: str, version: str | None = None) -> Project:
    """The pinned project called ``name`` (an instance's ``repo``); ``version``, when given, must match.

    Raises :class:`KeyError` naming the known projects, or :class:`ValueError` for another version.
    """
    try:
        project = PROJECTS[name]
    except KeyError:
        raise KeyError(
            f"unknown SWE project {name!r}; pinned projects: {', '.join(sorted(PROJECTS))}"
        ) from None
    if version is not None and str(version) != project.version:
        raise ValueError(
            f"project {name!r} is pinned at version {project.version}, not {version!r}; "
            "instances of another version need their own pin in skyrl_gym/envs/swe/projects.py"
        )
    return project
