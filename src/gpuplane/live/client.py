"""A small HTTP client of the control plane's API, used by the CLI (``gpuplane submit``, ``jobs``, ``why``...)."""

from __future__ import annotations

import os
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"


class ApiError(RuntimeError):
    """The API refused a request; the message carries its status and the server's explanation."""


def refusal(response: httpx.Response) -> str:
    """A refused request in words: ``422 team: unknown team 'x'``, not the raw JSON body.

    The API answers ``{"detail": TEXT}``, ``{"detail": {"field": F, "problem": P}}`` or, for a request
    that does not match the schema, ``{"detail": "invalid request", "errors": [{"field", "problem"}]}``."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return f"{response.status_code}: {response.text.strip() or response.reason_phrase}"
    parts = [_problem(body.get("detail", response.reason_phrase))]
    errors = body.get("errors")
    if isinstance(errors, list):
        parts += [_problem(e) for e in errors]
    return f"{response.status_code} " + "; ".join(p for p in parts if p)


def _problem(item: Any) -> str:
    if isinstance(item, dict) and "problem" in item:
        field = item.get("field")
        return f"{field}: {item['problem']}" if field else str(item["problem"])
    if isinstance(item, dict):
        return ", ".join(f"{k}: {v}" for k, v in item.items())
    return str(item)


class Client:
    """Calls the API with a bearer token (``GPUPLANE_TOKEN`` by default) at ``GPUPLANE_URL``."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout_s: float = 30.0) -> None:
        self.url = (url or os.environ.get("GPUPLANE_URL") or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("GPUPLANE_TOKEN")
        if not token:
            raise ApiError("no API token: pass --token or set GPUPLANE_TOKEN (a team's or the admin's token)")
        self._http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach the control plane at {self.url}: {exc}") from exc
        if response.status_code >= 400:
            raise ApiError(refusal(response))
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Submit a job; returns its view."""
        result: dict[str, Any] = self._call("POST", "/v1/jobs", json=spec)
        return result

    def submit_many(self, specs: list[dict[str, Any]]) -> dict[str, Any]:
        """Submit jobs in one request (``POST /v1/jobs/batch``: all accepted or none); returns ``created`` and each
        job's ``{"created", "job"}`` in order."""
        result: dict[str, Any] = self._call("POST", "/v1/jobs/batch", json={"jobs": specs})
        return result

    def jobs(self, state: str | None = None, team: str | None = None) -> list[dict[str, Any]]:
        """Jobs this token may see, of one state and one team when given."""
        params = {k: v for k, v in (("state", state), ("team", team)) if v}
        result: list[dict[str, Any]] = self._call("GET", "/v1/jobs", params=params or None)
        return result

    def job(self, job_id: str) -> dict[str, Any]:
        """One job."""
        result: dict[str, Any] = self._call("GET", f"/v1/jobs/{job_id}")
        return result

    def why(self, job_id: str) -> dict[str, Any]:
        """The scheduler's reason for the job's state."""
        result: dict[str, Any] = self._call("GET", f"/v1/jobs/{job_id}/why")
        return result

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a job."""
        result: dict[str, Any] = self._call("DELETE", f"/v1/jobs/{job_id}")
        return result

    def logs(self, job_id: str, rank: int = 0, offset: int = 0) -> str:
        """A rank's log from byte ``offset``."""
        return str(self._call("GET", f"/v1/jobs/{job_id}/logs", params={"rank": rank, "offset": offset}))

    def get(self, path: str) -> Any:
        """Any GET endpoint (queues, nodes, pools, events, services)."""
        return self._call("GET", path)
