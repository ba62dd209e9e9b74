"""Features built from the workspace and a host: each contributes docks, actions and menu entries."""
