"""Training: objectives, the engine, and the pretrain / finetune / train_from_scratch runs."""
from .passes import NonFiniteInputError, evaluate
from .result import NonFiniteLossError, RunResult
from .run_folder import RunInUse
from .runs import finetune, pretrain, train_from_scratch

__all__ = ["pretrain", "finetune", "train_from_scratch", "evaluate", "RunResult",
           "NonFiniteLossError", "NonFiniteInputError", "RunInUse"]
