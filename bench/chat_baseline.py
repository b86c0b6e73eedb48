"""The baseline of bench/chat.py's turn accept: a bare FastAPI route that inserts one row (the
least a durable accept costs), served by the same uvicorn."""

from __future__ import annotations

import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool

from inner_plane.runtime import get_runtime


def create_app() -> FastAPI:
    app = FastAPI()
    engine = get_runtime().engine
    with engine.begin() as connection:
        connection.execute(
            text("CREATE TABLE IF NOT EXISTS bench_bare (id uuid PRIMARY KEY, body text)")
        )

    @app.get("/healthz")
    def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @app.post("/bare", status_code=202)
    async def bare(request: Request) -> Response:
        body = (await request.body()).decode()

        def insert() -> None:
            with engine.begin() as connection:
                connection.execute(
                    text("INSERT INTO bench_bare (id, body) VALUES (:id, :body)"),
                    {"id": uuid.uuid4(), "body": body},
                )

        await run_in_threadpool(insert)
        return JSONResponse({"ok": True}, status_code=202)

    return app
