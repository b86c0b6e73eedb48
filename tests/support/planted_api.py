"""The API with one planted defect, for showing that schemathesis catches a route answering 500
(tests/acceptance/test_schemathesis.py): ``uvicorn --factory tests.support.planted_api:app``."""

from __future__ import annotations

from fastapi import FastAPI

from inner_plane.http.app import create_app


def app() -> FastAPI:
    served = create_app()

    @served.get("/v1/planted/{item}", summary="A planted defect: always fails")
    def planted(item: int) -> dict[str, int]:
        raise RuntimeError(f"planted defect {item}")

    return served
