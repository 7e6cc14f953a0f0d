"""The filesystem core: the only code that turns an agent's path into a system call.

* `root` — `Root`, the capability object and the only door (Go's os.Root), and `Target`,
  the entry a change acts on; `rootset` — the roots in force for a caller, by name;
* `beneath` — the one resolver: a relative path opened beneath a directory handle
  (openat2 RESOLVE_BENEATH, or the portable O_NOFOLLOW walk);
* `paths` — an agent's path as the core reads it; `files` — what `Root.open` hands out;
* `guards` — protected paths and git's repositories: what the file tools never change;
* `atomic` — atomic writes, temporary names, no-replace renames, appends, per-file locks;
* `content` — bytes into and out of open files; `handles` — where a handle really is;
* `trees` — the one tree walker, and folder copies and removals built on it; `ignores` — what a
  search's walk leaves out (`.git/`, `.gitignore`, `.ignore`, `.git/info/exclude`);
* `transfer` — copy and move between roots;
* `recovery` — records of changes in progress, replayed at the next start;
* `bounds` — each call's deadline and cancellation, checked by the loops here.

Failures are data (`errors.PathError`); the words are the tool edge's (`tools/messages.py`).
"""

from rootbound.fs.files import File, Kinds
from rootbound.fs.paths import display_path, file_type, split_path
from rootbound.fs.root import Root
from rootbound.fs.rootset import RootSet

__all__ = ["File", "Kinds", "Root", "RootSet", "display_path", "file_type", "split_path"]
