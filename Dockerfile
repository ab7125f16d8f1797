# Both images of the project, one file, two targets:
#
#   docker build --target worker   -t sendgroup-worker .     queue worker, producer client,
#                                                             dump/restore/purge (`sendgroup-worker`)
#   docker build --target operator -t sendgroup-operator .   the kopf operator (the default target)
#
# Python packages: exactly the pins of requirements.lock (hashes checked, `--require-hashes`),
# the part each image needs picked by hack/lock/lockfile.py (worker: the project's dependencies;
# operator: those and the `operator` extra). BASE_IMAGE: any image with CPython 3.11+ as
# `python3` and its `venv` module; the default is the public python image, hack/images/build
# passes a Debian base made with debootstrap. If wheelhouse/ holds wheels (hack/images/build puts
# them there), pip installs only from them (--no-index), else from the package index as usual
# (PIP_INDEX_URL: a mirror). hack/images/build labels both images with the lock's digest
# (io.sendgroups.requirements-lock); do the same with
# `--label io.sendgroups.requirements-lock=sha256:$(sha256sum requirements.lock | cut -d' ' -f1)`.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS builder-base
ARG PIP_INDEX_URL
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml requirements.lock /src/
COPY hack/lock/lockfile.py /src/hack/lock/
COPY wheelhouse/ /src/wheelhouse/
RUN python3 -m venv /opt/venv

# Dependencies first (their layer survives code changes), then the project itself, then what
# a running image never needs (pip, setuptools, wheel, the venv's activate scripts).
FROM builder-base AS worker-builder
# An ARG ends with its stage: the builders declare it again to see the --build-arg.
ARG PIP_INDEX_URL
RUN set -eu; \
    if ls /src/wheelhouse/*.whl >/dev/null 2>&1; then set -- --no-index --find-links=/src/wheelhouse; else set --; fi; \
    python3 /src/hack/lock/lockfile.py select --build /src/requirements.lock /src/pyproject.toml >/tmp/requirements.txt; \
    /opt/venv/bin/pip install --quiet --require-hashes --no-deps "$@" -r /tmp/requirements.txt
COPY . /src
RUN set -eu; \
    /opt/venv/bin/pip install --quiet --no-deps --no-build-isolation --no-index /src; \
    /opt/venv/bin/pip uninstall --quiet --yes pip setuptools wheel; \
    rm -f /opt/venv/bin/[Aa]ctivate*

FROM builder-base AS operator-builder
ARG PIP_INDEX_URL
RUN set -eu; \
    if ls /src/wheelhouse/*.whl >/dev/null 2>&1; then set -- --no-index --find-links=/src/wheelhouse; else set --; fi; \
    python3 /src/hack/lock/lockfile.py select --extra operator --build /src/requirements.lock /src/pyproject.toml >/tmp/requirements.txt; \
    /opt/venv/bin/pip install --quiet --require-hashes --no-deps "$@" -r /tmp/requirements.txt
COPY . /src
RUN set -eu; \
    /opt/venv/bin/pip install --quiet --no-deps --no-build-isolation --no-index "/src[operator]"; \
    /opt/venv/bin/pip uninstall --quiet --yes pip setuptools wheel; \
    rm -f /opt/venv/bin/[Aa]ctivate*; \
    # kubernetes.aio, the client's asyncio twin (about 70 MB with bytecode), is not used: kopf \
    # talks to the API server itself and the operator uses the sync client. A test in \
    # tests/images fails if the operator's source starts importing it. \
    rm -rf /opt/venv/lib/python3*/site-packages/kubernetes/aio

# What both final images share: a named user for uid 10001 (tools that look the uid up find
# it); home is /tmp, the only writable place when the root filesystem is read-only (Kubernetes
# mounts an emptyDir there).
FROM ${BASE_IMAGE} AS runtime
RUN echo 'sendgroup:x:10001:10001:sendgroup:/tmp:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'sendgroup:x:10001:' >>/etc/group
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /tmp
USER 10001:10001

FROM runtime AS worker
COPY --from=worker-builder /opt/venv /opt/venv
ENTRYPOINT ["sendgroup-worker"]
CMD ["work"]

FROM runtime AS operator
COPY --from=operator-builder /opt/venv /opt/venv
ENTRYPOINT ["sendgroup-operator"]
