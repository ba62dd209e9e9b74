"""The window's state and its one way to run work: the workspace, the run scheduler, frozen requests."""
