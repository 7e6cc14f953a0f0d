"""grep and glob's engine, beneath directory handles the tools open (it never resolves a path of its own).

`contents` (grep: a file or a tree, batches shared with the helper process, the answer in
walk order), `names` (glob), `scanner` (one open file's matching lines: RE2 block scans),
`literals` (the prefilter's required literals), `helper` (the helper process), `patterns`
(globs to regexes, length-capped), `clock` (when a search stops).
"""
