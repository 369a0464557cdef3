"""A small Hugging Face Hub on 127.0.0.1: the part of its HTTP API that the installed ``huggingface_hub``
uses to download (``HfApi.model_info`` with the files' sizes, ``hf_hub_download``'s HEAD and GET of
``resolve`` with the commit and ETag headers, and ranges for a resumed download), serving the files of
``folder/<owner>/<name>/``. ``HF_ENDPOINT`` points the real client at it; no part of the client is mocked.

A repository can be told to misbehave, as the real Hub or a network can: ``missing`` (404, RepoNotFound),
``gated`` (401, GatedRepo), ``forbidden`` (403), ``drop`` (each GET stops half-way through the file and
closes the connection) or ``hang`` (accepts and never answers); ``modes["*"] = "hang"``: the whole hub.

    python -m tools.local_hub FOLDER --port 8765     # serve FOLDER until stopped
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = re.compile(r"^[0-9a-f]{40}$")
ROOT = Path(__file__).resolve().parent.parent


class LocalHub:
    def __init__(self, folder: Path, port: int = 0):
        self.folder = Path(folder)
        self.modes: dict[str, str] = {}  # repo id → how it misbehaves
        self.requests: list[tuple[str, str]] = []  # (method, path): what the client asked
        self._etags: dict[Path, str] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.stopping = threading.Event()

    def __enter__(self) -> LocalHub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def commit(self, repo: str, revision: str) -> str:
        """A commit hash asked for is served as is; a branch resolves to one made from the repo's name."""
        return revision if COMMIT.match(revision) else hashlib.sha1(repo.encode()).hexdigest()

    def etag(self, path: Path) -> str:
        if path not in self._etags:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            self._etags[path] = digest.hexdigest()
        return self._etags[path]

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet: the test reads hub.requests instead
                pass

            def do_HEAD(self):
                self.answer(body=False)

            def do_GET(self):
                self.answer(body=True)

            def refuse(self, status: int, code: str = "", message: str = "") -> None:
                data = json.dumps({"error": message or code}).encode()
                self.send_response(status)
                if code:
                    self.send_header("X-Error-Code", code)
                if message:
                    self.send_header("X-Error-Message", message)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(data)

            def send_json(self, value) -> None:
                data = json.dumps(value).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(data)

            def answer(self, body: bool) -> None:
                path = unquote(urlparse(self.path).path)
                hub.requests.append((self.command, path))
                if hub.modes.get("*") == "hang":  # the whole hub accepts and never answers
                    hub.stopping.wait(600)
                    return
                if path == "/api/models":  # "does the hub answer?"
                    return self.send_json([])
                api = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
                resolve = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
                repo = (api or resolve).group(1) if (api or resolve) else None
                mode = hub.modes.get(repo, "ok")
                if mode == "hang":  # a server that accepts and never answers
                    hub.stopping.wait(600)
                    return
                if repo is None or mode == "missing" or not (hub.folder / repo).is_dir():
                    return self.refuse(404, "RepoNotFound", "Repository not found")
                if mode == "gated" and resolve:
                    return self.refuse(401, "GatedRepo", "Access to model is restricted. You must be authenticated.")
                if mode == "forbidden" and resolve:
                    return self.refuse(403, "", "Access to this resource is forbidden.")
                if api:
                    files = sorted(p for p in (hub.folder / repo).rglob("*") if p.is_file())
                    siblings = [
                        {"rfilename": p.relative_to(hub.folder / repo).as_posix(), "size": p.stat().st_size}
                        for p in files
                    ]
                    return self.send_json(
                        {"id": repo, "modelId": repo, "sha": hub.commit(repo, api.group(2) or "main"),
                         "private": False, "gated": mode == "gated", "siblings": siblings}
                    )  # fmt: skip
                file = hub.folder / repo / resolve.group(3)
                if not file.is_file():
                    return self.refuse(404, "EntryNotFound", "Entry not found")
                self.send_file(repo, resolve.group(2), file, body, drop=mode == "drop")

            def send_file(self, repo: str, revision: str, file: Path, body: bool, drop: bool) -> None:
                size = file.stat().st_size
                start = 0
                ranged = re.match(r"bytes=(\d+)-", self.headers.get("Range", ""))
                if ranged and body:
                    start = min(int(ranged.group(1)), size)
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", hub.commit(repo, revision))
                self.send_header("ETag", f'"{hub.etag(file)}"')
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(size - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                self.end_headers()
                if not body:
                    return
                stop = size // 2 if drop else size  # a dropped connection: half the file, then nothing
                with open(file, "rb") as f:
                    f.seek(start)
                    left = max(stop - start, 0)
                    while left > 0:
                        chunk = f.read(min(left, 1 << 20))
                        self.wfile.write(chunk)
                        left -= len(chunk)
                if drop:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)

        return Handler


def tiny_checkpoint(config_file: str, folder: Path, layers: int, seed: int) -> None:
    """The real architecture (its config.json, the same model class) at a test's size, random weights, with
    SmolLM2's tokenizer and chat template (the Qwen tokenizer cannot be had offline)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    real = json.loads((ROOT / "assets" / "configs" / config_file).read_text())
    tokenizer = AutoTokenizer.from_pretrained(ROOT / "assets" / "models" / "smollm2-draft")
    small = real | {
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": layers, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_window_layers": layers, "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id, "max_position_embeddings": 512,
    }  # fmt: skip
    config = AutoConfig.for_model(**{k: v for k, v in small.items() if k not in ("architectures", "torch_dtype")})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with LocalHub(args.folder, args.port) as hub:
        print(hub.url, flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
