"""A loopback stand-in for the Kaggle API, for the real `kaggle` client in TEST mode.

`KAGGLE_API_ENVIRONMENT=TEST` sends the client to http://localhost:7777. The server
speaks the same protocol as the service: a JSON POST to
/api/v1/<service>/<method> with Basic or Bearer auth, answered by a redirect to
the file, which it then streams with Content-Length. Kernels are pushed as numbered versions whose
status can step through `kernel_statuses`; a code submission names a kernel version that exists.
Several kernels at once (a fan-out) each follow their own `KernelPlan`, version by version, and
the weekly accelerator quota is answered as `quota` says.
"""

from __future__ import annotations

import base64
import fcntl
import json
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

PORT = 7777
# How often the serving thread looks for `shutdown`: socketserver's 0.5 s made each test's server
# take up to half a second to stop, with the port's lock held and the other workers' servers
# waiting on it (15 files of server tests under 3 workers: 86.6 s, 63.9 s at 0.02).
POLL = 0.02
LOCK = Path(tempfile.gettempdir()) / f"petals-kaggle-test-server-{PORT}.lock"


@dataclass
class KernelPlan:
    """One kernel of several: the states each pushed version steps through, one per status request
    (the last one repeats), and the output files its versions leave."""

    versions: list[list[str]] = field(default_factory=lambda: [["COMPLETE"]])
    failure_message: str = "test kernel failed"
    files: dict[str, bytes] = field(default_factory=dict)
    status_requests: int = 0


@dataclass
class Behaviour:
    archive: bytes = b""
    username: str = "petals-user"
    key: str = "petals-key"
    fail_with: list[int] = field(default_factory=list)  # statuses to answer, one per request, first
    requests: list[dict] = field(default_factory=list)
    uploads: dict[str, bytes] = field(default_factory=dict)  # upload token -> the bytes PUT there
    file_names: dict[str, str] = field(default_factory=dict)  # upload token -> the file's name
    created: list[dict] = field(default_factory=list)  # CreateSubmission requests that succeeded
    lost_answers: int = 0  # the first this many Create(Code)Submissions are recorded, then answered 502
    submissions: list[dict] = field(default_factory=list)  # what ListSubmissions answers
    kernel_status: str = "COMPLETE"  # what GetKernelSessionStatus answers once `kernel_statuses` is spent
    kernel_statuses: list[str] = field(default_factory=list)  # answered first, one per status request
    failure_message: str = ""  # the status answer's failureMessage
    # A kernel's output files by name, listed as they are: a test may name one `/tmp/x` or `../../x`
    # to play a hostile server (the download URL quotes the name, so it reaches the server whole).
    kernel_files: dict[str, bytes] = field(default_factory=dict)
    kernel_log: str = "kernel log"  # what ListKernelSessionOutput answers as the log
    # The listing's entries as answered ({"fileName": ..., "url": ...}), instead of one per
    # `kernel_files` name: a test may give a `file://` URL, no URL, or the same name twice.
    kernel_listing: list[dict] | None = None
    kernel_page_token: str = ""  # the listing's nextPageToken, answered on every page: endless if set
    # Where DownloadDataFiles redirects to, `{slug}` filled in: the client names the archive from it.
    download_location: str = "/files/{slug}.zip"
    pushed: list[dict] = field(default_factory=list)  # SaveKernel requests
    versions: dict[str, int] = field(default_factory=dict)  # owner/kernel -> its newest version number
    code_submissions: list[dict] = field(default_factory=list)  # CreateCodeSubmission requests accepted
    stall_seconds: float = 0.0  # the first `stalls` requests wait this long before any answer
    stalls: int = 0
    plans: dict[str, KernelPlan] = field(default_factory=dict)  # owner/kernel -> its plan, if any
    # The weekly quota: {"gpu"|"tpu": (hours used, hours reserved, hours allowed)}; None: no answer.
    quota: dict[str, tuple[float, float, float]] | None = None
    quota_refresh: str = "2026-11-30T00:00:00Z"
    push_errors: list[str] = field(default_factory=list)  # SaveKernel's `error`, one per push, first
    lost_pushes: int = 0  # the first this many SaveKernels make their version, then answer 502
    hide_versions: bool = False  # GetKernel answers 403, as for a kernel Kaggle will not show
    # Datasets by owner/slug: each version's files, {name: bytes}, newest last.
    datasets: dict[str, list[dict[str, bytes]]] = field(default_factory=dict)
    dataset_requests: list[dict] = field(default_factory=list)  # CreateDataset(Version) requests
    dataset_statuses: list[str] = field(default_factory=list)  # answered first, then READY
    refuse_uploads: set[str] = field(
        default_factory=set
    )  # files whose upload is answered 400 (the client goes on)


class _Handler(BaseHTTPRequestHandler):
    behaviour: Behaviour

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorised(self) -> bool:
        expected = base64.b64encode(f"{self.behaviour.username}:{self.behaviour.key}".encode()).decode()
        return self.headers.get("Authorization") == f"Basic {expected}"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        payload = json.loads(self.rfile.read(length) or b"{}")
        self.behaviour.requests.append({"path": self.path, "json": payload})
        if self.behaviour.stalls:  # a server that stops answering
            self.behaviour.stalls -= 1
            time.sleep(self.behaviour.stall_seconds)
            return None
        if self.behaviour.fail_with:
            status = self.behaviour.fail_with.pop(0)
            body = json.dumps({"code": status, "message": f"test server says {status}"}).encode()
            return self._reply(status, body, {"Content-Type": "application/json"})
        if not self._authorised():
            body = json.dumps({"code": 401, "message": "Unauthenticated"}).encode()
            return self._reply(401, body, {"Content-Type": "application/json"})
        if self.path.startswith("/api/v1/kernels.KernelsApiService/"):
            return self._kernels(self.path.rsplit("/", 1)[-1], payload)
        if self.path.startswith("/api/v1/datasets.DatasetApiService/"):
            return self._datasets(self.path.rsplit("/", 1)[-1], payload)
        if self.path == "/api/v1/blobs.BlobApiService/StartBlobUpload":
            token = f"blob-{len(self.behaviour.uploads) + 1}"
            self.behaviour.uploads[token] = b""
            self.behaviour.file_names[token] = payload.get("name", "")
            return self._json({"token": token, "createUrl": f"http://localhost:{PORT}/upload/{token}"})
        method = self.path.removeprefix("/api/v1/competitions.CompetitionApiService/")
        if method == "DownloadDataFiles":
            slug = payload.get("competitionName", "")
            location = self.behaviour.download_location.format(slug=slug)
            return self._reply(302, headers={"Location": location})
        if method == "StartSubmissionUpload":
            token = f"blob-{len(self.behaviour.uploads) + 1}"
            self.behaviour.uploads[token] = b""
            self.behaviour.file_names[token] = payload.get("fileName", "")
            url = f"http://localhost:{PORT}/upload/{token}"
            return self._json({"token": token, "createUrl": url})
        if method == "CreateSubmission":
            if self.behaviour.uploads.get(payload.get("blobFileTokens")) in (None, b""):
                return self._reply(
                    400, b'{"message": "no such upload"}', {"Content-Type": "application/json"}
                )
            self.behaviour.created.append(payload)
            ref = 1000 + len(self.behaviour.created)
            self.behaviour.submissions.append(  # what ListSubmissions answers from now on
                {
                    "ref": ref,
                    "fileName": self.behaviour.file_names.get(payload.get("blobFileTokens"), ""),
                    "description": payload.get("submissionDescription", ""),
                    "status": "PENDING",
                }
            )
            if self.behaviour.lost_answers:  # Kaggle took it; its answer is lost on the way back
                self.behaviour.lost_answers -= 1
                return self._reply(502, b"{}", {"Content-Type": "application/json"})
            return self._json({"message": "Successfully submitted to the test server", "ref": ref})
        if method == "CreateCodeSubmission":
            return self._code_submission(payload)
        if method == "ListSubmissions":
            return self._json({"submissions": self.behaviour.submissions})
        return self._reply(404, b"{}", {"Content-Type": "application/json"})

    def _code_submission(self, payload: dict) -> None:
        """A code competition's submission: the output file of a kernel version that exists here."""
        kernel = f"{payload.get('kernelOwner')}/{payload.get('kernelSlug')}"
        version = payload.get("kernelVersion")
        if not isinstance(version, int) or not 1 <= version <= self.behaviour.versions.get(kernel, 0):
            body = json.dumps({"code": 404, "message": f"no version {version} of notebook {kernel}"})
            return self._reply(404, body.encode(), {"Content-Type": "application/json"})
        self.behaviour.code_submissions.append(payload)
        ref = 2000 + len(self.behaviour.code_submissions)
        self.behaviour.submissions.append(
            {
                "ref": ref,
                "fileName": payload.get("fileName", ""),
                "description": payload.get("submissionDescription", ""),
                "status": "PENDING",
            }
        )
        if self.behaviour.lost_answers:  # Kaggle took it; its answer is lost on the way back
            self.behaviour.lost_answers -= 1
            return self._reply(502, b"{}", {"Content-Type": "application/json"})
        competition = payload.get("competitionName")
        return self._json({"message": f"Successfully submitted to {competition}", "ref": ref})

    def _datasets(self, method: str, payload: dict) -> None:
        """A dataset created, given a version, listed, or its status; the files of each version are
        the blobs uploaded for its tokens (one whose upload never arrived is dropped, as Kaggle would)."""
        body = payload.get("body") or payload
        dataset = f"{payload.get('ownerSlug')}/{payload.get('slug') or payload.get('datasetSlug')}"
        versions = self.behaviour.datasets.get(dataset)
        if method == "CreateDataset" and versions is not None:
            return self._json({"error": f"dataset {dataset} exists"})
        if method in ("CreateDataset", "CreateDatasetVersion"):
            if method == "CreateDatasetVersion" and versions is None:
                return self._reply(404, b"{}", {"Content-Type": "application/json"})
            self.behaviour.dataset_requests.append({"method": method, **payload})
            files = {
                self.behaviour.file_names[t]: self.behaviour.uploads[t]
                for t in (f.get("token") for f in body.get("files", []))
                if self.behaviour.uploads.get(t)
            }
            self.behaviour.datasets.setdefault(dataset, []).append(files)
            url = f"https://www.kaggle.com/datasets/{dataset}"
            return self._json({"ref": dataset, "url": url, "status": "ok", "error": ""})
        if versions is None:
            body = json.dumps({"code": 404, "message": f"no dataset {dataset}"}).encode()
            return self._reply(404, body, {"Content-Type": "application/json"})
        if method == "ListDatasetFiles":
            listed = [{"name": n, "totalBytes": len(b)} for n, b in versions[-1].items()]
            return self._json({"datasetFiles": listed, "nextPageToken": ""})
        if method == "GetDatasetStatus":
            statuses = self.behaviour.dataset_statuses
            return self._json({"status": statuses.pop(0) if statuses else "READY"})
        return self._reply(404, b"{}", {"Content-Type": "application/json"})

    def _kernels(self, method: str, payload: dict) -> None:
        if method == "SaveKernel" and self.behaviour.push_errors:  # refused: no version made
            return self._json({"error": self.behaviour.push_errors.pop(0)})
        if method == "SaveKernel":
            self.behaviour.pushed.append(payload)
            kernel = payload.get("slug", "")
            version = self.behaviour.versions[kernel] = self.behaviour.versions.get(kernel, 0) + 1
            if self.behaviour.lost_pushes:  # Kaggle made the version; its answer is lost on the way back
                self.behaviour.lost_pushes -= 1
                return self._reply(502, b"{}", {"Content-Type": "application/json"})
            url = f"https://www.kaggle.com/code/{kernel}"
            return self._json({"ref": f"/code/{kernel}", "url": url, "versionNumber": version})
        if method == "GetKernel":  # the kernel's metadata: its newest version number
            version = self.behaviour.versions.get(f"{payload.get('userName')}/{payload.get('kernelSlug')}")
            if self.behaviour.hide_versions or not version:
                status = 403 if self.behaviour.hide_versions else 404
                body = json.dumps({"code": status, "message": "no such notebook"}).encode()
                return self._reply(status, body, {"Content-Type": "application/json"})
            return self._json({"metadata": {"currentVersionNumber": version}})
        planned = self._planned(method, payload)
        if planned is not None:
            return planned
        if method == "GetAcceleratorQuotaStatistics":
            return self._quota()
        if method == "GetKernelSessionStatus":
            statuses = self.behaviour.kernel_statuses
            status = statuses.pop(0) if statuses else self.behaviour.kernel_status
            return self._json({"status": status, "failureMessage": self.behaviour.failure_message})
        if method == "ListKernelSessionOutput":
            files = [
                {"fileName": name, "url": f"http://localhost:{PORT}/kernel-files/{quote(name, safe='')}"}
                for name in self.behaviour.kernel_files
            ]
            if self.behaviour.kernel_listing is not None:
                files = self.behaviour.kernel_listing
            answer = {"files": files, "log": self.behaviour.kernel_log}
            return self._json({**answer, "nextPageToken": self.behaviour.kernel_page_token})
        return self._reply(404, b"{}", {"Content-Type": "application/json"})

    def _planned(self, method: str, payload: dict) -> bool | None:
        """A kernel with a plan: its status by version, its files; None for one without."""
        kernel = f"{payload.get('userName')}/{payload.get('kernelSlug')}"
        plan = self.behaviour.plans.get(kernel)
        if plan is None or method not in ("GetKernelSessionStatus", "ListKernelSessionOutput"):
            return None
        version = self.behaviour.versions.get(kernel, 0)
        if version == 0:
            body = json.dumps({"code": 404, "message": f"no notebook {kernel}"}).encode()
            self._reply(404, body, {"Content-Type": "application/json"})
            return True
        if method == "ListKernelSessionOutput":
            files = [
                {
                    "fileName": name,
                    "url": f"http://localhost:{PORT}/kernel-files/{quote(kernel + '/' + name, safe='')}",
                }
                for name in plan.files
            ]
            self._json({"files": files, "log": "kernel log", "nextPageToken": ""})
            return True
        plan.status_requests += 1
        states = plan.versions[min(version, len(plan.versions)) - 1]
        status = states.pop(0) if len(states) > 1 else states[0]
        failed = status == "ERROR"
        self._json({"status": status, "failureMessage": plan.failure_message if failed else ""})
        return True

    def _quota(self) -> None:
        if self.behaviour.quota is None:
            return self._reply(404, b"{}", {"Content-Type": "application/json"})
        answer = {"quotaRefreshTime": self.behaviour.quota_refresh}
        for kind, (used, reserved, allowed) in self.behaviour.quota.items():
            answer[f"{kind}Quota"] = {
                "timeUsed": f"{used * 3600:.0f}s",
                "timeReserved": f"{reserved * 3600:.0f}s",
                "totalTimeAllowed": f"{allowed * 3600:.0f}s",
            }
        return self._json(answer)

    def _json(self, payload: dict) -> None:
        self._reply(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

    def do_PUT(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        token = self.path.removeprefix("/upload/")
        self.behaviour.requests.append({"path": self.path, "bytes": len(body)})
        if token not in self.behaviour.uploads:
            return self._reply(404)
        if self.behaviour.file_names.get(token) in self.behaviour.refuse_uploads:
            return self._reply(400, b"{}", {"Content-Type": "application/json"})
        self.behaviour.uploads[token] = body
        return self._reply(200, b"{}", {"Content-Type": "application/json"})

    def do_GET(self) -> None:
        self.behaviour.requests.append({"path": self.path})
        if self.path.startswith("/kernel-files/"):
            name = unquote(self.path.removeprefix("/kernel-files/"))
            owner, _, rest = name.partition("/")
            kernel, _, file = rest.partition("/")
            plan = self.behaviour.plans.get(f"{owner}/{kernel}")
            if plan is not None and file in plan.files:
                return self._reply(200, plan.files[file])
            if name in self.behaviour.kernel_files:
                return self._reply(200, self.behaviour.kernel_files[name])
            return self._reply(404)
        if self.path.startswith("/files/"):
            return self._reply(
                200,
                self.behaviour.archive,
                {
                    "Content-Type": "application/zip",
                    "Last-Modified": "Mon, 02 Mar 2020 10:00:00 GMT",
                    "ETag": '"petals-test"',
                    "Accept-Ranges": "bytes",
                },
            )
        return self._reply(404)


class KaggleTestServer:
    """Serve `Behaviour` on localhost:7777 in a background thread (use as a context manager).

    The client's TEST endpoint is that one fixed port, so servers in parallel test workers take
    turns: each holds an exclusive lock on a file for as long as it serves.
    """

    def __init__(self, behaviour: Behaviour):
        self.behaviour = behaviour
        self.handler = type("Handler", (_Handler,), {"behaviour": behaviour})

    def __enter__(self) -> KaggleTestServer:
        self.lock = open(LOCK, "w")
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", PORT), self.handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(POLL,), daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        fcntl.flock(self.lock, fcntl.LOCK_UN)
        self.lock.close()
