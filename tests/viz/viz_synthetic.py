"""Small synthetic study results in the study layout (for figure / explorer tests)."""
import numpy as np
import xarray as xr


def study(dims: dict, seed: int = 0, curves: bool = False) -> xr.Dataset:
    """Random test/val accuracies over `dims` ({name: coords}); init must be one of the dims."""
    rng = np.random.default_rng(seed)
    shape = tuple(len(v) for v in dims.values())
    data = {"test_accuracy": (tuple(dims), rng.uniform(0.2, 0.9, shape)),
            "val_accuracy": (tuple(dims), rng.uniform(0.2, 0.9, shape)),
            "steps": (tuple(dims), rng.integers(10, 100, shape).astype(float))}
    ds = xr.Dataset(data, coords=dims)
    if curves:
        epochs = np.arange(6)
        base = rng.uniform(0.1, 0.9, shape + (6,))
        ds["curve_val_accuracy"] = (tuple(dims) + ("epoch",), base)
        ds["curve_train_loss"] = (tuple(dims) + ("epoch",), 1.0 + base)
        ds = ds.assign_coords(epoch=epochs)
    return ds
