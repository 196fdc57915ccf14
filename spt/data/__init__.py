"""Tasks: each module returns a :class:`~spt.data.task.Task` (a TaskSpec + train/val/test Datasets)."""
from .collate import pad_collate
from .digits import digits_task
from .task import EOS_ID, MASK_ID, PAD_ID, UNK_ID, Task, TaskSpec

__all__ = ["Task", "TaskSpec", "pad_collate", "digits_task", "PAD_ID", "MASK_ID", "UNK_ID", "EOS_ID"]
from .cache import DataError, DataFormatError, DataMissingError  # noqa: E402
from .fractions import FRACTIONS, nested_subset  # noqa: E402
from .tasks import TASK_NAMES, describe_task, load_task  # noqa: E402

__all__ += ["DataError", "DataFormatError", "DataMissingError", "FRACTIONS", "nested_subset",
            "TASK_NAMES", "describe_task", "load_task"]
