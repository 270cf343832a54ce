"""Key bindings: defaults live on the widgets (each ``Binding`` has an id); users override by id.

The override file is ``keymap.toml`` in platformdirs' ``user_config_dir("servelab")`` (or the path
in ``$SERVELAB_KEYMAP``)::

    [keys]
    "log.search" = "slash,ctrl+f"
    "app.back" = "q,escape"

A bad file never stops the dashboard: its problems come back as one line each.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from platformdirs import user_config_dir

ENV_KEYMAP = "SERVELAB_KEYMAP"


def keymap_path() -> Path:
    """Where the user's overrides are read from."""
    env = os.environ.get(ENV_KEYMAP)
    if env:
        return Path(env)
    return Path(user_config_dir("servelab")) / "keymap.toml"


def load_keymap(known_ids: set[str], path: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """User overrides as ``{binding id: keys}`` plus one line per problem found in the file."""
    path = path or keymap_path()
    if not path.exists():
        return {}, []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [f"{path}: cannot read: {exc}"]
    except tomllib.TOMLDecodeError as exc:
        return {}, [f"{path}: {exc}"]
    keys = data.get("keys", {})
    problems = [f"{path}: unknown table [{name}] (only [keys])" for name in data if name != "keys"]
    if not isinstance(keys, dict):
        return {}, [*problems, f"{path}: [keys] must be a table of \"binding id\" = \"keys\""]
    overrides: dict[str, str] = {}
    for binding_id, value in keys.items():
        if binding_id not in known_ids:
            problems.append(f"{path}: unknown binding id {binding_id!r} (see the help screen, ?, for ids)")
        elif not isinstance(value, str) or not value.strip() or any(not part.strip() for part in value.split(",")):
            problems.append(f"{path}: {binding_id}: keys must be a string like \"slash,ctrl+f\"")
        else:
            overrides[binding_id] = ",".join(part.strip() for part in value.split(","))
    return overrides, problems
