"""The typed config: defaults < recipe file < --set overrides, every key and type checked."""

from __future__ import annotations

import pytest

from pipeline.core.config import AugmentConfig, Config, load_config, parse_overrides
from pipeline.core.errors import PetalsError


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
