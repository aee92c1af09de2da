"""What runs inside a Kaggle kernel: its script (`main.py`) and a fan-out kernel's share (`share.py`)."""
