"""Speech Commands v0.02 reader on a tiny fixture in the release layout."""
import numpy as np
import pytest
import torch
from official_formats import speech_release, wav

from spt.data import DataFormatError, DataMissingError
from spt.data.speech import WORDS, load_speech, waveform_stats


def test_official_split_lists_padding_and_labels(tmp_path):
    speech_release(tmp_path)
    task = load_speech(tmp_path)
    s = task.spec
    assert (s.seq_len, s.d_input, s.num_classes, s.mask_ratio) == (16000, 1, 35, 0.25)
    assert len(WORDS) == 35 and list(WORDS) == sorted(WORDS)
    assert (len(task.train), len(task.val), len(task.test)) == (6, 3, 3)  # noise folder ignored
    for split, clips in ((task.val, (1,)), (task.test, (2,)), (task.train, (0, 3))):
        for item in split:
            x, y = item["inputs"], int(item["label"])
            assert x.shape == (16000, 1) and x.dtype == torch.float32
            word = WORDS[y]
            assert word in ("bed", "yes", "zero")
            raw = np.round(x.numpy() * split.scale + split.shift)  # undo the standardisation
            w_i, clip = divmod(int(raw[0, 0]), 100)
            assert ("bed", "yes", "zero")[w_i - 1] == word and clip in clips
            n = 16000 if clip % 2 == 0 else 8000
            assert np.all(raw[:n] == raw[0, 0]) and np.all(raw[n:] == 0)  # zero-padded


def test_bad_wavs_and_folders(tmp_path):
    with pytest.raises(DataMissingError, match="spt data prepare speech"):
        load_speech(tmp_path)
    d = speech_release(tmp_path)
    wav(d / "yes" / "0000000a_nohash_0.wav", np.zeros(100, np.uint8), width=1)
    with pytest.raises(DataFormatError, match=r"0000000a_nohash_0.wav: expected mono 16-bit"):
        load_speech(tmp_path)
    (d / "yes" / "0000000a_nohash_0.wav").write_bytes(b"RIFF\x00\x00")
    with pytest.raises(DataFormatError, match=r"0000000a_nohash_0.wav: not a readable WAV"):
        load_speech(tmp_path)
    (d / "yes" / "0000000a_nohash_0.wav").unlink()
    (d / "banana").mkdir()
    with pytest.raises(DataFormatError, match=r"\['banana'\] are not Speech Commands"):
        load_speech(tmp_path)
    (d / "banana").rmdir()
    with open(d / "testing_list.txt", "a") as f:
        f.write("yes/missing.wav\n")
    with pytest.raises(DataFormatError, match=r"testing_list.txt:4: lists yes/missing.wav"):
        load_speech(tmp_path)


def test_split_list_that_is_not_utf8_names_the_file_and_line(tmp_path):
    d = speech_release(tmp_path)
    with open(d / "validation_list.txt", "ab") as f:
        f.write(b"\nyes/caf\xe9.wav\n")  # Latin-1
    with pytest.raises(DataFormatError, match=r"validation_list.txt:\d+: byte b'\\xe9' at column 8 "
                                              r"is not UTF-8 .*spt data prepare speech"):
        load_speech(tmp_path)


def _noise_release(root, n_train=12, val_gain=1.0, seed=0):
    """2 words; per word n_train // 2 training clips of Gaussian noise (std 1000, a few shorter
    than a second) and 2 val + 2 test clips whose amplitude is `val_gain` times larger."""
    rng = np.random.default_rng(seed)
    d = root / "speech_commands"
    clips, val, test = {}, [], []
    for word in ("no", "yes"):
        for c in range(n_train // 2 + 4):
            n = 16000 if c % 3 else 11000
            gain = 1.0 if c < n_train // 2 else val_gain
            samples = np.clip(rng.normal(50, 1000 * gain, n).round(), -32768, 32767)
            rel = f"{word}/{c:08x}_nohash_0.wav"
            wav(d / rel, samples.astype(np.int16))
            clips[rel] = np.pad(samples, (0, 16000 - n)) / 32768.0
            if c >= n_train // 2:
                (val if c < n_train // 2 + 2 else test).append(rel)
    (d / "validation_list.txt").write_text("\n".join(val))
    (d / "testing_list.txt").write_text("\n".join(test))
    train = np.stack([v for k, v in sorted(clips.items()) if k not in val and k not in test])
    return clips, val, test, train


def _stack(ds):
    return torch.stack([ds[i]["inputs"][:, 0] for i in range(len(ds))]).double().numpy()


def test_global_standardisation_uses_all_training_samples(tmp_path):
    clips, val, test, train = _noise_release(tmp_path)
    task = load_speech(tmp_path, standardise="global")
    x = _stack(task.train)
    mean, std = train.mean(), train.std(ddof=1)
    # the training split: mean 0, std 1 (std / (std + 1e-5) exactly, for the authors' epsilon)
    assert abs(x.mean()) < 1e-6 and abs(x.std(ddof=1) - std / (std + 1e-5)) < 1e-6
    for split, rels in ((task.val, val), (task.test, test)):  # val / test: the training statistics
        want = np.stack([(clips[r] - mean) / (std + 1e-5) for r in sorted(rels)])
        np.testing.assert_allclose(_stack(split), want, atol=1e-4)


def test_position_standardisation_as_the_authors_code(tmp_path):
    """IdoAmos/not-from-scratch sc.py: every time position standardised with the training clips'
    mean and unbiased std at that position, val and test with the same statistics."""
    clips, val, test, train = _noise_release(tmp_path)
    task = load_speech(tmp_path)  # standardise="position" is the default
    x = _stack(task.train)
    mean, std = train.mean(0), train.std(0, ddof=1)
    assert np.abs(x.mean(0)).max() < 1e-5 and np.abs(x.std(0, ddof=1) - 1).max() < 2e-3
    np.testing.assert_allclose(x.std(0, ddof=1), std / (std + 1e-5), atol=1e-5)
    for split, rels in ((task.val, val), (task.test, test)):
        want = np.stack([(clips[r] - mean) / (std + 1e-5) for r in sorted(rels)])
        np.testing.assert_allclose(_stack(split), want, atol=1e-4)


@pytest.mark.parametrize("standardise", ["position", "global"])
def test_statistics_come_from_training_clips_only(tmp_path, standardise):
    """Val / test clips 10x louder than training: standardised with the training statistics they
    stay ~10x spread out; statistics that had seen them would pull them towards 1."""
    _noise_release(tmp_path, val_gain=10.0)
    task = load_speech(tmp_path, standardise=standardise)
    assert abs(_stack(task.train).std() - 1) < 0.05
    for split in (task.val, task.test):
        assert 9 < _stack(split).std() < 11


def test_bad_standardise_names_the_choices(tmp_path):
    speech_release(tmp_path)
    with pytest.raises(ValueError, match=r"standardise must be one of \('position', 'global'\)"):
        load_speech(tmp_path, standardise="minmax")


def test_waveform_stats_in_chunks_match_numpy():
    x = np.random.default_rng(1).integers(-32768, 32768, (13, 50, 1)).astype(np.int16)
    got = waveform_stats(x, n_train=9, chunk=4)  # 3 chunks, the last one partial; rows 9.. unused
    train = x[:9, :, 0] / 32768.0
    np.testing.assert_allclose(got["position_mean"], train.mean(0), atol=1e-12)
    np.testing.assert_allclose(got["position_std"], train.std(0, ddof=1), atol=1e-12)
    assert abs(got["mean"] - train.mean()) < 1e-12 and abs(got["std"] - train.std(ddof=1)) < 1e-12
    assert got["n_clips"] == 9
