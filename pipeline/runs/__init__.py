"""What runs leave for people: the offline leaderboard of every run, group and submission, the
submission files written and checked against the competition's sample, the main job's closing
report, and each run's TensorBoard events and (when asked) MLflow run. Above training and below the
experiments and stages that record into them."""
