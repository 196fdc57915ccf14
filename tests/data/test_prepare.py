"""`spt data prepare` logic without network: local sources, fake openers and a fake hub."""
import io
import json
import tarfile

import pytest

import spt.data.prepare as prepare
from official_formats import (aan_release, bidmc_archive, imdb_hub, listops_release,
                              pathfinder_release, speech_release)
from spt.data.prepare import PrepareError, download, prepare_task, unpack


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
