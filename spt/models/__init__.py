"""Sequence models: Transformer backbone, heads, and the attention backends."""
from .model import Backbone, SequenceModel, classifier_model, count_parameters, pretraining_model

__all__ = ["Backbone", "SequenceModel", "classifier_model", "pretraining_model", "count_parameters"]
