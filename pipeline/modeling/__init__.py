"""Training: losses, the classifier, the training loops per backend, checkpoints, the feature cache
and inference, over the networks of pipeline/networks/ and generic over the competition's task."""

import warnings

# Keras's warnings about what petals means to do, filtered here so that every stage that trains or
# predicts has them before Keras can warn: a tf.data dataset ignores fit's shuffle flag (the
# pipeline shuffles), and a finite dataset "ran out of data" when `predict` has read all of it
# (val scoring, evaluate, predict, TTA).
warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed", category=UserWarning)
warnings.filterwarnings("ignore", message=r"Your input ran out of data", category=UserWarning)
