"""The window's state and its ways to run work: the workspace; the run scheduler (loads and runs: generations,
debounce, newest request wins) with frozen requests; and the features' side tasks (``Workspace.submit``,
``tasks``), exclusive ones taking turns with the runs."""
