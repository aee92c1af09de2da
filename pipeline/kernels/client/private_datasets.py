"""The private datasets petals builds for its kernels (`wheels.py`, `weights.py`): one folder each under
`kernels/_datasets/`, uploaded with the official client before a kernel that attaches it: created
once, a new version when its files changed, reused while they have not.

Files are compared by name and size (what Kaggle's listing gives), so a file whose bytes may change
under one name carries its hash in its name (`weights.py`). The folder only grows: a kernel
generated later adds its files beside the earlier ones, and a version that would drop a file Kaggle
holds (made on another machine) is refused, so a kernel generated earlier still finds its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.files import write_json
from pipeline.kernels.client.metadata import read_metadata

DATASETS = "_datasets"  # kernels/_datasets/: datasets petals builds (no kernel name starts with "_")
DATASET_METADATA = "dataset-metadata.json"  # the official client's; not uploaded as a file


@dataclass(frozen=True)
class Private:
    """One kind of dataset petals builds: `<owner>/<slug>`, the files of its folder that count."""

    slug: str
    noun: str  # "wheel(s)": how a report counts its files
    counts: Callable[[str], bool]  # which file names of the folder are its content
    description: str
    regenerate: str  # what to do when the folder holds none

    def folder(self, kernels_dir: Path) -> Path:
        return kernels_dir / DATASETS / self.slug

    def write_metadata(self, folder: Path, dataset: str) -> None:
        """The official client's dataset-metadata.json for `dataset` (its owner: the kernel's)."""
        write_json(
            folder / DATASET_METADATA,
            {
                "title": self.slug.replace("-", " "),
                "id": dataset,
                "licenses": [{"name": "other"}],  # each file keeps its own project's licence
                "description": self.description,
            },
        )


def files_of(folder: Path) -> dict[str, int]:
    """{file name: bytes} of what an upload of `folder` sends: its files but the metadata."""
    return {
        p.name: p.stat().st_size
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != DATASET_METADATA
    }


def _listed(names: list[str]) -> str:
    return f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''}"


def publish(kernel_folder: Path, kind: Private, report=print) -> str | None:
    """Before a kernel is pushed: the `kind` dataset petals built for it, `<owner>/<slug>` with the
    kernel's owner, on Kaggle. Kaggle's newest version, once processed, is reused when it holds every
    file of the folder (name and size); else the folder goes up (created if absent), is waited for and
    checked file by file against what was sent. Its handle; None for a kernel attaching no such
    dataset (another account's is the user's own: trusted, never uploaded)."""
    from pipeline.core import kaggle_datasets

    meta = read_metadata(kernel_folder)
    dataset = f"{meta['id'].split('/')[0]}/{kind.slug}"
    if dataset not in meta.get("dataset_sources", []):
        return None
    folder = kind.folder(kernel_folder.parent)
    ours = {n: size for n, size in files_of(folder).items() if kind.counts(n)} if folder.is_dir() else {}
    if not ours:
        raise PetalsError(
            f"kernel {meta['id']} attaches {dataset}, but {folder} holds no {kind.noun}: {kind.regenerate}"
        )
    theirs = kaggle_datasets.dataset_files(dataset)
    if theirs is not None:
        kaggle_datasets.wait_ready(dataset)  # a version still processing: neither reused nor replaced
        theirs = kaggle_datasets.dataset_files(dataset) or {}
        if _holds(theirs, ours):
            report(
                f"kernel: dataset {dataset} holds these {len(ours)} {kind.noun} already: reused, not uploaded"
            )
            return dataset
        only_there = sorted(name for name in theirs if kind.counts(name) and name not in ours)
        if only_there:  # a new version from here would drop them, and the kernels that need them fail
            raise PetalsError(
                f"Kaggle's dataset {dataset} holds {len(only_there)} {kind.noun} {folder} lacks "
                f"({_listed(only_there)}), made on another machine: a new version from here would drop "
                "them; copy that machine's folder here, or push from there; nothing was pushed"
            )
    kind.write_metadata(folder, dataset)  # the kernel's owner, whoever generated the folder
    new = ", ".join(sorted(set(ours) - set(theirs or {}))) or "none"
    report(f"kernel: {'creating the private' if theirs is None else 'a new version of'} dataset {dataset} "
           f"({len(ours)} {kind.noun}, {sum(ours.values()) / 1e6:.1f} MB)")  # fmt: skip
    kaggle_datasets.upload(
        folder, dataset, None if theirs is None else f"petals: {len(ours)} {kind.noun}; new: {new}"
    )
    kaggle_datasets.wait_ready(dataset)
    after = kaggle_datasets.dataset_files(dataset) or {}
    lost = sorted(name for name in ours if not _holds(after, {name: ours[name]}))
    if lost:
        raise PetalsError(
            f"Kaggle's dataset {dataset} lacks {_listed(lost)} after the upload: the kernel was not "
            "pushed; rerun `make kernel-push`"
        )
    report(f"kernel: dataset {dataset} is ready ({len(ours)} {kind.noun})")
    return dataset


def _holds(listing: dict[str, int], files: dict[str, int]) -> bool:
    """Every file in Kaggle's listing by name, and by size where Kaggle gives one."""
    return all(name in listing and listing[name] in (0, size) for name, size in files.items())
