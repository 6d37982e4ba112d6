"""The small health/metrics HTTP server."""

from __future__ import annotations

import httpx

from controller.httpserve import HttpServer


async def test_routes_404_and_get_only() -> None:
    calls = []

    def healthz() -> tuple[int, str, bytes]:
        calls.append(1)
        return 200, "text/plain", b"ok\n"

    def broken() -> tuple[int, str, bytes]:
        raise RuntimeError("boom")

    server = await HttpServer("127.0.0.1", 0, {"/healthz": healthz, "/broken": broken}).start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            ok = await http.get("/healthz?verbose=1")
            assert (ok.status_code, ok.text, ok.headers["content-type"]) == (200, "ok\n", "text/plain")
            again = await http.get("/healthz")  # keep-alive: a second request on the same connection
            assert again.status_code == 200 and len(calls) == 2
            assert (await http.get("/nope")).status_code == 404
            assert (await http.post("/healthz")).status_code == 405
            assert (await http.get("/broken")).status_code == 500
    finally:
        await server.stop()
