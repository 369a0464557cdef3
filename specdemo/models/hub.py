"""Downloads from the Hugging Face Hub, with their progress and one line for each way they fail.

``huggingface_hub`` does the work (``HfApi.model_info`` lists a repository's files, ``hf_hub_download``
fetches each one into the hub cache: resumable, written to a temporary file and moved into place only
when whole, so a cut download is never taken for a model). It honours ``HF_ENDPOINT``, ``HF_HOME`` and
``HF_HUB_OFFLINE``. This module adds what the app needs around it: a quick "does the hub answer?" so an
offline laptop falls through in seconds, the bytes and files done so far (the Run button and the status
line show them; a ZeroGPU Space's preload logs them), and the failure said in a line.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tqdm.auto import tqdm

from specdemo.errors import ModelLoadError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0  # an offline laptop, or a hub that never answers, falls through after this
ANSWER_TIMEOUT_S = 10.0  # a hub that answered once and then stalls: a file's listing gives up after this
# what a causal LM needs from its repository (not the other formats' copies of the same weights)
MODEL_FILES = ("*.json", "*.safetensors", "*.txt", "*.model", "*.jinja")
LOG_EVERY = 0.1  # the preload logs each tenth of a download
REMEMBER_S = 60.0  # how long an answer to "does the hub answer?" holds
_asked: dict[str, tuple[float, object]] = {}  # a question to the hub → (when asked, its answer)

_lock = threading.RLock()  # the app's thread reads what the loading thread writes
downloading: dict = {}  # while a download runs in this process: what, its files, the bytes done (the app shows it)


def endpoint() -> str:
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) set: the hub is never asked."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in ("1", "on", "yes", "true")


def reachable(timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """Does the hub answer at all (any HTTP status counts), within ``timeout``? No: offline, no network,
    or a server that accepts and never answers. Asked once a minute at most (a start asks several times)."""
    if offline():
        return False
    return remembered(f"answers {endpoint()}", lambda: answers(endpoint(), timeout))


def remembered(question: str, ask):
    """``ask()``'s answer, asked again only once it is older than REMEMBER_S."""
    asked = _asked.get(question)
    if asked is None or time.monotonic() - asked[0] >= REMEMBER_S:
        asked = _asked[question] = (time.monotonic(), ask())
    return asked[1]


def answers(url: str, timeout: float) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url + "/api/models?limit=1"), timeout=timeout).close()
        return True
    except urllib.error.HTTPError:
        return True  # it answered, if only to refuse
    except (OSError, ValueError):
        return False


class _Bar(tqdm):
    """huggingface_hub's progress bar for one file, counted into ``downloading`` as it moves."""

    def update(self, n=1):
        out = super().update(n)
        with _lock:
            if downloading:
                downloading["file_bytes"] = self.n
                done = progress()
                if done is not None and done >= downloading["logged"] + LOG_EVERY:
                    downloading["logged"] = done
                    log.info("downloading %s", describe_progress())
        return out


def progress() -> float | None:
    """How far the download running in this process is, from 0 to 1 (None when none runs)."""
    with _lock:
        d = downloading
        if not d:
            return None
        return min((d["done_bytes"] + d["file_bytes"]) / (d["total"] or 1), 1.0)


def describe_progress() -> str | None:
    """ "Qwen/Qwen2.5-0.5B-Instruct: file 2 of 4, 312 of 988 MB" for the download running now (None: none)."""
    with _lock:
        d = downloading
        if not d:
            return None
        done, total, file = (d["done_bytes"] + d["file_bytes"]) / 1e6, d["total"] / 1e6, min(d["file"] + 1, d["files"])
        return f"{d['what']}: file {file} of {d['files']}, {done:.0f} of {total:.0f} MB"


def describe_failure(what: str, error: BaseException) -> str:
    """One line for a download that failed: gated, refused, missing, cut off, or a hub that does not answer.
    huggingface_hub wraps the cause (a 403 comes back as "not in the local cache"): the whole chain is read."""
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    chain, e = [], error
    while e is not None and len(chain) < 8:
        chain.append(e)
        e = e.__cause__ or e.__context__
    status = next((s for c in chain if (s := getattr(getattr(c, "response", None), "status_code", None))), None)
    names = " ".join(type(c).__name__ for c in chain)
    if any(isinstance(c, GatedRepoError) for c in chain):
        return f"{what} is gated on the Hub: accept its terms there and give this machine a token (HF_TOKEN)"
    if status in (401, 403):
        return f"the Hub refused to send {what} ({status}): give this machine a token with access to it (HF_TOKEN)"
    if any(isinstance(c, RepositoryNotFoundError | RevisionNotFoundError) for c in chain) or status == 404:
        return f"{what} is not on the Hub at {endpoint()} (check the name, or give a token if it is private)"
    if any(isinstance(c, HfHubHTTPError) for c in chain) and status:
        return f"the Hub answered {status} for {what}: try again later"
    if "Timeout" in names or "ConnectError" in names:
        return f"the Hub at {endpoint()} did not answer in time for {what}: try again later"
    first = f"{type(error).__name__}: {error}".splitlines()[0][:160]
    return f"the download of {what} broke off ({first}); nothing half-written was kept: the next start tries again"


def download(repo_id: str, revision: str | None = None, files: tuple[str, ...] = MODEL_FILES) -> Path:
    """Download ``repo_id``'s files matching ``files`` into the hub cache (resuming what is there) → the
    snapshot folder. Raises ModelLoadError with one line on any failure; nothing half-written is kept."""
    from huggingface_hub import HfApi, hf_hub_download

    what = repo_id if revision is None else f"{repo_id}@{revision[:7]}"
    if offline():
        raise ModelLoadError(f"{what} is not cached here and the Hub is off (HF_HUB_OFFLINE)")
    try:
        api = HfApi(endpoint=endpoint())
        info = api.model_info(repo_id, revision=revision, files_metadata=True, timeout=ANSWER_TIMEOUT_S)
        # the repository's top level only: a subfolder holds other formats' copies (onnx/, original/…)
        top = [s for s in info.siblings or () if "/" not in s.rfilename]
        wanted = [s for s in top if any(fnmatch.fnmatch(s.rfilename, p) for p in files)]
        if not wanted:
            raise ModelLoadError(f"{what} has no files this app can load ({', '.join(files)})")
        with _lock:
            downloading.clear()
            downloading.update(what=what, file=0, files=len(wanted), done_bytes=0, file_bytes=0, logged=0.0)
            downloading["total"] = sum(s.size or 0 for s in wanted)
        log.info("downloading %s: %d files, %.0f MB", what, len(wanted), downloading["total"] / 1e6)
        for i, sibling in enumerate(wanted):
            with _lock:
                downloading.update(file=i, file_bytes=0)
            path = hf_hub_download(
                repo_id,
                sibling.rfilename,
                revision=info.sha,
                endpoint=endpoint(),
                etag_timeout=ANSWER_TIMEOUT_S,
                tqdm_class=_Bar,
            )
            with _lock:
                downloading["done_bytes"] += sibling.size or 0
        return Path(path).parent  # the snapshot folder
    except ModelLoadError:
        raise
    except Exception as error:  # huggingface_hub's and httpx's errors: said in one line, the app keeps serving
        log.warning("download of %s failed: %s", what, error)
        raise ModelLoadError(describe_failure(what, error)) from error
    finally:
        with _lock:
            downloading.clear()


def fetchable(repo_id: str, filename: str, revision: str | None = None) -> str | None:
    """Why ``filename`` cannot be downloaded now, in one line (None: the hub would send it). One HEAD
    request, asked once a minute at most: a start checks before it promises a model it cannot fetch."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    if not reachable():
        return "the Hub is off here (HF_HUB_OFFLINE)" if offline() else f"the Hub at {endpoint()} does not answer"
    what = repo_id if revision is None else f"{repo_id}@{revision[:7]}"

    def ask() -> str | None:
        try:
            get_hf_file_metadata(hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint()),
                                 timeout=ANSWER_TIMEOUT_S)  # fmt: skip
            return None
        except Exception as error:  # said in one line; the caller falls back
            return describe_failure(what, error)

    return remembered(f"fetchable {endpoint()} {repo_id} {filename} {revision}", ask)


def cached(repo_id: str, filename: str, revision: str | None = None) -> Path | None:
    """A file already in the local hub cache (no network used), else None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, filename, revision=revision)
    return Path(found) if isinstance(found, str) else None
