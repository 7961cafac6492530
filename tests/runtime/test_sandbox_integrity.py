"""What sandboxed code must not be able to reach: the sandbox's start signal, descriptors it was not meant to
inherit, and, through the copy-back of a ``LocalDirWorkspace``, anything of the host outside the folder.

Every copy-back attack ends with the same checks: ``run()`` returned a result (it did not raise), and the
folder's parent (a sentinel file, a sibling folder) is byte-identical, with nothing new in it.
"""

from __future__ import annotations

import base64
import io
import os
import stat
import tarfile
import threading
from pathlib import Path

import pytest

from skyrl_gym.runtime import Limits, RunResult, make_sandbox
from skyrl_gym.runtime.bwrap import BwrapSandbox, bwrap_available
from skyrl_gym.tools.workspace import _END_MARKER, _EXIT_MARKER, LocalDirWorkspace, _pack, _unpack_into

LIMITS = Limits(timeout_s=10, memory_mb=256, max_file_mb=16, max_output_bytes=64 * 1024)


def _need_bwrap() -> None:
    works, why = bwrap_available()
    if works:
        return
    if os.environ.get("CI", "").lower() == "true":  # CI installs bubblewrap: these tests must run there
        pytest.fail(f"bubblewrap is needed here: {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def bwrap():
    _need_bwrap()
    box = make_sandbox("bwrap", limits=LIMITS)
    yield box
    box.close()


@pytest.fixture(scope="module")
def bwrap_rlimits():
    """The sandbox as it runs without control groups (``prlimit`` wraps the first process)."""
    _need_bwrap()
    box = BwrapSandbox(LIMITS)
    box.use_cgroups = False
    yield box
    box.close()


# -- the start signal and inherited descriptors ---------------------------------------------------------------

STEAL_START_BYTE = r"""
for f in /proc/self/fd/* /proc/1/fd/* /proc/2/fd/*; do
  n=${f##*/}
  [ "$n" -gt 2 ] 2>/dev/null || continue
  if timeout 1 dd if="$f" of=/dev/null bs=1 count=1 iflag=nonblock 2>/dev/null | grep -q .; then echo "read $f"; fi
  got=$(timeout 1 dd if="$f" bs=1 count=1 iflag=nonblock 2>/dev/null | wc -c)
  [ "$got" != 0 ] && echo "read $f"
  : 2>/dev/null >"$f" && echo "opened $f for writing"
done
echo finished
"""


@pytest.mark.parametrize("which", ["cgroups", "rlimits"])
def test_the_command_cannot_swallow_or_fake_the_start_signal(which, bwrap, bwrap_rlimits):
    box = bwrap if which == "cgroups" else bwrap_rlimits
    result = box.run(["/bin/bash", "-c", STEAL_START_BYTE], files={"data/x.txt": "x"})
    # before the fix the byte was read away here, and the run came back as a start failure (exit_code None)
    assert result.exit_code == 0, result
    assert result.stdout == "finished\n"


def test_a_background_process_cannot_reach_the_start_pipe_later(bwrap):
    script = (
        "( for i in 1 2 3 4 5; do for f in /proc/1/fd/* /proc/2/fd/*; do n=${f##*/}; "
        '[ "$n" -gt 2 ] && timeout 1 cat "$f" >/dev/null 2>&1 && echo "read $f"; done; sleep 0.05; done ) & '
        "wait; echo finished"
    )
    result = bwrap.run(["/bin/bash", "-c", script])
    assert result.exit_code == 0 and result.stdout == "finished\n", result


LIST_FDS = r"""
import os
own = sorted(int(n) for n in os.listdir("/proc/self/fd"))
print("self", own)
mine = {os.readlink(f"/proc/self/fd/{n}") for n in (0, 1, 2)}
for pid in ("1", "2"):
    if pid == str(os.getpid()):
        continue
    for n in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{n}")
        except OSError:
            continue
        if int(n) > 2 and target not in mine and target != "/dev/null":
            print("foreign", pid, n, target)
        if int(n) > 2:
            try:
                os.close(os.open(f"/proc/{pid}/fd/{n}", os.O_WRONLY | os.O_NONBLOCK))
                if target not in mine:
                    print("writable", pid, n, target)
            except OSError:
                pass
"""


@pytest.mark.parametrize("which", ["cgroups", "rlimits"])
def test_only_the_standard_descriptors_are_inherited(which, bwrap, bwrap_rlimits):
    box = bwrap if which == "cgroups" else bwrap_rlimits
    # files make memfds (--file), the passwd files too (--ro-bind-data); --block-fd and the start pipe as well
    result = box.run(["/usr/bin/python3", "-c", LIST_FDS], files={"a/b.txt": "b", "c.bin": b"\0\1"})
    assert result.exit_code == 0, result
    lines = result.stdout.splitlines()
    # 0, 1, 2 and the descriptor listing /proc/self/fd itself
    assert lines[0] == "self [0, 1, 2, 3]", result.stdout
    assert lines[1:] == [], result.stdout  # nothing of pid 1 but what the command holds itself


def test_a_warm_interpreter_inherits_only_the_standard_descriptors():
    _need_bwrap()
    box = make_sandbox("bwrap", limits=LIMITS, warm=1)
    try:
        code = 'import os\nprint(sorted(int(n) for n in os.listdir("/proc/1/fd")))\n'
        result = box.run_python(code)
        assert result.exit_code == 0, result
        assert result.stdout.strip() in ("[0, 1, 2]", "[0, 1, 2, 3]"), result.stdout
    finally:
        box.close()


def test_a_signal_death_is_reported_without_the_first_shell_s_message(bwrap):
    result = bwrap.run(["/bin/sh", "-c", "echo before >&2; kill -9 $$"])
    assert result.exit_code == -9 and result.stderr == "before\n", result


# -- copy-back: the host outside the folder stays untouched ---------------------------------------------------


def _snapshot(parent: Path, root: Path) -> dict[str, tuple[str, bytes]]:
    """Everything under ``parent`` but ``root``: kind and content (a link's target), never following links."""
    found: dict[str, tuple[str, bytes]] = {}
    for folder, dirs, names in os.walk(parent):
        here = Path(folder)
        if here == root or root in here.parents:
            continue
        for name in [*dirs, *names]:
            full = here / name
            if full == root:
                continue
            info = full.lstat()
            key = str(full.relative_to(parent))
            if stat.S_ISLNK(info.st_mode):
                found[key] = ("link", os.readlink(full).encode())
            elif stat.S_ISREG(info.st_mode):
                found[key] = (f"file {stat.S_IMODE(info.st_mode):o}", full.read_bytes())
            else:
                found[key] = ("dir" if stat.S_ISDIR(info.st_mode) else "other", b"")
    return found


class Host:
    """A workspace folder ``root`` with a sentinel file and a sibling folder next to it."""

    def __init__(self, parent: Path):
        self.parent = parent
        self.root = parent / "ws"
        (parent / "sentinel.txt").write_text("sentinel\n")
        (parent / "sibling").mkdir()
        (parent / "sibling" / "secret.txt").write_text("secret\n")
        (parent / "sibling" / "victim.sh").write_text("#!/bin/sh\necho original\n")
        self.root.mkdir()
        self.before = _snapshot(parent, self.root)

    def assert_untouched(self) -> None:
        assert _snapshot(self.parent, self.root) == self.before
        assert not Path("/tmp/pwned").exists() and not Path("/pwned").exists()

    def host_kind(self, relative: str) -> str | None:
        path = self.root / relative
        try:
            info = path.lstat()
        except FileNotFoundError:
            return None
        return "link" if stat.S_ISLNK(info.st_mode) else "dir" if stat.S_ISDIR(info.st_mode) else "file"


@pytest.fixture
def host(tmp_path):
    made = Host(tmp_path)
    yield made
    made.assert_untouched()


@pytest.fixture
def workspace(host, bwrap):
    ws = LocalDirWorkspace(host.root, files={"keep.txt": "keep\n", "sub/inner.txt": "inner\n"}, sandbox=bwrap)
    yield ws
    ws.close()


def test_links_leading_out_are_dropped_and_the_rest_comes_back(workspace, host):
    command = (
        "ln -s /etc/passwd abs; ln -s .. up; ln -s ../sibling sib; ln -s ../../../../.. far; "
        "ln -s sub/../.. sneaky; ln -s keep.txt ok; ln -s sub okdir; mkdir -p deep/er; ln -s ../.. deep/er/root; "
        "ln -s .. l0; for i in $(seq 1 12); do ln -s l$((i-1)) l$i; done; "
        "echo new > new.txt; echo changed > keep.txt"
    )
    result = workspace.run(command)
    assert result.exit_code == 0, result
    for name in ("abs", "up", "sib", "far", "sneaky", *(f"l{i}" for i in range(13))):
        assert host.host_kind(name) is None, name
        assert f"'{name}'" in result.output  # the result says what was dropped
    assert os.readlink(host.root / "ok") == "keep.txt" and os.readlink(host.root / "okdir") == "sub"
    assert os.readlink(host.root / "deep/er/root") == "../.."  # leads to the root itself: inside
    assert workspace.read_file("new.txt") == "new\n" and workspace.read_file("keep.txt") == "changed\n"
    assert workspace.read_file("ok") == "changed\n"


def test_a_chain_that_is_lexically_inside_but_physically_outside_is_dropped(workspace, host):
    # s leads up to a (inside); t = s/../../.. reads as a/b/c/s/../../.. = a written out, but the kernel
    # follows s first: a, then the root, then the root's parent
    result = workspace.run(
        "mkdir -p a/b/c && ln -s ../.. a/b/c/s && ln -s s/../../.. a/b/c/t && ln -s s/.. a/b/c/u"
    )
    assert result.exit_code == 0, result
    assert host.host_kind("a/b/c/s") == "link" and host.host_kind("a/b/c/u") == "link"
    assert host.host_kind("a/b/c/t") is None and "'a/b/c/t'" in result.output


def test_a_chain_deeper_than_path_max_is_dropped(workspace, host):
    # CVE-2025-4517 style: folders whose names add up to most of PATH_MAX, a link at the bottom climbing back to
    # the root, a link at the root down to it (long resolves to the root), then long/.. which reads as the root
    # written out, but is the root's parent once long is followed; and one climbing a level too far
    command = (
        "name=$(printf 'd%.0s' $(seq 1 180)); top=$PWD; "
        "for i in $(seq 1 20); do mkdir $name && cd $name || exit 9; done; "
        "ln -s $(printf '../%.0s' $(seq 1 20)) climb; "
        "ln -s $(printf '../%.0s' $(seq 1 21))sibling/secret.txt escape; "
        'cd $top; ln -s $(printf "$name/%.0s" $(seq 1 20))climb long; '
        "ln -s long/.. esc; ln -s long/../sibling/secret.txt esc2; ln -s long/keep.txt fine; echo done"
    )
    result = workspace.run(command)
    assert result.exit_code == 0 and "done" in result.output, result
    assert host.host_kind("long") == "link" and host.host_kind("fine") == "link"
    assert workspace.read_file("fine") == "keep\n"
    for name in ("esc", "esc2"):
        assert host.host_kind(name) is None and f"'{name}'" in result.output
    assert "/escape'" in result.output and "/climb'" not in result.output


def test_folders_nested_too_deep_are_not_copied_back(workspace, host):
    result = workspace.run(
        "for i in $(seq 1 200); do mkdir x && cd x || exit 9; done; echo bottom > f; echo ok"
    )
    assert result.exit_code == 0, result
    assert "nested too deep" in result.output
    assert workspace.read_file("keep.txt") == "keep\n"


def test_fifos_are_not_copied_back(workspace, host):
    result = workspace.run("mkfifo pipe && mkfifo sub/pipe2 && echo made")
    assert result.exit_code == 0 and "made" in result.output, result
    assert host.host_kind("pipe") is None and host.host_kind("sub/pipe2") is None
    assert "'pipe'" in result.output and "'sub/pipe2'" in result.output
    (host.root / "hostfifo").unlink(missing_ok=True)
    os.mkfifo(host.root / "hostfifo")  # a fifo on the host side: packing must not block on it
    assert workspace.run("ls").exit_code == 0


def test_a_folder_replaced_by_a_link_between_commands(workspace, host):
    assert workspace.run("mkdir d && echo 1 > d/f.txt").exit_code == 0
    assert host.host_kind("d") == "dir"
    result = workspace.run("rm -rf d && ln -s ../sibling d")
    assert result.exit_code == 0, result
    assert host.host_kind("d") is None
    result = workspace.run("rm -rf d; ln -s sub d; echo via > d/via.txt")
    assert result.exit_code == 0, result
    assert host.host_kind("d") == "link" and workspace.read_file("sub/via.txt") == "via\n"
    # the next command replaces the (inside) link by a folder: its files go in the folder, not through the link
    result = workspace.run("rm d && mkdir d && echo mine > d/inner.txt")
    assert result.exit_code == 0, result
    assert host.host_kind("d") == "dir" and workspace.read_file("sub/inner.txt") == "inner\n"
    assert workspace.read_file("d/inner.txt") == "mine\n"


def test_a_link_already_on_the_host_is_not_written_through(host, bwrap):
    ws = LocalDirWorkspace(host.root, files={"x.txt": "x"}, sandbox=bwrap)
    os.symlink("../sibling", host.root / "a")  # left by someone: the archive will hold a real folder a
    os.symlink(str(host.parent / "sibling"), host.root / "b")
    result = ws.run("rm a b; mkdir a b; echo pwned > a/secret.txt; echo pwned > b/victim.sh; echo ok")
    assert result.exit_code == 0, result
    assert host.host_kind("a") == "dir" and (host.root / "a/secret.txt").read_text() == "pwned\n"
    assert host.host_kind("b") == "dir"


def test_a_link_created_while_the_folder_is_packed(workspace, host):
    # a background process keeps swapping x between a folder and a link out while tar lists the folder
    command = (
        "head -c 3000000 /dev/urandom > big.bin; "
        "( for i in $(seq 1 400); do rm -rf x; mkdir x; echo f > x/f; rm -rf x; ln -s ../sibling x; "
        "rm -f x; ln -s /etc x; done ) >/dev/null 2>&1 & "
        "sleep 0.05; echo started"
    )
    for _ in range(3):
        result = workspace.run(command)
        assert isinstance(result.output, str) and result.exit_code in (0, None), result
        assert host.host_kind("x") in (None, "dir")
        host.assert_untouched()


def test_a_file_too_big_is_a_normal_result(workspace, host):
    result = workspace.run("head -c 300000000 /dev/zero > big.bin; echo $?")
    assert result.exit_code == 0, result
    assert workspace.read_file("keep.txt") == "keep\n"


def test_setuid_bits_never_reach_the_host(workspace, host):
    result = workspace.run("echo '#!/bin/sh' > tool && chmod 6755 tool && chmod 2775 sub && echo ok")
    assert result.exit_code == 0, result
    assert stat.S_IMODE((host.root / "tool").stat().st_mode) & 0o7000 == 0
    assert stat.S_IMODE((host.root / "tool").stat().st_mode) & 0o100  # executable it stays


# -- copy-back of forged archives -----------------------------------------------------------------------------


def _tar(*members: tuple[str, str, bytes | str]) -> bytes:
    """An archive of (kind, name, content or link target) members, kind one of file, dir, sym, hard, fifo, chr."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for kind, name, content in members:
            info = tarfile.TarInfo(name)
            info.mode = 0o644
            if kind == "file":
                data = content.encode() if isinstance(content, str) else content
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE,
            }[kind]  # fmt: skip
            if kind in ("sym", "hard"):
                info.linkname = str(content)
            archive.addfile(info)
    return out.getvalue()


FORGED = [
    # names that leave the folder
    _tar(("file", "../sentinel.txt", "pwned"), ("file", "/tmp/pwned", "pwned"), ("file", "ok.txt", "ok")),
    _tar(("file", "sub/../../sibling/secret.txt", "pwned"), ("file", "ok.txt", "ok")),
    # a link, then a file through it (the classic)
    _tar(("sym", "out", "../sibling"), ("file", "out/secret.txt", "pwned"), ("file", "ok.txt", "ok")),
    _tar(("sym", "out", "/tmp"), ("file", "out/pwned", "pwned"), ("file", "ok.txt", "ok")),
    _tar(
        ("sym", "a", "."),
        ("sym", "a/b", ".."),
        ("file", "a/b/sentinel.txt", "pwned"),
        ("file", "ok.txt", "ok"),
    ),
    # chains, absolute, to ..
    _tar(*(("sym", f"c{i}", f"c{i + 1}") for i in range(30)), ("sym", "c30", ".."), ("file", "ok.txt", "ok")),
    _tar(
        ("sym", "abs", "/etc/passwd"), ("sym", "dotdot", ".."), ("sym", "empty", ""), ("file", "ok.txt", "ok")
    ),
    _tar(("sym", "loop1", "loop2"), ("sym", "loop2", "loop1"), ("file", "ok.txt", "ok")),
    # hard links to files outside, or to what the archive does not hold as a file
    _tar(
        ("hard", "h1", "../sentinel.txt"),
        ("hard", "h2", "/etc/passwd"),
        ("hard", "h3", "keep.txt"),
        ("file", "ok.txt", "ok"),
    ),  # fmt: skip
    _tar(("sym", "s", "../sibling/secret.txt"), ("hard", "h", "s"), ("file", "ok.txt", "ok")),
    _tar(("file", "real.txt", "real"), ("hard", "copy.txt", "real.txt"), ("file", "ok.txt", "ok")),
    # fifos and devices
    _tar(("fifo", "fifo", ""), ("chr", "null", ""), ("file", "ok.txt", "ok")),
    # the same name twice: a folder, then a link in its place
    _tar(
        ("dir", "d", ""),
        ("sym", "d", "../sibling"),
        ("file", "d/secret.txt", "pwned"),
        ("file", "ok.txt", "ok"),
    ),
]


@pytest.mark.parametrize("data", FORGED, ids=range(len(FORGED)))
def test_forged_archives_never_write_outside(host, data):
    (host.root / "keep.txt").write_text("keep\n")
    notes = _unpack_into(host.root, data)
    assert isinstance(notes, list)
    assert (host.root / "ok.txt").read_text() == "ok"
    for folder, dirs, names in os.walk(host.root):
        for name in [*dirs, *names]:
            full = Path(folder) / name
            if full.is_symlink():
                assert not os.readlink(full).startswith("/")
                real = full.resolve()
                assert real == host.root.resolve() or host.root.resolve() in real.parents, full
            else:
                assert stat.S_ISREG(full.lstat().st_mode) or stat.S_ISDIR(full.lstat().st_mode)
    if (host.root / "copy.txt").exists():
        assert (host.root / "copy.txt").read_text() == "real"


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "not base64 at all!!!",
        base64.b64encode(b"not a tar archive" * 100).decode() + "\n" + _END_MARKER,
        base64.b64encode(_tar(("file", "a", "x" * 5000))[:1024]).decode() + "\n" + _END_MARKER,
        base64.b64encode(_tar(("file", "ok.txt", "ok"))).decode(),  # cut short: no end marker
    ],
)
def test_damaged_copies_are_a_normal_result_and_change_nothing(host, payload):
    class Forger:
        name = "forger"

        def run(self, command, **kwargs):
            return RunResult(f"{_EXIT_MARKER}0\n{payload}", "said something\n", 0)

    ws = LocalDirWorkspace(host.root, files={"keep.txt": "keep\n"}, sandbox=Forger())
    result = ws.run("anything")
    assert result.exit_code == 0 and "said something" in result.output
    assert ws.read_file("keep.txt") == "keep\n"


def test_a_forged_channel_through_the_workspace_run(host):
    data = _tar(("sym", "out", "../sibling"), ("file", "out/secret.txt", "pwned"), ("file", "ok.txt", "ok"))
    payload = base64.b64encode(data).decode()

    class Forger:
        name = "forger"

        def run(self, command, **kwargs):
            return RunResult(f"{_EXIT_MARKER}0\n{payload}\n{_END_MARKER}\n", "", 0)

    ws = LocalDirWorkspace(host.root, sandbox=Forger())
    result = ws.run("anything")
    assert result.exit_code == 0 and "dropped" in result.output
    assert ws.read_file("ok.txt") == "ok"


def test_code_in_the_sandbox_can_forge_the_channel_and_still_stays_inside(workspace, host):
    # the command grabs the script's stdout (pidfd_getfd), stops it and sends an archive of its own
    data = _tar(
        ("sym", "out", "../sibling"), ("file", "out/secret.txt", "pwned"), ("file", "../sentinel.txt", "pwned"),
        ("hard", "h", "/etc/passwd"), ("file", "forged.txt", "forged"),
    )  # fmt: skip
    forge = (
        "import ctypes, os, signal\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = libc.syscall(438, os.pidfd_open(2), 1, 0)\n"
        "if fd < 0:\n"
        "    raise SystemExit(0)\n"
        "os.kill(2, signal.SIGSTOP)\n"
        f"os.write(fd, b'\\x1eSKYRL-WORKSPACE-EXIT 0\\n{base64.b64encode(data).decode()}\\n\\x1eSKYRL-WORKSPACE-END\\n')\n"
        "os.kill(2, signal.SIGKILL)\n"
    )
    workspace.write_file("forge.py", forge)
    result = workspace.run("python3 forge.py")
    assert isinstance(result.output, str)
    if host.host_kind("forged.txt") == "file":  # the forgery went through: only its safe part was copied back
        assert host.host_kind("out") is None and host.host_kind("h") is None


def test_pack_never_follows_links_on_the_host(host):
    (host.root / "in.txt").write_text("in")
    os.symlink("../sibling", host.root / "out")
    os.symlink(str(host.parent / "sentinel.txt"), host.root / "abs")
    os.mkfifo(host.root / "fifo")
    with tarfile.open(fileobj=io.BytesIO(_pack(host.root))) as archive:
        members = {m.name: m for m in archive.getmembers()}
    assert set(members) == {"in.txt", "out", "abs"}
    assert members["out"].issym() and members["abs"].issym()


# -- read_file / write_file / list_files on the host --------------------------------------------------------


@pytest.fixture
def local(host):
    ws = LocalDirWorkspace(host.root, files={"sub/real.txt": "real\n", "top.txt": "top\n"}, sandbox="process")
    os.symlink("../sibling", host.root / "out")
    os.symlink(str(host.parent / "sibling"), host.root / "absout")
    os.symlink("sub", host.root / "insub")
    os.symlink("sub/real.txt", host.root / "alias.txt")
    os.symlink(str(host.root / "sub"), host.root / "absin")
    os.symlink("c2", host.root / "c1")
    os.symlink("out", host.root / "c2")
    os.symlink("../..", host.root / "sub" / "up")
    os.symlink("../sibling/new.txt", host.root / "dangling")
    yield ws


@pytest.mark.parametrize(
    "path", ["out/secret.txt", "absout/secret.txt", "c1/secret.txt", "sub/up/sentinel.txt", "sub/../../x"]
)
def test_files_behind_links_out_are_refused(local, host, path):
    with pytest.raises(ValueError):
        local.read_file(path)
    with pytest.raises(ValueError):
        local.write_file(path, "pwned")


def test_writing_a_dangling_link_out_is_refused(local, host):
    with pytest.raises(ValueError):
        local.write_file("dangling", "pwned")
    with pytest.raises(ValueError):
        local.write_file("out/new/deeper.txt", "pwned")


def test_links_inside_the_root_work(local, host):
    local.write_file("insub/made.txt", "made\n")
    assert (host.root / "sub" / "made.txt").read_text() == "made\n"
    local.write_file("alias.txt", "through\n")
    assert (host.root / "sub" / "real.txt").read_text() == "through\n"
    assert local.read_file("absin/real.txt") == "through\n"
    assert local.read_file("insub/../top.txt") == "top\n"
    assert local.list_files("insub") == ["sub/made.txt", "sub/real.txt"]
    assert local.resolve("alias.txt") == host.root / "sub" / "real.txt"


def test_listing_never_follows_links_out(local, host):
    files = local.list_files()
    assert files == ["sub/real.txt", "top.txt"]
    for path in ("out", "c1", "absout", "sub/up"):
        with pytest.raises(ValueError):
            local.list_files(path)


def test_a_fifo_in_the_root_neither_blocks_nor_is_written(local, host):
    os.mkfifo(host.root / "fifo")
    with pytest.raises(FileNotFoundError):
        local.read_file("fifo")
    with pytest.raises(ValueError):
        local.write_file("fifo", "x")
    assert "fifo" not in local.list_files()


def test_swapping_a_folder_for_a_link_during_writes_never_escapes(host):
    ws = LocalDirWorkspace(host.root, sandbox="process")
    swap = host.root / "swap"
    stop = threading.Event()

    def swapper() -> None:
        while not stop.is_set():
            try:
                swap.mkdir()
                swap.rmdir()
                swap.symlink_to("../sibling")
                swap.unlink()
            except OSError:
                pass

    thread = threading.Thread(target=swapper)
    thread.start()
    try:
        for i in range(2000):
            try:
                ws.write_file("swap/secret.txt", "pwned")
                ws.write_file(f"swap/new{i}.txt", "pwned")
            except (ValueError, OSError):
                pass
    finally:
        stop.set()
        thread.join()
    with_link = host.root / "swap"
    if with_link.is_symlink():
        with_link.unlink()
