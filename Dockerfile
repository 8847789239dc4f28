# pdroute images.
#
#   docker build --target service  -t pdroute:0.1.0 .            # the routing service (no torch)
#   docker build --target profiler -t pdroute-profiler:0.1.0 .   # profile + fit on CUDA GPUs
#
# Service: python:3.11-slim, non-root (uid 10001), writes nothing outside /tmp, so it runs
# with a read-only root filesystem. It serves the embedded default params unless
# PDROUTE_PARAMS_PATH names another file (mount it read-only). See docs/deploy.md.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The profiler's base carries its own CUDA torch build; pip is told to keep it (see below).
ARG PYTORCH_IMAGE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

# ---------------------------------------------------------------------------------------
# build: a virtualenv holding the service's dependencies, then pdroute itself. Every package
# comes from a hash lock (requirements/, refreshed by scripts/lock.sh); pip refuses anything else.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# python3, not python: Debian's own python (a locally built base) has no `python`.
# /opt/build-tools holds what builds the wheel, so that none of it reaches the service's venv.
RUN python3 -m venv /opt/venv \
    && python3 -m venv /opt/build-tools
WORKDIR /src
# Dependencies before the source: this layer is rebuilt only when a lock changes.
COPY requirements/service.txt requirements/build.txt ./requirements/
RUN /opt/venv/bin/pip install --no-cache-dir --require-hashes -r requirements/service.txt \
    && /opt/build-tools/bin/pip install --no-cache-dir --require-hashes -r requirements/build.txt
ENV PATH=/opt/venv/bin:$PATH
# Only what the service (and `pdroute proxy`, which the CLI registers) imports: no profiling/,
# so no torch can come in.
COPY pyproject.toml README.md ./
COPY pdroute_core ./pdroute_core
COPY solver ./solver
COPY app ./app
COPY pdroute_proxy ./pdroute_proxy
RUN /opt/build-tools/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation -w /tmp/dist . \
    && pip install --no-cache-dir --no-deps /tmp/dist/pdroute-*.whl \
    && python -c "from app.settings import embedded_params_path; from solver.params import load_params; print(load_params(embedded_params_path()).params_id)"

# ---------------------------------------------------------------------------------------
# service: the routing service.
FROM ${PYTHON_IMAGE} AS service
RUN groupadd --system --gid 10001 pdroute \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin pdroute
COPY --from=build /opt/venv /opt/venv
# Bytecode was compiled at install time; never try to write it at run time (read-only root).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp \
    PDROUTE_PORT=8000
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000
# python, not curl: the slim image has no curl. urlopen raises (exit 1) on any non-2xx answer.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PDROUTE_PORT', '8000'), timeout=2)"]
ENTRYPOINT ["pdroute"]
CMD ["serve", "--host", "0.0.0.0"]

# ---------------------------------------------------------------------------------------
# profiler: `pdroute profile` then `pdroute fit` on this machine's GPUs (deploy/profiler/reprofile.sh),
# optionally publishing params.json into the service's ConfigMap (the reprofile Job does).
FROM ${PYTORCH_IMAGE} AS profiler
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    PDROUTE_OUT_DIR=/work
WORKDIR /opt/pdroute
COPY pyproject.toml ./
# Pin torch to the base image's own CUDA build so that no dependency can replace it with
# another (multi-GB) build from PyPI.
RUN python -c "import torch; print('torch==' + torch.__version__)" > /tmp/constraints.txt \
    && python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['profiling']))" > /tmp/requirements.txt \
    && pip install --no-cache-dir -c /tmp/constraints.txt -r /tmp/requirements.txt
COPY README.md ./
COPY pdroute_core ./pdroute_core
COPY solver ./solver
COPY app ./app
COPY pdroute_proxy ./pdroute_proxy
COPY profiling ./profiling
RUN pip install --no-cache-dir --no-deps -c /tmp/constraints.txt . \
    && groupadd --system --gid 10001 pdroute \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin pdroute \
    && mkdir -p /work \
    && chown 10001:10001 /work
COPY deploy/profiler/reprofile.sh deploy/profiler/publish_params.py /opt/pdroute/bin/
USER 10001:10001
# Outputs (profile_data.pt, params.json, fit report) go here: mount a volume to keep them.
WORKDIR /work
ENTRYPOINT ["/bin/sh", "/opt/pdroute/bin/reprofile.sh"]
