"""The local reader's path, as `make lab` sets it up: a JupyterLab server from this environment, Jupytext's
contents manager opening a chapter's .md as a notebook and keeping .md and .ipynb paired on save, and a chapter
run through a kernel of that server (REST + websocket API, as the browser does it).

The server works on a copy of one chapter (and the root jupytext.toml) in a temporary folder, so saving in the
test never touches the repository. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import jupytext
import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAPTER = "book/00_conventions"  # the shortest chapter: three code cells
LAB_SETTINGS = ROOT / "binder" / "jupyterlab"  # what `make lab` passes as --LabApp.app_settings_dir
SERVER_START_TIMEOUT_S = 120
CELL_TIMEOUT_S = 120

pytestmark = [
    pytest.mark.slow,  # a JupyterLab server and a kernel: about 20 s
    pytest.mark.skipif(
        shutil.which("jupyter-lab", path=str(pathlib.Path(sys.executable).parent)) is None,
        reason="JupyterLab is not installed in this environment (make install installs it)",
    ),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LabServer:
    """A headless JupyterLab server on localhost with a token; ``request`` calls its REST API."""

    def __init__(self, root: pathlib.Path, log: pathlib.Path):
        self.root, self.port, self.token = root, _free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log.open("w")
        command = [
            str(pathlib.Path(sys.executable).parent / "jupyter-lab"),
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--port-retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={root}",
            f"--LabApp.app_settings_dir={LAB_SETTINGS}",
        ] + (["--allow-root"] if os.geteuid() == 0 else [])  # as `make lab` does (containers often run as root)
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(log.parent / "config"),
            "TQDM_DISABLE": "1",
            "JUPYTER_RUNTIME_DIR": str(log.parent / "runtime"),
        }
        env.pop("MPLBACKEND", None)
        self.process = subprocess.Popen(command, cwd=root, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 30) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as response:
            text = response.read().decode()
        return json.loads(text) if text else {}

    def wait_until_ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with code {self.process.returncode}: {self.log_text()}")
            try:
                self.request("GET", "/api/status", timeout=5)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        raise TimeoutError(f"jupyter lab did not answer within {SERVER_START_TIMEOUT_S} s: {self.log_text()}")

    def log_text(self) -> str:
        self._log.flush()
        return pathlib.Path(self._log.name).read_text()[-3000:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self._log.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The server, rooted in a copy of jupytext.toml and one chapter (.md and .ipynb) as `tools/execute_chapters.py`
    leaves them: the .ipynb written last, so newer than the .md. Jupytext refuses to open a .md whose paired
    .ipynb is newer and differs from it (the .ipynb's metadata names its formats, the .md's header does not), so
    `make lab` first touches every chapter's .md (the .md is the source; the .ipynb only adds outputs); so does
    this fixture."""
    root = tmp_path_factory.mktemp("lab")
    (root / "book").mkdir()
    shutil.copy(ROOT / "jupytext.toml", root / "jupytext.toml")
    for suffix in (".md", ".ipynb"):
        shutil.copy(ROOT / (CHAPTER + suffix), root / (CHAPTER + suffix))
    md, ipynb = root / (CHAPTER + ".md"), root / (CHAPTER + ".ipynb")
    now = time.time()
    os.utime(md, (now - 120, now - 120))  # as after execute_chapters.py: the .ipynb written after the .md
    os.utime(ipynb, (now - 60, now - 60))
    for chapter in root.glob("book/[0-9][0-9]_*.md"):  # what `make lab` does before starting JupyterLab
        chapter.touch()
    server = LabServer(root, tmp_path_factory.mktemp("lab-log") / "server.log")
    try:
        server.wait_until_ready()
        yield server
    finally:
        server.stop()


def _code_sources(notebook: dict) -> list[str]:
    return [cell["source"].strip() for cell in notebook["cells"] if cell["cell_type"] == "code"]


def test_chapter_md_opens_as_a_notebook_with_the_chapters_cells(lab):
    model = lab.request("GET", f"/api/contents/{CHAPTER}.md?type=notebook&content=1")
    assert model["type"] == "notebook", f"{CHAPTER}.md arrived as {model['type']!r}, not as a notebook"
    expected = jupytext.read(ROOT / (CHAPTER + ".md"))
    assert _code_sources(model["content"]) == [c.source.strip() for c in expected.cells if c.cell_type == "code"]
    assert len(model["content"]["cells"]) == len(expected.cells)
    executed = nbformat.read(ROOT / (CHAPTER + ".ipynb"), as_version=4)
    outputs = [cell["outputs"] for cell in model["content"]["cells"] if cell["cell_type"] == "code"]
    assert outputs == [c.outputs for c in executed.cells if c.cell_type == "code"], (
        "opening the .md should show the outputs stored in its paired .ipynb"
    )


def test_double_click_opens_a_markdown_file_as_a_jupytext_notebook(lab):
    settings = lab.request("GET", "/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    # overrides.json changes the schema's default (a reader's own settings may still choose otherwise)
    defaults = settings["schema"]["properties"]["defaultViewers"]["default"]
    assert defaults["markdown"] == defaults["myst"] == "Jupytext Notebook"


def test_saving_the_notebook_writes_both_md_and_ipynb(lab):
    model = lab.request("GET", f"/api/contents/{CHAPTER}.md?type=notebook&content=1")
    marker = f"Edited in JupyterLab {uuid.uuid4().hex[:8]}."
    content = model["content"]
    first_markdown = next(cell for cell in content["cells"] if cell["cell_type"] == "markdown")
    first_markdown["source"] += "\n\n" + marker
    lab.request("PUT", f"/api/contents/{CHAPTER}.md", {"type": "notebook", "format": "json", "content": content})
    md_text = (lab.root / (CHAPTER + ".md")).read_text()
    assert marker in md_text and "```{code-cell} ipython3" in md_text, "the .md must stay a MyST notebook"
    paired = nbformat.read(lab.root / (CHAPTER + ".ipynb"), as_version=4)
    assert any(marker in cell.source for cell in paired.cells if cell.cell_type == "markdown"), (
        "saving the .md notebook must update its paired .ipynb (jupytext.toml: formats)"
    )
    code_cells = [cell for cell in paired.cells if cell.cell_type == "code"]
    assert all(cell.outputs for cell in code_cells[1:]), "the executed outputs must be kept (the Colab cell has none)"


def _execute(channel, code: str) -> list[dict]:
    """Send one execute_request over the kernel's websocket; returns its iopub outputs; raises on an error."""
    msg_id = uuid.uuid4().hex
    channel.send(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "msg_type": "execute_request",
                    "username": "test",
                    "session": "test",
                    "version": "5.3",
                    "date": "",
                },
                "parent_header": {},
                "metadata": {},
                "channel": "shell",
                "buffers": [],
                "content": {
                    "code": code,
                    "silent": False,
                    "store_history": True,
                    "user_expressions": {},
                    "allow_stdin": False,
                    "stop_on_error": True,
                },
            }
        )
    )
    outputs, reply, idle = [], None, False
    deadline = time.monotonic() + CELL_TIMEOUT_S
    while reply is None or not idle:
        channel.settimeout(max(0.1, deadline - time.monotonic()))
        message = json.loads(channel.recv())  # raises a timeout once the deadline has passed
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        kind = message["msg_type"]
        if message["channel"] == "shell" and kind == "execute_reply":
            reply = message["content"]
        elif kind == "status":
            idle = message["content"]["execution_state"] == "idle"
        elif kind in ("stream", "execute_result", "display_data", "error"):
            outputs.append(message["content"])
    if reply["status"] != "ok":
        raise AssertionError(f"cell failed: {reply.get('ename')}: {reply.get('evalue')}\n{code}")
    return outputs


def test_a_chapter_runs_through_a_kernel_of_the_server(lab):
    import websocket  # websocket-client, installed with jupyter_server

    session = lab.request(
        "POST",
        "/api/sessions",
        {"path": f"{CHAPTER}.md", "type": "notebook", "name": "", "kernel": {"name": "python3"}},
    )
    kernel_id = session["kernel"]["id"]
    channel = websocket.create_connection(
        f"ws://127.0.0.1:{lab.port}/api/kernels/{kernel_id}/channels?session_id={uuid.uuid4().hex}",
        header=[f"Authorization: token {lab.token}"],
        timeout=CELL_TIMEOUT_S,
    )
    try:
        model = lab.request("GET", f"/api/contents/{CHAPTER}.md?type=notebook&content=1")
        outputs = [_execute(channel, source) for source in _code_sources(model["content"])]
        cwd = _execute(channel, "import os; print(os.getcwd())")
    finally:
        channel.close()
        lab.request("DELETE", f"/api/sessions/{session['id']}")
    printed = "".join(out.get("text", "") for cell in outputs for out in cell)
    assert "weights: (2, 4, 5, 5)  [batch, heads, q_len, k_len]" in printed
    assert cwd[0]["text"].strip() == str(lab.root / "book"), "the kernel works in the chapter's folder"
