"""A kernel's outputs, downloaded from Kaggle's answer without trusting it.

The official client joins each file name Kaggle lists onto the target folder and writes there, so
an answer naming `/etc/x` or `../../x` would land outside it. Petals lists the outputs itself,
checks every name lies inside the target before writing anything, then streams each file to the
path it checked, atomically and bounded in size.
"""

from __future__ import annotations

from pathlib import Path

import requests

from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically
from pipeline.core.kaggle_client import call_with_retries, explain_kernel_error, kernel_call
from pipeline.core.paths import check_name, inside

# Kaggle keeps at most 20 GB of a kernel's /kaggle/working: a file said to be larger is not one of
# its outputs, and streaming stops there instead of filling the disk.
MAX_OUTPUT_BYTES = 20 * 10**9
CHUNK = 1 << 20


def _output_listing(kernel: str) -> tuple[list[tuple[str, str]], str]:
    """The kernel's latest outputs as Kaggle lists them, (file name, download URL) for each, and its
    log; nothing is written. Each name is the server's to choose: the caller checks it."""
    from kagglesdk.kernels.types.kernels_api_service import ApiListKernelSessionOutputRequest

    owner, _, slug = kernel.partition("/")

    def listing(client) -> tuple[list[tuple[str, str]], str]:
        files, token, log_text = [], "", ""
        with client.build_kaggle_client() as kaggle:
            while True:
                request = ApiListKernelSessionOutputRequest()
                request.user_name, request.kernel_slug = owner, slug
                request.page_size, request.page_token = 100, token
                response = kaggle.kernels.kernels_api_client.list_kernel_session_output(request)
                files += [(item.file_name, item.url) for item in response.files or []]
                log_text = log_text or response.log or ""
                token = response.next_page_token
                if not token:
                    return files, log_text

    return kernel_call(listing, kernel, f"listing the output of kernel {kernel}")


def kernel_output(kernel: str, target: Path) -> list[str]:
    """Download the kernel's latest outputs into `target` (every name checked first); the files
    written. The log is saved as `<slug>.log`, as the client saves it."""
    owner, _, slug = kernel.partition("/")
    source = f"kernel {kernel}"
    check_name(owner, "owner", source)
    check_name(slug, "slug", source)
    files, log_text = _output_listing(kernel)
    paths = [(inside(target, name, "output file", source), url) for name, url in files]
    written = []
    for path, url in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        call_with_retries(
            lambda path=path, url=url: write_atomically(path, lambda tmp: _stream(url, tmp, kernel)),
            slug=kernel,
            action=f"downloading {path.name} of kernel {kernel}",
            explain=explain_kernel_error,
        )
        written.append(str(path))
    if log_text:
        log = target / f"{slug}.log"
        target.mkdir(parents=True, exist_ok=True)
        write_atomically(log, lambda tmp: tmp.write_text(log_text))
        written.append(str(log))
    return written


def _stream(url: str, tmp: Path, kernel: str) -> None:
    """One output file from `url` into `tmp`, in chunks, stopped past MAX_OUTPUT_BYTES."""
    with requests.get(url, stream=True) as response:
        response.raise_for_status()
        size = 0
        with open(tmp, "wb") as out:
            for chunk in response.iter_content(CHUNK):
                size += len(chunk)
                if size > MAX_OUTPUT_BYTES:
                    raise PetalsError(
                        f"kernel {kernel}: output {tmp.name.removesuffix('.partial')!r} is larger than "
                        f"{MAX_OUTPUT_BYTES} bytes, more than Kaggle keeps of a kernel; not downloaded"
                    )
                out.write(chunk)
