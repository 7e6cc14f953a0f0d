"""OS confinement of commands: Landlock (landlock.py, applied by a restricted spawner thread, spawn.py) and
bubblewrap (bwrap.py, with exec.py applying Landlock inside), chosen fail-closed by select.py.

Imports nothing: the launcher inside bubblewrap imports this package on every command.
"""
