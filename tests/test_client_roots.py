"""Client roots (MCP `roots`, seed 004): the client narrows or names the workspace, never widens it."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest
from mcp.client import ClientRequestContext
from mcp.types import ErrorData, ListRootsResult

from rootbound.server import roots_request
from tests.conftest import Harness, MakeServer, RootsClient, no_host_path

pytestmark = pytest.mark.anyio


def uri(path: Path | str) -> str:
    return f"file://{path}"


async def root_names(h: Harness) -> dict[str, list[str]]:
    got = await h.ok("list_roots")
    return {r["name"]: r["allowed_tools"] for r in got["roots"]}


@pytest.fixture
def project(workspace: Path) -> Path:
    proj = workspace / "proj"
    proj.mkdir()
    (proj / "main.py").write_text("print('hi')\n")
    (workspace / "top.txt").write_text("top\n")
    return proj


async def test_within_narrows_to_the_client_root_with_the_operator_allowlist(
        make_server: MakeServer, workspace: Path, project: Path) -> None:
    h = await make_server({"workspace": (workspace, ["list_folder", "read_file"])}, mode="legacy",
                          roots_client=RootsClient(uri(project)))
    assert await root_names(h) == {"proj": ["list_folder", "read_file"]}
    got = await h.ok("read_file", root="proj", path="main.py")
    assert got["content"] == "print('hi')\n"
    assert "unknown root: workspace" in await h.err("read_file", root="workspace", path="top.txt")
    # The client root is a fence of its own: its parent is outside it now.
    assert "outside root boundary" in await h.err("read_file", root="proj", path="../top.txt")
    assert "not allowed on root proj" in await h.err("hash_file", root="proj", path="main.py")


async def test_within_refuses_a_client_root_outside_every_operator_root(
        make_server: MakeServer, workspace: Path, project: Path, outside: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rootbound")
    h = await make_server(mode="legacy", roots_client=RootsClient(uri(outside), uri(project)))
    assert list(await root_names(h)) == ["proj"]
    assert any("outside every operator root" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)


async def test_within_with_no_acceptable_client_root_keeps_the_operator_roots(
        make_server: MakeServer, workspace: Path, outside: Path) -> None:
    h = await make_server(mode="legacy", roots_client=RootsClient(uri(outside)))
    assert list(await root_names(h)) == ["workspace"]
    assert "outside root boundary" in await h.err("read_file", root="workspace", path="../outside/secret.txt")


async def test_percent_encoded_dotdot_is_decoded_once_and_still_refused(
        make_server: MakeServer, workspace: Path, outside: Path) -> None:
    sneaky = f"file://{workspace}/%2e%2e/outside"  # decodes to <workspace>/../outside
    double = f"file://{workspace}/%252e%252e"  # decodes once to a literal name "%2e%2e": no such dir
    h = await make_server(mode="legacy", roots_client=RootsClient(sneaky, double, "https://example.com/x"))
    assert list(await root_names(h)) == ["workspace"]


async def test_replace_uses_the_client_roots_instead_of_the_operators(
        make_server: MakeServer, workspace: Path, outside: Path) -> None:
    h = await make_server(mode="legacy", client_roots="replace", roots_client=RootsClient((uri(outside), "desk")))
    names = await root_names(h)
    assert list(names) == ["desk"]
    assert "write_file" in names["desk"]
    assert (await h.ok("read_file", root="desk", path="secret.txt"))["content"] == "OUTSIDE-SECRET\n"


async def test_off_ignores_client_roots_and_never_asks(make_server: MakeServer, project: Path) -> None:
    client = RootsClient(uri(project))
    h = await make_server(mode="legacy", client_roots="off", roots_client=client)
    assert list(await root_names(h)) == ["workspace"]
    assert client.asked == 0


async def test_names_come_from_the_client_then_the_basename_deduplicated(
        make_server: MakeServer, workspace: Path) -> None:
    for d in ("a/src", "b/src", "c"):
        (workspace / d).mkdir(parents=True)
    h = await make_server(mode="legacy", roots_client=RootsClient(
        uri(workspace / "a/src"), uri(workspace / "b/src"), (uri(workspace / "c"), "docs")))
    assert list(await root_names(h)) == ["src", "src-2", "docs"]


async def test_list_changed_refreshes_the_roots(make_server: MakeServer, workspace: Path, project: Path) -> None:
    other = workspace / "other"
    other.mkdir()
    client = RootsClient(uri(project))
    h = await make_server(mode="legacy", roots_client=client)
    assert list(await root_names(h)) == ["proj"]
    client.roots = [uri(other)]
    await h.client.send_roots_list_changed()
    with anyio.fail_after(5):
        while list(await root_names(h)) != ["other"]:
            await anyio.sleep(0.02)


async def test_sessionless_protocol_uses_the_operator_roots(make_server: MakeServer, project: Path) -> None:
    client = RootsClient(uri(project))
    h = await make_server(mode="auto", roots_client=client)  # 2026-07-28: the server cannot ask
    assert list(await root_names(h)) == ["workspace"]
    assert client.asked == 0


async def test_a_client_that_answers_with_an_error_leaves_the_operator_roots(make_server: MakeServer) -> None:
    class Failing(RootsClient):
        async def list_roots(self, context: ClientRequestContext) -> ListRootsResult:  # type: ignore[override]
            self.asked += 1
            return ErrorData(code=-32603, message="no roots here")  # type: ignore[return-value]

    h = await make_server(mode="legacy", roots_client=Failing())
    assert list(await root_names(h)) == ["workspace"]


async def test_a_client_that_never_answers_cannot_hang_a_call(
        make_server: MakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(roots_request, "ROOTS_TIMEOUT", 0.3)

    class Silent(RootsClient):
        async def list_roots(self, context: ClientRequestContext) -> ListRootsResult:
            await anyio.sleep(3600)
            raise AssertionError("unreachable")

    h = await make_server(mode="legacy", roots_client=Silent())
    with anyio.fail_after(5):
        assert list(await root_names(h)) == ["workspace"]
        assert list(await root_names(h)) == ["workspace"]  # the failure is remembered: no second wait


async def test_relative_command_cwd_resolves_against_the_first_client_root(
        make_server: MakeServer, workspace: Path, project: Path) -> None:
    other = workspace / "other"
    other.mkdir()
    h = await make_server(mode="legacy", roots_client=RootsClient(uri(project), uri(other)),
                          commands={"allowed": ["pwd"]})
    got = await h.ok("execute_command", command="pwd", cwd=".")
    assert got["stdout"].strip() == str(project)


# -- client roots that try to reach further -------------------------------------------------------------


async def test_client_root_inside_a_repository_keeps_its_protection(make_server: MakeServer, workspace: Path
                                                                    ) -> None:
    """A client narrowing to `repo/.git` must not turn `hooks/pre-commit` into an ordinary path."""
    (workspace / "repo" / ".git" / "hooks").mkdir(parents=True)
    gitdir = workspace / "repo" / ".git"
    h = await make_server(mode="legacy", roots_client=RootsClient((f"file://{gitdir}", "g")))
    assert [r["name"] for r in (await h.ok("list_roots"))["roots"]] == ["g"]
    assert "protected path" in await h.err("write_file", root="g", path="hooks/pre-commit", content="x")
    assert "protected path" in await h.err("write_file", root="g", path="config", content="x")
    assert not (gitdir / "config").exists()


async def test_client_root_uri_tricks(make_server: MakeServer, workspace: Path, outside: Path,
                                      tmp_path: Path) -> None:
    (workspace / "link_out").symlink_to(outside)
    uris = [f"file://{workspace}%2F..%2Foutside", f"file://{workspace}/link_out", f"file://evil.example{outside}",
            f"file://{workspace}/%2e%2e/outside", f"file:{outside}"]
    h = await make_server(mode="legacy", roots_client=RootsClient(*uris))
    roots = await h.ok("list_roots")
    assert [r["name"] for r in roots["roots"]] == ["workspace"]
    no_host_path(str(roots), tmp_path)
