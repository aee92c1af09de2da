"""The typed config: defaults < recipe file < --set overrides, every key and type checked."""

from __future__ import annotations

import pytest

from pipeline.core.config import AugmentConfig, Config
from pipeline.core.errors import PetalsError
from pipeline.core.overrides import parse_overrides
from pipeline.tasks.competitions import load_competition
from pipeline.tasks.recipe_config import load_config


def test_defaults_are_the_dataclass_defaults():
    config = load_config()
    assert config == Config()
    assert config.augment.where == "auto"  # resolved per backend and device (augment.placement)


def test_overrides_are_typed_and_nested():
    config = load_config(overrides=["augment.cutmix=0.5", "data.batch_size=8", "data.cache=true", "seed=3"])
    assert config.augment.cutmix == 0.5
    assert config.data.batch_size == 8 and config.data.cache is True and config.seed == 3
    assert config.augment == AugmentConfig(cutmix=0.5)  # nothing else moved


def test_a_recipe_overrides_only_what_it_names(tmp_path):
    recipe = tmp_path / "strong.toml"
    recipe.write_text('[augment]\nmixup = 0.3\nwhere = "host"\n[data]\nimage_size = 224\n')
    config = load_config(str(recipe), ["augment.mixup=0.2"])
    assert config.recipe == "strong"
    assert config.augment.mixup == 0.2  # --set wins over the recipe
    assert config.augment.where == "host" and config.data.image_size == 224
    assert config.augment.rotation == AugmentConfig().rotation


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("augment.cutmx=0.5", "unknown key 'augment.cutmx'"),
        ("data.batch_size=eight", "data.batch_size: expected an integer, got 'eight'"),
        ("data.batch_size=1.5", "expected an integer"),
        ("data.cache=maybe", "data.cache: expected true or false"),
        ("augment.where=gpu", "augment.where: 'gpu' is not one of auto, host, device"),
        ("augment.cutmix=1.5", "augment.cutmix=1.5: a probability"),
        ("augment.rotation=-1", "augment.rotation=-1.0: a magnitude"),
        ("data.batch_size=0", "data.batch_size=0: must be a positive"),
        ("train.logit_adjustment=-1", "train.logit_adjustment=-1.0: must be >= 0"),
        ("train.ema=1", "train.ema=1.0: a momentum, must be in"),
        ("train.weight_decay=-0.1", "train.weight_decay=-0.1: must be in 0..10"),
        ("train.val_every=0", "train.val_every=0: must be >= 1"),
        ("augment=1", "augment is a section"),
        ("nokey", "expected key=value"),
    ],
)
def test_bad_overrides_are_refused_naming_the_key(override, message):
    with pytest.raises(PetalsError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_config(overrides=[override])


def test_cutmix_and_mixup_together_cannot_exceed_one():
    with pytest.raises(PetalsError, match="sum must be <= 1"):
        load_config(overrides=["augment.cutmix=0.6", "augment.mixup=0.6"])


def test_unknown_recipe_lists_the_known_ones():
    with pytest.raises(PetalsError, match=r"unknown recipe 'nope'.*recipes: .*default"):
        load_config("nope")


def test_a_recipe_with_an_unknown_key_names_its_file(tmp_path):
    recipe = tmp_path / "typo.toml"
    recipe.write_text("[augment]\nrotaton = 10\n")
    with pytest.raises(PetalsError, match=r"typo\.toml: unknown key 'augment\.rotaton'"):
        load_config(str(recipe))


def test_a_recipe_that_is_not_toml_names_its_file(tmp_path):
    recipe = tmp_path / "broken.toml"
    recipe.write_text("[augment\n")
    with pytest.raises(PetalsError, match=r"broken\.toml: not valid TOML"):
        load_config(str(recipe))


def test_parse_overrides_nests_dotted_keys():
    assert parse_overrides(["a.b=1", "a.c= x ", "d=2"]) == {"a": {"b": "1", "c": "x"}, "d": "2"}


def test_a_wrong_type_in_a_recipe_names_its_file(tmp_path):
    recipe = tmp_path / "types.toml"
    recipe.write_text('[data]\nbatch_size = "big"\n')
    with pytest.raises(PetalsError, match=r"types\.toml: data\.batch_size: expected an integer"):
        load_config(str(recipe))


def _competition(tmp_path, keeps_label: str):
    """flowers' competition file with another keeps_label, as a competition of its own."""
    from competition.spec import SPEC_DIR

    text = (SPEC_DIR / "flowers" / "competition.toml").read_text()
    start = text.index("keeps_label = [")
    text = text[:start] + f"keeps_label = {keeps_label}\n"
    (tmp_path / "classes.txt").write_text((SPEC_DIR / "flowers" / "classes.txt").read_text())
    path = tmp_path / "digits.toml"
    path.write_text(text.replace('name = "flowers"', 'name = "digits"'))
    return path


def test_a_transform_that_changes_the_label_is_off_by_default_and_refused_when_asked(tmp_path):
    digits = _competition(tmp_path, '["brightness", "contrast", "zoom", "shift"]')
    config = load_config(overrides=[f"competition={digits}"])
    aug = config.augment
    assert (aug.flip, aug.rotation, aug.saturation, aug.shear) == (False, 0.0, 0.0, 0.0)
    assert (aug.brightness, aug.zoom, aug.shift) == (0.1, 0.1, 16.0)  # kept: the defaults
    with pytest.raises(PetalsError, match=r"^augment.flip=true: competition digits does not keep the label"):
        load_config(overrides=[f"competition={digits}", "augment.flip=true"])
    recipe = tmp_path / "r.toml"
    recipe.write_text("[augment]\nrotation = 10.0\n")
    with pytest.raises(
        PetalsError, match=r"augment.rotation=10.0: competition digits .*keeps_label: brightness"
    ):
        load_config(str(recipe), [f"competition={digits}"])
    from pipeline.tasks.recipe_config import describe

    shown = describe("default", [f"competition={digits}"])
    assert "off: competition" in next(line for line in shown.splitlines() if line.startswith("flip ="))


def test_a_competition_naming_an_unknown_transform_is_refused(tmp_path):
    odd = _competition(tmp_path, '["flip", "warp"]')
    with pytest.raises(PetalsError, match=r"keeps_label names \['warp'\], which are not transforms"):
        load_config(overrides=[f"competition={odd}"])


def test_flowers_keeps_every_default_transform():
    assert load_config(overrides=["competition=flowers"]).augment == AugmentConfig()


def test_every_size_range_names_a_config_key_and_every_shipped_recipe_is_inside_them():
    """RANGES is the one place sizes are bounded: each key is a config key (or `tta`, an option),
    and no recipe petals ships reaches a bound (a bound a real recipe hits is a bug)."""
    from pipeline.core.config import RANGES, validate
    from pipeline.tasks.recipe_config import recipe_names

    defaults = Config()
    for key, (low, high, why) in RANGES.items():
        section, _, name = key.partition(".")
        assert key == "tta" or hasattr(getattr(defaults, section), name), key
        assert low < high and why, key
    for competition in ("flowers", "dogs-vs-cats", "cassava", "plant-pathology-2021", "imdb", "watson"):
        for recipe in recipe_names(load_competition(competition)):
            validate(load_config(recipe, [f"competition={competition}"]))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.image_size=1025", "data.image_size=1025: must be in 1..1024"),
        ("data.sequence_length=5000", "data.sequence_length=5000: must be in 2..4096"),
        ("data.vocabulary_size=600000", "data.vocabulary_size=600000: must be in 3..500000"),
        ("train.epochs=1001", "train.epochs=1001: must be in 1..1000"),
        ("train.folds=51", "train.folds=51: must be in 0..50"),
    ],
)
def test_a_size_past_its_range_is_refused_naming_the_key_and_the_bound(override, message):
    with pytest.raises(PetalsError, match=message.replace(".", r"\.")):
        load_config(overrides=[override])


def test_the_cpu_image_recipes_regularise_alike_at_every_size():
    """The rule both CPU image recipes write down (bench-regularise): one dropout, no decay, whatever
    the data's size; the flowers' own recipe and the task's (cassava has none of its own) must not
    drift apart. They differ in one measured place: the flowers smooth their labels by 0.1 (their
    macro-F1 reads the class), the task's recipe, Dogs vs. Cats' (log loss), does not."""
    smoothing = {"flowers": 0.1, "cassava": 0.0, "dogs-vs-cats": 0.0}
    for competition, smoothed in smoothing.items():
        config = load_config("cpu", [f"competition={competition}"])
        regularisation = (config.model.dropout, config.train.label_smoothing, config.train.weight_decay)
        assert regularisation == (0.2, smoothed, 0.0), competition
