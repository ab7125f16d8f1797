"""Real PHP for the PHP examples' tests: Debian's ``php-cli`` with the ``php-redis`` extension
(installed by ``hack/bootstrap``). Missing PHP fails the test saying what to install, never a
skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from functools import cache
from pathlib import Path

#: The PHP examples (producer, outcome consumer) the tests run, as users copy them.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "php"


@cache
def php_bin() -> str:
    """Path of ``php`` with the redis extension loaded; AssertionError naming the Debian
    packages otherwise."""
    php = shutil.which("php")
    if php is None:
        raise AssertionError(
            "php not found: run hack/bootstrap (apt-get install php-cli php-redis)"
        )
    modules = subprocess.run([php, "-m"], capture_output=True, text=True, check=False).stdout
    if "redis" not in modules.split():
        raise AssertionError(
            "PHP has no redis extension: run hack/bootstrap (apt-get install php-redis)"
        )
    return php


def run_php(
    script: str,
    *args: str,
    stdin: str = "",
    timeout: float = 30,
    check: bool = True,
    env_prefix: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``examples/php/<script>`` with ``args`` (``env_prefix``: ``SENDGROUP_KEY_PREFIX``
    for it); with ``check`` an exit code other than 0 raises AssertionError carrying stderr."""
    env = dict(os.environ)
    env.pop("SENDGROUP_KEY_PREFIX", None)
    if env_prefix is not None:
        env["SENDGROUP_KEY_PREFIX"] = env_prefix
    proc = subprocess.run(
        [php_bin(), str(EXAMPLES / script), *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"php {script} exited {proc.returncode}: {proc.stderr}")
    return proc


def jsonl(rows: Sequence[object]) -> str:
    """Rows as JSON lines (the examples' input format)."""
    import json

    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


#: The minimal Laravel 8 app on Debian's packages (its artisan and app classes).
LARAVEL_APP = EXAMPLES.parent / "laravel-app"

#: Debian's php-laravel-framework installs the framework's autoloaders here.
LARAVEL_AUTOLOAD = Path("/usr/share/php/Illuminate/autoload.php")


def _artisan_env(env: dict[str, str], storage: Path) -> dict[str, str]:
    """The environment of an artisan process: PATH, the storage paths under ``storage`` (its
    directories created), then ``env``. AssertionError naming the Debian packages when Laravel
    is not installed."""
    if not LARAVEL_AUTOLOAD.is_file():
        raise AssertionError(
            f"{LARAVEL_AUTOLOAD} missing: run hack/bootstrap "
            "(apt-get install php-laravel-framework php-swiftmailer)"
        )
    for sub in ("framework/views", "framework/cache", "logs", "cache"):
        (storage / sub).mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LARAVEL_STORAGE_PATH": str(storage),
        "APP_SERVICES_CACHE": str(storage / "cache/services.php"),
        "APP_PACKAGES_CACHE": str(storage / "cache/packages.php"),
        **env,
    }


def run_artisan(
    *args: str,
    env: dict[str, str],
    storage: Path,
    timeout: float = 60,
    check: bool = True,
    command: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``php artisan <args>`` of :data:`LARAVEL_APP` with ``env`` (REDIS_PORT, MAIL_PORT, ...);
    everything it writes (compiled views, caches) goes under ``storage``. AssertionError naming
    the Debian packages when Laravel is not installed; with ``check``, on an exit code != 0.
    ``command``: run this instead (e.g. a Deployment's container command), in the app's
    directory, as a pod would."""
    full_env = _artisan_env(env, storage)
    proc = subprocess.run(
        command or [php_bin(), str(LARAVEL_APP / "artisan"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=LARAVEL_APP,
        check=False,
    )
    if check and proc.returncode != 0:
        what = " ".join((command or list(args))[:6])
        raise AssertionError(f"{what} exited {proc.returncode}: {proc.stderr[-3000:]}")
    return proc


def start_artisan(
    command: list[str], *, env: dict[str, str], storage: Path, output: Path
) -> subprocess.Popen[bytes]:
    """Start ``command`` (e.g. a Deployment's container command running ``queue:work``) in
    :data:`LARAVEL_APP`'s directory, as :func:`run_artisan` runs it, without waiting; stdout and
    stderr go to the file ``output``. The caller stops it (SIGTERM) and waits."""
    php_bin()
    full_env = _artisan_env(env, storage)
    with output.open("wb") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=LARAVEL_APP
        )
