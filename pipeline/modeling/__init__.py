"""Modeling: the backbone registry, losses, the classifier, the training loops per backend,
checkpoints and inference."""
