"""The standalone script's fixed parts as Python files (``standalone.py``), read as text by ``script_export``.

Never imported by Hookscope: the parts run in the scripts it writes. They are files rather than strings so that
ruff checks them (``ruff format`` leaves them as the scripts hold them: see pyproject.toml).
"""
