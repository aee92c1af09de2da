"""Cross-validated experiments: folds, CV groups and what is judged out of fold."""
