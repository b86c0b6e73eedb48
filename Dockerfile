# One image for every inner-plane process; docker-compose.yml and deploy/ pick the role with the
# command (`inner-plane worker signals`, `inner-plane beat`, ...), exactly as `inner-plane up` does.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    INNER_PLANE_DATA_DIR=/var/lib/inner-plane

WORKDIR /app

# Dependencies first, in a layer of their own that only a pyproject.toml edit rebuilds: the
# dependency list is read from pyproject.toml alone (tomllib, standard library) and installed
# before any source is copied. The package itself is then installed without dependencies.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
COPY README.md ./
COPY inner_plane ./inner_plane
COPY workers ./workers
COPY beat_schedule ./beat_schedule
RUN pip install --no-deps .

# Celery refuses nothing as root but warns loudly; run as an unprivileged user anyway.
RUN useradd --system --uid 10001 --home-dir /var/lib/inner-plane --create-home inner-plane
USER inner-plane
WORKDIR /var/lib/inner-plane

CMD ["inner-plane", "--help"]
