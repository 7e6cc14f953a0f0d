"""Drives the journal's seam the way the file tools will (phase 2), on real files in a temp directory."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from rootbound.fs import atomic, trees
from rootbound.fs.beneath import Located, locate, locate_making
from rootbound.fs.content import copy_fd, write_all
from rootbound.fs.handles import lstat_or_none
from rootbound.journal.change import Journal
from rootbound.journal.recovery import start
from rootbound.journal.settings import Settings, resolve
from rootbound.journal.store import Store


@dataclass(frozen=True)
class RootRef:
    name: str
    real_path: str


class Driver:
    """One root served with a journal, and the file operations the tools make, each journaled."""

    def __init__(self, tmp: Path, name: str = "ws", journal_dir: Path | None = None, *,
                 max_file_size: int = 64 << 20, max_bytes: int = 1 << 30, connection: str = "conn-1",
                 client: str = "test-client", journal: Journal | None = None) -> None:
        self.path = tmp / name
        self.path.mkdir(parents=True, exist_ok=True)
        self.root = RootRef(name, str(self.path.resolve()))
        self.fd = os.open(self.root.real_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if journal is None:
            settings = resolve(str(journal_dir or tmp / "state" / "journal"), None, [self.root.real_path],
                               max_file_size=max_file_size, max_bytes=max_bytes)
            assert settings is not None
            journal = start(settings, [(self.root, self.fd)])
        self.journal = journal
        self.connection = connection
        self.client = client

    @property
    def settings(self) -> Settings:
        return self.journal.settings

    @property
    def store(self) -> Store:
        return self.journal.store(self.root.real_path)

    def close(self) -> None:
        os.close(self.fd)

    def _loc(self, rel: str, *, follow: bool = True, make_parents: bool = False) -> Located:
        parts = [p for p in rel.split("/") if p]
        return (locate_making if make_parents else locate)(self.fd, parts, follow=follow)

    def write(self, rel: str, data: bytes | str, *, connection: str | None = None) -> str:
        """write_file (overwrite): the entry id."""
        body = data.encode() if isinstance(data, str) else data
        loc = self._loc(rel, make_parents=True)
        try:
            with atomic.target_lock(loc.dirfd, loc.name), self.journal.begin(
                    tool="write_file", root=self.root, connection=connection or self.connection,
                    client=self.client) as change:
                st = lstat_or_none(loc.dirfd, loc.name)
                change.before_file(loc.dirfd, loc.name, rel)
                atomic.write_file(loc.dirfd, loc.name, lambda fd: write_all(fd, body), replace=True,
                                  perms=stat.S_IMODE(st.st_mode) if st else 0o644, before_commit=change.ready)
                return change.commit(after={rel: hashlib.sha256(body).hexdigest()})
        finally:
            loc.close()

    def remove(self, rel: str) -> str:
        loc = self._loc(rel, follow=False)
        try:
            with self.journal.begin(tool="remove_file", root=self.root, connection=self.connection,
                                    client=self.client) as change:
                change.before_file(loc.dirfd, loc.name, rel)
                change.ready()
                os.unlink(loc.name, dir_fd=loc.dirfd)
                return change.commit()
        finally:
            loc.close()

    def remove_folder(self, rel: str) -> str:
        loc = self._loc(rel, follow=False)
        try:
            with self.journal.begin(tool="remove_folder", root=self.root, connection=self.connection,
                                    client=self.client) as change:
                change.before_tree(loc.dirfd, loc.name, rel)
                change.ready()
                trees.remove_tree(loc.dirfd, loc.name)
                return change.commit()
        finally:
            loc.close()

    def create_folder(self, rel: str) -> str:
        loc = self._loc(rel, make_parents=True)
        try:
            with self.journal.begin(tool="create_folder", root=self.root, connection=self.connection,
                                    client=self.client) as change:
                change.before_absent(rel, dirfd=loc.dirfd, name=loc.name)
                change.ready()
                os.mkdir(loc.name, dir_fd=loc.dirfd)
                return change.commit()
        finally:
            loc.close()

    def move(self, src: str, dst: str, *, dst_driver: Driver | None = None) -> str:
        target = dst_driver or self
        sloc = self._loc(src, follow=False)
        dloc = target._loc(dst, follow=False, make_parents=True)
        try:
            with self.journal.begin(tool="move", root=self.root, connection=self.connection,
                                    client=self.client) as change:
                change.before_move(sloc.dirfd, sloc.name, src, dloc.dirfd, dloc.name, dst, dst_root=target.root)
                change.ready()
                os.rename(sloc.name, dloc.name, src_dir_fd=sloc.dirfd, dst_dir_fd=dloc.dirfd)
                return change.commit()
        finally:
            sloc.close()
            dloc.close()

    def copy(self, src: str, dst: str) -> str:
        sfd = os.open(self.path / src, os.O_RDONLY)
        loc = self._loc(dst, make_parents=True)
        try:
            with self.journal.begin(tool="copy", root=self.root, connection=self.connection,
                                    client=self.client) as change:
                change.before_file(loc.dirfd, loc.name, dst)
                atomic.write_file(loc.dirfd, loc.name, lambda fd: copy_fd(sfd, fd), replace=True, perms=0o644,
                                  before_commit=change.ready)
                return change.commit()
        finally:
            os.close(sfd)
            loc.close()
