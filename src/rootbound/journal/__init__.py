"""The change journal (issue 17): every change the file tools make, recorded before it happens, with undo.

Phase 1 (this package) is self-contained; phase 2 wired it in (server/app.py, fs/journaling.py called by the fs
core's mutating doors, execution/service.py, tools/history.py, server/changes.py), as follows:

1. **Start-up** (`App.__init__`, right after `recovery.start`, which finishes moves a killed server
   left): if `config.journal.enabled`,

       settings = journal.settings.resolve(config.journal.dir, config.state_dir,
                                            [r.real_path for r in roots], max_bytes=config.journal.max_bytes,
                                            max_age=config.journal.max_age_seconds,
                                            max_file_size=config.journal.max_file_size)
       self.journal = journal.recovery.start(settings, [(root, root.handle()) for root in roots])  # settles pending
       self.journal.after_commit.append(journal.retention.Upkeep(settings))
       for root in roots: journal.retention.maintain(self.journal.store(root.real_path), settings)

   (`resolve` returning None: log a warning that the journal is off, as recovery does.) `App.close()`
   calls `self.journal.close()`.
2. **Every mutating door of the fs core** drives one `Change` (change.py has the exact protocol):
   `begin(tool=, root=, connection=, client=)` before reading what a read-modify-write depends on;
   `before_file(dirfd, name, rel)` / `before_tree` / `before_absent(rel, dirfd=, name=)` /
   `before_move(...)` through the handles the door holds; `ready()` as `Target.write_atomic`'s
   `before_commit` (or just before unlink/rename/mkdir); `commit(after={rel: sha256})`; `abandon()` on
   failure. Which before_* per tool:
   - write_file, edit_file, patch_file, copy onto a file: `before_file` on the target (absent or not);
     write_file's append mode too (an append is a change of the whole file);
   - remove_file: `before_file` (a symlink is recorded as its text);
   - remove_folder: `before_tree`;  create_folder: `before_absent(rel, dirfd=, name=)` when it makes it;
   - copy of a folder: `before_absent` on the destination entry (with its handle);
   - move: `before_move(src_dirfd, src_name, src_rel, dst_dirfd, dst_name, dst_rel, dst_root=)`.
   `connection`: the Caller's id (one per stdio process / HTTP session / auth principal);
   `client`: the clientInfo name of the connection.
3. **Commands**: the command runner calls `journal.note_command(root=, tool=, command=, cwd=, exit_code=,
   connection=, client=, duration=)` where it writes the audit record (execution/service.py).
4. **Tools `history` and `undo`** (off unless in `allowed_tools`): `query.history_lines(...,
   connection=<caller>)` and `undo.undo(journal, query.select(stores, connection=<caller>, ids=...),
   root_fds, connection=<caller>)` — select with the caller's connection only, so another connection's
   changes are never listed or reverted.
5. **HTTP**: mount `page.changes_routes(journal, {root.real_path: (root.name, root.handle())}, may=...)` next to
   /mcp, `may` applying the same token, Host and Origin checks; never on stdio.

Modules: settings, model, store, blobs, capture, change, locks, recovery, retention, query, diffs, restore,
undo, cli, page (each says its one job in its docstring).
"""
