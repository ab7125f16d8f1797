"""ArgoCD's health check of SendGroups (``gitops/argocd/.../health.lua``) run by a real Lua
interpreter, the way ArgoCD runs resource customizations.

ArgoCD (gopher-lua, Lua 5.1) sets the global ``obj`` to the object, runs the script and takes
the table it returns (``{status=..., message=...}``). :func:`run_health` does the same with
Debian's ``lua5.4`` (package lua5.4) or ``lua5.1``: the object becomes a Lua table literal
whose numbers are all floats, as in ArgoCD, where every JSON number is a float64.

- :data:`HEALTH_DIR`, :data:`HEALTH_LUA`: the customization's folder and script.
- :func:`lua_bin`: an interpreter's path (AssertionError saying how to install it if missing).
- :func:`lua_literal`: a JSON-like value as Lua source.
- :func:`run_health`: ``(status, message)`` of one object.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HEALTH_DIR = REPO / "gitops" / "argocd" / "resource_customizations" / "sendgroups.io" / "SendGroup"
HEALTH_LUA = HEALTH_DIR / "health.lua"
#: The argocd-cm key ArgoCD reads the script from (``resource.customizations.health.<group>_<kind>``
#: the per-key form; old releases took one YAML block under ``resource.customizations``).
CM_KEY = "resource.customizations.health.sendgroups.io_SendGroup"
#: The argocd-cm key without which ArgoCD runs the script with no ``string`` or ``math`` library
#: (argo-cd ``util/settings``: ``resource.customizations.useOpenLibs.<group>_<kind>``).
OPEN_LIBS_KEY = "resource.customizations.useOpenLibs.sendgroups.io_SendGroup"
#: Interpreters the tests run the script with: 5.4 (Debian's current) and 5.1 (the dialect of
#: ArgoCD's gopher-lua).
INTERPRETERS = ("lua5.4", "lua5.1")


def lua_bin(name: str = "lua5.4") -> str:
    """Path of the interpreter ``name``; AssertionError naming the Debian package when absent."""
    path = shutil.which(name)
    if path is None:
        raise AssertionError(
            f"{name} is not installed: run hack/bootstrap (apt-get install {name}); the ArgoCD "
            "health check is tested with a real Lua interpreter"
        )
    return path


def _lua_string(text: str) -> str:
    out = []
    for byte in text.encode():
        ch = chr(byte)
        if 32 <= byte < 127 and ch not in '"\\':
            out.append(ch)
        else:
            out.append(f"\\{byte:03d}")  # decimal escape: valid in Lua 5.1 and 5.4
    return '"' + "".join(out) + '"'


def lua_literal(value: Any) -> str:
    """``value`` (dict/list/str/bool/int/float/None, as from YAML or JSON) as a Lua expression.

    Numbers become floats (``3.0``) as in ArgoCD; ``None`` map values are left out (nil).
    Raises TypeError for any other type.
    """
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(float(value))
    if isinstance(value, str):
        return _lua_string(value)
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        items = [
            f"[{_lua_string(str(k))}] = {lua_literal(v)}" for k, v in value.items() if v is not None
        ]
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"cannot express {type(value).__name__} in Lua")


def run_health(
    obj: dict[str, Any], interpreter: str = "lua5.4", script: Path = HEALTH_LUA
) -> tuple[str, str]:
    """Run ``script`` with the global ``obj`` set to ``obj``; return ``(status, message)``.

    AssertionError with the interpreter's stderr when the script fails or returns no table.
    """
    driver = (
        f"obj = {lua_literal(obj)}\n"
        f"local hs = dofile({_lua_string(str(script))})\n"
        'assert(type(hs) == "table", "health.lua must return a table")\n'
        'io.write(tostring(hs.status), "\\n", tostring(hs.message))\n'
    )
    proc = subprocess.run(
        [lua_bin(interpreter), "-"],
        input=driver,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"{interpreter} {script.name} failed:\n{proc.stderr}")
    status, _, message = proc.stdout.partition("\n")
    return status, message
