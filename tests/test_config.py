import dataclasses
import re

import pytest

from hp_mlm.config import Settings, get_settings
from hp_mlm.profiles import SMOKE_DATASET, SMOKE_MODEL


def test_defaults_are_the_course_real_job():
    s = get_settings("full", environ={})
    assert (s.model, s.dataset, s.split, s.text_column) == (
        "bert-base-uncased",
        "andjela-r/mlm-harry-potter",
        "train[:10%]",
        "text",
    )
    assert (s.max_length, s.mlm_probability, s.batch_size, s.epochs) == (512, 0.15, 16, None)
    from hp_mlm.config import resolve_auto

    assert resolve_auto(s, new_head=False).epochs == 3  # a head that knows, as bert-base-uncased's
    assert 0 < s.validation_fraction < 1


def test_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_settings("full", environ={}).epochs = 9


def test_profile_comes_from_environment_and_smoke_is_offline():
    s = get_settings(environ={"HP_MLM_PROFILE": "smoke"})
    assert s.profile == "smoke" and s.model == SMOKE_MODEL and s.dataset == SMOKE_DATASET


def test_environment_overrides_are_typed_and_flags_win():
    env = {
        "HP_MLM_PROFILE": "quick",
        "HP_MLM_MODEL": "./my-bert",
        "HP_MLM_EPOCHS": "2",
        "HP_MLM_MLM_PROBABILITY": "0.2",
        "HP_MLM_PROGRESS": "0",
        "HP_MLM_LEARNING_RATE": "auto",
    }
    s = get_settings(environ=env)
    assert (s.profile, s.model, s.epochs, s.mlm_probability, s.progress, s.learning_rate) == (
        "quick",
        "./my-bert",
        2,
        0.2,
        False,
        None,
    )
    assert get_settings(environ=env, epochs=5).epochs == 5


def test_bad_environment_value_names_the_variable():
    with pytest.raises(ValueError, match="HP_MLM_EPOCHS"):
        get_settings(environ={"HP_MLM_EPOCHS": "three"})


@pytest.mark.parametrize(
    "change, name",
    [
        ({"mlm_probability": 0.0}, "mlm_probability"),
        ({"mlm_probability": 1.0}, "mlm_probability"),
        ({"batch_size": 0}, "batch_size"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"validation_fraction": -0.1}, "validation_fraction"),
        ({"recipe": "magic"}, "recipe"),
        ({"epochs": 0}, "epochs"),
        ({"learning_rate": -1.0}, "learning_rate"),
    ],
)
def test_out_of_range_settings_name_the_setting(change, name):
    with pytest.raises(ValueError, match=name):
        Settings(**change)


def test_unknown_profile_and_setting_are_refused():
    with pytest.raises(ValueError, match="profile"):
        get_settings(environ={"HP_MLM_PROFILE": "huge"})
    with pytest.raises(ValueError, match="unknown setting"):
        get_settings("full", environ={}, colour="red")


def test_new_head_policy_applies_only_to_a_new_head():
    from hp_mlm.config import resolve_auto
    from hp_mlm.profiles import HEAD_AUTO

    s = Settings()
    new, pretrained = resolve_auto(s, new_head=True), resolve_auto(s, new_head=False)
    assert (new.learning_rate, new.schedule) == (HEAD_AUTO["new"]["learning_rate"], HEAD_AUTO["new"]["schedule"])
    assert (pretrained.learning_rate, pretrained.schedule) == (5e-5, "linear")
    assert (new.learning_rate, new.schedule) != (pretrained.learning_rate, pretrained.schedule)
    assert resolve_auto(s.replace(recipe="seed"), new_head=True).learning_rate == 1e-5
    assert resolve_auto(s.replace(recipe="original"), new_head=True).schedule == "constant"
    # explicit choices are kept, whatever the head
    explicit = resolve_auto(s.replace(learning_rate=3e-4, schedule="linear"), new_head=True)
    assert (explicit.learning_rate, explicit.schedule) == (3e-4, "linear")


def test_original_recipe_is_settings_below_variables_and_flags():
    from hp_mlm.profiles import ORIGINAL_RECIPE

    s = get_settings("full", environ={}, recipe="original")
    assert all(getattr(s, k) == v for k, v in ORIGINAL_RECIPE.items())
    assert get_settings("full", environ={}, recipe="seed") == s  # the alias gives the same settings
    assert get_settings("full", environ={"HP_MLM_LEARNING_RATE": "3e-5"}, recipe="original").learning_rate == 3e-5
    assert get_settings("full", environ={}, recipe="original", max_grad_norm=0.5).max_grad_norm == 0.5
    assert get_settings("full", environ={}).padding == "batch"


@pytest.mark.parametrize(
    ("raw", "value"), [("1", True), ("Yes", True), ("on", True), ("0", False), ("no", False), ("OFF", False)]
)
def test_a_yes_no_variable_reads_every_usual_spelling(raw, value):
    assert get_settings("smoke", environ={"HP_MLM_PROGRESS": raw}).progress is value


@pytest.mark.parametrize(
    ("name", "raw", "called"),
    [
        ("HP_MLM_PROGRESS", "maybe", "yes/no"),
        ("HP_MLM_BATCH_SIZE", "three", "whole number"),
        ("HP_MLM_EPOCHS", "3.5", "whole number (or auto)"),
        ("HP_MLM_LEARNING_RATE", "x", "number (or auto)"),
    ],
)
def test_a_bad_variable_is_named_with_the_kind_of_value_it_needs(name, raw, called):
    with pytest.raises(ValueError, match=rf"^{name}='{raw}' is not a valid {re.escape(called)} for setting"):
        get_settings("smoke", environ={name: raw})


def test_the_time_budget_has_a_short_variable_and_flag():
    from hp_mlm.ops.flags import flag_for

    assert get_settings("smoke", environ={"HP_MLM_TIME_BUDGET": "2.5"}).time_budget_minutes == 2.5
    assert flag_for("time_budget_minutes") == "--time-budget"


def test_the_quick_profile_sets_epochs_by_the_kind_of_head():
    """A head that knows needs far fewer epochs than a new one; the quick profile leaves epochs on auto."""
    from hp_mlm.config import resolve_auto
    from hp_mlm.profiles import HEAD_AUTO

    quick = get_settings("quick", environ={})
    assert quick.epochs is None and HEAD_AUTO["pretrained"]["epochs"] < HEAD_AUTO["new"]["epochs"]
    assert resolve_auto(quick, new_head=False).epochs == HEAD_AUTO["pretrained"]["epochs"] == 3
    assert resolve_auto(quick, new_head=True).epochs == HEAD_AUTO["new"]["epochs"] == 12
    assert resolve_auto(quick.replace(epochs=5), new_head=False).epochs == 5  # a chosen value stays
    assert get_settings("quick", environ={"HP_MLM_EPOCHS": "auto"}).epochs is None
    with pytest.raises(ValueError, match=r"`epochs` \(HP_MLM_EPOCHS\) must be >= 1 \(or unset, for auto\), got 0"):
        get_settings("quick", environ={}, epochs=0)


def test_a_plan_refuses_epochs_left_on_auto(smoke_tokenizer, smoke_model):
    from helpers import SENTENCES, tokenised

    from hp_mlm.training import plan_training

    settings = get_settings("smoke", environ={}, schedule="linear", learning_rate=1e-3, precision="fp32").replace(
        epochs=None
    )
    with pytest.raises(ValueError, match=r"^epochs still 'auto'"):
        plan_training(smoke_model, smoke_tokenizer, tokenised(smoke_tokenizer, SENTENCES), settings)


def test_every_numeric_setting_is_read_as_a_number_from_its_flag():
    """A setting whose type is ``int | None`` or ``float | None`` gets a number from its flag, never text."""
    from dataclasses import fields

    from hp_mlm.ops.flags import build_parser, flag_for

    numeric = {f.name: f.type for f in fields(Settings) if f.type.split(" |")[0] in ("int", "float")}
    assert {"epochs", "learning_rate", "time_budget_minutes", "batch_size"} <= set(numeric)
    argv = ["train"] + [a for name in numeric for a in (flag_for(name), "2")]
    args = build_parser().parse_args(argv)
    for name, kind in numeric.items():
        assert type(getattr(args, name)).__name__ == kind.split(" |")[0], name


# auto follows what the head knows, not the profile nor the model's name ----------------------------------


@pytest.mark.parametrize("profile", ["full", "quick", "offline"])
def test_auto_follows_what_the_head_knows_in_every_profile(profile):
    """A head no better than a constant guess (the offline MiniLM's stock head, a random head) gets 5e-4 held
    after warmup and 12 epochs whatever the profile and the model's name: the quick profile gave the offline
    MiniLM 5e-5 with linear decay and 3 epochs, the rule for a strong pretrained head. A head that knows
    (bert-base-uncased's) keeps that rule in every profile; values set by hand stay."""
    from hp_mlm.config import resolve_auto
    from hp_mlm.profiles import OFFLINE_MODEL

    base = get_settings(profile, environ={})
    assert (base.learning_rate, base.schedule, base.epochs) == (None, "auto", None)

    def resolved(model, new_head):
        s = resolve_auto(base.replace(model=model), new_head=new_head)
        return s.learning_rate, s.schedule, s.epochs

    assert resolved(OFFLINE_MODEL, True) == resolved("my/saved-copy", True) == (5e-4, "constant", 12)
    assert resolved("bert-base-uncased", False) == resolved(OFFLINE_MODEL, False) == (5e-5, "linear", 3)
    chosen = resolve_auto(base.replace(model=OFFLINE_MODEL, learning_rate=1e-4, epochs=2), True)
    assert (chosen.learning_rate, chosen.schedule, chosen.epochs) == (1e-4, "constant", 2)
