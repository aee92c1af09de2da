"""The platform under the stages: configuration, the backend and device choice, run directories,
the Kaggle client, files and errors."""
