"""Confinement of the read tools: traversal, symlinks, allowlists, odd names and a live swap race.

Every test runs twice, once per resolver (openat2 and the portable O_NOFOLLOW walk).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rootbound.errors import ToolError
from rootbound.fs import Kinds
from tests.conftest import Harness, MakeServer, tr

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("resolver")]

ESCAPE = "path resolves outside root boundary"
READ_TOOLS = ("list_folder", "read_file", "stat_file", "hash_file", "permissions_file")
FOLLOWING_TOOLS = ("list_folder", "read_file", "hash_file")  # tools that act on what a final symlink leads to


async def refused(h: Harness, tool: str, path: str, tmp_path: Path, root: str = "workspace") -> str:
    """Call `tool` on `path`, which must fail; the message must not reveal any host path."""
    message = await h.err(tool, root=root, path=path)
    assert str(tmp_path) not in message, message
    assert "OUTSIDE-SECRET" not in message
    return message


# -- traversal -----------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", READ_TOOLS)
async def test_dotdot_traversal_rejected(server: Harness, tmp_path: Path, tool: str) -> None:
    """E2E-063."""
    assert await refused(server, tool, "../../etc/passwd", tmp_path) == ESCAPE
    assert await refused(server, tool, "../outside/secret.txt", tmp_path) == ESCAPE


async def test_sibling_prefix_escape(server: Harness, tmp_path: Path) -> None:
    """CVE-2025-53110's shape: `/x/workspace_evil` starts with the string `/x/workspace`."""
    evil = tmp_path / "workspace_evil"
    evil.mkdir()
    (evil / "f").write_text("OUTSIDE-SECRET\n")
    (tmp_path / "workspace" / "evil").symlink_to("../workspace_evil")
    for path in ("../workspace_evil/f", "evil/f", "./../workspace_evil/f"):
        assert await refused(server, "read_file", path, tmp_path) == ESCAPE
    assert await refused(server, "list_folder", "../workspace_evil", tmp_path) == ESCAPE


async def test_climbing_out_and_back_in_is_refused(server: Harness, workspace: Path, tmp_path: Path) -> None:
    """Leaving the root even for one step is an escape, as RESOLVE_BENEATH defines it."""
    (workspace / "a.txt").write_text("inside\n")
    (workspace / "sub").mkdir()
    for path in ("../workspace/a.txt", "sub/../../workspace/a.txt", "sub/../../workspace/sub/../a.txt"):
        assert await refused(server, "read_file", path, tmp_path) == ESCAPE
    assert await refused(server, "list_folder", "..", tmp_path) == ESCAPE


async def test_dotdot_that_stays_inside_works(server: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("inside\n")
    (workspace / "sub" / "deep").mkdir(parents=True)
    (workspace / "sub" / "up").symlink_to("..")
    for path in ("sub/../a.txt", "sub/deep/../../a.txt", "sub/up/a.txt", "sub/up/sub/up/a.txt"):
        assert (await server.ok("read_file", root="workspace", path=path))["content"] == "inside\n"


async def test_leading_slash_is_the_root(server: Harness, workspace: Path) -> None:
    (workspace / "etc").mkdir()
    (workspace / "etc" / "hosts").write_text("in-root hosts\n")
    assert (await server.ok("read_file", root="workspace", path="/etc/hosts"))["content"] == "in-root hosts\n"
    assert await server.err("read_file", root="workspace", path="/etc/passwd") == "file not found: /etc/passwd"


# -- symlinks ------------------------------------------------------------------------------------


@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
@pytest.mark.parametrize("position", ["first", "middle", "last"])
async def test_symlink_to_outside_at_any_component(server: Harness, workspace: Path, outside: Path,
                                                    tmp_path: Path, position: str, absolute: bool) -> None:
    (workspace / "a" / "b").mkdir(parents=True)
    if position == "first":
        link, target, path = workspace / "esc", outside, "esc/secret.txt"
    elif position == "middle":
        link, target, path = workspace / "a" / "esc", outside, "a/esc/secret.txt"
    else:
        link, target, path = workspace / "a" / "b" / "link", outside / "secret.txt", "a/b/link"
    link.symlink_to(target if absolute else os.path.relpath(target, link.parent))
    for tool in FOLLOWING_TOOLS:
        if tool == "list_folder":
            # List the escaping directory itself (or, for a file link, the file behind it).
            dir_path = path.rsplit("/", 1)[0] if position != "last" else path
            assert await refused(server, tool, dir_path, tmp_path) == ESCAPE
        else:
            assert await refused(server, tool, path, tmp_path) == ESCAPE


async def test_symlink_escape_for_list_folder(server: Harness, workspace: Path, tmp_path: Path) -> None:
    """E2E-064: `escape -> /tmp`."""
    (workspace / "escape").symlink_to("/tmp")
    assert await refused(server, "list_folder", "escape", tmp_path) == ESCAPE


async def test_escaping_symlink_is_described_not_followed(server: Harness, workspace: Path, outside: Path) -> None:
    """stat_file and permissions_file describe the link itself; its target stays unnamed."""
    (workspace / "link").symlink_to(outside / "secret.txt")
    result = await server.call("stat_file", root="workspace", path="link")
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["is_symlink"] is True
    assert result.structured_content["target"] == {"type": "external"}
    assert str(outside) not in repr(result)
    perms = await server.ok("permissions_file", root="workspace", path="link")
    assert perms["mode_string"].startswith("l")


async def test_absolute_symlink_into_the_root_is_refused(server: Harness, workspace: Path, tmp_path: Path) -> None:
    """Absolute link targets are refused even when they land inside (the kernel's RESOLVE_BENEATH rule)."""
    (workspace / "real.txt").write_text("inside\n")
    (workspace / "abs").symlink_to(workspace / "real.txt")
    assert await refused(server, "read_file", "abs", tmp_path) == ESCAPE


async def test_magic_proc_link_is_refused(server: Harness, workspace: Path, outside: Path, tmp_path: Path) -> None:
    (workspace / "magic").symlink_to(f"/proc/self/root{outside}/secret.txt")
    (workspace / "cwd").symlink_to("/proc/self/cwd")
    assert await refused(server, "read_file", "magic", tmp_path) == ESCAPE
    assert await refused(server, "list_folder", "cwd", tmp_path) == ESCAPE


async def test_dangling_symlinks(server: Harness, workspace: Path, tmp_path: Path) -> None:
    (workspace / "dangling").symlink_to("nowhere.txt")
    (workspace / "dangling_out").symlink_to("../nowhere.txt")
    assert await refused(server, "read_file", "dangling", tmp_path) == "file not found: dangling"
    assert await refused(server, "read_file", "dangling_out", tmp_path) == ESCAPE
    got = await server.ok("stat_file", root="workspace", path="dangling")
    assert (got["is_symlink"], got["target"]) == (True, {"type": "external"})


async def test_symlink_loops(server: Harness, workspace: Path, tmp_path: Path) -> None:
    (workspace / "loop1").symlink_to("loop2")
    (workspace / "loop2").symlink_to("loop1")
    (workspace / "self").symlink_to("self")
    (workspace / "dirloop").symlink_to("dirloop/x")
    for path in ("loop1", "self", "dirloop/file", "loop1/file"):
        message = await refused(server, "read_file", path, tmp_path)
        assert message == f"too many levels of symbolic links: {path}"
    got = await server.ok("list_folder", root="workspace", path="")
    assert {e["name"]: e["target_type"] for e in got["entries"]} == {
        "dirloop": "external", "loop1": "external", "loop2": "external", "self": "external"}


async def test_long_in_root_symlink_chain_is_followed(server: Harness, workspace: Path) -> None:
    (workspace / "end.txt").write_text("end\n")
    previous = "end.txt"
    for i in range(30):
        (workspace / f"l{i}").symlink_to(previous)
        previous = f"l{i}"
    assert (await server.ok("read_file", root="workspace", path=previous))["content"] == "end\n"


# -- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", READ_TOOLS)
async def test_null_byte_rejected(server: Harness, workspace: Path, tmp_path: Path, tool: str) -> None:
    """E2E-070."""
    (workspace / "file").write_text("x")
    message = await refused(server, tool, "file\x00.txt", tmp_path)
    assert message == "invalid path: contains a null byte"


async def test_double_encoded_traversal_is_a_literal_name(server: Harness, workspace: Path, tmp_path: Path) -> None:
    """E2E-071: percent signs are just characters in a file name."""
    name = "%2e%2e%2fetc%2fpasswd"
    assert await refused(server, "read_file", name, tmp_path) == f"file not found: {name}"
    (workspace / name).write_text("literal\n")
    assert (await server.ok("read_file", root="workspace", path=name))["content"] == "literal\n"
    assert await refused(server, "read_file", "..%2f..%2fetc%2fpasswd", tmp_path) == \
        "file not found: ..%2f..%2fetc%2fpasswd"


async def test_unencodable_and_overlong_names(server: Harness, tmp_path: Path) -> None:
    message = await refused(server, "read_file", "bad\ud800name", tmp_path)
    assert message.startswith("invalid path: not valid UTF-8")
    message = await refused(server, "read_file", "x" * 300, tmp_path)
    assert message.startswith("invalid path: component longer than 255 bytes")


# -- allowlists ----------------------------------------------------------------------------------


async def test_tool_not_in_allowlist_rejected(make_server: MakeServer, tmp_path: Path) -> None:
    """E2E-066, for the read tools: only the listed tools run on a restricted root."""
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    (readonly / "a.txt").write_text("a\n")
    h = await make_server({"readonly": (readonly, ["list_folder", "read_file"]), "open": tmp_path / "open"})
    assert (await h.ok("read_file", root="readonly", path="a.txt"))["content"] == "a\n"
    assert (await h.ok("list_folder", root="readonly", path=""))["count"] == 1
    for tool in ("stat_file", "hash_file", "permissions_file"):
        message = await h.err(tool, root="readonly", path="a.txt")
        assert message == f"tool {tool} not allowed on root readonly"
    # The allowlist is checked before the path: a denied tool says nothing about what exists.
    assert await h.err("stat_file", root="readonly", path="missing") == "tool stat_file not allowed on root readonly"
    assert (await h.ok("stat_file", root="open", path=""))["is_directory"] is True


# -- logging -------------------------------------------------------------------------------------


async def test_denials_are_logged_at_warn(server: Harness, workspace: Path, outside: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """Seed NFR-019: tool, root and attempted path at WARN; successes and plain errors below it."""
    (workspace / "esc").symlink_to(outside)
    caplog.set_level(logging.INFO, logger="rootbound")
    await server.err("read_file", root="workspace", path="esc/secret.txt")
    await server.err("read_file", root="workspace", path="missing.txt")
    await server.ok("list_folder", root="workspace", path="")
    calls = [r for r in caplog.records if r.name == "rootbound" and r.getMessage() == "tool call"]
    assert [(r.levelname, r.__dict__["outcome"]) for r in calls] == [
        ("WARNING", "denied"), ("INFO", "error"), ("INFO", "ok")]
    denial = calls[0].__dict__
    assert (denial["tool"], denial["root"], denial["path"]) == ("read_file", "workspace", "esc/secret.txt")
    assert denial["error"] == ESCAPE


async def test_allowlist_denial_is_logged_at_warn(make_server: MakeServer, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    h = await make_server({"ro": (tmp_path / "ro", ["read_file"])})
    caplog.set_level(logging.INFO, logger="rootbound")
    await h.err("hash_file", root="ro", path="x")
    [record] = [r for r in caplog.records if r.name == "rootbound" and r.getMessage() == "tool call"]
    assert record.levelno == logging.WARNING
    assert (record.__dict__["tool"], record.__dict__["root"], record.__dict__["outcome"]) == (
        "hash_file", "ro", "denied")


# -- the swap race -------------------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}


def _exchanger() -> Callable[..., int]:
    libc = ctypes.CDLL(None, use_errno=True)
    if hasattr(libc, "renameat2"):
        return libc.renameat2
    number = _SYS_RENAMEAT2.get(platform.machine())
    if number is None:
        pytest.skip("renameat2 is not reachable on this platform")
    return lambda *args: int(libc.syscall(number, *args))


@pytest.fixture
def swapper() -> Iterator[Swapper]:
    s = Swapper()
    yield s
    s.stop()


class Swapper:
    """A thread that atomically exchanges two directory entries until stopped."""

    def __init__(self) -> None:
        self.swaps = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._exchange = _exchanger()

    def start(self, a: Path, b: Path) -> None:
        first, second = os.fsencode(a), os.fsencode(b)
        if self._exchange(_AT_FDCWD, first, _AT_FDCWD, second, _RENAME_EXCHANGE) != 0:
            err = ctypes.get_errno()
            pytest.skip(f"RENAME_EXCHANGE unsupported here: {os.strerror(err)}")

        def run() -> None:
            while not self._stop.is_set():
                if self._exchange(_AT_FDCWD, first, _AT_FDCWD, second, _RENAME_EXCHANGE) != 0:
                    raise OSError(ctypes.get_errno(), "renameat2 failed")
                self.swaps += 1

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def _hammer(root: object, path: str, rounds: int, seen: Counter[str]) -> None:
    """Open and read `path` through the Root as fast as possible (more tries than MCP calls allow)."""
    for _ in range(rounds):
        try:
            fd = root.open(path, Kinds.FILE).fd  # type: ignore[attr-defined]
        except ToolError as exc:
            seen[exc.message.split(":")[0]] += 1
            continue
        try:
            seen[os.read(fd, 100).decode()] += 1
        finally:
            os.close(fd)


@pytest.mark.parametrize("position", ["first", "middle", "last"])
async def test_swap_race_never_reads_outside(server: Harness, workspace: Path, outside: Path,
                                             swapper: Swapper, position: str) -> None:
    """Another thread keeps swapping an in-root entry for a symlink to outside while reads go on.

    Every read must return the inside content or an error; none may return the outside file.
    """
    (outside / "f.txt").write_text("OUTSIDE-SECRET\n")
    (workspace / "a").mkdir()
    if position == "first":
        real, link, path = workspace / "dir", workspace / "swap", "dir/f.txt"
        real.mkdir()
        link.symlink_to("../outside")
        (real / "f.txt").write_text("INSIDE\n")
    elif position == "middle":
        real, link, path = workspace / "a" / "dir", workspace / "a" / "swap", "a/dir/f.txt"
        real.mkdir()
        link.symlink_to("../../outside")
        (real / "f.txt").write_text("INSIDE\n")
    else:
        real, link, path = workspace / "a" / "f.txt", workspace / "a" / "swap", "a/f.txt"
        real.write_text("INSIDE\n")
        link.symlink_to("../../outside/f.txt")

    seen: Counter[str] = Counter()
    per_thread: list[Counter[str]] = [Counter(), Counter()]
    swapper.start(real, link)
    root = server.app.roots["workspace"]
    hammers = [threading.Thread(target=_hammer, args=(root, path, 20_000, c)) for c in per_thread]
    for t in hammers:
        t.start()
    try:
        for _ in range(300):
            result = await server.call("read_file", root="workspace", path=path)
            text = result.content[0].text  # type: ignore[union-attr]
            if result.is_error:
                seen["mcp: " + text.split(":")[0]] += 1
            else:
                assert result.structured_content is not None
                seen["mcp: " + result.structured_content["content"]] += 1
    finally:
        for t in hammers:
            t.join()
        swapper.stop()
    for counter in per_thread:
        seen.update(counter)

    assert swapper.swaps > 0
    assert not [k for k in seen if "OUTSIDE" in k], seen
    # Both states were observed, so the race really ran: the inside file, and the refused link.
    assert seen["INSIDE\n"] > 0, seen
    assert seen[ESCAPE] + seen["too many levels of symbolic links"] + seen["mcp: " + ESCAPE] > 0, seen
    allowed = {"INSIDE\n", ESCAPE, "too many levels of symbolic links", "not a directory", "file not found"}
    assert {k.removeprefix("mcp: ") for k in seen} <= allowed, seen


async def test_swap_race_list_folder(server: Harness, workspace: Path, outside: Path, swapper: Swapper) -> None:
    """list_folder of a directory being swapped never lists the outside directory's entries."""
    (workspace / "dir").mkdir()
    (workspace / "dir" / "inside-marker").touch()
    (workspace / "swap").symlink_to("../outside")
    swapper.start(workspace / "dir", workspace / "swap")
    outcomes: Counter[str] = Counter()
    for _ in range(400):
        result = await server.call("list_folder", root="workspace", path="dir")
        if result.is_error:
            outcomes[result.content[0].text] += 1  # type: ignore[union-attr]
        else:
            assert result.structured_content is not None
            names = [e["name"] for e in result.structured_content["entries"]]
            assert names == ["inside-marker"], names
            outcomes["listed"] += 1
    swapper.stop()
    assert outcomes["listed"] > 0, outcomes


def test_exchange_helper_really_swaps(tmp_path: Path) -> None:
    """The race tests mean something only if the swap works: check it once, directly."""
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("elsewhere")
    s = Swapper()
    rc = s._exchange(_AT_FDCWD, os.fsencode(tmp_path / "d"), _AT_FDCWD, os.fsencode(tmp_path / "l"),
                     _RENAME_EXCHANGE)
    if rc != 0:
        assert ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS)
        pytest.skip("RENAME_EXCHANGE unsupported")
    assert (tmp_path / "d").is_symlink()
    assert (tmp_path / "l").is_dir()


# -- special files named as a tool's start -------------------------------------------------------------


@pytest.mark.parametrize("tool", ["grep", "glob", "copy", "list_folder"])
async def test_a_fifo_named_as_the_start_is_never_opened(server: Harness, workspace: Path, tool: str) -> None:
    """Opening a FIFO for reading wakes a writer blocked on it: the tools must refuse it unopened."""
    fifo = workspace / "fifo"
    os.mkfifo(fifo)
    woke = threading.Event()

    def writer() -> None:
        fd = os.open(fifo, os.O_WRONLY)  # blocks until someone opens the FIFO for reading
        woke.set()
        os.close(fd)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        if tool == "copy":
            text = await server.err("copy", **tr("fifo", "copied"))
        else:
            extra = {} if tool == "list_folder" else {"pattern": "x"}
            text = await server.err(tool, root="workspace", path="fifo", **extra)
        assert "not a" in text
        assert not woke.wait(0.2)  # with the bug the writer wakes at once
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # release the writer
        t.join()
    assert not (workspace / "copied").exists()
