"""Tasks: each module returns a :class:`~spt.data.task.Task` (a TaskSpec + train/val/test Datasets)."""
from .collate import pad_collate
from .digits import digits_task
from .errors import DataError, DataFormatError, DataMissingError
from .fractions import FRACTIONS, nested_subset
from .registry import TASK_NAMES, describe_task, load_task
from .task import EOS_ID, MASK_ID, PAD_ID, UNK_ID, Task, TaskSpec

__all__ = ["Task", "TaskSpec", "pad_collate", "digits_task", "PAD_ID", "MASK_ID", "UNK_ID",
           "EOS_ID", "DataError", "DataFormatError", "DataMissingError", "FRACTIONS", "nested_subset",
           "TASK_NAMES", "describe_task", "load_task"]
