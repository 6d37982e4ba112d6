# The operator image: `queuescale run` as a numeric non-root user, on a read-only root filesystem.
#   docker build -t ghcr.io/queuescale/queuescale:0.1.0 .
# Two stages on the same pinned base: the first builds the wheel and installs it with its runtime dependencies
# into a virtualenv; the second copies only that virtualenv (no compiler, no pip, no tests, no sources).
# Pin the base by digest too in a release pipeline (docker buildx imagetools inspect python:3.12.8-slim-bookworm).
ARG PYTHON_IMAGE=python:3.12.8-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY controller/ controller/
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/queuescale \
 && pip --python /opt/queuescale/bin/python install --compile \
      "$(ls /wheels/queuescale-*.whl)[redis,postgres]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="queuescale" \
      org.opencontainers.image.description="Scales worker Deployments from the length of the queues they consume" \
      org.opencontainers.image.licenses="Apache-2.0"
# Bytecode was compiled at install time; the root filesystem is read-only at run time, so never write any.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/queuescale/bin:$PATH
COPY --from=build /opt/queuescale /opt/queuescale
# 65532: the conventional "nonroot" uid; numeric so that runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["queuescale"]
CMD ["run"]
