# The operator image: `sendgroup-operator` (kopf) with the `operator` extra (kopf, kubernetes).
#
#   docker build -t sendgroup-operator .
#
# BASE_IMAGE: any image with CPython 3.11+ as `python3` and its `venv` module. The default is the
# public python image; hack/images/build passes a Debian base made with debootstrap. If
# wheelhouse/ holds wheels (hack/images/build puts them there), pip installs only from them
# (--no-index), else from the package index as usual.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# Dependencies first (their layer survives code changes), then the project itself.
COPY pyproject.toml /src/
COPY wheelhouse/ /src/wheelhouse/
RUN set -eu; \
    if ls /src/wheelhouse/*.whl >/dev/null 2>&1; then set -- --no-index --find-links=/src/wheelhouse; else set --; fi; \
    python3 -m venv /opt/venv; \
    python3 -c 'import tomllib; t = tomllib.load(open("/src/pyproject.toml", "rb")); p = t["project"]; \
print("\n".join(p["dependencies"] + p["optional-dependencies"]["operator"]))' >/tmp/requirements.txt; \
    /opt/venv/bin/pip install --quiet "$@" -r /tmp/requirements.txt
COPY . /src
RUN set -eu; \
    if ls /src/wheelhouse/*.whl >/dev/null 2>&1; then set -- --no-index --find-links=/src/wheelhouse; else set --; fi; \
    /opt/venv/bin/pip install --quiet --no-deps "$@" "/src[operator]"; \
    /opt/venv/bin/pip uninstall --quiet --yes pip setuptools; \
    rm -f /opt/venv/bin/[Aa]ctivate*; \
    # kubernetes.aio, the client's asyncio twin (about 70 MB with bytecode), is not used: kopf \
    # talks to the API server itself and the operator uses the sync client. A test in \
    # tests/images fails if the operator's source starts importing it. \
    rm -rf /opt/venv/lib/python3*/site-packages/kubernetes/aio

FROM ${BASE_IMAGE}
# A named user for uid 10001; home is /tmp, the only writable place when the root filesystem
# is read-only (Kubernetes mounts an emptyDir there).
RUN echo 'sendgroup:x:10001:10001:sendgroup:/tmp:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'sendgroup:x:10001:' >>/etc/group
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /tmp
USER 10001:10001
ENTRYPOINT ["sendgroup-operator"]
