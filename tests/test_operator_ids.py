"""Who did what: named bearer tokens limited to their own roots, and log lines that say which connection,
client and token made each call (issue 13 item 12).

The HTTP tests run the real `rootbound serve --transport http` process (tests/test_http.py's helpers), the
stdio one the real process over its pipes (tests/live.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client

from tests.conftest import RootsClient, text_of
from tests.live import INITIALIZE, call, raw_stdio
from tests.test_config_cli import config_error, rootbound, write_config
from tests.test_http import MCP_HEADERS, Served, http_server, mcp_client

pytestmark = pytest.mark.anyio

ALICE_TOKEN = "alice-token-0123456789abcdef"
BOB_TOKEN = "bob-token-fedcba9876543210"
SHARED_TOKEN = "shared-token-5555555555555555"


def team(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """A team server's configuration: one root per person, each person's token limited to their root."""
    for name in ("alice", "bob"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "secret.txt").write_text(f"{name}'s secret\n")
    return {"roots": [{"name": "alice", "path": str(tmp_path / "alice")},
                      {"name": "bob", "path": str(tmp_path / "bob")}],
            "auth_tokens": [{"name": "alice", "token": ALICE_TOKEN, "roots": ["alice"]},
                            {"name": "bob", "token": BOB_TOKEN, "roots": ["bob"]}],
            "commands": {"allowed": ["cat"], "audit_log": str(tmp_path / "audit.jsonl")}, **extra}


def log_lines(base: Served, tmp_path: Path) -> list[dict[str, Any]]:
    port = base.rsplit(":", 1)[1]
    return [json.loads(line) for line in (tmp_path / f"http-{port}.log").read_text().splitlines()
            if line.startswith("{")]


def tool_calls(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["msg"] == "tool call"]


async def operator_roots(client: Client) -> list[str]:
    listed = (await client.call_tool("list_roots", {})).structured_content
    assert listed is not None
    return [r["name"] for r in listed["roots"] if r["name"] != "command-output"]  # the caller's own spill root


async def assert_reaches_only(client: Client, tmp_path: Path, mine: str, theirs: str) -> None:
    assert await operator_roots(client) == [mine]
    own = await client.call_tool("read_file", {"root": mine, "path": "secret.txt"})
    assert not own.is_error and own.structured_content is not None
    assert own.structured_content["content"] == f"{mine}'s secret\n"
    # The other person's root does not exist for this token: the same error as any unknown root.
    for tool, args in (("read_file", {"root": theirs, "path": "secret.txt"}),
                       ("write_file", {"root": theirs, "path": "planted.txt", "content": "x"}),
                       ("list_folder", {"root": theirs, "path": ""}),
                       ("shell", {"command": "cat secret.txt", "root": theirs})):
        denied = await client.call_tool(tool, args)
        assert denied.is_error, (tool, denied)
        assert text_of(denied).startswith(f"unknown root: {theirs}; roots: {mine}"), text_of(denied)
    assert not (tmp_path / theirs / "planted.txt").exists()
    # Commands run in a sandbox that mounts only the token's roots: the other root's absolute path is not there.
    cat_own = await client.call_tool("shell", {"command": f"cat {tmp_path / mine / 'secret.txt'}", "root": mine})
    assert cat_own.structured_content is not None and cat_own.structured_content["exit_code"] == 0, cat_own
    assert f"{mine}'s secret" in cat_own.structured_content["stdout"]
    cat_theirs = await client.call_tool("shell", {"command": f"cat {tmp_path / theirs / 'secret.txt'}",
                                                  "root": mine})
    assert cat_theirs.structured_content is not None and cat_theirs.structured_content["exit_code"] != 0
    assert f"{theirs}'s secret" not in text_of(cat_theirs)
    # Nor does a plain cwd in the other root let a command see into it.
    cwd_theirs = await client.call_tool("shell", {"command": "cat secret.txt",
                                                  "working_directory": str(tmp_path / theirs)})
    assert f"{theirs}'s secret" not in text_of(cwd_theirs)


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # a handshake-era session; sessionless 2026-07-28 requests
async def test_each_token_reaches_only_its_own_root(tmp_path: Path, mode: str) -> None:
    with http_server(tmp_path, **team(tmp_path)) as base:
        async with mcp_client(base, ALICE_TOKEN, mode=mode) as alice, mcp_client(base, BOB_TOKEN, mode=mode) as bob:
            await assert_reaches_only(alice, tmp_path, "alice", "bob")
            await assert_reaches_only(bob, tmp_path, "bob", "alice")
    # The command audit file says whose each command was, by the token's name.
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert {record["token"] for record in audit} == {"alice", "bob"}


async def test_client_roots_cannot_widen_a_token(tmp_path: Path) -> None:
    """Even with `client_roots: replace`, a client's roots outside its token's roots are refused; inside them,
    they narrow as usual."""
    config = team(tmp_path, client_roots="replace")
    (tmp_path / "alice" / "project").mkdir()
    with http_server(tmp_path, **config) as base:
        widen = RootsClient(f"file://{tmp_path / 'bob'}", f"file://{tmp_path}")
        async with mcp_client(base, ALICE_TOKEN, mode="legacy", list_roots_callback=widen.list_roots) as alice:
            assert await operator_roots(alice) == ["alice"]
            denied = await alice.call_tool("read_file", {"root": "bob", "path": "secret.txt"})
            assert denied.is_error and text_of(denied).startswith("unknown root: bob")
        narrow = RootsClient(f"file://{tmp_path / 'alice' / 'project'}")
        async with mcp_client(base, ALICE_TOKEN, mode="legacy", list_roots_callback=narrow.list_roots) as alice:
            assert await operator_roots(alice) == ["project"]
        # An unrestricted token keeps the operator's policy: replace.
    open_config = {**config, "auth_tokens": [{"name": "ops", "token": SHARED_TOKEN}]}
    (tmp_path / "elsewhere").mkdir()
    with http_server(tmp_path, **open_config) as base:
        elsewhere = RootsClient(f"file://{tmp_path / 'elsewhere'}")
        async with mcp_client(base, SHARED_TOKEN, mode="legacy", list_roots_callback=elsewhere.list_roots) as ops:
            assert await operator_roots(ops) == ["elsewhere"]


async def test_a_session_is_refused_with_another_token(tmp_path: Path) -> None:
    with http_server(tmp_path, **team(tmp_path)) as base:
        url = f"{base}/mcp"
        opened = httpx2.post(url, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {ALICE_TOKEN}"})
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        read_alice = call("read_file", {"root": "alice", "path": "secret.txt"}, 2)
        as_alice = {**MCP_HEADERS, "Authorization": f"Bearer {ALICE_TOKEN}", "mcp-session-id": session,
                    "mcp-protocol-version": "2025-11-25"}
        assert httpx2.post(url, json=initialized, headers=as_alice).status_code == 202
        as_bob = {**as_alice, "Authorization": f"Bearer {BOB_TOKEN}"}
        hijack = httpx2.post(url, json=read_alice, headers=as_bob)
        assert hijack.status_code == 404, hijack.text
        assert "alice's secret" not in hijack.text
        own = httpx2.post(url, json=read_alice, headers=as_alice)
        assert own.status_code == 200 and "alice's secret" in own.text


async def test_http_log_lines_name_connection_client_and_token_never_the_token(tmp_path: Path) -> None:
    config = team(tmp_path, auth_token=SHARED_TOKEN)
    with http_server(tmp_path, **config) as base:
        async with mcp_client(base, ALICE_TOKEN, mode="legacy") as alice:
            await alice.call_tool("read_file", {"root": "alice", "path": "secret.txt"})
            await alice.call_tool("shell", {"command": "cat secret.txt", "root": "alice"})
        async with mcp_client(base, BOB_TOKEN) as bob:  # sessionless: no session; the client in each request
            await bob.call_tool("read_file", {"root": "alice", "path": "secret.txt"})
        async with mcp_client(base, SHARED_TOKEN, mode="legacy") as shared:
            await shared.call_tool("list_roots", {})
        bad = httpx2.post(f"{base}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": "Bearer wrong"})
        assert bad.status_code == 401
        lines = log_lines(base, tmp_path)
    calls = tool_calls(lines)
    assert [(c["tool"], c["token"], c["outcome"]) for c in calls] == [
        ("read_file", "alice", "ok"), ("shell", "alice", "ok"), ("read_file", "bob", "error"),
        ("list_roots", "auth_token", "ok")]
    alice_read, alice_shell, bob_read, shared_list = calls
    assert len(alice_read["connection"]) == 32 and alice_read["connection"] == alice_shell["connection"]
    assert shared_list["connection"] not in (alice_read["connection"], bob_read["connection"])
    assert bob_read["connection"] == "token:bob"  # sessionless: the principal is the connection
    for line in calls:
        assert line["client"] == "mcp/" + line["client"].split("/", 1)[1], line  # the SDK client's clientInfo
    # Every line logged while serving a call says whose it was: the command's line too.
    [command] = [line for line in lines if line["msg"] == "command"]
    assert (command["token"], command["connection"]) == ("alice", alice_read["connection"])
    # The start-up line names the tokens; no line anywhere holds a token's value.
    [listening] = [line for line in lines if line["msg"] == "listening"]
    assert listening["auth"] == "bearer tokens: auth_token, alice, bob"
    text = json.dumps(lines)
    for secret in (ALICE_TOKEN, BOB_TOKEN, SHARED_TOKEN, "wrong"):
        assert secret not in text


async def test_stdio_log_lines_carry_connection_and_client(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    seen = []
    for era in ("handshake", "2026-07-28"):
        with raw_stdio(["--root", f"ws={tmp_path / 'ws'}"], tmp_path / f"{era}.log") as server:
            if era == "handshake":
                server.initialize()
            for id in (1, 2):
                server.send(call("list_roots", {}, id, modern=era != "handshake"))
                assert "result" in server.answer(id)
            lines = [json.loads(line) for line in server.stderr().splitlines() if '"tool call"' in line]
            # One connection per process: the stdio client is the process's only one.
            assert [(c["connection"], c["client"]) for c in lines] == [(f"stdio:{server.proc.pid}", "raw/0")] * 2
            assert all("token" not in c for c in lines)
            seen.append(lines[0]["connection"])
    assert seen[0] != seen[1]


# -- configuration ----------------------------------------------------------------------------------------


def test_check_names_each_token_and_the_roots_it_reaches_and_never_prints_one(tmp_path: Path) -> None:
    config = team(tmp_path, auth_token=SHARED_TOKEN)
    config["commands"]["allowed_cwd_roots"] = [str(tmp_path)]  # a work area holding bob's root: alice reaches it
    path = write_config(tmp_path / "team.yaml", config)
    human, as_json = rootbound("check", "--config", str(path)), rootbound("check", "--config", str(path), "--json")
    assert human.returncode == 0, human.stderr
    assert "  token auth_token: reaches all roots\n  token alice: reaches root(s) alice\n" \
           "  token bob: reaches root(s) bob\n" in human.stdout
    assert "token 'alice' is limited to root(s) alice, but commands.allowed_cwd_roots[0] contains root 'bob'" \
        in human.stdout
    assert json.loads(as_json.stdout)["http"]["tokens"] == [
        {"name": "auth_token", "roots": ["alice", "bob"], "all_roots": True},
        {"name": "alice", "roots": ["alice"], "all_roots": False},
        {"name": "bob", "roots": ["bob"], "all_roots": False}]
    for out in (human, as_json):
        for secret in (ALICE_TOKEN, BOB_TOKEN, SHARED_TOKEN):
            assert secret not in out.stdout + out.stderr
    # Without a sandbox nothing keeps a limited token's commands out of the other roots: check says so.
    config["commands"] = {"allowed": ["cat"], "sandbox": "off"}
    unconfined = rootbound("check", "--config", str(write_config(tmp_path / "off.yaml", config)))
    assert "token(s) 'alice', 'bob' are limited to some roots, but commands.sandbox is off" in unconfined.stdout


@pytest.mark.parametrize(("tokens", "extra", "expected"), [
    ([{"name": "alice", "token": ALICE_TOKEN}, {"name": "alice", "token": BOB_TOKEN}], {},
     "auth_tokens[1].name: duplicate token name 'alice'"),
    ([{"name": "alice", "token": ALICE_TOKEN}, {"name": "bob", "token": ALICE_TOKEN}], {},
     "auth_tokens[1].token ('bob') is the same token as auth_tokens[0] ('alice')"),
    ([{"name": "alice", "token": ALICE_TOKEN}], {"auth_token": ALICE_TOKEN},
     "auth_tokens[0].token ('alice') is the same token as auth_token (or ROOTBOUND_AUTH_TOKEN)"),
    ([{"name": "auth_token", "token": ALICE_TOKEN}], {"auth_token": BOB_TOKEN},
     "auth_tokens[0].name: duplicate token name 'auth_token'"),
    ([{"name": "alice", "token": ALICE_TOKEN, "roots": ["carol"]}], {},
     "auth_tokens[0].roots: unknown root 'carol' for token 'alice'; roots: alice, bob"),
    ([{"name": "alice", "token": ALICE_TOKEN, "roots": []}], {}, "auth_tokens[0].roots is empty"),
    ([ALICE_TOKEN], {}, "auth_tokens[0] must be a {name, token, roots} entry"),
    ([{"name": "alice", "token": [ALICE_TOKEN]}], {}, "auth_tokens[0].token must be text"),
    (ALICE_TOKEN, {}, "auth_tokens must be a list of {name, token, roots} entries"),
    ([], {"auth_token": [ALICE_TOKEN]}, "auth_token must be text"),
])
def test_token_config_errors_say_what_to_fix_and_never_echo_a_token(
        tmp_path: Path, tokens: Any, extra: dict[str, Any], expected: str) -> None:
    config = {**team(tmp_path), "auth_tokens": tokens, **extra}
    message = config_error(rootbound("check", "--config", str(write_config(tmp_path / "bad.yaml", config))))
    assert expected in message
    for secret in (ALICE_TOKEN, BOB_TOKEN):
        assert secret not in message
