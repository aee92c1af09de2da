"""What runs leave for people: the offline leaderboard of every run, group and submission, the
submission files written and checked against the competition's sample, and the main job's
closing report. Above training and below the experiments and stages that record into them."""
