"""Searches over recipes with Optuna (`make sweep`): a search space beside the recipes
(space.py), a study in a real database that several processes share and a killed sweep
continues (study.py). Each trial is a petals run, or a CV group with `FOLDS`
(pipeline/stages/sweep.py drives them)."""
