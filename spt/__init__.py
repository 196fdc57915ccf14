"""spt: self-pretraining (SPT) of long-sequence models.

Pretrain a model on its task's own training data with a denoising objective (masked or causal),
finetune it on the labels, and compare with training from scratch (Amos, Berant & Gupta, ICLR 2024).
"""
__version__ = "0.1.0"
