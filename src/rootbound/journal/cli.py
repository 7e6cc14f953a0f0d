"""`rootbound history | show ID | undo ...`: the journal from the command line.

These take the same `--config` / `--root` options as `serve` and read the journals of those roots
(the journal directory is found as the server finds it: settings.py). A `--root NAME` that names a
root of the `--config` file selects that root instead of adding one. They work whether a server is
running or not: SQLite lets both use the journal at once, and an undo takes the roots' locks
(locks.py), so it never interleaves with a change the server is making.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rootbound.config import Config, ConfigError, load_config, parse_root_flag

if TYPE_CHECKING:  # imported when a command runs: `rootbound --help` stays instant
    from rootbound.journal import query
    from rootbound.journal.change import Journal

__all__ = ["COMMANDS", "add_parsers", "run"]

COMMANDS: Final = ("history", "show", "undo")


def add_parsers(sub: argparse._SubParsersAction, common: Callable[[argparse.ArgumentParser], None]) -> None:  # type: ignore[type-arg]
    history = sub.add_parser("history", help="list the changes the file tools made, newest first",
                             description="One line per change: id, age, client, tool, root:path, +/- lines. "
                             "Command runs appear too (their own changes are not journaled).")
    common(history)
    history.add_argument("--path", metavar="GLOB", help="only changes of paths matching GLOB (e.g. 'src/*.py', "
                         "'*.md')")
    history.add_argument("--since", metavar="WHEN", help="only changes since WHEN: 30m, 2h, 14d, or a date/time")
    history.add_argument("--connection", metavar="ID", help="only changes made through this connection")
    history.add_argument("--client", metavar="NAME", help="only changes made by this client")
    history.add_argument("--limit", type=int, metavar="N", help="at most N lines (the newest)")
    show = sub.add_parser("show", help="show what one change did, as a unified diff")
    show.add_argument("id", help="the change's id (from history; a unique prefix of 4+ characters will do)")
    common(show)
    show.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                      help="colour the diff (auto: on a terminal, unless NO_COLOR is set)")
    und = sub.add_parser("undo", help="put back what changes replaced or removed, newest first",
                         description="Restores the before-state of each selected change, newest first. A file "
                         "that is no longer what the change left (edited since) is refused and named, unless "
                         "--force. The undo is journaled itself: undo its id to redo.")
    und.add_argument("ids", nargs="*", metavar="ID", help="changes to undo")
    common(und)
    und.add_argument("--connection", metavar="ID", help="undo every change made through this connection")
    und.add_argument("--since", metavar="WHEN", help="undo every change since WHEN: 30m, 2h, or a date/time")
    und.add_argument("--dry-run", action="store_true", help="say what would be restored or refused; change nothing")
    und.add_argument("--force", action="store_true", help="restore files edited since the change too (what they "
                     "hold now is journaled by the undo, so it can be undone)")


@dataclass
class _Opened:
    journal: Journal
    fds: dict[str, int]  # root real path -> handle
    names: dict[str, str]  # root real path -> name
    selected: set[str]  # root real paths the command is about


def _split_roots(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(--root values that name a root of the config file, the other --root values)."""
    if not args.config or not args.root:
        return [], list(args.root)
    try:
        names = {r.name for r in load_config(args.config, [], env={}).roots}
    except ConfigError:
        return [], list(args.root)
    chosen = [r for r in args.root if "=" not in r and "/" not in r and r in names]
    return chosen, [r for r in args.root if r not in chosen]


def _load(args: argparse.Namespace) -> tuple[Config, list[str], list[str]]:
    """The configuration (with the --root values that add roots), and the names of the roots asked about."""
    chosen, added = _split_roots(args)
    config = load_config(args.config, added, {"allow_commands": args.allow_commands})
    return config, chosen, added


@contextmanager
def _open(config: Config, chosen: list[str], added: list[str]) -> Iterator[_Opened]:
    roots = {os.path.realpath(r.path): r.name for r in config.roots}
    if chosen or added:
        wanted = set(chosen) | {parse_root_flag(f)["name"] for f in added}
        selected = {path for path, name in roots.items() if name in wanted}
    else:
        selected = set(roots)
    from rootbound.journal.recovery import start
    from rootbound.journal.settings import resolve

    settings = resolve(config.journal.dir, config.state_dir, roots, max_bytes=config.journal.max_bytes,
                       max_age=config.journal.max_age_seconds, max_file_size=config.journal.max_file_size)
    if settings is None:
        raise _Fail("no usable journal directory outside the roots; set journal.dir")
    fds: dict[str, int] = {}
    try:
        for path in roots:
            try:
                fds[path] = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                raise _Fail(f"cannot open root {roots[path]!r}: {exc.strerror}") from None

        @dataclass(frozen=True)
        class _Ref:
            name: str
            real_path: str

        journal = start(settings, [(_Ref(roots[p], p), fd) for p, fd in fds.items()])
        try:
            yield _Opened(journal, fds, roots, selected)
        finally:
            journal.close()
    finally:
        for fd in fds.values():
            os.close(fd)


class _Fail(Exception):
    pass


def run(args: argparse.Namespace) -> int:
    from rootbound.journal import locks

    try:
        config, chosen, added = _load(args)
    except ConfigError as exc:
        print(f"rootbound: configuration error: {exc}", file=sys.stderr)
        return 1
    if not config.journal.enabled:
        print("rootbound: the change journal is off in this configuration (journal: off); nothing was recorded",
              file=sys.stderr)
        return 1
    try:
        with _open(config, chosen, added) as opened:
            if args.command == "history":
                return _history(args, opened)
            if args.command == "show":
                return _show(args, opened)
            return _undo(args, opened)
    except _Fail as exc:
        print(f"rootbound: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"rootbound: {exc}", file=sys.stderr)
        return 2
    except locks.Busy as exc:
        print(f"rootbound: {exc}; nothing was changed, try again", file=sys.stderr)
        return 1


def _history(args: argparse.Namespace, opened: _Opened) -> int:
    from rootbound.journal import query

    since = query.parse_since(args.since) if args.since else None
    lines = query.history_lines([opened.journal.store(p) for p in opened.names], root_fds=opened.fds,
                                root_paths=opened.selected, path_glob=args.path, since=since,
                                connection=args.connection, client=args.client, limit=args.limit)
    if not lines:
        print("no changes recorded" + (" that match" if any((args.path, args.since, args.connection, args.client))
                                       else ""), file=sys.stderr)
        return 0
    print("\n".join(lines))
    return 0


def _one(opened: _Opened, ident: str) -> query.Found:
    from rootbound.journal import query

    hits = query.find([opened.journal.store(p) for p in opened.names], ident)
    ids = {h.entry.id for h in hits}
    if not ids:
        raise _Fail(f"no change {ident!r} in the journals of {', '.join(sorted(opened.names.values()))} "
                    "(see rootbound history)")
    if len(ids) > 1:
        raise _Fail(f"{ident!r} names several changes ({', '.join(sorted(ids))}); give more of the id")
    return hits[0]


def _show(args: argparse.Namespace, opened: _Opened) -> int:
    from rootbound.journal import diffs, query

    found = _one(opened, args.id)
    full = found.store.get(found.entry.id)
    assert full is not None
    found = query.Found(found.store, full)
    e = full
    use_colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty()
                                            and not os.environ.get("NO_COLOR"))
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time))
    out = [f"change {e.id}  {e.tool}  {when} ({query.age(time.time() - e.time)})",
           f"client {e.client or '-'}  connection {e.connection or '-'}  root {e.root}"]
    status = query.describe(e)
    if status:
        out.append(status)
    if e.kind == "command":
        out.append(f"command run in {e.note.get('cwd', '.')}: its changes are not journaled")
    for d in query.entry_diffs(found, opened.fds):
        out.append("")
        if d.note:
            out.append(f"{d.path}: {d.note}")
        out.extend(diffs.colour(line) if use_colour else line for line in d.lines)
    print("\n".join(out))
    return 0


def _undo(args: argparse.Namespace, opened: _Opened) -> int:
    from rootbound.journal import query
    from rootbound.journal.undo import undo

    if not args.ids and not args.connection and not args.since:
        raise ValueError("say what to undo: change ids, --connection ID or --since 30m (see rootbound history)")
    stores = [opened.journal.store(p) for p in opened.names]
    chosen: list[query.Found] = []
    for ident in args.ids:
        chosen.append(_one(opened, ident))
    if args.connection or args.since:
        since = query.parse_since(args.since) if args.since else None
        chosen.extend(query.select(stores, root_paths=opened.selected, connection=args.connection, since=since,
                                   commands=False))
    unique = {f.entry.id: f for f in chosen}
    report = undo(opened.journal, list(unique.values()), opened.fds, force=args.force, dry_run=args.dry_run,
                  connection="cli", client=f"rootbound undo ({_user()})")
    print("\n".join(report.lines()))
    return 1 if report.refused else 0


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
