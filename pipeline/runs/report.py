"""The main job's closing lines: what ran, how it scored, where its files are, what to do next."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from pipeline.core.foreign import text

if TYPE_CHECKING:
    from competition.spec import CompetitionSpec


def closing_summary(
    submissions_dir: Path,
    competition: str,
    spec: CompetitionSpec,
    provenance: dict,
    path: Path,
    rows: int,
    uploaded: str | None,
    synthetic: bool,
    code: bool = False,
) -> str:
    """The main job's last lines: what ran, how it scored, where its files are, what to do next.
    `competition`: its name or the path to its file, as given; `spec`: its spec, as the stage loaded
    it; `code`: a code competition, where the kernel's own output is what was (or would be) submitted."""
    from pipeline.runs import leaderboard

    board = leaderboard.read(leaderboard.board_file(submissions_dir, spec.name))
    table = leaderboard.ranked(board, spec)
    column, metric = leaderboard.score_column(spec)
    entry = provenance.get("entry", path.stem)
    lines = ["", "petals: done."]
    mine = board[board["entry"] == entry]
    if not mine.empty:
        row, rank = mine.iloc[0], int(table.loc[table["entry"] == entry, "rank"].iloc[0])
        if row["kind"] == "run":  # columns may be empty (a row from an older petals): shown as "?"
            size, epochs = (_whole(row[c]) for c in ("image_size", "epochs"))
            at = "" if size == "?" else f" at {size} px"  # texts have no size
            recipe, backbone, backend = (text(row[c], 60) for c in ("recipe", "backbone", "backend"))
            what = f"recipe {recipe}: {backbone}{at}, {epochs} epochs on {backend}"
        elif row["kind"] == "cv":  # members: "5 folds: <fold runs>"
            what = f"CV group of {text(row['members'], 1000)}"
        elif row["kind"] == "refit":  # members: "refit of <group> to epoch N"
            what = text(row["members"], 1000)
        else:
            what = f"ensemble of {text(row['members'], 1000)}"
        lines.append(f"  ran      {what}")
        judged = table.loc[table["entry"] == entry, "judged"].iloc[0]
        if judged and judged != leaderboard.SINGLE_SPLIT:  # its CV score (± the folds' spread), not val
            shown = table.loc[table["entry"] == entry, metric.name].iloc[0]
            scored = f"{metric.title} {shown} by {judged}"
            evaluation = _evaluation(provenance.get("run_dir"))
            if evaluation and row["kind"] == "cv":
                scored += f" {worth(evaluation)}"
            folds = pd.to_numeric(row.get("folds"), errors="coerce")
            if row["kind"] in ("cv", "refit") and not pd.isna(folds) and folds >= 2:
                scored += f", {fold_models(int(folds), refit=row['kind'] == 'refit')}"
        else:
            score = pd.to_numeric(row[column], errors="coerce")
            scored = f"val {metric.title} {'not scored' if pd.isna(score) else f'{score:.4f}'}"
            evaluation = _evaluation(provenance.get("run_dir"))
            if evaluation and not pd.isna(score):
                scored += f" {worth(evaluation)}"
        lines.append(f"  scored   {scored}, rank {rank} of {len(table)} on the offline leaderboard")
    lines.append(f"  run      {provenance.get('run_dir', entry)}")
    sent, unsent = ("submitted", "NOT SUBMITTED") if code else ("uploaded", "NOT UPLOADED")
    status = f"{sent} to {uploaded}" if uploaded else f"{unsent} (dry run)"
    picked = f" COMPETITION={competition}"  # as it was given: a name, or your own file's path
    lines.append(f"  wrote    {path} ({rows} rows), {status}")
    if uploaded:
        step = (
            f"`make leaderboard-sync{picked}` once Kaggle has scored it; "
            f"`make leaderboard{picked}` ranks every run"
        )
    elif synthetic:
        fetch = f"make fetch SOURCE=kaggle FORCE=1{picked}"  # FORCE=1 on submit would upload again
        step = f"real data: Kaggle credentials, then `{fetch} && make train submit{picked}`"
    else:
        step = f"Kaggle credentials, then `make submit{picked}`; `make leaderboard{picked}` ranks every run"
    lines.append(f"  next     {step}")
    return "\n".join(lines)


def worth(evaluation: dict) -> str:
    """What a val score is worth, in words: `on 2,797 rows (95% interval 0.951-0.966)`; where its
    weights are an epoch val chose, how the choice was scored (each part of val at the epoch the
    others chose) and what the kept epoch and the schedule's end score on all of val:
    `; scored cross-fitted: each of 5 parts at the epoch the others chose (3 3 2 3 3); the weights:
    epoch 3, the best of 10 on all of val (0.7583; the last: 0.7250)`, or where the end was kept
    yet some part chose another epoch, `; the kept weights: 0.8972 on all of val`. A run evaluated
    before 2026-12-02 scored the choice on its own rows: `; epoch 3, the best of 10 on these rows
    (...)`."""
    rows = f"on {evaluation['images']:,} rows"
    if evaluation.get("groups"):
        rows += f" of {evaluation['groups']:,} groups"
    interval = evaluation.get("interval")
    rows += f" (95% interval {interval[0]:.3f}-{interval[1]:.3f})" if interval else ""
    crossed = evaluation.get("cross_fitted")
    crossed = crossed if _crossed_shaped(crossed) else None
    if crossed:
        epochs = " ".join(str(e) for e in crossed["epochs"])
        parts = len(crossed["epochs"])
        rows += f"; scored cross-fitted: each of {parts} parts at the epoch the others chose ({epochs})"
    chosen = evaluation.get("chosen_epoch")
    if _chosen_shaped(chosen):
        epoch, scored, last = chosen["epoch"], chosen["scored"], chosen["last"]
        if crossed:
            kept = f"{crossed['kept']:.4f}; the last: {last:.4f}"
            rows += f"; the weights: epoch {epoch}, the best of {scored} on all of val ({kept})"
        else:
            rows += f"; epoch {epoch}, the best of {scored} on these rows (the last: {last:.4f})"
    elif crossed and f"{crossed['kept']:.4f}" != _shown(evaluation.get(f"val_{evaluation.get('metric')}")):
        # the end kept (or one as good), yet some part's choice was another epoch: the figures differ
        rows += f"; the kept weights: {crossed['kept']:.4f} on all of val"
    return rows


def _shown(score: object) -> str | None:
    """A score as the summary prints it, None for anything not a number."""
    if isinstance(score, bool) or not isinstance(score, float | int):
        return None
    return f"{score:.4f}"


def chosen_epoch(run, key: str, greater_is_better: bool) -> dict | None:
    """Where a run's weights are not its schedule's end but the epoch that scored best on its val
    rows (`Trainer._save_weights`), that epoch, how many were scored, and the last one's score:
    that epoch's score on those rows was chosen on them (evaluate scores the choice cross-fitted
    where the run kept its epochs' val predictions), and on a few hundred rows the
    best of several noisy epochs sits above what the schedule earns (Watson's embedded pairs: 0.758
    at epoch 3 of 10, 0.725 at the end). None where nothing was chosen."""
    import pandas as pd

    history = run.read_history() if run.history_file.is_file() else None
    if history is None or key not in history or "epoch" not in history:
        return None
    scored = history.dropna(subset=[key])
    scores = pd.to_numeric(scored[key], errors="coerce")
    if len(scored) < 2 or scores.isna().any():
        return None
    best = int(scores.to_numpy().argmax() if greater_is_better else scores.to_numpy().argmin())
    if best == len(scored) - 1 or scores.iloc[best] == scores.iloc[-1]:  # the end, or as good
        return None
    return {"epoch": int(scored["epoch"].iloc[best]), "scored": len(scored), "last": float(scores.iloc[-1])}


def _chosen_shaped(found: object) -> bool:
    """Whether `found` is what `chosen_epoch` writes (a run may come back in a kernel's output)."""
    import math

    if not isinstance(found, dict):
        return False
    counts = [found.get("epoch"), found.get("scored")]
    last = found.get("last")
    return all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in counts) and (
        isinstance(last, float | int) and not isinstance(last, bool) and math.isfinite(last)
    )


def _crossed_shaped(found: object) -> bool:
    """Whether `found` is what evaluate writes of a cross-fitted epoch choice."""
    import math

    if not isinstance(found, dict):
        return False
    epochs, kept = found.get("epochs"), found.get("kept")
    return (
        isinstance(epochs, list)
        and 2 <= len(epochs) <= 100
        and all(isinstance(e, int) and not isinstance(e, bool) and e > 0 for e in epochs)
        and isinstance(kept, float | int)
        and not isinstance(kept, bool)
        and math.isfinite(kept)
    )


def fold_models(folds: int, refit: bool = False) -> str:
    """What a CV score scores against what is submitted, in words: a CV score is not the
    submission's own, and on a few hundred rows the two part by a few points (CV's learning curve)."""
    submitted = "one model refitted on all of them" if refit else f"the {folds} fold models' mean"
    return f"each row scored by a fold model trained on the other {folds - 1}/{folds}; submitted: {submitted}"


def _evaluation(run_dir) -> dict | None:
    """What the run's score is worth (its rows, groups and interval: a run's evaluation, a CV
    group's out-of-fold rows), where its folder is known and says."""
    from pipeline.core.errors import PetalsError
    from pipeline.core.rundir import RunDir

    if not run_dir:
        return None
    try:
        metrics = RunDir(Path(run_dir)).metrics()
    except PetalsError:
        return None
    if "examples" in metrics:  # a CV group: its out-of-fold rows
        found = {"images": metrics["examples"], **{k: metrics.get(k) for k in ("groups", "interval")}}
    else:
        found = metrics.get("evaluation")
    return found if _worth_shaped(found) else None


def _worth_shaped(found: object) -> bool:
    """Whether `found` holds what `worth` reads, of the right types: a run may come back in a
    kernel's downloaded output, whose metrics.json says anything."""
    import math

    if not isinstance(found, dict):
        return False
    whole = [found.get("images"), *([found["groups"]] if found.get("groups") is not None else [])]
    interval = found.get("interval")
    numbers = interval is None or (
        isinstance(interval, list)
        and len(interval) == 2
        and all(isinstance(v, float | int) and math.isfinite(v) for v in interval)
    )
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in whole) and numbers


def _whole(value) -> str:
    number = pd.to_numeric(value, errors="coerce")
    return "?" if pd.isna(number) else str(int(number))
