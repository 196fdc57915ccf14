"""Training: objectives, the engine, and the pretrain / finetune / train_from_scratch runs."""
from .engine import NonFiniteLossError, RunInUse, RunResult, evaluate
from .passes import NonFiniteInputError
from .runs import finetune, pretrain, train_from_scratch

__all__ = ["pretrain", "finetune", "train_from_scratch", "evaluate", "RunResult",
           "NonFiniteLossError", "NonFiniteInputError", "RunInUse"]
