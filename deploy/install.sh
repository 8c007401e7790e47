#!/bin/sh
# Installs zbus into the virtualenv /opt/zbus, in the build stage of deploy/Dockerfile and
# deploy/Dockerfile.spark (run from /src, the build context's copy of the repository).
#
#   install.sh deps [EXTRAS]   the dependencies of zbus (and of its comma-separated extras)
#   install.sh zbus            zbus itself, then a check that it and pyarrow import
#
# Every version comes from deploy/constraints.txt. Wheels in /wheels (`make images` stages
# a wheelhouse there) are installed without any package index; with none, the index is used.
set -eu

export PIP_CONSTRAINT=/src/deploy/constraints.txt
export PIP_NO_CACHE_DIR=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_ROOT_USER_ACTION=ignore
if ls /wheels/*.whl >/dev/null 2>&1; then
    export PIP_NO_INDEX=1
    export PIP_FIND_LINKS=/wheels
fi
venv=/opt/zbus
pip="$venv/bin/python -m pip install --quiet"

case "${1:-}" in
deps)
    python3 -m venv "$venv"
    $pip --upgrade pip
    # The requirements are read from pyproject.toml, so that this layer survives any
    # change to the sources.
    python3 - "${2:-}" > /tmp/requirements.txt <<'PY'
import sys
import tomllib

with open("pyproject.toml", "rb") as fh:
    project = tomllib.load(fh)["project"]
requirements = list(project["dependencies"])
for extra in filter(None, sys.argv[1].split(",")):
    requirements += project["optional-dependencies"][extra]
print("\n".join(requirements))
PY
    $pip -r /tmp/requirements.txt
    # What zbus never loads: pyarrow's Flight RPC, C++ headers and Cython sources, the
    # duplicate copies of its Python bindings (a wheel cannot hold symlinks; the
    # modules link the .so.NNNN name), and the libraries' own test suites.
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cd "$site"
    rm -rf pyarrow/include pyarrow/includes pyarrow/src pyarrow/tests \
        pyarrow/*flight* pyarrow/*.pyx pyarrow/*.pxd pyarrow/*.pxi pyarrow/_pyarrow_cpp_tests* \
        pyarrow/libarrow_python*.so pyarrow/libarrow_python*.so.*.*.*
    for package in pandas numpy pyspark; do
        if [ -d "$package" ]; then
            find "$package" -depth -type d -name tests -exec rm -rf {} +
        fi
    done
    # pyarrow's libraries keep their symbol tables (a fifth of their size); strip comes
    # from binutils, in this build stage only.
    if ! command -v strip >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            binutils >/dev/null
    fi
    strip --strip-unneeded pyarrow/*.so*
    # pydantic-core's and msgpack's modules likewise. Not the others: a wheel whose
    # libraries auditwheel patched (numpy, pyzmq and their .libs) is broken by strip.
    for package in pydantic_core msgpack; do
        if [ -d "$package" ]; then
            find "$package" -name '*.so' -type f -exec strip --strip-unneeded {} +
        fi
    done
    # rich (the `zbus` command's tables and progress bars) depends on pygments for
    # syntax highlighting, which zbus never asks for: its ~550 lexers go (8 MB), the
    # package, its lexer index and its styles stay (rich falls back to plain text when
    # a lexer is missing).
    if [ -d pygments/lexers ]; then
        find pygments/lexers -name '*.py' ! -name '__init__.py' ! -name '_mapping.py' -delete
        rm -rf pygments/lexers/__pycache__
    fi
    ;;
zbus)
    $pip --no-deps .
    # The services run without pip and setuptools; a derived image that adds job
    # modules gets pip back with `python3 -m ensurepip` (docs/deploy.md).
    "$venv/bin/python" -m pip uninstall --quiet --yes setuptools pip
    "$venv/bin/python" -c 'import pyarrow.compute, pyarrow.dataset, pyarrow.fs, pyarrow.parquet'
    "$venv/bin/zbus" --help >/dev/null
    ;;
*)
    echo "usage: install.sh deps [EXTRAS] | install.sh zbus" >&2
    exit 2
    ;;
esac
