"""Image (grayscale) and sCIFAR (RGB) readers on CIFAR-10 parquet fixtures."""
import numpy as np
import pytest
import torch
from official_formats import cifar_hub, cifar_images, parquet, png_bytes
from PIL import Image

from spt.data import DataFormatError, DataMissingError
from spt.data.images import load_image, load_scifar


def test_scifar_rgb_pixels_in_row_major_order(tmp_path):
    cifar_hub(tmp_path, n_train=20, n_test=10)
    task = load_scifar(tmp_path)
    assert (task.spec.seq_len, task.spec.d_input, task.spec.num_classes) == (1024, 3, 10)
    assert (len(task.train), len(task.val), len(task.test)) == (18, 2, 10)
    test_imgs = cifar_images(10, seed=1)
    ds = task.test
    raw = test_imgs[3].reshape(1024, 3).astype(np.float32)
    x = ds[3]["inputs"]
    assert x.shape == (1024, 3) and x.dtype == torch.float32
    np.testing.assert_allclose(x.numpy() * ds.scale + ds.shift, raw, atol=1e-3)
    assert int(ds[3]["label"]) == 3
    train_imgs = cifar_images(20, seed=0).reshape(-1, 3) / 255.0
    np.testing.assert_allclose(ds.shift / 255.0, train_imgs.mean(0), atol=1e-6)
    np.testing.assert_allclose(ds.scale / 255.0, train_imgs.std(0), atol=1e-6)


def test_image_is_grayscale_luma(tmp_path):
    cifar_hub(tmp_path)
    task = load_image(tmp_path)
    assert task.spec.d_input == 1 and task.spec.name == "image"
    img = cifar_images(10, seed=1)[0]
    gray = np.asarray(Image.fromarray(img).convert("L"), np.float32).reshape(1024, 1)
    ds = task.test
    np.testing.assert_allclose(ds[0]["inputs"].numpy() * ds.scale + ds.shift, gray, atol=1e-3)
    train = torch.stack([task.train[i]["inputs"] for i in range(len(task.train))])
    assert abs(train.mean()) < 0.2  # standardised with the train statistics


def test_corrupt_png_names_file_and_record(tmp_path):
    cifar_hub(tmp_path)
    imgs = cifar_images(3, seed=5)
    cells = [{"bytes": png_bytes(im), "path": "x.png"} for im in imgs]
    cells[2]["bytes"] = cells[2]["bytes"][:40]  # cut inside the PNG data
    parquet(tmp_path / "cifar10" / "plain_text" / "test-00000-of-00001.parquet",
            {"img": cells, "label": [0, 1, 2]})
    with pytest.raises(DataFormatError,
                       match=r"test-00000-of-00001.parquet: record 2: cannot decode"):
        load_scifar(tmp_path)


def test_wrong_size_and_missing(tmp_path):
    with pytest.raises(DataMissingError, match="spt data prepare image"):
        load_image(tmp_path)
    cifar_hub(tmp_path)
    small = np.zeros((16, 16, 3), np.uint8)
    parquet(tmp_path / "cifar10" / "plain_text" / "test-00000-of-00001.parquet",
            {"img": [{"bytes": png_bytes(small), "path": "s.png"}], "label": [0]})
    with pytest.raises(DataFormatError, match="record 0: image is 16x16, expected 32x32"):
        load_image(tmp_path)


def test_image_pixel_tokens_are_gray_intensities_of_the_decoded_png(tmp_path):
    """tokens=True (study 05, the authors' `tokenize: true`): id = N_SPECIAL + grayscale intensity,
    the Pathfinder reader's convention; same splits as the standardised Image task."""
    import io

    from spt.data.registry import load_task
    from spt.data.task import N_SPECIAL

    cifar_hub(tmp_path, n_train=20, n_test=10)
    task = load_task("image", tmp_path, tokens=True)
    s = task.spec
    assert (s.name, s.seq_len, s.vocab_size, s.d_input, s.num_classes) == (
        "image", 1024, N_SPECIAL + 256, None, 10)
    assert s.is_tokens and s.pretrain_loss == "ce"

    def gray(img):  # through the PNG bytes the parquet holds, decoded by PIL as the reader does
        with Image.open(io.BytesIO(png_bytes(img))) as im:
            return np.asarray(im.convert("L"), np.int64).reshape(-1)

    train_imgs, test_imgs = cifar_images(20, seed=0), cifar_images(10, seed=1)
    for i in range(len(task.test)):
        x = task.test[i]["inputs"]
        assert x.dtype == torch.long and x.shape == (1024,)
        np.testing.assert_array_equal(x.numpy(), N_SPECIAL + gray(test_imgs[i]))
        assert int(task.test[i]["label"]) == i % 10
    plain = load_image(tmp_path)
    for split, same in ((task.train, plain.train), (task.val, plain.val)):
        np.testing.assert_array_equal(split.index, same.index)
        for i, row in enumerate(split.index):
            np.testing.assert_array_equal(split[i]["inputs"].numpy(),
                                          N_SPECIAL + gray(train_imgs[row]))
    assert len(load_task("image", tmp_path, fraction=0.5, tokens=True).train) == 9


def test_rgb_pixel_tokens_are_refused(tmp_path):
    from spt.data.images import load_cifar

    cifar_hub(tmp_path)
    with pytest.raises(ValueError, match="tokens=True is for grayscale CIFAR-10"):
        load_cifar(tmp_path, rgb=True, tokens=True)
