"""`spt data prepare` logic without network: local sources, fake openers and a fake hub."""
import io
import json
import tarfile

import pytest
from official_formats import (
    aan_release,
    bidmc_archive,
    cifar_hub,
    imdb_hub,
    listops_release,
    pathfinder_release,
    speech_release,
)

import spt.data.cli as data_cli
import spt.data.prepare as prepare
from spt.data.prepare import PrepareError, download, prepare_task, unpack
from spt.data.registry import TASK_NAMES


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a test tried to reach the network")
    monkeypatch.setattr(prepare, "_open", refuse)
    monkeypatch.setattr(prepare, "hub_snapshot", refuse)


class FakeResponse(io.BytesIO):
    def __init__(self, data, status=200, length=None, fail_after=None):
        super().__init__(data)
        self.status = status
        self.headers = {"Content-Length": str(len(data) if length is None else length)}
        self.fail_after = fail_after

    def read(self, n=-1):
        if self.fail_after is not None and self.tell() >= self.fail_after:
            raise ConnectionResetError("connection reset")
        return super().read(min(n, 7) if n > 0 else n)


def test_download_resumes_after_interruption(tmp_path):
    payload = bytes(range(256)) * 4
    dest = tmp_path / "dl" / "file.bin"
    calls = []

    def opener(url, offset):
        calls.append(offset)
        if len(calls) == 1:
            return FakeResponse(payload, fail_after=300)
        return FakeResponse(payload[offset:], status=206)

    with pytest.raises(PrepareError, match="interrupted.*re-run to resume"):
        download("https://example.invalid/file.bin", dest, opener, log=lambda *a: None)
    assert not dest.exists() and dest.with_name("file.bin.part").stat().st_size >= 300
    download("https://example.invalid/file.bin", dest, opener, log=lambda *a: None)
    assert dest.read_bytes() == payload and calls[1] >= 300
    assert not dest.with_name("file.bin.part").exists()
    download("https://example.invalid/file.bin", dest, opener, log=lambda *a: None)
    assert len(calls) == 2  # complete file: nothing fetched again


def test_download_restarts_when_range_ignored_and_rejects_short(tmp_path):
    payload = b"x" * 100
    dest = tmp_path / "f.bin"
    dest.with_name("f.bin.part").write_bytes(b"garbage")
    download("u", dest, lambda url, off: FakeResponse(payload, status=200), log=lambda *a: None)
    assert dest.read_bytes() == payload
    short = tmp_path / "g.bin"
    with pytest.raises(PrepareError, match="incomplete \\(100 of 150 bytes\\)"):
        download("u", short, lambda url, off: FakeResponse(payload, length=150),
                 log=lambda *a: None)
    assert not short.exists()


def _tar(tmp_path, src_root, name, arcroot):
    path = tmp_path / name
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src_root, arcname=arcroot)
    return path


def test_prepare_lra_tasks_from_a_local_release_archive(tmp_path):
    release = tmp_path / "release"
    listops_release(release)
    aan_release(release)
    pathfinder_release(release, n_folders=1, per_folder=10)
    archive = _tar(tmp_path, release / "lra_release", "lra_release.gz", "lra_release")
    root = tmp_path / "root"
    logs = []
    info = prepare_task("listops", root, str(archive), log=logs.append)
    assert info["splits"] == {"train": 5, "val": 5, "test": 5} and info["num_classes"] == 10
    assert (root / "lra_release/listops-1000/basic_train.tsv").is_file()
    assert not (root / "lra_release/tsv_data").exists()  # only the task's folder is unpacked
    assert json.loads((root / ".spt_prepared/listops.json").read_text())["vocab_size"] == 19
    info = prepare_task("retrieval", root, str(archive), log=logs.append)
    assert info["splits"] == {"train": 3, "val": 1, "test": 2}
    # an archive downloaded earlier (in ROOT/downloads) is reused: no source, no network
    (root / "downloads").mkdir()
    archive.rename(root / "downloads" / "lra_release.gz")
    info = prepare_task("pathfinder", root, log=logs.append)
    assert sum(info["splits"].values()) == 10 and info["d_input"] == 1
    prepare_task("listops", root, log=logs.append)  # idempotent
    assert any(str(m).startswith("have ") for m in logs)


def test_truncated_archive_and_unsafe_members(tmp_path):
    release = tmp_path / "release"
    listops_release(release)
    archive = _tar(tmp_path, release / "lra_release", "lra.tar.gz", "lra_release")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[:-40])
    with pytest.raises(PrepareError, match="cut.tar.gz is corrupt or truncated"):
        unpack(cut, tmp_path / "out" / "lra_release", "listops-1000", log=lambda *a: None)
    assert not (tmp_path / "out" / "lra_release" / "listops-1000").exists()
    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as tar:
        for name in ("../escape.txt", "/abs.txt", "lra_release/listops-1000/ok.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))
    out = unpack(evil, tmp_path / "out2", "listops-1000", log=lambda *a: None)
    assert [p.name for p in out.iterdir()] == ["ok.txt"]
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "abs.txt").exists()


def test_prepare_hub_speech_and_bidmc(tmp_path):
    root = tmp_path / "root"
    fetched = []

    def fake_hub(repo, local_dir, patterns):
        fetched.append((repo, local_dir.name, tuple(patterns)))
        imdb_hub(local_dir.parent)

    info = prepare_task("text", root, hub_fetch=fake_hub, log=lambda *a: None)
    assert fetched[0][:2] == ("stanfordnlp/imdb", "imdb")
    assert info["splits"] == {"train": 18, "val": 2, "test": 6} and info["vocab_size"] == 260

    src = tmp_path / "sc_src"
    speech_release(src)
    archive = _tar(tmp_path, src / "speech_commands", "sc.tar.gz", ".")
    info = prepare_task("speech", root, str(archive), log=lambda *a: None)
    assert info["splits"] == {"train": 6, "val": 3, "test": 3} and info["num_classes"] == 35

    bidmc_archive(tmp_path / "ts_src")
    info = prepare_task("bidmc", root, str(tmp_path / "ts_src" / "bidmc"), log=lambda *a: None)
    assert info["num_classes"] is None and info["d_input"] == 2
    assert len(list((root / "bidmc").glob("*.ts"))) == 6


# ----------------------------------------------------------------- offline: one line, with --source

def _offline(monkeypatch):
    """Make urllib and huggingface_hub fail as they do with no network (DNS lookup fails)."""
    import socket
    import urllib.error

    import httpx
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    dns = socket.gaierror(-2, "Name or service not known")

    def opener(url, offset=0):
        raise urllib.error.URLError(dns)

    def snapshot_download(**kw):
        err = LocalEntryNotFoundError("An error happened while trying to locate the files on the "
                                      "Hub, and we cannot find the appropriate snapshot folder for "
                                      "the specified revision on the local disk. Please check "
                                      "your internet connection and try again.")
        raise err from httpx.ConnectError(str(dns))

    monkeypatch.setattr(prepare, "_open", opener)
    monkeypatch.setattr(prepare, "hub_snapshot", REAL_HUB_SNAPSHOT)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


REAL_HUB_SNAPSHOT = prepare.hub_snapshot


@pytest.mark.parametrize("task", TASK_NAMES)
def test_offline_error_is_one_line_naming_task_and_source(tmp_path, monkeypatch, capsys, task):
    _offline(monkeypatch)
    with pytest.raises(PrepareError) as err:
        prepare_task(task, tmp_path / "root", log=lambda *a: None)
    msg = str(err.value)
    assert len(msg.splitlines()) == 1
    assert msg.startswith(f"prepare {task}: cannot reach ")
    assert "Name or service not known" in msg
    assert f"spt data prepare {task} --root {tmp_path / 'root'} --source " in msg
    if task in prepare.HUB:
        assert f"the Hugging Face hub (dataset {prepare.HUB[task][0]})" in msg
    # the command line prints it as one line, no traceback
    assert data_cli.main(["data", "prepare", task, "--root", str(tmp_path / "root")]) == 1
    assert capsys.readouterr().err == f"error: {msg}\n"


def test_hf_hub_offline_is_named(tmp_path, monkeypatch):
    """huggingface_hub's own offline mode (HF_HUB_OFFLINE=1): the real snapshot_download, no
    network, an empty hub cache."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub_cache"))
    with pytest.raises(PrepareError, match=r"^prepare image: cannot reach the Hugging Face hub "
                                           r"\(dataset uoft-cs/cifar10\) \(HF_HUB_OFFLINE is set; "
                                           r"unset it to download\)\. .*--source FOLDER$"):
        prepare_task("image", tmp_path / "root", hub_fetch=REAL_HUB_SNAPSHOT, log=lambda *a: None)


def test_hub_tasks_take_a_folder_fetched_by_hand(tmp_path):
    fetched = imdb_hub(tmp_path / "by_hand")  # by_hand/imdb/plain_text/*.parquet
    info = prepare_task("text", tmp_path / "root", str(fetched / "plain_text"), log=lambda *a: None)
    assert info["splits"] == {"train": 18, "val": 2, "test": 6}
    assert sorted(p.name for p in (tmp_path / "root/imdb/plain_text").iterdir()) == [
        "test-00000-of-00001.parquet", "train-00000-of-00001.parquet"]
    info = prepare_task("text", tmp_path / "root", log=lambda *a: None)  # files there: no fetch
    assert info["splits"]["test"] == 6
    cifar_hub(tmp_path / "by_hand")
    info = prepare_task("scifar", tmp_path / "r2", str(tmp_path / "by_hand/cifar10"),
                        log=lambda *a: None)  # the folder above plain_text/ works too
    assert info["splits"]["test"] == 10 and info["d_input"] == 3


@pytest.mark.parametrize("task, source, match", [
    ("listops", "no/such/lra_release.gz", "--source no/such/lra_release.gz: no such file"),
    ("listops", ".", "must be the archive file or a URL, not a folder"),
    ("text", "https://example.invalid/imdb", "must be a local folder"),
    ("text", ".", "holds no train-\\*.parquet"),
    ("bidmc", ".", "lacks BIDMC32RR_TRAIN.ts"),
])
def test_bad_source_is_named(tmp_path, monkeypatch, task, source, match):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PrepareError, match=match):
        prepare_task(task, tmp_path / "root", source, log=lambda *a: None)
