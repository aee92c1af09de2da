"""Modeling: the backbone registry, losses, the classifier, the training loops per backend,
checkpoints and inference."""

import warnings

# Keras warns that a finite dataset "ran out of data" when `predict` has read all of it (val
# scoring, evaluate, predict, TTA): reading all of it is what is meant. Here, so that every stage
# that predicts has the filter before Keras can warn.
warnings.filterwarnings("ignore", message=r"Your input ran out of data", category=UserWarning)
