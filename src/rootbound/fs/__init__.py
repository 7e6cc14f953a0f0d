"""The filesystem core: the only code that turns an agent's path into a system call.

* `beneath` — the one resolver: a relative path opened beneath a directory handle
  (openat2 RESOLVE_BENEATH, or the portable O_NOFOLLOW walk);
* `bounds` — each call's deadline and cancellation, checked by the loops below;
* `recovery` — records of changes in progress, replayed at the next start.
"""
