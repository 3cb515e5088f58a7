"""A small HTTP client of the control plane's API, used by the CLI (``gpuplane submit``, ``jobs``, ``why``...)."""

from __future__ import annotations

import os
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"


class ApiError(RuntimeError):
    """The API refused a request; the message carries its status and the server's explanation."""


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
            try:
                detail = response.json().get("detail", response.text)
                errors = response.json().get("errors")
            except ValueError:
                detail, errors = response.text, None
            raise ApiError(f"{response.status_code}: {detail}" + (f" {errors}" if errors else ""))
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Submit a job; returns its view."""
        result: dict[str, Any] = self._call("POST", "/v1/jobs", json=spec)
        return result

    def jobs(self, state: str | None = None) -> list[dict[str, Any]]:
        """Jobs this token may see."""
        result: list[dict[str, Any]] = self._call("GET", "/v1/jobs", params={"state": state} if state else None)
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

    def logs(self, job_id: str, rank: int = 0) -> str:
        """A rank's log."""
        return str(self._call("GET", f"/v1/jobs/{job_id}/logs", params={"rank": rank}))

    def get(self, path: str) -> Any:
        """Any GET endpoint (queues, nodes, pools, events, services)."""
        return self._call("GET", path)
