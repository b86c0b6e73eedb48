# One image for every inner-plane process; docker-compose.yml and deploy/ pick the role with the
# command (`inner-plane worker signals`, `inner-plane beat`, ...), exactly as `inner-plane up` does.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    INNER_PLANE_DATA_DIR=/var/lib/inner-plane

WORKDIR /app

# Dependencies first so source edits do not reinstall them.
COPY pyproject.toml README.md ./
COPY inner_plane ./inner_plane
COPY workers ./workers
COPY beat_schedule ./beat_schedule
RUN pip install .

# Celery refuses nothing as root but warns loudly; run as an unprivileged user anyway.
RUN useradd --system --uid 10001 --home-dir /var/lib/inner-plane --create-home inner-plane
USER inner-plane
WORKDIR /var/lib/inner-plane

CMD ["inner-plane", "--help"]
