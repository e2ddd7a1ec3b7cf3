"""Hub ids without the Hub: the checks never refuse what the libraries would load, every refusal
says something true, and the course's default command runs from a Hugging Face cache.

The cache is laid by hand (``hub_cache.py``): the smoke BERT as ``bert-base-uncased``, smoke rows
as ``andjela-r/mlm-harry-potter``. "Network down" is ``HF_ENDPOINT`` on a closed local port; "the
Hub answers" is a local ``http.server`` answering 404. Nothing here touches the real network.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hub_cache import DATASET_ID, MODEL_ID, datasets_cache_root, hub_model_dir, lay_hf_cache

from hp_mlm import hub, models
from hp_mlm.data import load_corpus
from hp_mlm.hub import HubUnavailableError, hub_reachable, require_hub
from hp_mlm.models import load_model

ROOT = Path(__file__).resolve().parents[1]
NETWORK_VARS = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "HF_ENDPOINT",
    "HF_HUB_CACHE",
    "HF_DATASETS_CACHE",
    "HF_HOME",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
)


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Answer404(http.server.BaseHTTPRequestHandler):
    """Answers every request 404 and records its request line (a Hub mirror, or a proxy, that answers)."""

    seen: list[str] = []

    def _answer(self):
        self.seen.append(self.requestline)
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _answer

    def log_message(self, *args):
        pass


@pytest.fixture()
def answering_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer404)
    _Answer404.seen = []
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Answer404.seen
    server.shutdown()
    server.server_close()


@pytest.fixture()
def clean_network(monkeypatch):
    """No offline flag, endpoint or proxy from the caller; huggingface_hub's client made afresh (it reads proxies once).

    The libraries read the offline variables once, at import: a room told to set ``HF_HUB_OFFLINE=1`` (teaching.md)
    runs these tests with huggingface_hub's and datasets' offline constants set, and their HTTP client refuses
    every request. So the constants follow the variables, unset, as in a process started without them."""
    import datasets
    from huggingface_hub import close_session, constants

    for name in NETWORK_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setattr(datasets.config, name, False)
    close_session()
    yield monkeypatch
    close_session()


@pytest.fixture(scope="module")
def laid_cache(tmp_path_factory):
    return lay_hf_cache(tmp_path_factory.mktemp("hf_home"))


def use_cache(monkeypatch, home: Path) -> None:
    """Point this process's libraries at the cache under ``home`` (they read HF_HOME only at import)."""
    import datasets
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")


@pytest.fixture()
def cached(clean_network, laid_cache):
    use_cache(clean_network, laid_cache)
    return clean_network


@pytest.fixture()
def not_cached(clean_network, tmp_path):
    use_cache(clean_network, tmp_path)
    assert not hub_model_dir(tmp_path).exists() and not datasets_cache_root(tmp_path).exists()
    return clean_network


def network_down(monkeypatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    assert not hub_reachable()


def load(what: str):
    return load_model(MODEL_ID) if what == "model" else load_corpus(DATASET_ID, "train")[0]


# --- the probe -----------------------------------------------------------------------------------


def test_any_http_answer_counts_as_reachable_and_a_closed_port_does_not(clean_network, answering_server):
    url, seen = answering_server
    clean_network.setenv("HF_ENDPOINT", url)
    assert hub_reachable() and seen  # a 404 is an answer
    clean_network.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    started = time.perf_counter()
    assert not hub_reachable()
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
@pytest.mark.parametrize("what", ["model", "dataset"])
def test_the_probe_goes_through_the_proxy_the_libraries_use(not_cached, answering_server, variable, what):
    """Behind a mandatory proxy the Hub's host does not even resolve; the libraries (and the probe) use the proxy."""
    url, seen = answering_server
    not_cached.setenv("HF_ENDPOINT", "http://hub.invalid")  # .invalid never resolves (RFC 2606)
    not_cached.setenv(variable, url)
    assert (
        require_hub(MODEL_ID if what == "model" else DATASET_ID, what, lambda: pytest.fail("asked the cache"), "cache")
        is False
    )
    assert any("http://hub.invalid" in line for line in seen), seen


def test_no_proxy_is_honoured_as_the_libraries_honour_it(clean_network, answering_server):
    url, _ = answering_server
    clean_network.setenv("HF_ENDPOINT", url)
    clean_network.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed_port()}")  # a dead proxy...
    clean_network.setenv("NO_PROXY", "127.0.0.1")  # ...that the endpoint bypasses
    assert hub_reachable()
    clean_network.delenv("NO_PROXY")
    from huggingface_hub import close_session

    close_session()
    assert not hub_reachable()  # through the dead proxy, as transformers and datasets would go


@pytest.mark.parametrize("what", ["model", "dataset"])
def test_a_reachable_hub_is_handed_to_the_library_even_when_nothing_is_cached(not_cached, answering_server, what):
    not_cached.setenv("HF_ENDPOINT", answering_server[0])
    if what == "model":
        assert models._check_source(MODEL_ID, "model") is False  # fetch as usual
        return
    from datasets import Dataset

    from hp_mlm import data

    calls = []
    not_cached.setattr(data, "load_dataset", lambda *a, **k: calls.append(a) or Dataset.from_dict({"text": ["x"]}))
    load_corpus(DATASET_ID, "train")
    assert calls == [(DATASET_ID,)]


# --- each refusal path, for models and datasets ---------------------------------------------------


@pytest.mark.parametrize("what", ["model", "dataset"])
def test_offline_flag_and_cached_loads_from_the_cache(cached, what):
    cached.setenv("HF_HUB_OFFLINE", "1")
    cached.setattr(hub, "hub_reachable", lambda *a: pytest.fail("offline mode must not probe the Hub"))
    loaded = load(what)
    assert loaded.model.config.hidden_size == 64 if what == "model" else len(loaded) == 300


@pytest.mark.parametrize("what", ["model", "dataset"])
def test_offline_flag_and_not_cached_says_so(not_cached, what):
    not_cached.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnavailableError) as info:
        load(what)
    message = str(info.value)
    assert (MODEL_ID if what == "model" else DATASET_ID) in message
    assert "offline mode is set (HF_HUB_OFFLINE)" in message and "not in the local Hugging Face cache" in message
    assert "Cannot reach" not in message and "HP_MLM_PROFILE=offline" in message and "local path" in message


@pytest.mark.parametrize("what", ["model", "dataset"])
def test_hub_out_of_reach_and_cached_loads_from_the_cache_within_seconds(cached, what):
    network_down(cached)
    started = time.perf_counter()
    loaded = load(what)
    assert time.perf_counter() - started < 10
    assert loaded.model.config.hidden_size == 64 if what == "model" else len(loaded) == 300


@pytest.mark.parametrize("what", ["model", "dataset"])
def test_hub_out_of_reach_and_not_cached_says_cannot_reach(not_cached, what):
    network_down(not_cached)
    started = time.perf_counter()
    with pytest.raises(HubUnavailableError) as info:
        load(what)
    assert time.perf_counter() - started < 10
    message = str(info.value)
    assert message.startswith("Cannot reach the Hugging Face Hub") and "not in the local Hugging Face cache" in message
    assert (MODEL_ID if what == "model" else DATASET_ID) in message and "offline mode" not in message


# --- the course's default command, from the cache, in fresh processes ----------------------------


def command_env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k.upper() not in NETWORK_VARS and not k.startswith("HP_MLM_")
    }  # HP_MLM_PROFILE unset: full
    return {
        **env,
        "HF_HOME": str(home),
        "HP_MLM_PROGRESS": "0",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        **extra,
    }


@pytest.fixture(scope="module")
def runs(laid_cache, tmp_path_factory):
    """The commands, started together (each in its own copy of the cache), then waited for."""
    base = tmp_path_factory.mktemp("runs")
    offline = {"HF_HUB_OFFLINE": "1"}
    small = {"HP_MLM_MAX_LENGTH": "64", "HP_MLM_EPOCHS": "1", "HP_MLM_BATCH_SIZE": "8"}
    commands = {
        "train_offline": (["-m", "hp_mlm", "train", "--output-dir", "{out}"], {**offline, **small}),
        "train_network_down": (["-m", "hp_mlm", "train", "--output-dir", "{out}"], small),
        "predict": (["-m", "hp_mlm", "predict", "Harry [MASK] is a wizard.", "--model", MODEL_ID, "--json"], offline),
        "evaluate": (
            ["-m", "hp_mlm", "evaluate", "--model", MODEL_ID, "--dataset", DATASET_ID, "--max-length", "64"],
            {},
        ),
        "datasets_alone": (
            ["-c", f"import datasets; print(len(datasets.load_dataset({DATASET_ID!r}, split='train')))"],
            offline,
        ),
    }
    started = {}
    for name, (args, extra) in commands.items():
        home = shutil.copytree(laid_cache, base / name / "hf_home")
        if "HF_HUB_OFFLINE" not in extra:
            extra = {**extra, "HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}  # network down
        out = base / name / "out"
        started[name] = (
            subprocess.Popen(
                [sys.executable, *[a.format(out=out) for a in args]],
                cwd=base / name,
                env=command_env(home, **extra),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
            out,
        )
    results = {}
    for name, (process, out) in started.items():
        stdout, stderr = process.communicate(timeout=240)
        results[name] = (process.returncode, stdout, stderr, out)
    return results


def finished(runs, name):
    code, stdout, stderr, out = runs[name]
    assert code == 0, f"{name} exited {code}:\n{stderr[-3000:]}"
    return stdout, out


def test_the_fixture_cache_is_what_datasets_alone_reads_offline(runs):
    stdout, _ = finished(runs, "datasets_alone")
    assert stdout.strip().splitlines()[-1] == "300"


@pytest.mark.parametrize("name", ["train_offline", "train_network_down"])
def test_default_train_command_runs_from_the_cache(runs, name):
    stdout, out = finished(runs, name)
    assert "model bert-base-uncased, data andjela-r/mlm-harry-potter [train[:10%]]" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    history = json.loads((out / "history.json").read_text())
    assert metrics["data"]["n_loaded"] == 30 and len(history["steps"]) >= 3  # 27 training rows, batches of 8


def test_predict_by_hub_id_from_the_cache(runs):
    stdout, _ = finished(runs, "predict")
    (sentence,) = json.loads(stdout)
    assert len(sentence) == 1 and len(sentence[0]) == 5


def test_evaluate_by_hub_ids_with_the_hub_out_of_reach(runs):
    stdout, _ = finished(runs, "evaluate")
    assert json.loads(stdout)["n_positions"] > 0
