"""Build zbus's images on a machine that can pull none: what `make images` runs.

    python deploy/images.py [--tag TAG] [--base IMAGE] [--only app,spark,prometheus,etcd]

TAG is the project's version unless given (docker-compose.yml runs that one).

1. The base image, ``zbus-base:bookworm``: Debian bookworm with Python 3.11, made by
   mmdebstrap from the Debian mirror this host's apt uses (read from apt at run time),
   then ``docker import``-ed. Kept while it exists with the same recipe; its root tarball
   is cached under ``.cache/images/``. ``--base IMAGE`` uses an existing image instead
   (e.g. ``python:3.11-slim`` where it can be pulled).
2. A wheelhouse: every dependency as a wheel, built on the host at the versions of
   ``deploy/constraints.txt``, because build containers may reach no package index.
   Cached under ``.cache/images/wheels/`` until the constraints change.
3. The images ``zbus:TAG`` (deploy/Dockerfile), ``zbus-spark:TAG``
   (deploy/Dockerfile.spark), ``zbus-prometheus:TAG`` (deploy/Dockerfile.prometheus,
   Debian's package) and ``zbus-etcd:TAG`` (deploy/Dockerfile.etcd, Debian's packages),
   each from a build context staged under ``.cache/images/context/`` holding the sources
   and only the wheels that image installs, so nothing comes from a package index during
   the build.

Only the standard library is used; pip is the interpreter's that runs this script, and it
must be the images' Python version (3.11), since the wheels it builds go into them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "images"
CONSTRAINTS = ROOT / "deploy" / "constraints.txt"

SUITE = "bookworm"
BASE_IMAGE = f"zbus-base:{SUITE}"
# The base: Debian's minimal system, Python 3.11 with its venv module, CA certificates.
# A merged /usr made by mmdebstrap's hook keeps the usrmerge package (and Perl) out.
BASE_RECIPE = {
    "suite": SUITE,
    "variant": "minbase",
    "include": ["python3.11", "python3-venv", "ca-certificates"],
    "hook_dir": "/usr/share/mmdebstrap/hooks/merged-usr",
    "path_exclude": [
        "/usr/share/doc/*",
        "/usr/share/man/*",
        "/usr/share/info/*",
        "/usr/share/locale/*",
    ],
    # What nothing in an image runs, removed once every package is installed (a
    # path-exclude would break the byte-compiling of the standard library's parts):
    # help()'s topics, the 2to3 converter and CPython's own test support, 5 MB; glibc's
    # iconv modules, 8 MB (Python and the JVM convert text with codecs of their own;
    # glibc keeps UTF-8, ASCII and Latin-1 built in); shell completions.
    "remove": [
        "/usr/lib/python3.11/pydoc_data",
        "/usr/lib/python3.11/lib2to3",
        "/usr/lib/python3.11/test",
        "/usr/lib/x86_64-linux-gnu/gconv",
        "/usr/share/bash-completion",
    ],
    "changes": [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["python3"]',
    ],
}
RECIPE_LABEL = "org.zbus.base-recipe"

# image -> (Dockerfile, name, the pyproject extras its Python environment has)
IMAGES: dict[str, tuple[str, str, tuple[str, ...] | None]] = {
    "app": ("deploy/Dockerfile", "zbus", ()),
    "spark": ("deploy/Dockerfile.spark", "zbus-spark", ("spark",)),
    "prometheus": ("deploy/Dockerfile.prometheus", "zbus-prometheus", None),
    "etcd": ("deploy/Dockerfile.etcd", "zbus-etcd", None),
}


class BuildError(RuntimeError):
    """A step that cannot be done here; the message says what to do."""


_SAY = threading.Lock()


def say(text: str) -> None:
    with _SAY:  # one whole line at a time: the builds run in threads
        print(f"images: {text}", flush=True)


def run(*cmd: str, capture: bool = False, log: Path | None = None) -> str:
    """Run ``cmd``; its output goes to ours, or to ``log``, unless captured. Fails with
    the command (and the end of its log)."""
    out = None
    try:
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            out = log.open("w")
        try:
            done = subprocess.run(
                cmd,
                check=False,
                text=True,
                stdout=subprocess.PIPE if capture else out,
                stderr=out,
            )
        finally:
            if out is not None:
                out.close()
    except FileNotFoundError:
        raise BuildError(f"{cmd[0]} is not installed") from None
    if done.returncode != 0:
        tail = ""
        if log is not None:
            lines = log.read_text(errors="replace").splitlines()[-30:]
            tail = f"; the end of {log.relative_to(ROOT)}:\n" + "\n".join(lines)
        raise BuildError(f"{' '.join(cmd)} failed with exit code {done.returncode}{tail}")
    return done.stdout or ""


def image_id(name: str) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", name],
        check=False,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def image_label(name: str, label: str) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", name],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return None
    labels = json.loads(done.stdout) or {}
    value = labels.get(label)
    return value if isinstance(value, str) else None


def digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------- base


def host_codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME":
            return value.strip().strip('"')
    raise BuildError("cannot tell this host's Debian release from /etc/os-release")


def debian_sources() -> list[str]:
    """``deb URI SUITE main`` lines for bookworm, from the archives this host's apt uses.

    apt itself lists what it is configured with (``apt-get indextargets``, every source
    format); the Debian archives are the ones serving this host's release, its updates
    and its security suite. The same archives serve bookworm.
    """
    codename = host_codename()
    try:
        out = run(
            "apt-get",
            "indextargets",
            "--format",
            "$(TARGET_OF) $(REPO_URI) $(RELEASE) $(COMPONENT)",
            capture=True,
        )
    except BuildError as exc:
        raise BuildError(f"cannot read this host's apt sources ({exc}); give --base") from None
    lines: list[str] = []
    for row in out.splitlines():
        parts = row.split()
        if len(parts) != 4:
            continue
        kind, uri, release, component = parts
        if kind != "deb" or component != "main":
            continue
        for suffix in ("", "-updates", "-security"):
            if release == codename + suffix:
                line = f"deb {uri} {SUITE}{suffix} main"
                if line not in lines:
                    lines.append(line)
    if not any(line.endswith(f" {SUITE} main") for line in lines):
        raise BuildError(
            f"no Debian archive serving {codename} in this host's apt sources; give --base"
        )
    return lines


def build_base() -> str:
    """The base image's name, built (or rebuilt) when missing or made by another recipe."""
    key = digest(BASE_RECIPE)
    if image_label(BASE_IMAGE, RECIPE_LABEL) == key:
        say(f"base image {BASE_IMAGE}: present")
        return BASE_IMAGE
    tarball = CACHE / f"base-{SUITE}-{key}.tar"
    if not tarball.exists():
        mmdebstrap = shutil.which("mmdebstrap")
        if mmdebstrap is None:
            raise BuildError("mmdebstrap is missing: apt-get install mmdebstrap")
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".partial.tar")
        say(f"making the base root file system with mmdebstrap ({SUITE})")
        started = time.monotonic()
        cmd = [
            mmdebstrap,
            "--quiet",
            f"--variant={BASE_RECIPE['variant']}",
            f"--include={','.join(BASE_RECIPE['include'])}",
            f"--hook-dir={BASE_RECIPE['hook_dir']}",
            '--aptopt=APT::Install-Recommends "false"',
            *(f"--dpkgopt=path-exclude={p}" for p in BASE_RECIPE["path_exclude"]),
            *(f'--customize-hook=rm -rf "$1"{p}' for p in BASE_RECIPE["remove"]),
            "--format=tar",
            SUITE,
            str(partial),
            *debian_sources(),
        ]
        run(*map(str, cmd))
        partial.rename(tarball)
        say(f"base root file system made in {time.monotonic() - started:.0f} s")
    changes = [*BASE_RECIPE["changes"], f"LABEL {RECIPE_LABEL}={key}"]
    old = image_id(BASE_IMAGE)
    run(
        "docker",
        "import",
        *(arg for change in changes for arg in ("--change", str(change))),
        str(tarball),
        BASE_IMAGE,
        capture=True,
    )
    drop_replaced(old, BASE_IMAGE)
    say(f"base image {BASE_IMAGE} imported")
    return BASE_IMAGE


def base_python(base: str) -> str:
    out = run(
        "docker",
        "run",
        "--rm",
        "--entrypoint",
        "python3",
        base,
        "-c",
        "import sys; print('%d.%d' % sys.version_info[:2])",
        capture=True,
    )
    return out.strip()


# ---------------------------------------------------------------------- wheelhouse


def requirements(extras: tuple[str, ...]) -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    # What the images' build stage installs besides: pip itself and the build backend.
    return [*reqs, "pip", *pyproject["build-system"]["requires"]]


def pip(*args: str, capture: bool = False) -> str:
    return run(sys.executable, "-m", "pip", *args, capture=capture)


def build_wheelhouse(extras: tuple[str, ...]) -> Path:
    """Every wheel the images need, at the constrained versions; built once per lock."""
    wheels = CACHE / "wheels"
    reqs = requirements(extras)
    key = digest({"reqs": reqs, "constraints": CONSTRAINTS.read_text(), "py": sys.version})
    stamp = wheels / ".recipe"
    if stamp.exists() and stamp.read_text() == key:
        say(f"wheelhouse: {sum(1 for _ in wheels.glob('*.whl'))} wheels (cached)")
        return wheels
    wheels.mkdir(parents=True, exist_ok=True)
    say("building the wheelhouse (a first run downloads pyspark: several minutes)")
    started = time.monotonic()
    pip(
        "wheel",
        "--quiet",
        "--wheel-dir",
        str(wheels),
        "--find-links",
        str(wheels),
        "--constraint",
        str(CONSTRAINTS),
        *reqs,
    )
    stamp.write_text(key)
    count = sum(1 for _ in wheels.glob("*.whl"))
    say(f"wheelhouse: {count} wheels in {time.monotonic() - started:.0f} s")
    return wheels


def wheels_for(wheels: Path, extras: tuple[str, ...]) -> list[Path]:
    """The wheels installing zbus with ``extras`` takes: pip resolves it offline."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        pip(
            "install",
            "--quiet",
            "--dry-run",
            "--ignore-installed",
            "--no-index",
            "--find-links",
            str(wheels),
            "--constraint",
            str(CONSTRAINTS),
            "--report",
            str(report),
            *requirements(extras),
        )
        items = json.loads(report.read_text())["install"]
    files = [Path(unquote(urlsplit(item["download_info"]["url"]).path)) for item in items]
    missing = [f for f in files if f.parent != wheels]
    if missing:
        raise BuildError(f"not in the wheelhouse: {', '.join(map(str, missing))}")
    return files


# -------------------------------------------------------------------------- images


def stage_context(name: str, wheels: list[Path]) -> Path:
    """A build context with what the Dockerfiles copy, and ``wheels`` in deploy/wheels/."""
    context = CACHE / "context" / name
    shutil.rmtree(context, ignore_errors=True)
    (context / "deploy" / "wheels").mkdir(parents=True)
    if IMAGES[name][2] is None:
        return context  # an image of Debian's packages: its Dockerfile copies nothing
    for item in ("pyproject.toml", "README.md", "deploy/install.sh", "deploy/constraints.txt"):
        shutil.copy2(ROOT / item, context / item)
    shutil.copytree(
        ROOT / "services",
        context / "services",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    for wheel in wheels:
        target = context / "deploy" / "wheels" / wheel.name
        try:
            os.link(wheel, target)
        except OSError:
            shutil.copy2(wheel, target)
    return context


def drop_replaced(old: str | None, name: str) -> None:
    """Remove the image ``name`` had before a rebuild, unless something still uses it."""
    if old is not None and old != image_id(name):
        subprocess.run(["docker", "image", "rm", old], check=False, capture_output=True)


def build_image(key: str, tag: str, base: str, wheels: Path | None) -> str:
    dockerfile, name, extras = IMAGES[key]
    image = f"{name}:{tag}"
    files = wheels_for(wheels, extras) if wheels is not None and extras is not None else []
    context = stage_context(key, files)
    log = CACHE / "logs" / f"{key}.log"
    say(f"building {image} on {base} (log: {log.relative_to(ROOT)})")
    started = time.monotonic()
    old = image_id(image)
    run(
        "docker",
        "build",
        "--file",
        str(ROOT / dockerfile),
        "--build-arg",
        f"BASE_IMAGE={base}",
        "--tag",
        image,
        str(context),
        log=log,
    )
    drop_replaced(old, image)
    size = int(run("docker", "image", "inspect", "--format", "{{.Size}}", image, capture=True))
    say(f"{image}: built in {time.monotonic() - started:.0f} s, {size / 1e6:.0f} MB")
    return image


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="images.py", description=__doc__.splitlines()[0])
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    parser.add_argument(
        "--tag", default=version, help=f"the images' tag (default: the version, {version})"
    )
    parser.add_argument(
        "--base", default=None, help="an existing base image instead of zbus-base:bookworm"
    )
    parser.add_argument(
        "--only",
        default=",".join(IMAGES),
        help=f"comma-separated images to build (default: {','.join(IMAGES)})",
    )
    args = parser.parse_args(argv)
    chosen = [item.strip() for item in args.only.split(",") if item.strip()]
    unknown = sorted(set(chosen) - set(IMAGES))
    if unknown or not chosen:
        parser.error(f"--only: choose among {', '.join(IMAGES)}")
    started = time.monotonic()
    try:
        run("docker", "version", "--format", "{{.Server.Version}}", capture=True)
        base = args.base or build_base()
        python = base_python(base)
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        if python != here:
            raise BuildError(
                f"{base} has Python {python}, this pip is Python {here}'s: "
                f"run this script with python{python}"
            )
        # One wheelhouse for every image, so that building some of them reuses it.
        extras = tuple(sorted({e for k in IMAGES for e in (IMAGES[k][2] or ())}))
        needs_wheels = any(IMAGES[k][2] is not None for k in chosen)
        # The builds run side by side: much of each is waiting on the storage driver. The
        # images without wheels start before the wheelhouse is made.
        with ThreadPoolExecutor(max_workers=len(chosen)) as pool:
            builds = {
                key: pool.submit(build_image, key, args.tag, base, None)
                for key in chosen
                if IMAGES[key][2] is None
            }
            wheels = build_wheelhouse(extras) if needs_wheels else None
            for key in chosen:
                if key not in builds:
                    builds[key] = pool.submit(build_image, key, args.tag, base, wheels)
            failures = [str(e) for f in builds.values() if (e := f.exception()) is not None]
        if failures:
            raise BuildError("\n".join(failures))
        built = [builds[key].result() for key in chosen]
    except BuildError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    say(f"done in {time.monotonic() - started:.0f} s: {', '.join(built)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
