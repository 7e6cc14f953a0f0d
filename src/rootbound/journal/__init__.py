"""The change journal (issue 17): every change the file tools make, recorded before it happens, with undo."""
