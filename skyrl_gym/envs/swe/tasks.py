"""SWE task instances: the committed set (``datasets/swe/instances.jsonl.gz``), its splits, and users' own rows.

A row in SWE-bench's schema (``instance_id``, ``repo``, ``base_commit``, ``patch``, ``FAIL_TO_PASS``,
``PASS_TO_PASS``, ``problem_statement``...) becomes one :class:`SWEInstance`. Three kinds of rows are read:

- this project's instances (they carry ``bug_patch``): the clean repository at ``environment_setup_commit``
  plus ``bug_patch`` is the bugged state ``base_commit``; ``patch`` is the fix;
- SWE-bench / SWE-Gym rows (``base_commit``, a ``patch`` that fixes, a ``test_patch`` with the tests): the image
  already holds the repository at ``base_commit``; ``test_patch`` is applied only when verifying;
- SWE-smith rows (``image_name``, no ``base_commit``): ``patch`` is the bug, applied to the clean repository
  of the image at set-up; the fix is its reverse.

``FAIL_TO_PASS`` / ``PASS_TO_PASS`` may be lists or JSON text (SWE-bench stores them as text). The image of a
row is its ``image_name``, else the naming rule of ``env_config.image_template`` (see :func:`image_for`).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "IMAGE_RULES",
    "SWEInstance",
    "default_instances_path",
    "find_instance",
    "image_for",
    "instance_from_extras",
    "load_instances",
    "load_split",
]

REPO_INSTANCES = Path(__file__).resolve().parents[3] / "datasets" / "swe" / "instances.jsonl.gz"

KIND_SYNTH = "synth"
KIND_SWEBENCH = "swe-bench"
KIND_SWESMITH = "swe-smith"

IMAGE_RULES: dict[str, str] = {
    "swe-bench": "swebench/sweb.eval.x86_64.{instance_id_1776}:latest",
    "swe-gym": "xingyaoww/sweb.eval.x86_64.{instance_id_s}:latest",
    "local": "local/swe-{repo_slug}:{version}",
}
"""Named image-naming rules for rows without ``image_name`` (``env_config.image_template`` may name one of
these or be a format string with the fields ``instance_id``, ``instance_id_1776`` (``__`` written ``_1776_``,
SWE-bench's images), ``instance_id_s`` (``__`` written ``_s_``, SWE-Gym's), ``repo``, ``repo_slug`` and
``version``)."""


def default_instances_path() -> Path:
    """Where the instances are read from: ``$SKYRL_SWE_INSTANCES``, else the committed
    ``datasets/swe/instances.jsonl.gz`` of the repository."""
    return Path(os.environ.get("SKYRL_SWE_INSTANCES") or REPO_INSTANCES)


def _node_list(value: Any, field: str, instance_id: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return ()
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(
                f"SWE instance {instance_id!r}: {field} is neither a list nor JSON text"
            ) from None
    if hasattr(value, "tolist"):  # a numpy array from a parquet row
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"SWE instance {instance_id!r}: {field} must be a list of test ids")
    return tuple(value)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.") or "repo"


@dataclasses.dataclass(frozen=True)
class SWEInstance:
    """One task: a repository at a bugged state, the tests that judge a fix, the problem statement.

    ``kind`` says how the bugged state is reached (``synth``: clean repository + ``bug_patch``, checked
    against ``base_commit``; ``swe-bench``: the image is at ``base_commit``; ``swe-smith``: ``bug_patch`` (the
    row's ``patch``) on the image's repository). ``fix_patch`` is the known fix (``""`` when only its reverse,
    ``bug_patch``, is known: SWE-smith). ``row`` is the row as given.
    """

    instance_id: str
    repo: str
    version: str
    kind: str
    base_commit: str
    environment_setup_commit: str
    fix_patch: str
    bug_patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    problem_statement: str
    image_name: str
    test_command: str
    split: str = ""
    row: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def test_files(self) -> tuple[str, ...]:
        """The files of the tests that judge a fix (from the test ids), sorted."""
        return tuple(sorted({node.split("::", 1)[0] for node in (*self.fail_to_pass, *self.pass_to_pass)}))

    @property
    def test_dirs(self) -> tuple[str, ...]:
        """The folders holding those files whose name says they hold tests (``tests``, ``toolz/tests``),
        sorted; a test file beside the source (``pkg/test_x.py``) does not make ``pkg`` a test folder."""
        parents = {f.rsplit("/", 1)[0] for f in self.test_files if "/" in f}
        return tuple(sorted(p for p in parents if "test" in p.rsplit("/", 1)[-1].lower()))

    @classmethod
    def from_row(cls, row: Mapping[str, Any], *, test_command: str | None = None) -> SWEInstance:
        """Read a row of any of the three formats; a ``ValueError`` names what is missing."""
        if not isinstance(row, Mapping):
            raise ValueError(f"a SWE instance is a mapping of SWE-bench fields, got {type(row).__name__}")
        instance_id = row.get("instance_id")
        if not isinstance(instance_id, str) or not instance_id:
            raise ValueError("a SWE instance needs an 'instance_id'")
        for needed in ("repo", "FAIL_TO_PASS"):
            if row.get(needed) in (None, ""):
                raise ValueError(f"SWE instance {instance_id!r} has no {needed!r}")
        f2p = _node_list(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", instance_id)
        p2p = _node_list(row.get("PASS_TO_PASS"), "PASS_TO_PASS", instance_id)
        if not f2p:
            raise ValueError(
                f"SWE instance {instance_id!r}: FAIL_TO_PASS is empty, nothing would judge a fix"
            )
        base_commit = str(row.get("base_commit") or "")
        patch = str(row.get("patch") or "")
        if row.get("bug_patch"):
            kind, bug, fix = KIND_SYNTH, str(row["bug_patch"]), patch
            if not base_commit:
                raise ValueError(f"SWE instance {instance_id!r} has a bug_patch but no base_commit to check")
        elif base_commit:
            kind, bug, fix = KIND_SWEBENCH, "", patch
        elif patch:
            kind, bug, fix = KIND_SWESMITH, patch, ""  # SWE-smith's patch breaks the clean repository
        else:
            raise ValueError(f"SWE instance {instance_id!r} has neither base_commit nor patch")
        command = str(row.get("test_command") or test_command or "")
        return cls(
            instance_id=instance_id,
            repo=str(row["repo"]),
            version=str(row.get("version") or ""),
            kind=kind,
            base_commit=base_commit,
            environment_setup_commit=str(row.get("environment_setup_commit") or ""),
            fix_patch=fix,
            bug_patch=bug,
            test_patch=str(row.get("test_patch") or ""),
            fail_to_pass=f2p,
            pass_to_pass=p2p,
            problem_statement=str(row.get("problem_statement") or ""),
            image_name=str(row.get("image_name") or ""),
            test_command=command,
            split=str(row.get("split") or ""),
            row=dict(row),
        )

    def command(self) -> str:
        """The shell command that runs the judging tests from the repository's root.

        The row's ``test_command`` (``{test_files}`` in it is replaced by the test files), else pytest on the
        test files."""
        files = " ".join(self.test_files)
        if self.test_command:
            return self.test_command.replace("{test_files}", files)
        return f"python3 -m pytest -p no:cacheprovider {files}"


def image_for(instance: SWEInstance, template: str | None = None) -> str:
    """The image a row runs in: its ``image_name``; else ``template`` (a name in :data:`IMAGE_RULES` or a
    format string); else this project's ``local/swe-<repo>:<version>``."""
    if instance.image_name:
        return instance.image_name
    rule = IMAGE_RULES.get(template or "local", template or "")
    fields = {
        "instance_id": instance.instance_id,
        "instance_id_1776": instance.instance_id.replace("__", "_1776_"),
        "instance_id_s": instance.instance_id.replace("__", "_s_"),
        "repo": instance.repo,
        "repo_slug": _slug(instance.repo.replace("/", "-")),
        "version": instance.version or "latest",
    }
    try:
        name = rule.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"env_config.image_template {template!r} is not a naming rule: {exc}; use one of "
            f"{sorted(IMAGE_RULES)} or a format string with {sorted(fields)}"
        ) from None
    # Docker wants lower-case repository names (SWE-bench's rule lower-cases the whole name)
    repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    return f"{repository.lower()}:{tag}" if tag else name.lower()


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ValueError(
            f"no SWE instances at {path}: build them with `python datasets/swe/build.py` "
            "or point SKYRL_SWE_INSTANCES at a .jsonl(.gz) file"
        )
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime: float) -> tuple[SWEInstance, ...]:
    return tuple(SWEInstance.from_row(row) for row in _read_rows(Path(path)))


def load_instances(path: str | os.PathLike | None = None) -> list[SWEInstance]:
    """Every instance of a ``.jsonl`` / ``.jsonl.gz`` file (default :func:`default_instances_path`), in
    file order (read once per process while the file is unchanged)."""
    target = Path(path) if path is not None else default_instances_path()
    mtime = target.stat().st_mtime if target.is_file() else 0.0
    return list(_load(str(target), mtime))


def load_split(split: str, path: str | os.PathLike | None = None) -> list[SWEInstance]:
    """The instances of a split (``train`` or ``test``)."""
    instances = load_instances(path)
    chosen = [i for i in instances if i.split == split]
    if not chosen:
        splits = sorted({i.split for i in instances})
        raise ValueError(f"no SWE instances in split {split!r} (the file has splits {splits})")
    return chosen


def find_instance(instance_id: str, path: str | os.PathLike | None = None) -> SWEInstance:
    """The instance of that id (``ValueError`` with close ids when there is none)."""
    instances = load_instances(path)
    for instance in instances:
        if instance.instance_id == instance_id:
            return instance
    import difflib

    close = difflib.get_close_matches(instance_id, [i.instance_id for i in instances], n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    raise ValueError(f"no SWE instance {instance_id!r} in {path or default_instances_path()}{hint}")


def instance_from_extras(
    extras: Mapping[str, Any],
    ground_truth: Any,
    *,
    path: str | os.PathLike | None = None,
    test_command: str | None = None,
) -> SWEInstance:
    """The instance a dataset row names: a whole instance in ``extras["instance"]`` (SkyRL's SWE rows),
    ``extras["extra_info"]["instance"]`` or the ground truth itself, else the ``instance_id`` of the ground
    truth (or the ground truth as a string) looked up in the instance file."""
    candidates: Sequence[Any] = (
        extras.get("instance"),
        (extras.get("extra_info") or {}).get("instance")
        if isinstance(extras.get("extra_info"), Mapping)
        else None,
        ground_truth,
    )
    for candidate in candidates:
        if isinstance(candidate, Mapping) and "FAIL_TO_PASS" in candidate:
            return SWEInstance.from_row(candidate, test_command=test_command)
    instance_id = ground_truth.get("instance_id") if isinstance(ground_truth, Mapping) else ground_truth
    if not isinstance(instance_id, str) or not instance_id:
        raise ValueError(
            "swe needs an instance: extras={'reward_spec': {'method': 'rule', 'ground_truth': "
            "{'instance_id': '<id>'}}} (an id of datasets/swe), or a whole SWE-bench row in extras['instance']"
        )
    return find_instance(instance_id, path)
